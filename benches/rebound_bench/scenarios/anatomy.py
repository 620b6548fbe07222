"""Where a keep-alive redirect's CPU goes, on each server and on the load generator."""

from __future__ import annotations

import os
import resource
import time
from typing import Any, Mapping

from ..context import Bench
from ..servers import Server
from ..tools.proc import kernel_net_counters, perf_syscalls, proc_cpu_split, proc_sleeps
from ..tools.wrk import wrk
from ..util import log


def request_anatomy(b: Bench, targets: Mapping[str, tuple[Server, str]], request_file: str, key: str,
                    duration: int = 10) -> None:
    """One wrk run per server (`targets`: name -> (server, URL)) on `request_file`, measuring
    wrk's user and system CPU (its rusage), the server's (/proc), the server's system calls
    by kind (perf stat, over the run) and the TCP segments and bytes per request. It says
    whether the per-second figures measure the servers or the client."""
    anatomy: dict[str, Any] = {}
    for name, (s, url) in targets.items():
        pids = s.pids()
        # perf counts over the whole run and a little more (the server is idle then).
        syscalls_of = perf_syscalls(pids, duration + 1, b.path("perf-anatomy.txt"))
        time.sleep(0.5)
        cpu0, sleeps0, (segs0, octets0) = proc_cpu_split(pids), proc_sleeps(pids), kernel_net_counters()
        # wrk is the only child reaped during the run: the children's rusage grows by its.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = wrk(url, [request_file], duration, b.args.connections, b.path("wrk-anatomy.txt"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu1, sleeps1, (segs1, octets1) = proc_cpu_split(pids), proc_sleeps(pids), kernel_net_counters()
        syscalls = syscalls_of()
        rps, requests = r["rps"], r["requests"]
        user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        per = 1e6 / requests
        a: dict[str, Any] = {
            "rps": rps, "requests": requests,
            "client_user_us": user * per, "client_sys_us": system * per,
            "client_core_share": (user + system) / duration,
            "server_user_us": (cpu1[0] - cpu0[0]) * per, "server_sys_us": (cpu1[1] - cpu0[1]) * per,
            "server_core_share": (sum(cpu1) - sum(cpu0)) / duration,
            "server_sleeps": (sleeps1 - sleeps0) / requests,
            "segments": (segs1 - segs0) / requests, "bytes": (octets1 - octets0) / requests}
        if syscalls:
            a["syscalls"] = {k: v / requests for k, v in syscalls.items()}
        anatomy[name] = a
        log(f"{key} {name}: {rps:.0f} req/s, wrk {a['client_user_us'] + a['client_sys_us']:.1f} us a request "
            f"({100 * a['client_core_share']:.0f} % of a core), server "
            f"{a['server_user_us'] + a['server_sys_us']:.1f} us ({100 * a['server_core_share']:.0f} %)")
    b.results[key] = anatomy
    b.commands.append(f"wrk -t 1 -c {b.args.connections} -d {duration}s -s benches/wrk/replay.lua URL -- "
                      f"{os.path.basename(request_file)}  # once per server, with wrk's rusage, /proc/PID/stat, "
                      f"perf stat -e 'raw_syscalls:sys_enter,syscalls:sys_enter_*' -p PIDS, /proc/net/snmp")
