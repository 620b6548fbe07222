"""conns: RSS before and after many short connections on every port, in clear and over TLS."""

from __future__ import annotations

import time
from typing import Any

from ..context import Bench
from ..servers import Server
from ..tools import openssl
from ..tools.proc import proc_rss_mib
from ..tools.wrk import wrk
from ..util import curl_answers, free_port, log, wait_for


def run(b: Bench, data_dir: str, count: int = 100_000) -> None:
    """RSS before and after `count` short connections (one request each, then closed) on
    every port of Rebound (redirect, redirect TLS, API, metrics) and of nginx (clear
    and TLS): memory must not grow with the connections a process has served."""
    cert, key = b.path("conns.crt"), b.path("conns.key")
    openssl.self_signed(cert, key)
    tls_port = free_port()
    rebound = b.rebound_server(data_dir, extra={"REBOUND_TLS_ADDR": f"127.0.0.1:{tls_port}",
                                               "REBOUND_TLS_CERT": cert, "REBOUND_TLS_KEY": key})
    nginx, nginx_tls = b.nginx_server("main"), b.nginx_server("main-conns-tls", tls=(cert, key), map_name="main")
    ports: dict[str, tuple[Server, list[tuple[str, str, str]]]] = {
        "rebound": (rebound, [("redirect", f"http://127.0.0.1:{rebound.port}", "/nosuchcode"),
                              ("redirect TLS", f"https://127.0.0.1:{tls_port}", "/nosuchcode"),
                              ("API", f"http://127.0.0.1:{rebound.api_port}", "/api/v1/links/nosuchcode"),
                              ("metrics", f"http://127.0.0.1:{rebound.metrics_port}", "/healthz")]),
        "nginx": (nginx, [("clear", f"http://127.0.0.1:{nginx.port}", "/nosuchcode")]),
        "nginx TLS": (nginx_tls, [("TLS", f"https://127.0.0.1:{nginx_tls.port}", "/nosuchcode")]),
    }
    out: list[dict[str, Any]] = []
    for name, (s, targets) in ports.items():
        s.start(b.path(f"conns-{name.replace(' ', '-')}.log"))
        try:
            if name == "rebound":
                s.wait_ready("/readyz", 300)
            else:
                scheme = "https" if "TLS" in name else "http"
                wait_for(lambda: curl_answers(f"{scheme}://127.0.0.1:{s.port}/"), 300, f"{name} ready")
            for port, url, path in targets:
                with open(b.path("conns-path.txt"), "w") as f:
                    f.write(path + "\n")

                def connections(n: int) -> tuple[int, float]:
                    """wrk runs of 5 s with `Connection: close` (a connection a request)
                    until `n` requests were answered: (connections, per second)."""
                    done, seconds = 0, 0.0
                    while done < n:
                        r = wrk(url, [b.path("conns-path.txt")], 5, 16, b.path("wrk-conns.txt"),
                                headers=["Connection: close"])
                        done, seconds = done + r["requests"], seconds + 5
                    return done, done / seconds

                # A warm-up: the first connections grow the allocator's and runtime's pools.
                connections(5000)
                time.sleep(1)
                before = proc_rss_mib(s.pids())
                done, rate = connections(count)
                time.sleep(2)
                after = proc_rss_mib(s.pids())
                out.append({"server": name, "port": port, "connections": done, "rps": rate,
                            "rss_before": before, "rss_after": after})
                log(f"conns {name} {port}: {done:,} connections at {rate:.0f}/s, "
                    f"RSS {before:.1f} -> {after:.1f} MiB")
        finally:
            s.stop()
    b.results["short_connections"] = out
    b.commands.append(f"wrk -t 1 -c 16 -d 5s -H 'Connection: close' -s benches/wrk/replay.lua URL -- PATH-FILE  "
                      f"# repeated until {count:,} connections on each port, after 5,000 to warm up; "
                      "RSS from /proc before and after")
