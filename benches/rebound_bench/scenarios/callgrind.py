"""callgrind: user-space instructions per L1-hit redirect, the repeatable figure."""

from __future__ import annotations

import os
import time
from typing import Any

from ..context import Bench, Table
from ..probes import ClickWatch
from ..tools import callgrind as cg
from ..tools import nginx, oha, openssl
from ..tools.h2load import h2load
from ..tools.wrk import wrk
from ..util import curl_answers, free_port, log, wait_for

# The workloads: (key, title, codes, connections, seconds, servers, Rebound's settings,
# protocol: "h1" for cleartext HTTP/1.1 with wrk, "h2" for HTTP/2 over TLS with h2load).
# The measured stretch is longer than the longest click hold (60 s), so it holds at
# least one rollup write however the writes are paced: the figure is the long-run cost
# of a redirect with its click persisted, not the cost of a stretch between writes.
WORKLOADS: list[tuple[str, str, int, int, int, list[str], dict[str, str], str]] = [
    ("callgrind", "8 connections over 10,000 codes, 1 redirect thread", 10_000, 8, 70,
     ["nginx", "hyper", "rebound"], {}, "h1"),
    # Issue 9's workload: fewer clicks per code and window, so click persistence shows.
    ("callgrind_defaults", "4 connections over 20,000 codes, default settings (a redirect thread per core)",
     20_000, 4, 70, ["nginx", "hyper", "hyper_1", "rebound"], {"REBOUND_REDIRECT_THREADS": "0"}, "h1"),
    # Issue 43's low-rate run: under callgrind's slowdown a few thousand redirects a second,
    # where each wake-up's fixed cost (parking, timers, the click shipper) is spread over
    # few requests; its stretch is shorter than a click hold, as an idle-ish proxy's is.
    ("callgrind_low", "4 connections over 20,000 codes for 8 s, default settings (a low rate)",
     20_000, 4, 8, ["nginx", "hyper", "rebound"], {"REBOUND_REDIRECT_THREADS": "0"}, "h1"),
    # The tls scenario's HTTP/2 row, repeatable: h2load's wall-clock ratios against nginx
    # moved by a sixth between runs minutes apart (benches/results/2026-12-07h-*). The
    # same ECDSA P-256 certificate on Rebound's TLS port and nginx's `listen ssl http2`;
    # the 4 handshakes fall in the stretch (h2load connects anew), a few million
    # instructions against the stretch's hundreds of millions. No hyper: it serves no TLS.
    ("callgrind_h2", "HTTP/2 over TLS, 4 connections of 10 streams over 10,000 codes, 1 redirect thread",
     10_000, 4, 70, ["nginx", "rebound"], {}, "h2"),
]


# Streams each h2load connection keeps open (the tls scenario's -m).
H2_STREAMS = 10


def tls_files(b: Bench) -> tuple[str, str]:
    """The certificate and key of the HTTP/2 workload (made once a run)."""
    cert, key = b.path("cg-tls.crt"), b.path("cg-tls.key")
    if not os.path.exists(cert):
        openssl.self_signed(cert, key)
    return cert, key


def run(b: Bench) -> None:
    """Loads a table of its own (at most 100,000 links), then measures every workload."""
    cg_dir = b.path("data-callgrind")
    cg_table, _ = b.load_links(cg_dir, min(100_000, b.links), "cg")
    b.write_tables(cg_table, "cg")
    measure(b, cg_dir, cg_table)


def measure(b: Bench, data_dir: str, usable: Table) -> None:
    """Instructions per L1-hit redirect under callgrind: counters zeroed after a warm-up,
    dumped after a fixed wrk run, divided by the requests served; click accounting and
    writes included (every thread of the process is counted)."""
    wanted = set(b.args.servers.split(",")) if b.args.servers else None
    workloads = set(b.args.workloads.split(",")) if b.args.workloads else None
    headers = [f"User-Agent: {b.args.user_agent}"] if b.args.user_agent else []
    headers += [f"Referer: {b.args.referer}"] if b.args.referer else []
    headers += [f"Accept-Language: {b.args.accept_language}"] if b.args.accept_language else []
    for key, title, n_codes, connections, seconds, all_names, settings, protocol in WORKLOADS:
        if workloads is not None and key not in workloads:
            continue
        names = [n for n in all_names if wanted is None or n in wanted]
        if (b.args.compare_bin or b.args.compare_env) and "rebound" in names:
            # The tree before a change (or this one with other settings), measured in the
            # same run right after this one's.
            names.insert(names.index("rebound") + 1, "rebound_compared")
        codes = usable[:n_codes]
        request_file = b.path(f"requests-{key}.txt")
        with open(request_file, "w") as f:
            f.write("\n".join("/" + c for c, _ in codes) + "\n")
        out: dict[str, Any] = {"title": title}
        tls = tls_files(b) if protocol == "h2" else None
        for name in names:
            outfile = b.path(f"{key}.out.{name}")
            wrapper = cg.wrapper(outfile)
            port = None
            if name == "nginx":
                nginx_name = "cg" if tls is None else "cg-tls"
                s = b.nginx_server(nginx_name, tls=tls, map_name="cg")
                # One process: the master runs the server itself, so valgrind follows it.
                s.cmd = wrapper + nginx.command(b.path(f"nginx-{nginx_name}"), b.path(f"nginx-{nginx_name}/nginx.conf"),
                                                "daemon off; master_process off;")
                port = s.port
            elif name in ("hyper", "hyper_1"):
                s = b.hyper_server("cg", wrapper, "current_thread" if name == "hyper_1" else None)
            else:
                binary = os.path.abspath(b.args.compare_bin) if name == "rebound_compared" and b.args.compare_bin else None
                extra = dict(settings)
                if name == "rebound_compared":
                    extra.update(dict(kv.split("=", 1) for kv in b.args.compare_env))
                if tls is not None:
                    port = free_port()
                    extra.update({"REBOUND_TLS_ADDR": f"127.0.0.1:{port}", "REBOUND_TLS_CERT": tls[0],
                                  "REBOUND_TLS_KEY": tls[1]})
                s = b.rebound_server(data_dir, wrapper, extra=extra, binary=binary)
            s.start(b.path(f"{key}-{name}.log"))
            rebound = name.startswith("rebound")
            try:
                if tls is None:
                    s.wait_ready("/readyz" if rebound else "/", 900)
                    url = f"http://127.0.0.1:{s.port}"

                    def load(duration: int, raw: str) -> int:
                        return wrk(url, [request_file], duration, connections, raw, headers=headers)["requests"]
                else:
                    if rebound:
                        s.wait_ready("/readyz", 900)
                    tls_url = f"https://127.0.0.1:{port}"
                    # Under valgrind a handshake takes seconds.
                    wait_for(lambda: curl_answers(tls_url + "/", 30), 900, f"{name} TLS ready")
                    uris = oha.write_url_file(b.path(f"{key}-uris-{name}.txt"), tls_url,
                                              ["/" + c for c, _ in codes])

                    def load(duration: int, raw: str) -> int:
                        return h2load(uris, duration, connections, H2_STREAMS, raw, headers=headers)["done"]
                load(20, b.path(f"load-{key}-warmup.txt"))
                if rebound:
                    # A scrape of /metrics costs Rebound about 2M instructions (2026-12-06):
                    # the watch's first and last scrapes are outside the counted stretch
                    # (zeroed after the first, dumped before the last); its lag samples,
                    # one every 10 s, are in it, about 20 instructions a redirect in the
                    # 70 s workloads and none in the 8 s one. nginx is not scraped.
                    with ClickWatch(f"http://127.0.0.1:{s.metrics_port}/metrics", every=10.0) as clicks:
                        cg.zero(s.pid)
                        requests = load(seconds, b.path(f"load-{key}.txt"))
                        cg.dump(s.pid)
                    out[f"{name}_clicks"] = clicks.result
                else:
                    cg.zero(s.pid)
                    requests = load(seconds, b.path(f"load-{key}.txt"))
                    cg.dump(s.pid)
                time.sleep(1)
                total, dumps = cg.dumps_total(b.raw, f"{key}.out.{name}.")
                out[name] = {"instructions": total, "requests": requests,
                             "per_request": total / requests if requests else 0}
                # Not over HTTP/2: hyper runs each stream's service in a task of its own, outside
                # the connection's, and the parts are HTTP/1.1's (hyper's h1 functions).
                if rebound and dumps and requests and tls is None:
                    # The split: the request path (each connection's task, inclusive) and the
                    # rest (click accounting and writes, timers, the other runtimes), and
                    # where each redirect's instructions go, by part.
                    annotated = cg.annotate(os.path.join(b.raw, dumps[-1]))
                    out[name]["path_per_request"] = cg.request_path(annotated) / requests
                    out[name]["parts_per_request"] = {
                        part: n / requests for part, n in cg.parts(annotated).items()}
                log(f"{key} {name}: {out[name]['per_request']:.0f} instructions per redirect")
            finally:
                s.stop()
        b.results[key] = out
        agent = f" -H 'User-Agent: {b.args.user_agent}'" if b.args.user_agent else ""
        agent += f" -H 'Referer: {b.args.referer}'" if b.args.referer else ""
        agent += f" -H 'Accept-Language: {b.args.accept_language}'" if b.args.accept_language else ""
        if tls is None:
            b.commands.append(f"valgrind --tool=callgrind SERVER; wrk 20 s warm-up; callgrind_control -z PID; "
                              f"wrk -t 1 -c {connections} -d {seconds}s{agent} ({n_codes:,} codes of a 100,000-link "
                              f"table); callgrind_control -d PID  # {title}")
        else:
            b.commands.append(f"valgrind --tool=callgrind SERVER (TLS, a self-signed ECDSA P-256 certificate); "
                              f"h2load 20 s warm-up; callgrind_control -z PID; h2load -c {connections} "
                              f"-m {H2_STREAMS} -D {seconds}{agent} -i URIS ({n_codes:,} codes of a 100,000-link "
                              f"table); callgrind_control -d PID  # {title}")
