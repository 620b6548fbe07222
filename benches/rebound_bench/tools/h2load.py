"""h2load (nghttp2): the HTTP/2 load generator of the TLS scenario."""

from __future__ import annotations

import re
import subprocess
from typing import Sequence, TypedDict


class H2loadResult(TypedDict):
    rps: float
    done: int


def parse_h2load(out: str) -> H2loadResult:
    """h2load's report: requests per second over the run and the requests done."""
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
    if rps is None or done is None:
        raise ValueError(f"not an h2load report:\n{out}")
    return {"rps": float(rps.group(1)), "done": int(done.group(1))}


def h2load(uri_file: str, duration: int, connections: int, streams: int, raw_path: str,
           headers: Sequence[str] = ()) -> H2loadResult:
    """h2load with `connections` connections and `streams` streams each on the URIs of
    `uri_file` for `duration` seconds, each request with `headers` ("Name: value"); its
    report is appended to `raw_path`."""
    extra = [arg for h in headers for arg in ("-H", h)]
    out = subprocess.run(["h2load", "-c", str(connections), "-m", str(streams), "-D", str(duration), *extra,
                          "-i", uri_file], capture_output=True, text=True, timeout=duration + 120).stdout
    with open(raw_path, "a") as f:
        f.write(out)
    return parse_h2load(out)
