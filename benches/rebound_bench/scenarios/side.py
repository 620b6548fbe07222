"""side: Rebound, nginx and hyper-ref side by side on random codes with a warm L1, then with
10 % unknown codes (wrk), the warm list again with oha, and where the CPU goes.

Free-running, wrk's one thread is often the bound on 2 cores (it uses a whole core while the
servers use less of the other), so its requests per second say as much about wrk as about
the server. Each wrk run is then made again with every process of the server held to the
same CPU share (a cgroup v1 quota, --cap, as the tls scenario's capped rows): the server is
the bound, and the figure is what each does with that share (`warm_capped`,
`unknown_capped`)."""

from __future__ import annotations

from typing import Any

from ..context import Bench, Table, first_paths
from ..probes import ClickWatch, StatsFreshness
from ..servers import Server
from ..tools import cgroup
from ..tools.metrics import metric
from ..tools.oha import OhaResult, oha, write_url_file
from ..tools.proc import proc_cpu_seconds, proc_rss_mib
from ..tools.wrk import wrk
from ..util import log, summary
from .anatomy import request_anatomy

OHA_URLS = 20_000  # URLs in oha's file (it picks one at random for each request)


def run(b: Bench, data_dir: str, usable: Table) -> None:
    a = b.args
    lists = {
        "warm": b.request_lists(usable, 0.0, "warm", a.list_size),
        "unknown": b.request_lists(usable, 0.10, "unknown", a.list_size),
    }
    servers: dict[str, Server] = {
        "nginx": b.nginx_server("main"),
        "hyper": b.hyper_server("main"),
        "rebound": b.rebound_server(data_dir),
    }
    cap = cgroup.asked_cap(a.cap, a.no_cap)
    for name, s in servers.items():
        s.start(b.path(f"{name}.log"))
    try:
        servers["nginx"].wait_ready("/", 300)
        servers["hyper"].wait_ready("/", 300)
        servers["rebound"].wait_ready("/readyz", 300)
        rb = servers["rebound"]
        metrics_url = f"http://127.0.0.1:{rb.metrics_port}/metrics"
        l1_misses = 'rebound_lookups_total{result="miss",tier="l1"}'
        for name, s in servers.items():
            log(f"warming {name}")
            b.sweep(s.port, usable, name)
        # A loaded sweep may not reach the end of the list in its time; sweep Rebound
        # again (the codes already cached answer fast) until every code was filled.
        for _ in range(3):
            if metric(metrics_url, l1_misses) >= len(usable):
                break
            b.sweep(rb.port, usable, "rebound")
        rss_after_sweep = proc_rss_mib(rb.pids())
        b.results["rss"] = {name: proc_rss_mib(s.pids()) for name, s in servers.items()}
        b.results["rss"]["rebound"] = rss_after_sweep
        b.results["rss_rebound_cached"] = metric(metrics_url, l1_misses)
        store_reads = 'rebound_lookups_total{result="read",tier="store"}'
        for scenario, request_file in lists.items():
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
            capped: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
            reads_before = metric(metrics_url, store_reads)
            clicks = ClickWatch(metrics_url).__enter__()
            fresh = StatsFreshness(rb.port, rb.api_port, usable[0][0]).__enter__()
            for round_ in range(a.runs):
                order = list(servers.items())
                if round_ % 2:
                    order.reverse()
                for name, s in order:
                    cpu0 = proc_cpu_seconds(s.pids())
                    r: dict[str, Any] = dict(wrk(f"http://127.0.0.1:{s.port}", [request_file], a.duration,
                                                 a.connections, b.path(f"wrk-{scenario}.txt")))
                    r["cpu_s"] = proc_cpu_seconds(s.pids()) - cpu0
                    r["rps_per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else 0
                    runs[name].append(r)
                    log(f"{scenario} round {round_ + 1} {name}: {r['rps']:.0f} req/s, p99 {r['p99_ms']:.2f} ms, "
                        f"CPU {r['cpu_s']:.1f} s")
                    if cap:
                        out = b.path(f"wrk-{scenario}-capped.txt")
                        c, where = cgroup.run_capped(cap, name, s.pids(), a.duration, lambda: wrk(
                            f"http://127.0.0.1:{s.port}", [request_file], a.duration, a.connections, out))
                        capped[name].append({"rps": c["rps"], **where})
                        log(f"{scenario} round {round_ + 1} {name} capped to {cap[0] / cap[1]:.2f} core: "
                            f"{c['rps']:.0f} req/s (server {100 * where['server_core_share']:.0f} % of a core, "
                            f"throttled in {100 * where['throttled_share']:.0f} % of periods)")
            clicks.__exit__(None, None, None)
            fresh.__exit__(None, None, None)
            clicks.result["stats_freshness_s"] = fresh.result
            b.results.setdefault("click_persistence", {})[scenario] = clicks.result
            reads = metric(metrics_url, store_reads) - reads_before
            b.results[scenario] = {
                name: {
                    "rps": summary([r["rps"] for r in rs]),
                    "p99_ms": summary([r["p99_ms"] for r in rs]),
                    "rps_per_cpu_s": summary([r["rps_per_cpu_s"] for r in rs]),
                    "non_2xx_3xx": sum(r["non_2xx_3xx"] for r in rs),
                }
                for name, rs in runs.items()
            }
            b.results[scenario]["rebound_store_reads"] = reads
            if cap:
                b.results[f"{scenario}_capped"] = {
                    name: {k: summary([r[k] for r in rs]) for k in rs[0]} for name, rs in capped.items()}
            b.commands.append(
                f"wrk -t 1 -c {a.connections} -d {a.duration}s --latency -s benches/wrk/replay.lua URL -- "
                f"requests-{scenario}.txt  # x{a.runs} per server, alternating" +
                (", each run then again capped" if cap else ""))
        if cap:
            b.results["side_capped"] = {"quota_us": cap[0], "period_us": cap[1], "cores": cap[0] / cap[1],
                                        "shares": cgroup.MAX_SHARES}
            b.commands.append(
                f"mkdir /sys/fs/cgroup/cpu/rebound-bench-SERVER; echo {cap[1]} > cpu.cfs_period_us; "
                f"echo {cap[0]} > cpu.cfs_quota_us; echo {cgroup.MAX_SHARES} > cpu.shares; echo PID > cgroup.procs "
                f"(every process of the server); the bench (so wrk) in rebound-bench-client, cpu.shares "
                f"{cgroup.MAX_SHARES}, no quota; then the same wrk run; back to their cgroups after it")
        request_anatomy(b, {n: (s, f"http://127.0.0.1:{s.port}") for n, s in servers.items()}, lists["warm"],
                        "anatomy", a.duration)
        if b.oha:
            oha_rows(b, servers, lists["warm"])
    finally:
        for s in servers.values():
            s.stop()


def oha_rows(b: Bench, servers: dict[str, Server], request_file: str) -> None:
    """The warm scenario again with oha (one worker thread, HTTP/1.1 keep-alive), after
    wrk's runs and the anatomy, so that those run as they always did: `warm_oha` in the
    results."""
    a = b.args
    paths = first_paths(request_file, OHA_URLS)
    files = {name: write_url_file(b.path(f"oha-urls-{name}.txt"), f"http://127.0.0.1:{s.port}", paths)
             for name, s in servers.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    for round_ in range(a.runs):
        order = list(servers.items())
        if round_ % 2:
            order.reverse()
        for name, s in order:
            cpu0 = proc_cpu_seconds(s.pids())
            o: OhaResult = oha(files[name], a.duration, a.connections, b.path("oha-warm.txt"))
            r: dict[str, Any] = dict(o)
            r["cpu_s"] = proc_cpu_seconds(s.pids()) - cpu0
            r["rps_per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else 0
            runs[name].append(r)
            log(f"warm (oha) round {round_ + 1} {name}: {r['rps']:.0f} req/s, p99 {r['p99_ms']:.2f} ms, "
                f"CPU {r['cpu_s']:.1f} s, {o['errors']} errors")
    b.results["warm_oha"] = {
        name: {
            "rps": summary([r["rps"] for r in rs]),
            "p99_ms": summary([r["p99_ms"] for r in rs]),
            "rps_per_cpu_s": summary([r["rps_per_cpu_s"] for r in rs]),
            "non_2xx_3xx": sum(r["non_2xx_3xx"] for r in rs),
            "errors": sum(r["errors"] for r in rs),
        }
        for name, rs in runs.items()
    }
    b.commands.append(f"oha --no-tui --output-format json --worker-threads 1 --redirect 0 --insecure -c {a.connections} "
                      f"-z {a.duration}s --urls-from-file oha-urls-SERVER.txt  # {OHA_URLS:,} URLs of "
                      f"requests-warm.txt, x{a.runs} per server, alternating")
