"""wrk: the HTTP/1.1 load generator of every keep-alive and handshake row."""

from __future__ import annotations

import re
import subprocess
from typing import Mapping, Sequence, TypedDict

from ..util import REPLAY


class WrkResult(TypedDict):
    rps: float
    requests: int
    p99_ms: float
    non_2xx_3xx: int
    socket_errors: str


def parse_latency(text: str) -> float:
    """A wrk latency ("812.00us", "1.23ms", "2.01s") in milliseconds."""
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if m is None:
        raise ValueError(f"not a wrk latency: {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def _search(pattern: str, text: str) -> re.Match[str]:
    m = re.search(pattern, text)
    if m is None:
        raise ValueError(f"wrk output without {pattern!r}:\n{text}")
    return m


def parse_wrk(out: str) -> WrkResult:
    """wrk's report (run with --latency): requests per second, requests, the 99th
    percentile, the answers that were not 2xx or 3xx, and the socket errors line."""
    rps = float(_search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(_search(r"(\d+) requests in", out).group(1))
    p99 = parse_latency(_search(r"99%\s+([\d.]+\w+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "requests": total, "p99_ms": p99, "non_2xx_3xx": int(bad.group(1)) if bad else 0,
            "socket_errors": errors.group(1) if errors else ""}


def wrk_command(url: str, script_args: Sequence[str], duration: int, connections: int, threads: int = 1,
                script: str = REPLAY, headers: Sequence[str] = (), cpus: str | None = None) -> list[str]:
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{duration}s", "--latency", "-s", script, url]
    for h in headers:
        cmd[1:1] = ["-H", h]
    if cpus is not None:
        cmd[0:0] = ["taskset", "-c", cpus]
    if script_args:
        cmd += ["--"] + list(script_args)
    return cmd


def wrk(url: str, script_args: Sequence[str], duration: int, connections: int, raw_path: str, threads: int = 1,
        script: str = REPLAY, env: Mapping[str, str] | None = None, headers: Sequence[str] = (),
        cpus: str | None = None) -> WrkResult:
    """Runs wrk (on `cpus` with taskset if given), appends its command and output to
    `raw_path`, and parses it."""
    cmd = wrk_command(url, script_args, duration, connections, threads, script, headers, cpus)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration + 120).stdout
    with open(raw_path, "a") as f:
        f.write(" ".join(cmd) + "\n" + out + "\n")
    return parse_wrk(out)
