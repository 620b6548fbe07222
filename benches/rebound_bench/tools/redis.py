"""redis-server and what `redis-cli info all` says of it."""

from __future__ import annotations

import subprocess
from typing import TypedDict


class RedisInfo(TypedDict):
    commands: int
    bytes_sent: int
    cpu_s: float


def parse_info(text: str) -> RedisInfo:
    """Commands processed, bytes sent and CPU seconds (system + user) from INFO."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
    return {"commands": int(fields["total_commands_processed"]),
            "bytes_sent": int(fields["total_net_output_bytes"]),
            "cpu_s": float(fields["used_cpu_sys"]) + float(fields["used_cpu_user"])}


def info(port: int) -> RedisInfo:
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "all"], capture_output=True, text=True).stdout
    return parse_info(out)


def ping(port: int) -> bool:
    return subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode == 0


def command(port: int) -> list[str]:
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
