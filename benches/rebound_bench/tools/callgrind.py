"""valgrind's callgrind: instructions per request, the repeatable figure."""

from __future__ import annotations

import os
import subprocess
from typing import Iterable

# The inclusive cost of this function is Rebound's request path: each connection's task.
REQUEST_PATH = "rebound_edge::conn::Edge::serve::{{closure}}"


def wrapper(outfile: str) -> list[str]:
    """The command prefix that runs a server under callgrind, one dump file per process
    (`outfile`.PID, then .PID.1 ... for each `callgrind_control -d`)."""
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outfile}.%p"]


def zero(pid: int) -> None:
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, stdout=subprocess.DEVNULL)


def dump(pid: int) -> None:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)


def parse_total(lines: Iterable[str]) -> int:
    """The instructions of a callgrind dump: its `summary:` (or `totals:`) line, the
    largest if there are several."""
    total = 0
    for line in lines:
        if line.startswith("summary:") or line.startswith("totals:"):
            total = max(total, int(line.split()[1]))
    return total


def dump_files(directory: str, prefix: str) -> list[str]:
    """The first dumps (`.1`, the one `callgrind_control -d` wrote) of the files named
    `prefix`.PID in `directory`, sorted."""
    return sorted(f for f in os.listdir(directory) if f.startswith(prefix) and f.endswith(".1"))


def dumps_total(directory: str, prefix: str) -> tuple[int, list[str]]:
    """The largest total over the dumps of `prefix` in `directory`, and the dumps."""
    dumps = dump_files(directory, prefix)
    total = 0
    for d in dumps:
        with open(os.path.join(directory, d)) as f:
            total = max(total, parse_total(f))
    return total, dumps


def parse_annotate_inclusive(text: str, function: str = REQUEST_PATH) -> int:
    """The largest inclusive count on the lines of `callgrind_annotate --inclusive=yes`
    output that name `function` (0 when none does)."""
    return max((int(line.split()[0].replace(",", "")) for line in text.splitlines() if function in line), default=0)


def annotate_inclusive(path: str, function: str = REQUEST_PATH) -> int:
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True).stdout
    return parse_annotate_inclusive(annotated, function)
