"""Captures the fixtures in fixtures/: real outputs of the tools the suite parses, from short
runs against local servers (127.0.0.1 only), with the release binaries already built.

    python3 benches/rebound_bench/tests/capture_fixtures.py

It starts a Rebound all-in-one (with its TLS port) on 1,000 links, nginx in clear and over
TLS on the same links, hyper-ref and a redis-server, runs each tool for about two seconds,
and writes what the tool printed. Callgrind's dumps are large: the fixture keeps a real
dump's header and closing lines (callgrind-dump.txt) and the first lines of
callgrind_annotate's report (callgrind-annotate.txt). The raw directory is removed."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rebound_bench import servers  # noqa: E402
from rebound_bench.context import Bench, Options, first_paths  # noqa: E402
from rebound_bench.scenarios import domains  # noqa: E402
from rebound_bench.tools import callgrind, certs, cgroup, oha, openssl, redis  # noqa: E402
from rebound_bench.tools.proc import perf_events  # noqa: E402
from rebound_bench.tools.wrk import wrk_command  # noqa: E402
from rebound_bench.util import free_port, wait_for  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def save(name: str, text: str) -> None:
    with open(os.path.join(FIXTURES, name), "w") as f:
        f.write(text)
    print(f"fixtures/{name}: {len(text)} characters")


def out(cmd: list[str], **kw: object) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw).stdout  # type: ignore[call-overload, no-any-return]


def main() -> None:
    """Every fixture; `capture_fixtures.py domains` the domains scenario's alone."""
    b = Bench(Options(links=1000, list_size=20_000))
    try:
        if sys.argv[1:] != ["domains"]:
            capture(b)
        capture_domains(b)
    finally:
        shutil.rmtree(b.raw, ignore_errors=True)


def capture(b: Bench) -> None:
    data_dir = b.path("data")
    table, _ = b.load_links(data_dir, 1000, "main")
    save("links-import.csv", open(b.path("main.csv")).read().splitlines(keepends=True)[0] + "".join(
        open(b.path("main.csv")).read().splitlines(keepends=True)[1:5]))
    usable = b.write_tables(table, "main")
    cert, key = b.path("tls.crt"), b.path("tls.key")
    openssl.self_signed(cert, key)
    tls_port = free_port()
    rb = b.rebound_server(data_dir, extra={"REBOUND_TLS_ADDR": f"127.0.0.1:{tls_port}", "REBOUND_TLS_CERT": cert,
                                          "REBOUND_TLS_KEY": key})
    ng = b.nginx_server("main")
    ng_tls = b.nginx_server("main-tls", tls=(cert, key), map_name="main")
    redis_port = free_port()
    rd = servers.redis_server(redis_port)
    started = [rb.start(b.path("rebound.log")), ng.start(b.path("nginx.log")), ng_tls.start(b.path("nginx-tls.log")),
               rd.start(b.path("redis.log"))]
    try:
        rb.wait_ready("/readyz", 120)
        ng.wait_ready("/", 60)
        wait_for(lambda: redis.ping(redis_port), 30, "redis ready")
        wait_for(lambda: subprocess.run(["curl", "-sk", "-o", "/dev/null", f"https://127.0.0.1:{ng_tls.port}/"],
                                        timeout=5).returncode == 0, 60, "nginx TLS ready")
        warm = b.request_lists(usable, 0.0, "warm", 20_000)
        unknown = b.request_lists(usable, 0.10, "unknown", 20_000)
        # wrk: keep-alive with 10 % unknown codes (the Non-2xx line), HTTPS keep-alive,
        # handshakes (Connection: close).
        save("wrk-unknown.txt", out(wrk_command(f"http://127.0.0.1:{ng.port}", [unknown], 2, 64)))
        save("wrk-https.txt", out(wrk_command(f"https://127.0.0.1:{tls_port}", [warm], 2, 64)))
        save("wrk-handshakes.txt", out(wrk_command(f"https://127.0.0.1:{ng_tls.port}", [warm], 2, 16,
                                                   headers=["Connection: close"])))
        # oha: HTTP/1.1 keep-alive with unknown codes (404s), HTTPS, HTTP/2, no keep-alive.
        clear = oha.write_url_file(b.path("oha-clear.txt"), f"http://127.0.0.1:{ng.port}", first_paths(unknown, 20_000))
        tls = oha.write_url_file(b.path("oha-tls.txt"), f"https://127.0.0.1:{tls_port}", first_paths(warm, 20_000))
        save("oha-unknown.json", out(oha.oha_command(clear, 2, 64)))
        save("oha-https.json", out(oha.oha_command(tls, 2, 64)))
        save("oha-h2.json", out(oha.oha_command(tls, 2, 64, http2=True, streams=10)))
        save("oha-handshakes.json", out(oha.oha_command(tls, 2, 16, keepalive=False)))
        # h2load on nginx's TLS port.
        h2 = oha.write_url_file(b.path("h2.txt"), f"https://127.0.0.1:{ng_tls.port}", first_paths(warm, 20_000))
        save("h2load.txt", out(["h2load", "-c", "64", "-m", "10", "-D", "2", "-i", h2]))
        # perf stat on Rebound's threads while wrk runs.
        pids = rb.pids()
        perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", ",".join(perf_events()), "-p",
                                 ",".join(map(str, pids)), "--", "sleep", "3"], stderr=subprocess.PIPE, text=True)
        out(wrk_command(f"http://127.0.0.1:{rb.port}", [warm], 2, 64))
        save("perf-stat.txt", perf.communicate()[1])
        # /proc, with Rebound under load just before.
        tid = sorted(os.listdir(f"/proc/{rb.pid}/task"))[-1]
        for name, path in [("proc-stat-pid.txt", f"/proc/{rb.pid}/stat"),
                           ("proc-task-status.txt", f"/proc/{rb.pid}/task/{tid}/status"),
                           ("proc-status.txt", f"/proc/{rb.pid}/status"), ("proc-net-snmp.txt", "/proc/net/snmp"),
                           ("proc-net-netstat.txt", "/proc/net/netstat"), ("proc-stat.txt", "/proc/stat")]:
            save(name, open(path).read())
        # The CPU cap: the cgroup a capped server is in, and cpu.stat after a capped run.
        if cgroup.available():
            with cgroup.CpuCap("rebound-bench-fixture", 5000, 10000) as cap:
                cap.add(rb.pids())
                save("proc-cgroup-capped.txt", open(f"/proc/{rb.pid}/cgroup").read())
                out(wrk_command(f"https://127.0.0.1:{tls_port}", [warm], 2, 64))
                save("cgroup-cpu-stat.txt", open(os.path.join(cap.dir, "cpu.stat")).read())
        save("redis-info.txt", out(["redis-cli", "-p", str(redis_port), "info", "all"]))
        save("metrics.txt", out(["curl", "-s", f"http://127.0.0.1:{rb.metrics_port}/metrics"]))
        save("s_client-rebound.txt", subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{tls_port}"],
                                                    input=b"", capture_output=True, timeout=30).stdout.decode())
        save("s_client-nginx.txt", subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{ng_tls.port}"],
                                                  input=b"", capture_output=True, timeout=30).stdout.decode())
    finally:
        for s in started:
            s.stop()
    capture_callgrind(b, data_dir, [c for c, _ in usable])


def capture_callgrind(b: Bench, data_dir: str, codes: list[str]) -> None:
    requests = b.path("requests-cg.txt")
    with open(requests, "w") as f:
        f.write("\n".join("/" + c for c in codes) + "\n")
    prefix = b.path("cg.out.rebound")
    s = b.rebound_server(data_dir, callgrind.wrapper(prefix)).start(b.path("cg.log"))
    try:
        s.wait_ready("/readyz", 600)
        out(wrk_command(f"http://127.0.0.1:{s.port}", [requests], 3, 4))
        callgrind.zero(s.pid)
        out(wrk_command(f"http://127.0.0.1:{s.port}", [requests], 3, 4))
        callgrind.dump(s.pid)
        time.sleep(1)
    finally:
        s.stop()
    dumps = callgrind.dump_files(b.raw, "cg.out.rebound.")
    with open(os.path.join(b.raw, dumps[-1])) as f:
        lines = f.read().splitlines(keepends=True)
    # The header (up to the first function record) and the closing lines.
    head = next(i for i, line in enumerate(lines) if line.startswith("fl="))
    save("callgrind-dump.txt", "".join(lines[:head]) + "".join(
        line for line in lines[-5:] if line.startswith(("summary:", "totals:")) or line == "\n"))
    annotated = out(["callgrind_annotate", "--inclusive=yes", os.path.join(b.raw, dumps[-1])])
    save("callgrind-annotate.txt", "".join(annotated.splitlines(keepends=True)[:60]))


def capture_domains(b: Bench) -> None:
    """metrics-acme.txt: /metrics of an all-in-one with ACME on (nowhere to order from) and
    three domains added through the API, their certificates in the store, after the
    certificates were served, two more full handshakes and one resuming the second's
    session; cut to the families the domains scenario reads."""
    data_dir = b.path("data-domains")
    b.load_links(data_dir, 10, "domains")
    names = ["a.bench.example", "b.bench.example", "c.bench.example"]
    s = b.rebound_server(data_dir).start(b.path("domains-add.log"))
    try:
        s.wait_ready("/readyz", 120)
        domains.add_domains(s.api_port, names)
    finally:
        s.stop()
    made, _ = certs.domain_certificates(names + [domains.DEFAULT_HOST])
    certs.store_certificates(data_dir, made)
    s, tls_port = domains.rebound_tls(b, data_dir, "acme", ("", ""))
    s.start(b.path("domains-acme.log"))
    try:
        s.wait_ready("/readyz", 120)
        wait_for(lambda: domains.served_certificate(tls_port, names[-1]) == made[2].der_sha256, 60,
                 "the certificates served")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        session = None
        for name, resume in [(names[0], False), (names[1], False), (names[1], True)]:
            with socket.create_connection(("127.0.0.1", tls_port)) as sock, \
                    ctx.wrap_socket(sock, server_hostname=name, session=session if resume else None) as tls:
                # A request and its answer: the TLS 1.3 ticket comes after the handshake.
                tls.sendall(f"GET /nosuchcode HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
                while tls.recv(65536):
                    pass
                assert tls.session_reused == resume, (name, resume)
                session = tls.session
        text = out(["curl", "-s", f"http://127.0.0.1:{s.metrics_port}/metrics"])
    finally:
        s.stop()
    families = ("rebound_acme_", "rebound_domains_routed", "rebound_edge_tls_handshakes_total")
    kept = [line for line in text.splitlines(keepends=True)
            if line.startswith(families) or line.startswith(tuple(f"# {k} {f}" for k in ["HELP", "TYPE"]
                                                                  for f in families))]
    save("metrics-acme.txt", "".join(kept))


if __name__ == "__main__":
    main()
