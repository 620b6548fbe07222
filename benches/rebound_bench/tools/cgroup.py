"""A CPU cap for a server under test (cgroup v1's CFS quota): each server held to the same
share of a core, so that the server is the bound and not the load generator.

The cap is a cgroup of the `cpu` controller (/sys/fs/cgroup/cpu/NAME) with
`cpu.cfs_quota_us` of run time per `cpu.cfs_period_us`, summed over all the threads in it
and over every core; the server's processes are written into its `cgroup.procs` (every
thread of each process moves, and threads started later are born in it) and back into the
cgroup they came from when the cap is lifted. It needs root (sudo otherwise).

On a machine shared with other work, a capped server may not even get its quota, and the
load generator may not get what it needs: `cpu.shares` (the weight of the cgroup against
the machine's other tasks, 1024 each) gives both precedence, the server within its quota."""

from __future__ import annotations

import os
import resource
import subprocess
from types import TracebackType
from typing import Callable, Iterable, TypeVar

from ..util import log, sudo
from .proc import proc_cpu_seconds

T = TypeVar("T")

CPU_ROOT = "/sys/fs/cgroup/cpu"
# The largest weight cgroup v1 takes: 256 times a task's.
MAX_SHARES = 262144


def parse_cpu_stat(text: str) -> dict[str, int]:
    """cpu.stat: nr_periods, nr_throttled, throttled_time (ns) and whatever else the kernel
    adds, as name -> value."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_cpu_cgroup(text: str) -> str:
    """The path of a process's cgroup of the `cpu` controller, from /proc/PID/cgroup
    (v1 lines are ID:CONTROLLERS:PATH; CONTROLLERS may be "cpu,cpuacct")."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            return parts[2]
    return "/"


def parse_cap(text: str) -> tuple[int, int]:
    """--cap's QUOTA/PERIOD in microseconds ("5000/10000": half a core)."""
    quota, _, period = text.partition("/")
    q, p = int(quota), int(period or "100000")
    if q <= 0 or p <= 0:
        raise ValueError(f"not a CPU cap: {text!r} (QUOTA/PERIOD in microseconds, e.g. 5000/10000)")
    return q, p


def asked_cap(cap: str, no_cap: bool) -> tuple[int, int] | None:
    """The share of --cap (`cap`) for a scenario's capped rows; None with --no-cap, or where
    no cgroup can hold it (said in the log: the capped rows are then left out)."""
    if no_cap:
        return None
    if not available():
        log("no cgroup v1 cpu controller to write to (/sys/fs/cgroup/cpu): the capped rows are left out")
        return None
    return parse_cap(cap)


def available(root: str = CPU_ROOT) -> bool:
    """cgroup v1's cpu controller is mounted with CFS quotas, and we may write to it."""
    return os.path.exists(os.path.join(root, "cpu.cfs_quota_us")) and (os.geteuid() == 0 or _sudo_works())


def _sudo_works() -> bool:
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


def _write(path: str, value: str) -> None:
    if os.geteuid() == 0:
        with open(path, "w") as f:
            f.write(value)
    else:
        subprocess.run(sudo() + ["tee", path], input=value.encode(), check=True, stdout=subprocess.DEVNULL)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class CpuCap:
    """`with CpuCap("rebound-bench-rebound", 2500, 10000) as cap: cap.add(pids)`; a quota
    of None for no cap (a cgroup for its `shares` alone)."""

    def __init__(self, name: str, quota_us: int | None, period_us: int, shares: int | None = None,
                 root: str = CPU_ROOT) -> None:
        self.root, self.quota_us, self.period_us, self.shares = root, quota_us, period_us, shares
        self.dir = os.path.join(root, name)
        self.origin: dict[int, str] = {}

    @property
    def cores(self) -> float:
        return self.quota_us / self.period_us if self.quota_us is not None else float("inf")

    def __enter__(self) -> "CpuCap":
        if not os.path.isdir(self.dir):
            if os.geteuid() == 0:
                os.mkdir(self.dir)
            else:
                subprocess.run(sudo() + ["mkdir", self.dir], check=True)
        # The period first: a new cgroup has no quota (-1), and a quota is checked against it.
        _write(os.path.join(self.dir, "cpu.cfs_period_us"), str(self.period_us))
        _write(os.path.join(self.dir, "cpu.cfs_quota_us"), str(self.quota_us if self.quota_us is not None else -1))
        if self.shares is not None:
            _write(os.path.join(self.dir, "cpu.shares"), str(self.shares))
        return self

    def add(self, pids: Iterable[int]) -> None:
        """Moves the processes (every thread of each) into the cap."""
        for pid in pids:
            try:
                self.origin.setdefault(pid, parse_cpu_cgroup(_read(f"/proc/{pid}/cgroup")))
            except OSError:
                continue
            _write(os.path.join(self.dir, "cgroup.procs"), str(pid))

    def release(self) -> None:
        """Moves every process in the cap back to the cgroup it came from (the root for one
        that came in by another way)."""
        try:
            pids = [int(p) for p in _read(os.path.join(self.dir, "cgroup.procs")).split()]
        except OSError:
            return
        for pid in pids:
            back = os.path.join(self.root, self.origin.get(pid, "/").lstrip("/"), "cgroup.procs")
            try:
                _write(back, str(pid))
            except (OSError, subprocess.CalledProcessError):
                pass
        self.origin.clear()

    def stat(self) -> dict[str, int]:
        return parse_cpu_stat(_read(os.path.join(self.dir, "cpu.stat")))

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
        try:
            if os.geteuid() == 0:
                os.rmdir(self.dir)
            else:
                subprocess.run(sudo() + ["rmdir", self.dir], check=False)
        except OSError:
            pass


def children_seconds() -> float:
    """CPU seconds of this process's children reaped so far (the load generators, once each
    ends)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_capped(cap: tuple[int, int], name: str, pids: list[int], duration: float,
               go: Callable[[], T]) -> tuple[T, dict[str, float]]:
    """Runs `go` with every process of a server (`pids`) in a cgroup of its own
    (rebound-bench-NAME) held to `cap` (QUOTA, PERIOD in microseconds), and this process (so
    the load generator `go` starts) in one without a quota; both weigh the most against the
    machine's other work (cpu.shares). What `go` returns, and where the bound was over the
    run's `duration` seconds: the server's and the load generator's shares of a core, and
    the share of the cap's periods in which the server was throttled."""
    with CpuCap(f"rebound-bench-{name}", *cap, shares=MAX_SHARES) as cg, \
            CpuCap("rebound-bench-client", None, cap[1], shares=MAX_SHARES) as client:
        cg.add(pids)
        client.add([os.getpid()])
        cpu0, client0 = proc_cpu_seconds(pids), children_seconds()
        out = go()
        server_s, client_s = proc_cpu_seconds(pids) - cpu0, children_seconds() - client0
        st = cg.stat()
    return out, {"server_core_share": server_s / duration, "client_core_share": client_s / duration,
                 "throttled_share": st.get("nr_throttled", 0) / max(st.get("nr_periods", 0), 1)}
