"""oha: a second load generator beside wrk (Rust, tokio and hyper: another client's costs),
with HTTP/2 of its own (`--http2`, `-p` streams on each connection). Its JSON report is
parsed (`--output-format json`, since oha 1.5; older versions had `-j`).

oha picks a URL at random from the file for each request (`--urls-from-file`): the same
distribution as wrk's replay of a random list, not the same sequence. It never follows a
redirect here (`--redirect 0`): every answer is one of the servers' 301s or 404s."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any, Mapping, Sequence, TypedDict


class OhaResult(TypedDict):
    rps: float
    requests: int
    p99_ms: float
    non_2xx_3xx: int
    errors: int
    aborted_at_deadline: int


DEADLINE = "aborted due to deadline"


def parse_oha_json(text: str) -> OhaResult:
    """oha's JSON report: answers per second (answers over the run's total time; requests
    cut off by the deadline of `-z` are not answers), answers, the 99th percentile of the
    latency, answers that were not 2xx or 3xx, and errors (timeouts, resets), the deadline's
    aside."""
    doc: dict[str, Any] = json.loads(text)
    seconds = float(doc["summary"]["total"])
    statuses: dict[str, int] = doc.get("statusCodeDistribution", {})
    errors: dict[str, int] = doc.get("errorDistribution", {})
    answers = sum(statuses.values())
    p99 = doc.get("latencyPercentiles", {}).get("p99")
    return {
        "rps": answers / seconds if seconds > 0 else 0.0,
        "requests": answers,
        "p99_ms": float(p99) * 1000 if p99 is not None else float("nan"),
        "non_2xx_3xx": sum(n for code, n in statuses.items() if not 200 <= int(code) < 400),
        "errors": sum(n for e, n in errors.items() if e != DEADLINE),
        "aborted_at_deadline": errors.get(DEADLINE, 0),
    }


def available() -> bool:
    return shutil.which("oha") is not None


def oha_command(url_file: str, duration: int, connections: int, http2: bool = False, streams: int = 1,
                keepalive: bool = True, threads: int = 1, cpus: str | None = None,
                headers: Sequence[str] = (), connect_to: Sequence[str] = ()) -> list[str]:
    """oha on the URLs of `url_file` for `duration` seconds with `connections`
    connections, on `threads` tokio worker threads (1, like wrk's one thread); HTTP/2 with
    `streams` requests in flight on each connection; a new connection for every request
    without keep-alive (the handshake rows); `connect_to` as `--connect-to` each
    (`host:port:127.0.0.1:port`: a URL's host, so its SNI name and Host, resolved here)."""
    cmd = ["oha", "--no-tui", "--output-format", "json", "--worker-threads", str(threads), "--redirect", "0",
           "--insecure", "-c", str(connections), "-z", f"{duration}s"]
    if http2:
        cmd += ["--http2", "-p", str(streams)]
    if not keepalive:
        cmd.append("--disable-keepalive")
    for h in headers:
        cmd += ["-H", h]
    for c in connect_to:
        cmd += ["--connect-to", c]
    cmd += ["--urls-from-file", url_file]
    if cpus is not None:
        cmd[0:0] = ["taskset", "-c", cpus]
    return cmd


def oha(url_file: str, duration: int, connections: int, raw_path: str, http2: bool = False, streams: int = 1,
        keepalive: bool = True, threads: int = 1, cpus: str | None = None,
        env: Mapping[str, str] | None = None, connect_to: Sequence[str] = ()) -> OhaResult:
    """Runs oha, appends its command and JSON report to `raw_path`, and parses it."""
    cmd = oha_command(url_file, duration, connections, http2, streams, keepalive, threads, cpus,
                      connect_to=connect_to)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration + 120).stdout
    # The raw file names a few of many --connect-to.
    shown = cmd if len(connect_to) <= 3 else oha_command(
        url_file, duration, connections, http2, streams, keepalive, threads, cpus,
        connect_to=connect_to[:3]) + [f"(and {len(connect_to) - 3} more --connect-to)"]
    with open(raw_path, "a") as f:
        f.write(" ".join(shown) + "\n" + out + "\n")
    return parse_oha_json(out)


def write_url_file(path: str, base: str, paths: Sequence[str]) -> str:
    """The URL file oha reads: `base` + each path, one a line."""
    with open(path, "w") as f:
        f.write("\n".join(base + p for p in paths) + "\n")
    return path
