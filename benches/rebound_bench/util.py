"""What every part of the suite shares: the repository's paths, logging, ports, waiting."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Sequence, TypedDict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPLAY = os.path.join(ROOT, "benches", "wrk", "replay.lua")
CREATE = os.path.join(ROOT, "benches", "wrk", "create.lua")
KEY = "bench-operator-key-0000000000"
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class Summary(TypedDict):
    median: float
    min: float
    max: float
    runs: int


def log(*args: object) -> None:
    print("bench:", *args, file=sys.stderr, flush=True)


def run(cmd: Sequence[str], **kw: Any) -> "subprocess.CompletedProcess[Any]":
    return subprocess.run(cmd, check=True, **kw)


def sudo() -> list[str]:
    """The prefix that makes a command run as root: nothing when we are root."""
    return [] if os.geteuid() == 0 else ["sudo"]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def http_status(url: str, timeout: float = 2.0) -> int | None:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a: Any, **k: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        status: int = opener.open(url, timeout=timeout).status
        return status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


def curl_answers(url: str, timeout: float = 5.0) -> bool:
    """Whether anything answers `url` (curl, any status; over TLS a self-signed certificate
    passes): a server's port, cleartext or TLS, is up."""
    return subprocess.run(["curl", "-sk", "-o", "/dev/null", url], timeout=timeout).returncode == 0


def wait_for(predicate: Callable[[], bool], limit: float, what: str) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise SystemExit(f"bench: {what} did not happen within {limit} s")


def summary(values: Sequence[float]) -> Summary:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}
