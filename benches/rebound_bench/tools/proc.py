"""Process helpers and what the kernel tells about processes and the machine (/proc): CPU
time, sleeps, RSS, TCP counters, steal; `taskset` pinning; `perf stat` system-call counts.

Each reader has a parser of the file's text beside it, tested on saved copies."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable, Iterable, Mapping

# -- parsers -------------------------------------------------------------------------------


def parse_stat_cpu(text: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from a /proc/PID/stat line (the command name, in
    brackets, may hold spaces and brackets: the fields are counted after its last `)`)."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def parse_voluntary_switches(text: str) -> int:
    """voluntary_ctxt_switches from a /proc/PID/task/TID/status file."""
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("voluntary_ctxt_switches"))


def parse_vmrss_kib(text: str) -> int:
    """VmRSS in KiB from a /proc/PID/status file (0 for a process without one, a zombie)."""
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))


def parse_snmp_table(text: str, prefix: str) -> dict[str, int]:
    """One table of /proc/net/snmp or /proc/net/netstat: the header line and the value line
    that start with `prefix` ("Tcp:", "IpExt:"), as name -> value."""
    lines = [line.split() for line in text.splitlines() if line.startswith(prefix)]
    return dict(zip(lines[0][1:], (int(v) for v in lines[1][1:])))


def parse_cpu_ticks(text: str) -> tuple[int, int]:
    """(steal, total) jiffies of every CPU from /proc/stat's first line. The total is user
    nice system idle iowait irq softirq steal (guest time is already in user)."""
    fields = [int(v) for v in text.splitlines()[0].split()[1:]]
    return fields[7], sum(fields[:8])


# What `perf stat` counts of a server's system calls: every entry, then the ones a keep-alive
# redirect is made of (reading the request, writing the answer, waiting for readiness).
SYSCALL_GROUPS: dict[str, list[str]] = {
    "receive": ["read", "recvfrom", "recvmsg", "readv"],
    "send": ["write", "writev", "sendto", "sendmsg"],
    "wait": ["epoll_wait", "epoll_pwait", "epoll_pwait2"],
}


def perf_events() -> list[str]:
    return ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{n}" for g in SYSCALL_GROUPS.values() for n in g]


def parse_perf_stat(text: str) -> dict[str, int] | None:
    """The system calls by group from `perf stat -x ,` output (its stderr), or None where
    the tracepoints were not counted."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit():
            found[fields[2]] = int(fields[0])
    if "raw_syscalls:sys_enter" not in found:
        return None
    result = {"all": found["raw_syscalls:sys_enter"]}
    for group, names in SYSCALL_GROUPS.items():
        result[group] = sum(found.get(f"syscalls:sys_enter_{n}", 0) for n in names)
    return result


# -- readers -------------------------------------------------------------------------------


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def proc_cpu_split(pids: Iterable[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of the processes, from /proc/PID/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    user = system = 0
    for pid in pids:
        try:
            u, s = parse_stat_cpu(_read(f"/proc/{pid}/stat"))
        except OSError:
            continue
        user, system = user + u, system + s
    return user / tick, system / tick


def proc_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(proc_cpu_split(pids))


def proc_sleeps(pids: Iterable[int]) -> int:
    """Times the processes' threads went to sleep waiting (voluntary context switches, from
    /proc/PID/task/*/status). On the loopback each sleep of a server is a wake-up that the
    client's send pays for."""
    sleeps = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                sleeps += parse_voluntary_switches(_read(f"/proc/{pid}/task/{tid}/status"))
            except OSError:
                pass
    return sleeps


def kernel_net_counters() -> tuple[int, int]:
    """TCP segments sent and IP bytes sent by this machine since boot (/proc/net/snmp and
    /proc/net/netstat). On the loopback every segment and byte is also received, once."""
    return (parse_snmp_table(_read("/proc/net/snmp"), "Tcp:")["OutSegs"],
            parse_snmp_table(_read("/proc/net/netstat"), "IpExt:")["OutOctets"])


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of every CPU since boot, from /proc/stat's first line."""
    return parse_cpu_ticks(_read("/proc/stat"))


def proc_rss_mib(pids: Iterable[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += parse_vmrss_kib(_read(f"/proc/{pid}/status"))
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def pin(pids: Iterable[int], cpus: str) -> None:
    """Pins every thread of the processes to `cpus` (a taskset list, "0" or "0-1")."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def perf_syscalls(pids: Iterable[int], seconds: float,
                  out_path: str) -> Callable[[], Mapping[str, int] | None]:
    """Starts counting the system calls of every thread of `pids` for `seconds` with `perf
    stat` (tracepoints); the returned function waits for it and gives the counts, or None
    where perf or its tracepoints are not available."""
    if shutil.which("perf") is None:
        return lambda: None
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(perf_events()), "-p", ",".join(map(str, pids)), "--",
           "sleep", str(seconds)]
    perf = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def counts() -> Mapping[str, int] | None:
        err = perf.communicate()[1]
        with open(out_path, "a") as f:
            f.write(" ".join(cmd) + "\n" + err + "\n")
        return parse_perf_stat(err)
    return counts
