"""Names that resolve to 127.0.0.1 for a while: wrk takes a TLS connection's SNI name from
its URL's host, which must resolve. `with HostsEntries(names):` appends a marked block to
/etc/hosts and puts the file back exactly as it was afterwards (needs root); a block left
by a run that was killed is removed first."""

from __future__ import annotations

from types import TracebackType
from typing import Sequence

HOSTS = "/etc/hosts"
BEGIN = "# rebound-bench: begin (removed when the bench ends)"
END = "# rebound-bench: end"


def without_block(text: str) -> str:
    """The hosts file's text without a block of ours (the text itself when it has none)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == BEGIN]
    if not starts:
        return text
    ends = [i for i, line in enumerate(lines) if line.rstrip("\n") == END and i > starts[0]]
    stop = ends[0] + 1 if ends else len(lines)
    return "".join(lines[:starts[0]] + lines[stop:])


def with_block(text: str, names: Sequence[str], address: str = "127.0.0.1") -> str:
    """The text with a block of ours naming `names` at `address` at its end."""
    base = without_block(text)
    if base and not base.endswith("\n"):
        base += "\n"
    return base + "".join([BEGIN + "\n"] + [f"{address} {name}\n" for name in names] + [END + "\n"])


class HostsEntries:
    def __init__(self, names: Sequence[str], path: str = HOSTS) -> None:
        self.names, self.path = list(names), path
        self.original = ""

    def __enter__(self) -> "HostsEntries":
        with open(self.path) as f:
            read = f.read()
        # A block left by a killed run is not part of what is put back.
        self.original = without_block(read)
        # Written in place: the file keeps its inode, owner and mode.
        with open(self.path, "w") as f:
            f.write(with_block(read, self.names))
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        with open(self.path, "w") as f:
            f.write(self.original)
