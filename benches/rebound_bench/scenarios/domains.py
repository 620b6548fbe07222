"""domains: many domains configured (10,000 by default, --domains), each with its certificate.

1. Adding them through the API (`POST /api/v1/domains`, one client, one after the other),
   then start-up and memory: a data directory of 10,000 links, the domains, and a
   certificate for each (one self-signed ECDSA P-256 certificate with a key of its own,
   valid 90 days) written into the SQLite `certificates` table while no process runs (there
   is no API to upload a certificate: only the ACME issuer stores them). Four set-ups, each
   started 3 times, taking turns: 0 or N domains, and the TLS port with the certificate
   files alone or with ACME on (a directory URL where nothing listens: every certificate is
   stored and not due, so nothing may be ordered; the issuer's counters say whether anything
   was). Measured: exec to ready (`/readyz`), the domains routed then
   (`rebound_domains_routed`), with ACME exec to every expiry exported
   (`rebound_acme_certificate_expiry_seconds`, one series per domain) and to the
   certificates served (the resolver's map is swapped whole, so the first handshake
   answered with a domain's own certificate means all are in), RSS after the load and
   after 45 s idle (three ACME rounds), and the CPU of those 45 s.
2. TLS handshakes per second, each server held to a CPU share (--cap, as the tls scenario
   does; server on CPU 0, client on CPU 1): the ACME set-up with N certificates, SNI names
   among the N domains, against the same data directory served with the certificate files
   alone (one certificate for every name). wrk (`Connection: close`; its SNI is its URL's
   host, so a name per run, put in /etc/hosts for the run) and oha (`--disable-keepalive`,
   each connection to a name picked at random among all N, `--connect-to` 127.0.0.1).
3. Instructions per L1-hit redirect on a domain (callgrind, for information): 10,000 links
   on one of the domains, requested with its `Host`, against 10,000 links of the default
   domain, on the same data directory and binary."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import shutil
import socket
import ssl
import time
from typing import Any, Callable, Sequence

from ..context import Bench
from ..servers import Server
from ..tools import callgrind as cg
from ..tools import cgroup, metrics, oha, openssl
from ..tools.certs import DomainCert, domain_certificates, store_certificates
from ..tools.hosts import HostsEntries
from ..tools.proc import pin, proc_cpu_seconds, proc_rss_mib
from ..tools.wrk import wrk
from ..util import KEY, free_port, log, summary

# The default domain: the host of REBOUND_PUBLIC_BASE_URL (context.rebound_base_env).
DEFAULT_HOST = "sho.rt"
# An https URL where nothing listens (port 9, discard): an order would fail at once.
ACME_NOWHERE = "https://127.0.0.1:9/directory"
LINKS = 10_000
STARTS = 3
IDLE_S = 45  # three ACME rounds (ACME_ROUND, src/data_plane.rs: 15 s)
ACME_ROUND_S = 15
CERT_DAYS = 90
EXPIRY = "rebound_acme_certificate_expiry_seconds"
ROUTED = "rebound_domains_routed"
# Callgrind's workload, as callgrind.WORKLOADS[0]: 8 connections over 10,000 codes, 70 s.
CG_CODES, CG_CONNECTIONS, CG_SECONDS = 10_000, 8, 70

# The four start-up set-ups: (key, TLS port's certificates, domains).
SETUPS = [("files-0", "files", False), ("files-N", "files", True), ("acme-0", "acme", False),
          ("acme-N", "acme", True)]


def domain_names(n: int) -> list[str]:
    return [f"d{i:05d}.bench.example" for i in range(1, n + 1)]


def run(b: Bench) -> None:
    n = b.args.domains
    names = domain_names(n)
    out: dict[str, Any] = {"domains": n, "links": LINKS}
    base = b.path("data-domains-base")
    table, _ = b.load_links(base, LINKS, "domains")

    # -- the domains through the API, into copies of the links' directory ----------------
    adds: list[dict[str, float]] = []
    with_domains = b.path("data-domains-N")
    for i in range(STARTS):
        target = with_domains if i == 0 else b.path(f"data-domains-adds-{i}")
        shutil.copytree(base, target)
        s = b.rebound_server(target).start(b.path(f"domains-adds-{i}.log"))
        try:
            s.wait_ready("/readyz", 300)
            took = add_domains(s.api_port, names)
        finally:
            s.stop()
        if target != with_domains:
            shutil.rmtree(target)
        adds.append(add_figures(took))
        log(f"domains: {n:,} added through the API in {adds[-1]['seconds']:.1f} s "
            f"({adds[-1]['per_s']:.0f}/s, p99 {adds[-1]['p99_ms']:.1f} ms)")
    out["adds"] = {k: summary([a[k] for a in adds]) for k in adds[0]}

    # -- a certificate per domain, and the default domain's, written while stopped -------
    started = time.time()
    certs, how = domain_certificates(names + [DEFAULT_HOST], CERT_DAYS)
    out["certs_made"] = {"how": how, "seconds": time.time() - started}
    without_domains = b.path("data-domains-0")
    shutil.copytree(base, without_domains)
    started = time.time()
    store_certificates(with_domains, certs)
    out["certs_made"]["store_seconds"] = time.time() - started
    store_certificates(without_domains, certs[-1:])
    by_name = {c.domain: c for c in certs}
    log(f"domains: {len(certs):,} certificates made ({how}) in {out['certs_made']['seconds']:.1f} s, "
        f"written to the certificates table in {out['certs_made']['store_seconds']:.1f} s")

    files_cert = (b.path("domains-files.crt"), b.path("domains-files.key"))
    openssl.self_signed(*files_cert)
    dirs = {False: without_domains, True: with_domains}

    # -- start-up, memory and the idle ACME rounds --------------------------------------
    starts: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in SETUPS}
    for i in range(STARTS):
        order = SETUPS if i % 2 == 0 else list(reversed(SETUPS))
        for key, kind, many in order:
            probe = by_name[names[-1]] if many else by_name[DEFAULT_HOST]
            starts[key].append(start_once(b, f"{key}-{i}", dirs[many], kind, files_cert, n if many else 0,
                                          probe if kind == "acme" else None))
            r = starts[key][-1]
            log(f"domains start {i + 1} {key}: ready {r['ready_s']:.2f} s"
                + (f", certificates served {r['installed_s']:.2f} s" if "installed_s" in r else "")
                + f", RSS {r['rss_loaded_mib']:.1f} MiB, idle CPU {r['idle_cpu_s']:.2f} s / {IDLE_S} s")
    out["starts"] = starts
    out["startup"] = startup_figures(starts, n)
    b.commands += [
        f"rebound links import domains.jsonl  # {LINKS:,} links; the data directory copied {STARTS} times",
        f"POST /api/v1/domains {{\"name\": \"dNNNNN.bench.example\", \"certificate\": \"acme\"}}  "
        f"# x{n:,}, one client, keep-alive, one after the other, on each copy (ACME off)",
        f"{n + 1:,} self-signed ECDSA P-256 certificates, a key each, {CERT_DAYS} days ({how}); "
        f"INSERT INTO certificates (domain, chain_pem, key_pem, not_after) in data_dir/rebound.db, stopped",
        f"rebound with REBOUND_TLS_ADDR and REBOUND_TLS_CERT/KEY (files) or REBOUND_ACME_DIRECTORY_URL="
        f"{ACME_NOWHERE} (acme), on 0 or {n:,} domains; x{STARTS} each, taking turns: /readyz, /metrics "
        f"({ROUTED}, {EXPIRY}), a TLS handshake for a domain every 10 ms until its own certificate "
        f"answers, RSS 1 s later and after {IDLE_S} s idle",
    ]

    # -- handshakes: N certificates by SNI against the files' one ------------------------
    out["handshakes"] = handshakes(b, with_domains, names, by_name, files_cert)

    # -- a redirect's instructions on a domain -------------------------------------------
    out["callgrind"] = callgrind_on_domain(b, with_domains, [c for c, _ in table][:CG_CODES], names[0])
    b.results["domains"] = out


# -- the API ---------------------------------------------------------------------------------


def api_post(conn: http.client.HTTPConnection, path: str, body: object) -> tuple[int, bytes]:
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    res = conn.getresponse()
    return res.status, res.read()


def add_domains(api_port: int, names: Sequence[str]) -> list[float]:
    """Adds each domain (`certificate: acme`) through the API, one request after the other
    on one keep-alive connection: the seconds each took."""
    conn = http.client.HTTPConnection("127.0.0.1", api_port, timeout=60)
    took = []
    try:
        for name in names:
            started = time.perf_counter()
            status, body = api_post(conn, "/api/v1/domains", {"name": name, "certificate": "acme"})
            took.append(time.perf_counter() - started)
            if status != 201:
                raise RuntimeError(f"POST /api/v1/domains {name}: {status} {body[:300]!r}")
    finally:
        conn.close()
    return took


def add_figures(took: Sequence[float]) -> dict[str, float]:
    """Seconds for all the adds, adds per second, and the p50/p99/max of one add in ms."""
    ordered = sorted(took)

    def pct(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    total = sum(took)
    return {"seconds": total, "per_s": len(took) / total, "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "max_ms": 1000 * ordered[-1]}


def import_on_domain(api_port: int, count: int, domain: str) -> list[str]:
    """`count` links with generated codes on `domain` (the API's import, 1,000 a request):
    their codes."""
    conn = http.client.HTTPConnection("127.0.0.1", api_port, timeout=120)
    codes: list[str] = []
    try:
        for first in range(0, count, 1000):
            links = [{"long_url": f"https://example.com/{domain}/{i}?ref=bench", "domain": domain}
                     for i in range(first, min(count, first + 1000))]
            status, body = api_post(conn, "/api/v1/links/import", {"links": links})
            if status != 200:
                raise RuntimeError(f"import on {domain}: {status} {body[:300]!r}")
            codes += [r["code"] for r in json.loads(body)["results"] if "code" in r]
    finally:
        conn.close()
    if len(codes) != count:
        raise RuntimeError(f"{count - len(codes)} of {count} links on {domain} not imported")
    return codes


# -- servers and probes ----------------------------------------------------------------------


def rebound_tls(b: Bench, data_dir: str, kind: str, files_cert: tuple[str, str],
                wrapper: Sequence[str] = ()) -> tuple[Server, int]:
    """The all-in-one with its TLS port: the certificate files alone ("files"), or ACME
    on with nowhere to order from and no files ("acme": the domains' stored certificates,
    by SNI, and no certificate at all for another name)."""
    tls_port = free_port()
    extra = {"REBOUND_TLS_ADDR": f"127.0.0.1:{tls_port}"}
    if kind == "acme":
        extra["REBOUND_ACME_DIRECTORY_URL"] = ACME_NOWHERE
    else:
        extra.update({"REBOUND_TLS_CERT": files_cert[0], "REBOUND_TLS_KEY": files_cert[1]})
    return b.rebound_server(data_dir, wrapper, extra=extra), tls_port


def served_certificate(port: int, name: str) -> str | None:
    """SHA-256 of the certificate a TLS handshake asking for `name` is answered with, or
    None when it fails (no certificate for the name)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            with ctx.wrap_socket(sock, server_hostname=name) as tls:
                der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return hashlib.sha256(der).hexdigest() if der else None


def acme_counters(text: str) -> dict[str, float]:
    """What the issuer did: certificates issued and renewed, orders failed (every kind)."""
    return {"issued": metrics.parse_metric(text, "rebound_acme_issued_total"),
            "renewed": metrics.parse_metric(text, "rebound_acme_renewed_total"),
            "failed": metrics.parse_metric_sum(text, "rebound_acme_failures_total")}


def log_lines(path: str, words: Sequence[str]) -> int:
    """Lines of a log naming any of `words`."""
    with open(path, errors="replace") as f:
        return sum(any(w in line for w in words) for line in f)


def start_once(b: Bench, name: str, data_dir: str, kind: str, files_cert: tuple[str, str], domains: int,
               probe: DomainCert | None) -> dict[str, Any]:
    """One start of a set-up: its times, RSS and idle CPU (see the module's docstring).
    `probe`: with ACME, a domain whose own certificate must answer once all are served."""
    s, tls_port = rebound_tls(b, data_dir, kind, files_cert)
    log_path = b.path(f"domains-start-{name}.log")
    s.start(log_path)
    url = f"http://127.0.0.1:{s.metrics_port}/metrics"
    try:
        r: dict[str, Any] = {"ready_s": s.wait_ready("/readyz", 600)}
        r["routed_at_ready"] = metrics.parse_metric(metrics.fetch(url), ROUTED)
        if probe is not None:
            expiries_s = None
            deadline = time.time() + 600
            polls = 0
            while True:
                if expiries_s is None and polls % 10 == 0:
                    if metrics.parse_series_count(metrics.fetch(url), EXPIRY) >= domains + 1:
                        expiries_s = time.time() - s.started_at
                if served_certificate(tls_port, probe.domain) == probe.der_sha256:
                    r["installed_s"] = time.time() - s.started_at
                    break
                if time.time() > deadline:
                    raise SystemExit(f"bench: {name}: {probe.domain}'s certificate not served within 600 s")
                polls += 1
                time.sleep(0.01)
            # The expiries are exported before the certificates are installed: when the
            # 100 ms scrapes did not see them all first, the install's time bounds them.
            r["expiries_s"] = expiries_s if expiries_s is not None else r["installed_s"]
        time.sleep(1)
        r["rss_loaded_mib"] = proc_rss_mib(s.pids())
        cpu0 = proc_cpu_seconds(s.pids())
        time.sleep(IDLE_S)
        r["idle_cpu_s"] = proc_cpu_seconds(s.pids()) - cpu0
        r["rss_idle_mib"] = proc_rss_mib(s.pids())
        text = metrics.fetch(url)
        r["routed"] = metrics.parse_metric(text, ROUTED)
        if kind == "acme":
            r["expiry_series"] = metrics.parse_series_count(text, EXPIRY)
            r["acme"] = acme_counters(text)
    finally:
        s.stop()
    if kind == "acme":
        r["order_log_lines"] = log_lines(log_path, ["certificate order failed", "issued over ACME"])
    return r


def startup_figures(starts: dict[str, list[dict[str, Any]]], n: int) -> dict[str, Any]:
    """Medians over the starts, and memory per domain: the RSS difference between the set-up
    with N domains and the one without, in the same round, over N."""
    def per_domain(many: str, none: str, field: str) -> list[float]:
        return [(a[field] - z[field]) * 1024 * 1024 / n for a, z in zip(starts[many], starts[none])]

    figures: dict[str, Any] = {}
    for key, runs in starts.items():
        figures[key] = {field: summary([r[field] for r in runs])
                        for field in ["ready_s", "installed_s", "expiries_s", "rss_loaded_mib", "rss_idle_mib",
                                      "idle_cpu_s", "routed_at_ready"] if field in runs[0]}
    figures["bytes_per_domain"] = {
        "files": {field: summary(per_domain("files-N", "files-0", field)) for field in ["rss_loaded_mib", "rss_idle_mib"]},
        "acme": {field: summary(per_domain("acme-N", "acme-0", field)) for field in ["rss_loaded_mib", "rss_idle_mib"]},
    }
    rounds = IDLE_S / ACME_ROUND_S
    figures["acme_round_cpu_s"] = summary([(a["idle_cpu_s"] - z["idle_cpu_s"]) / rounds
                                           for a, z in zip(starts["acme-N"], starts["acme-0"])])
    figures["acme_ordered"] = sum(r["acme"]["issued"] + r["acme"]["renewed"] + r["acme"]["failed"]
                                  for key in ["acme-0", "acme-N"] for r in starts[key])
    figures["order_log_lines"] = sum(r["order_log_lines"] for key in ["acme-0", "acme-N"] for r in starts[key])
    return figures


# -- handshakes --------------------------------------------------------------------------------


def handshake_counts(url: str) -> dict[str, float]:
    text = metrics.fetch(url)
    return {outcome: metrics.parse_metric_sum(text, "rebound_edge_tls_handshakes_total", {"outcome": outcome})
            for outcome in ["full", "resumed", "failed"]}


# The handshake rows: (key, tool, seconds or None for --duration, title). Each measured run
# starts on a server just started, once its first ACME round has installed the
# certificates; "between rounds" ends before the second round (15 s after the start), the
# last one spans two rounds (at 15 and 30 s): the steady state with the rounds' reloads.
HANDSHAKE_ROWS: list[tuple[str, str, int | None, str]] = [
    ("wrk", "wrk", None, "wrk, `Connection: close`, one name per round, between ACME rounds"),
    ("oha", "oha", None, "oha `--disable-keepalive`, a name among all N per connection, between ACME rounds"),
    ("oha_rounds", "oha", 30, "the same over 30 s spanning two ACME rounds"),
]
WARM_S = 1


def handshakes(b: Bench, data_dir: str, names: Sequence[str], by_name: dict[str, DomainCert],
               files_cert: tuple[str, str]) -> dict[str, Any]:
    """The handshake rows (HANDSHAKE_ROWS), each server capped (see the module's
    docstring): the ACME set-up and the files' one in turn for each row in each round, a
    server started for each run and stopped after it."""
    a = b.args
    cap: tuple[int, int] | None = None
    if not a.no_cap and cgroup.available():
        cap = cgroup.parse_cap(a.cap)
    else:
        log("domains: no CPU cap (--no-cap, or no cgroup v1 cpu controller): the handshake rows are not server-bound")
    if a.duration + WARM_S + 3 > ACME_ROUND_S:
        raise SystemExit(f"bench: domains: --duration {a.duration} does not fit between two ACME rounds "
                         f"({ACME_ROUND_S} s apart)")
    rng = random.Random(20261205)
    # wrk's name in each round (the same for both set-ups of the round).
    wrk_names = rng.sample(list(names), a.runs)
    rows = [row for row in HANDSHAKE_ROWS if row[1] == "wrk" or b.oha]
    setups = ["acme", "files"]
    runs: dict[str, list[dict[str, float]]] = {f"{key}:{k}": [] for key, *_ in rows for k in setups}
    with open(b.path("domains-path.txt"), "w") as f:
        f.write("/nosuchcode\n")
    with HostsEntries(wrk_names):
        for round_ in range(a.runs):
            for key, tool, seconds, _ in rows:
                duration = seconds or a.duration
                order = setups if round_ % 2 == 0 else list(reversed(setups))
                for kind in order:
                    r = handshake_run(b, data_dir, kind, files_cert, tool, duration, wrk_names[round_], names,
                                      by_name[names[-1]], cap, f"{key}-{kind}-{round_}")
                    runs[f"{key}:{kind}"].append(r)
                    log(f"domains handshakes round {round_ + 1} {key} {kind}: {r['rate']:.0f}/s, server "
                        f"{100 * r['server_core_share']:.0f} % of a core, throttled {100 * r['throttled_share']:.0f} %, "
                        f"resumed {100 * r['resumed_share']:.0f} %, ended {r['ended_after_start_s']:.1f} s after "
                        "the start")
    out: dict[str, Any] = {"cap": {"quota_us": cap[0], "period_us": cap[1], "cores": cap[0] / cap[1]} if cap else None,
                           "wrk_names": wrk_names, "rows": [[key, title.replace("all N", f"all {len(names):,}")]
                                                            for key, _, _, title in rows]}
    for key, rs in runs.items():
        out[key] = {field: summary([r[field] for r in rs]) for field in rs[0]}
    # The ratios of each round (the two set-ups measured one after the other within it).
    for key, *_ in rows:
        pairs = list(zip(runs[f"{key}:acme"], runs[f"{key}:files"]))
        out[f"{key}:ratio"] = summary([x["rate"] / y["rate"] for x, y in pairs])
        out[f"{key}:ratio_per_cpu_s"] = summary([x["per_cpu_s"] / y["per_cpu_s"] for x, y in pairs])
    b.commands.append(
        f"taskset -a -p -c 0 SERVER; taskset -c 1 wrk -H 'Connection: close' -t 1 -c 16 -d {a.duration}s "
        f"-s benches/wrk/replay.lua https://dNNNNN.bench.example:TLS_PORT -- /nosuchcode  # a name per round "
        f"(/etc/hosts), x{a.runs}, each server capped, after a {WARM_S} s warm-up")
    if b.oha:
        b.commands.append(
            f"taskset -c 1 oha --no-tui --output-format json --worker-threads 1 --redirect 0 --insecure -c 16 "
            f"-z {a.duration}s (and -z 30s) --disable-keepalive --connect-to dNNNNN.bench.example:TLS_PORT:127.0.0.1:"
            f"TLS_PORT (x{len(names):,}) --urls-from-file (https://dNNNNN.bench.example:TLS_PORT/nosuchcode, every "
            f"domain)  # x{a.runs}, each server capped, after a {WARM_S} s warm-up")
    return out


def handshake_run(b: Bench, data_dir: str, kind: str, files_cert: tuple[str, str], tool: str, duration: int,
                  wrk_name: str, names: Sequence[str], probe: DomainCert, cap: tuple[int, int] | None,
                  name: str) -> dict[str, float]:
    """One measured run on a server started for it: once the first ACME round has served
    the certificates (the files' server: once ready), a warm-up of WARM_S and the run."""
    s, tls_port = rebound_tls(b, data_dir, kind, files_cert)
    s.start(b.path(f"domains-hs-{name}.log"))
    try:
        s.wait_ready("/readyz", 600)
        if kind == "acme":
            deadline = time.time() + 600
            while served_certificate(tls_port, probe.domain) != probe.der_sha256:
                if time.time() > deadline:
                    raise SystemExit("bench: domains: the certificates were not served within 600 s")
                time.sleep(0.01)
        metrics_url = f"http://127.0.0.1:{s.metrics_port}/metrics"
        if tool == "wrk":
            url = f"https://{wrk_name}:{tls_port}"

            def go(seconds: int) -> tuple[float, int]:
                r = wrk(url, [b.path("domains-path.txt")], seconds, 16, b.path("domains-wrk-hs.txt"),
                        headers=["Connection: close"], cpus="1")
                if r["socket_errors"]:
                    log(f"domains: wrk socket errors: {r['socket_errors']}")
                return r["rps"], r["requests"]
        else:
            url_file = oha.write_url_file(b.path("domains-oha-urls.txt"), "",
                                          [f"https://{n}:{tls_port}/nosuchcode" for n in names])
            connect_to = [f"{n}:{tls_port}:127.0.0.1:{tls_port}" for n in names]

            def go(seconds: int) -> tuple[float, int]:
                r = oha.oha(url_file, seconds, 16, b.path("domains-oha-hs.txt"), keepalive=False, cpus="1",
                            connect_to=connect_to)
                return r["rps"], r["requests"]
        go(WARM_S)
        r = measure(s, metrics_url, cap, lambda: go(duration), duration)
        r["ended_after_start_s"] = time.time() - s.started_at
        return r
    finally:
        s.stop()


def measure(s: Server, metrics_url: str, cap: tuple[int, int] | None, go: Callable[[], tuple[float, int]],
            duration: int) -> dict[str, float]:
    """One load against `s` pinned to CPU 0 (and capped): the rate, per server CPU-second,
    the shares of a core, the periods throttled, and the handshakes resumed."""
    hs0 = handshake_counts(metrics_url)
    pin(s.pids(), "0")
    try:
        if cap is not None:
            (rate, count), where = cgroup.run_capped(cap, "domains", s.pids(), duration, go)
        else:
            cpu0, client0 = proc_cpu_seconds(s.pids()), cgroup.children_seconds()
            rate, count = go()
            where = {"server_core_share": (proc_cpu_seconds(s.pids()) - cpu0) / duration,
                     "client_core_share": (cgroup.children_seconds() - client0) / duration,
                     "throttled_share": 0.0}
    finally:
        pin(s.pids(), f"0-{(os.cpu_count() or 1) - 1}")
    hs1 = handshake_counts(metrics_url)
    full, resumed = hs1["full"] - hs0["full"], hs1["resumed"] - hs0["resumed"]
    return {"rate": rate, "per_cpu_s": count / max(where["server_core_share"] * duration, 1e-9), **where,
            "resumed_share": resumed / max(full + resumed, 1), "failed": hs1["failed"] - hs0["failed"]}


# -- callgrind on a domain -----------------------------------------------------------------------


def callgrind_on_domain(b: Bench, with_domains: str, default_codes: Sequence[str], domain: str) -> dict[str, Any]:
    """Instructions per L1-hit redirect (callgrind.measure's method, its first workload's
    settings) on 10,000 links of `domain` requested with its Host, and on 10,000 of the
    default domain requested by address, in the same data directory (the N domains, ACME
    off, no TLS)."""
    data_dir = b.path("data-domains-callgrind")
    shutil.copytree(with_domains, data_dir)
    s = b.rebound_server(data_dir).start(b.path("domains-cg-import.log"))
    try:
        s.wait_ready("/readyz", 300)
        codes = import_on_domain(s.api_port, CG_CODES, domain)
    finally:
        s.stop()
    out: dict[str, Any] = {"domain": domain, "codes": CG_CODES, "connections": CG_CONNECTIONS, "seconds": CG_SECONDS}
    for key, paths, host in [("default", default_codes, None), ("on_domain", codes, domain)]:
        request_file = b.path(f"requests-domains-cg-{key}.txt")
        with open(request_file, "w") as f:
            f.write("\n".join("/" + c for c in paths) + "\n")
        prefix = f"domains-cg-{key}.out"
        s = b.rebound_server(data_dir, cg.wrapper(b.path(prefix)))
        s.start(b.path(f"domains-cg-{key}.log"))
        headers = [f"Host: {host}"] if host else []
        try:
            s.wait_ready("/readyz", 900)
            url = f"http://127.0.0.1:{s.port}"
            warm = wrk(url, [request_file], 20, CG_CONNECTIONS, b.path("wrk-domains-cg-warmup.txt"), headers=headers)
            if warm["non_2xx_3xx"]:
                raise RuntimeError(f"domains callgrind {key}: {warm['non_2xx_3xx']} answers not 2xx/3xx")
            cg.zero(s.pid)
            r = wrk(url, [request_file], CG_SECONDS, CG_CONNECTIONS, b.path("wrk-domains-cg.txt"), headers=headers)
            cg.dump(s.pid)
            time.sleep(1)
            total, dumps = cg.dumps_total(b.raw, prefix + ".")
            out[key] = {"instructions": total, "requests": r["requests"], "non_2xx_3xx": r["non_2xx_3xx"],
                        "per_request": total / r["requests"] if r["requests"] else 0.0,
                        "path_per_request": (cg.annotate_inclusive(os.path.join(b.raw, dumps[-1])) / r["requests"]
                                             if dumps and r["requests"] else 0.0)}
            log(f"domains callgrind {key}: {out[key]['per_request']:.0f} instructions per redirect "
                f"(request path {out[key]['path_per_request']:.0f})")
        finally:
            s.stop()
    b.commands.append(
        f"valgrind --tool=callgrind rebound (the {len(default_codes):,}-link directory with the domains, "
        f"{CG_CODES:,} links imported on {domain}); wrk 20 s warm-up; callgrind_control -z PID; "
        f"wrk -t 1 -c {CG_CONNECTIONS} -d {CG_SECONDS}s [-H 'Host: {domain}']; callgrind_control -d PID  "
        "# the default domain by address, then the domain")
    return out
