"""tls: HTTPS keep-alive, HTTP/2 and TLS handshakes, Rebound's TLS port against nginx's
`listen ssl http2` with the same certificate, the servers taking turns.

Each round gives, for each server: wrk's HTTPS keep-alive, h2load's HTTP/2 and wrk's
handshakes (`Connection: close`); the same three with oha (its own HTTP/1.1, `--http2`,
`--disable-keepalive`); and wrk's keep-alive and handshake runs again with the server held
to a CPU share (cgroup v1 quota, --cap), where the server and not wrk is the bound."""

from __future__ import annotations

import os
from typing import Any, Callable

from ..context import Bench, Table, first_paths
from ..servers import Server
from ..tools import cgroup, oha, openssl
from ..tools.h2load import h2load
from ..tools.proc import pin, proc_cpu_seconds
from ..tools.wrk import wrk
from ..util import curl_answers, free_port, log, summary, wait_for
from .anatomy import request_anatomy

URIS = 20_000  # URIs in h2load's and oha's files

# The rows of the TLS table, in order: (key, title). A key's runs are in results["tls"].
ROWS = [
    ("https", "HTTPS keep-alive req/s (wrk)"),
    ("https_capped", "HTTPS keep-alive req/s (wrk), each server capped to {cores} core"),
    ("https_oha", "HTTPS keep-alive req/s (oha)"),
    ("h2", "HTTP/2 req/s (h2load, -m 10)"),
    ("h2_oha", "HTTP/2 req/s (oha --http2, -p 10)"),
    ("handshakes", "TLS handshakes/s (wrk, Connection: close, 16 connections)"),
    ("handshakes_capped", "TLS handshakes/s (wrk, Connection: close, 16 connections), each server capped to {cores} core"),
    ("handshakes_oha", "TLS connections/s (oha --disable-keepalive, 16 connections)"),
]


def run(b: Bench, data_dir: str, usable: Table) -> None:
    a = b.args
    cert, key = b.path("tls.crt"), b.path("tls.key")
    openssl.self_signed(cert, key)
    requests = b.request_lists(usable, 0.0, "tls", a.list_size)
    # The same map as the main nginx.
    nginx = b.nginx_server("main-tls", tls=(cert, key), map_name="main")
    tls_port = free_port()
    rebound = b.rebound_server(data_dir, extra={"REBOUND_TLS_ADDR": f"127.0.0.1:{tls_port}",
                                               "REBOUND_TLS_CERT": cert, "REBOUND_TLS_KEY": key})
    servers: dict[str, tuple[Server, int]] = {"rebound": (rebound, tls_port), "nginx": (nginx, nginx.port)}
    cap = cgroup.asked_cap(a.cap, a.no_cap)
    for name, (s, _) in servers.items():
        s.start(b.path(f"tls-{name}.log"))
    try:
        wait_for(lambda: curl_answers(f"https://127.0.0.1:{nginx.port}/"), 300, "nginx TLS ready")
        rebound.wait_ready("/readyz", 300)
        b.sweep(rebound.port, usable, "rebound-tls")
        # What each server negotiates with an OpenSSL client of wrk's kind (AES-256 first).
        b.results["tls_negotiated"] = {name: openssl.negotiated(port) for name, (_, port) in servers.items()}
        paths = first_paths(requests, URIS)
        uris = {name: oha.write_url_file(b.path(f"h2load-uris-{name}.txt"), f"https://127.0.0.1:{port}", paths)
                for name, (_, port) in servers.items()}
        keys = ["https", "h2", "handshakes"]
        if b.oha:
            keys += ["https_oha", "h2_oha", "handshakes_oha"]
        if cap:
            keys += ["https_capped", "handshakes_capped"]
        runs: dict[tuple[str, str], list[float]] = {(k, name): [] for k in keys for name in servers}
        per_cpu: dict[tuple[str, str], list[float]] = {(k, name): [] for k in keys for name in servers}
        # Where the bound is, in the capped runs: each side's share of a core, the share of
        # the cap's periods in which the server was throttled.
        bound: dict[tuple[str, str], dict[str, list[float]]] = {
            (k, name): {"server_core_share": [], "client_core_share": [], "throttled_share": []}
            for k in keys if k.endswith("_capped") for name in servers}

        def measure(key: str, name: str, s: Server, go: Callable[[], tuple[float, int]]) -> float:
            """Runs one load (`go` gives its per-second figure and its count) and files
            the figure and the count per server CPU-second under (key, name)."""
            cpu0 = proc_cpu_seconds(s.pids())
            rate, count = go()
            runs[(key, name)].append(rate)
            per_cpu[(key, name)].append(count / max(proc_cpu_seconds(s.pids()) - cpu0, 1e-9))
            return rate

        def capped(key: str, name: str, s: Server, go: Callable[[], tuple[float, int]]) -> float:
            """`measure` with the server held to the cap (`cgroup.run_capped`)."""
            assert cap is not None
            rate, where = cgroup.run_capped(cap, name, s.pids(), a.duration, lambda: measure(key, name, s, go))
            for m, v in where.items():
                bound[(key, name)][m].append(v)
            return rate

        for round_ in range(a.runs):
            order = list(servers.items())
            if round_ % 2:
                order.reverse()
            for name, (s, port) in order:
                url = f"https://127.0.0.1:{port}"

                def https() -> tuple[float, int]:
                    r = wrk(url, [requests], a.duration, a.connections, b.path("wrk-https.txt"))
                    return r["rps"], r["requests"]

                def h2() -> tuple[float, int]:
                    r = h2load(uris[name], a.duration, a.connections, 10, b.path("h2load.txt"))
                    return r["rps"], r["done"]

                def handshakes() -> tuple[float, int]:
                    # A handshake costs the client more than the server (it verifies the
                    # signature), so with both on the same 2 cores the server's helper threads
                    # take the client's time: the server gets CPU 0, the load generator CPU 1.
                    pin(s.pids(), "0")
                    try:
                        r = wrk(url, [requests], a.duration, 16, b.path("wrk-handshakes.txt"),
                                headers=["Connection: close"], cpus="1")
                    finally:
                        pin(s.pids(), f"0-{(os.cpu_count() or 1) - 1}")
                    return r["rps"], r["requests"]

                measure("https", name, s, https)
                h2_rate = measure("h2", name, s, h2)
                hs_rate = measure("handshakes", name, s, handshakes)
                log(f"tls round {round_ + 1} {name}: https {runs[('https', name)][-1]:.0f} req/s, "
                    f"h2 {h2_rate:.0f} req/s, handshakes {hs_rate:.0f}/s")
                if b.oha:
                    oha_rounds(b, name, s, uris[name], measure)
                if cap:
                    capped("https_capped", name, s, https)
                    capped("handshakes_capped", name, s, handshakes)
                    sh = bound[("https_capped", name)]["server_core_share"][-1]
                    log(f"tls round {round_ + 1} {name} capped to {cap[0] / cap[1]:.2f} core: https "
                        f"{runs[('https_capped', name)][-1]:.0f} req/s (server {100 * sh:.0f} % of a core), "
                        f"handshakes {runs[('handshakes_capped', name)][-1]:.0f}/s")
        request_anatomy(b, {n: (s, f"https://127.0.0.1:{port}") for n, (s, port) in servers.items()}, requests,
                        "anatomy_https", a.duration)
        b.results["tls"] = {f"{k}:{name}": summary(v) for (k, name), v in runs.items()}
        b.results["tls_per_cpu_s"] = {f"{k}:{name}": summary(v) for (k, name), v in per_cpu.items()}
        if cap:
            b.results["tls_capped"] = {
                "quota_us": cap[0], "period_us": cap[1], "cores": cap[0] / cap[1], "shares": cgroup.MAX_SHARES,
                "bound": {f"{k}:{name}": {m: summary(v) for m, v in ms.items()} for (k, name), ms in bound.items()},
            }
        b.commands += [
            f"wrk -t 1 -c {a.connections} -d {a.duration}s --latency -s benches/wrk/replay.lua https://TLS_PORT -- "
            f"requests-tls.txt  # x{a.runs}, alternating",
            f"h2load -c {a.connections} -m 10 -D {a.duration} -i h2load-uris-SERVER.txt  # 20,000 URIs, x{a.runs}",
            f"taskset -a -p -c 0 SERVER; taskset -c 1 wrk -H 'Connection: close' -t 1 -c 16 -d {a.duration}s "
            f"-s benches/wrk/replay.lua https://TLS_PORT -- requests-tls.txt  # handshakes/s, x{a.runs}",
        ]
        if b.oha:
            base = (f"oha --no-tui --output-format json --worker-threads 1 --redirect 0 --insecure -z {a.duration}s "
                    f"--urls-from-file h2load-uris-SERVER.txt")
            b.commands += [
                f"{base} -c {a.connections}  # HTTPS keep-alive, x{a.runs}",
                f"{base} -c {a.connections} --http2 -p 10  # HTTP/2, x{a.runs}",
                f"taskset -a -p -c 0 SERVER; taskset -c 1 {base} -c 16 --disable-keepalive  # connections/s, x{a.runs}",
            ]
        if cap:
            b.commands.append(
                f"mkdir /sys/fs/cgroup/cpu/rebound-bench-SERVER; echo {cap[1]} > cpu.cfs_period_us; "
                f"echo {cap[0]} > cpu.cfs_quota_us; echo {cgroup.MAX_SHARES} > cpu.shares; echo PID > cgroup.procs "
                f"(every process of the server); the bench (so wrk) in rebound-bench-client, cpu.shares "
                f"{cgroup.MAX_SHARES}, no quota; then the HTTPS keep-alive and handshake wrk runs above; back to "
                f"their cgroups after each")
    finally:
        for s, _ in servers.values():
            s.stop()


def oha_rounds(b: Bench, name: str, s: Server, url_file: str,
               measure: Callable[[str, str, Server, Callable[[], tuple[float, int]]], float]) -> None:
    """oha's three rows for one server in one round."""
    a = b.args

    def https() -> tuple[float, int]:
        r = oha.oha(url_file, a.duration, a.connections, b.path("oha-https.txt"))
        return r["rps"], r["requests"]

    def h2() -> tuple[float, int]:
        r = oha.oha(url_file, a.duration, a.connections, b.path("oha-h2.txt"), http2=True, streams=10)
        return r["rps"], r["requests"]

    def connections() -> tuple[float, int]:
        pin(s.pids(), "0")
        try:
            r = oha.oha(url_file, a.duration, 16, b.path("oha-handshakes.txt"), keepalive=False, cpus="1")
        finally:
            pin(s.pids(), f"0-{(os.cpu_count() or 1) - 1}")
        return r["rps"], r["requests"]

    rates = [measure(k, name, s, go) for k, go in [("https_oha", https), ("h2_oha", h2),
                                                      ("handshakes_oha", connections)]]
    log(f"tls (oha) {name}: https {rates[0]:.0f} req/s, h2 {rates[1]:.0f} req/s, connections {rates[2]:.0f}/s")


def rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """The TLS table's rows that were measured, titled."""
    cores = results.get("tls_capped", {}).get("cores", 0.0)
    return [(k, title.format(cores=f"{cores:.2f}")) for k, title in ROWS if f"{k}:rebound" in results["tls"]]

