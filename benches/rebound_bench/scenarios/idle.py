"""idle: what a process with no traffic costs (issue 43): CPU time and wake-ups of the
all-in-one, a proxy and a control plane (distributed, on Redis and moto), each measured
for IDLE_SECONDS after a settling pause, from /proc: every thread's schedstat (nanoseconds
on a CPU, exact where utime's 10 ms ticks are not) and its voluntary context switches (each
one a sleep, so a wake-up). With --compare-bin, the same for a second binary, the two
measured in turn, so a change's effect is read in one run."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from .. import servers
from ..context import Bench
from ..servers import Server
from ..util import free_port, log, run
from .distributed import distributed_env, start_services, wait_services

# How long each process is watched, and how long it is left alone first (start-up's own
# work, the first keepalives and polls).
IDLE_SECONDS = 60
SETTLE_SECONDS = 5


def process_cost(pid: int) -> tuple[int, int]:
    """(nanoseconds on a CPU, voluntary context switches) of every live thread of `pid`."""
    ns = switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return ns, switches


def watch(s: Server, seconds: float) -> dict[str, float]:
    """CPU-seconds and wake-ups per minute of `s` over `seconds` of no traffic."""
    time.sleep(SETTLE_SECONDS)
    ns0, sw0 = process_cost(s.pid)
    time.sleep(seconds)
    ns1, sw1 = process_cost(s.pid)
    per_minute = 60.0 / seconds
    return {"cpu_s_per_min": (ns1 - ns0) / 1e9 * per_minute, "wakeups_per_min": (sw1 - sw0) * per_minute}


def run_idle(b: Bench) -> None:
    binaries = [("this", b.rebound)]
    if b.args.compare_bin:
        binaries.append(("compared", os.path.abspath(b.args.compare_bin)))
    out: dict[str, Any] = {"seconds": IDLE_SECONDS, "binaries": {k: v for k, v in binaries}}
    services, redis_port, moto_port = start_services(b, "idle-")
    try:
        wait_services(redis_port, services[1])
        for role in ("all-in-one", "control-plane", "proxy"):
            for label, binary in binaries:
                out[f"{role}:{label}"] = measure(b, role, binary, label, redis_port, moto_port)
                log(f"idle {role} ({label}): {out[f'{role}:{label}']['cpu_s_per_min']:.4f} CPU-s/min, "
                    f"{out[f'{role}:{label}']['wakeups_per_min']:,.0f} wake-ups/min")
    finally:
        for svc in services:
            svc.stop()
    b.results["idle"] = out
    b.commands.append(f"idle: each process started with no traffic, {SETTLE_SECONDS} s left alone, then "
                      f"/proc/PID/task/*/schedstat and voluntary_ctxt_switches read {IDLE_SECONDS} s apart")


def measure(b: Bench, role: str, binary: str, label: str, redis_port: int, moto_port: int) -> dict[str, float]:
    started: list[Server] = []
    try:
        if role == "all-in-one":
            data_dir = b.path(f"data-idle-{label}")
            os.makedirs(data_dir, exist_ok=True)
            ports = (free_port(), free_port(), free_port())
            s = servers.rebound_all_in_one(binary, b.rebound_env(data_dir, *ports), ports)
        else:
            # A fleet of its own: its tables and queue (`rebound provision`), a control plane,
            # and the proxy when that is what is measured.
            base = distributed_env(b, f"idle-{label}-{role}", redis_port, moto_port)
            with open(b.path(f"idle-{label}-{role}-provision.log"), "w") as f:
                run([binary, "provision"], env=base, stdout=f, stderr=subprocess.STDOUT)
            cp = servers.rebound_role("control-plane", binary, "control-plane", base, free_port(), free_port(),
                                      "REBOUND_API_ADDR")
            if role == "control-plane":
                s = cp
            else:
                cp.start(b.path(f"idle-{label}-{role}-cp.log"))
                started.append(cp)
                cp.wait_ready("/readyz", 120)
                s = servers.rebound_role("proxy", binary, "proxy", base, free_port(), free_port(),
                                         "REBOUND_REDIRECT_ADDR")
        s.start(b.path(f"idle-{label}-{role}.log"))
        started.append(s)
        s.wait_ready("/readyz", 120)
        return watch(s, IDLE_SECONDS)
    finally:
        for srv in reversed(started):
            srv.stop()
