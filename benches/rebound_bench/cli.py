"""The bench suite: Rebound side by side with nginx and a bare hyper server.

One command (scripts/bench [--quick]) installs what it needs when missing (wrk, nginx,
valgrind from Debian, oha from crates.io), builds the release binaries, generates the links, loads them into
Rebound through its bulk import, and runs every scenario, the servers taking turns:

  warm      random known codes over the whole table, L1 warm          (rps, p99, CPU)
            (wrk, then oha with one worker thread: a second client's figures)
  unknown   the same with 10 % unknown codes                          (rps, p99, store reads)
            each wrk run of both also again with each server held to the same CPU share
            (--cap), so that the server and not wrk is the bound                (rps)
            then one run per server on the warm list: where a request's CPU goes, on the
            server and on wrk (user, system, syscalls by kind with perf if installed,
            how often the server slept, TCP segments and bytes): whether the client or the server is the bound
  zipf      Zipf-distributed codes from a cold start                  (store reads/s, single-flight)
  redis     the same in distributed mode: `rebound proxy` with a cold L1 over a warm
            Redis, links in DynamoDB (moto), clicks to SQS (moto)       (Redis and store reads/s)
  create    creation through the API with generated codes             (links/s)
  startup   start to ready with the whole table, and with 1,000 links  (seconds)
  rss       process RSS with the whole table cached                   (MiB)
  callgrind user-space instructions per L1-hit redirect, 100,000 links (repeatable),
            over cleartext HTTP/1.1 (wrk) and over HTTP/2 with TLS (h2load, callgrind_h2)
  tls       the same certificate (ECDSA P-256) on Rebound's TLS port and nginx's
            `listen ssl http2`: HTTPS keep-alive (wrk), HTTP/2 (h2load), TLS handshakes
            (wrk with `Connection: close`)                             (req/s, handshakes/s)
            the same with oha (HTTPS, --http2, --disable-keepalive), and wrk's keep-alive and
            handshake runs again with each server held to the same CPU share (--cap, a
            cgroup v1 CPU quota), so that the server and not wrk is the bound
  abuse     500 slow-head clients and 500 clients that pipeline and never read, against
            Rebound and nginx: RSS growth and when the last one is let go (MiB, s)
  conns     100,000 short connections (one request each) on every port, in clear and over
            TLS, against Rebound and nginx: RSS before and after                (MiB)
  fleet     4 and 50 idle `rebound proxy` processes on one Redis: Redis's commands, bytes
            sent and CPU per proxy at rest, then deletes through a control plane waiting
            for all of them                          (per proxy per second, delete ms)
  blip      2 proxies under load over 20,000 links warm in L1, Redis frozen for 5 s: lookups
            per second by tier before, during and after          (Redis and store reads/s)
  regions   two regions, each a Redis and 2 proxies, region b's Redis 40 ms away each way
            (a relay): deletes through a control plane of region a alone and through one
            whose peer region is b, in turn                            (delete ms)
  domains   10,000 domains (--domains) added through the API, a certificate each in the
            store: start-up to ready and to every certificate served, RSS per domain, the
            ACME rounds' CPU; TLS handshakes/s by SNI among them against one certificate,
            each server capped (--cap); instructions per redirect on a domain (callgrind)
                                                        (adds/s, s, bytes, handshakes/s)
  idle      the all-in-one, a control plane and a proxy with no traffic, 60 s each: CPU time
            and wake-ups (--compare-bin: a second binary in turn)   (CPU-s and wake-ups/min)

Wall-clock figures on this shared 2-core machine swing 15-25 % between identical runs:
the servers alternate, every figure is a median of the runs with min and max, and the
instruction counts are the repeatable figure. The markdown table goes to
benches/results/<date>.md (<date>-<scenarios>.md for an --only run; and stdout); raw outputs stay in benches/results/raw/.
Traffic goes only to 127.0.0.1 and every run is bounded in time.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from . import report
from .context import Bench, Options
from .scenarios import abuse, blip, callgrind, conns, create, distributed, domains, idle, regions, side, startup, tls, zipf
from .tools.install import ensure_oha, ensure_tools
from .tools.proc import cpu_ticks
from .util import log

SCENARIOS = "side,startup,zipf,redis,create,callgrind,tls,abuse,conns,fleet,blip,regions,domains,idle"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100,000 links, 3 runs of 5 s: to check the suite itself")
    p.add_argument("--links", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--list-size", type=int, default=1_000_000, help="requests in each request list")
    p.add_argument("--only", help=f"comma-separated: {SCENARIOS}")
    p.add_argument("--redis-links", type=int, default=20_000,
                   help="links for the redis scenario (created through moto, which is slow: ~1,000/s)")
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--rebound-threads", type=int, default=1,
                   help="REBOUND_REDIRECT_THREADS: 1 by default, like nginx's one worker (0: one per core)")
    p.add_argument("--rebound-env", action="append", default=[], help="NAME=VALUE for Rebound (experiments)")
    p.add_argument("--rebound-bin", help="the Rebound binary every Rebound process of the run executes (default: "
                                         "target/release/rebound; with --no-build, e.g. a build from before a change)")
    p.add_argument("--compare-bin", help="the idle scenario measures this binary too, in turn with the run's own "
                                         "(e.g. a build from before a change)")
    p.add_argument("--compare-env", action="append", default=[],
                   help="NAME=VALUE for the compared Rebound process of the callgrind scenario alone (with or "
                        "without --compare-bin; without, the run's own binary): what a setting costs, e.g. "
                        "REBOUND_BREAKDOWNS=none for the breakdowns' share")
    p.add_argument("--link-rules", type=int, default=0, choices=range(0, 6),
                   help="rules each imported link carries (0-5; benches/rebound_bench/context.py bench_rules): "
                        "what a link's rules add to a redirect")
    p.add_argument("--domains", type=int, default=10_000, help="domains in the domains scenario")
    p.add_argument("--servers", help="the callgrind scenario's servers, a comma list of nginx,hyper,hyper_1,rebound "
                                     "(default: all; without nginx there is no 'vs nginx')")
    p.add_argument("--user-agent", help="a User-Agent on every request of the callgrind scenario (a browser's, to "
                                        "count the bot check in; default: none, as wrk sends)")
    p.add_argument("--referer", help="a Referer on every request of the callgrind scenario (with --user-agent, a "
                                     "browser's click as the breakdowns read it; default: none)")
    p.add_argument("--accept-language", help="an Accept-Language on every request of the callgrind scenario (a "
                                             "browser's, e.g. Chrome's en-US,en;q=0.9: what a language rule "
                                             "reads; default: none)")
    p.add_argument("--cap", default="2500/10000",
                   help="the CPU share of each server in the capped rows (side and tls scenarios): QUOTA/PERIOD in "
                        "microseconds of cgroup v1's cpu.cfs_quota_us/cpu.cfs_period_us (default: a quarter of "
                        "a core; with half a core a wrk that shares 2 busy cores could not always keep the "
                        "server busy)")
    p.add_argument("--no-cap", action="store_true", help="leave out the capped rows")
    p.add_argument("--workloads", help="the callgrind scenario's workloads, a comma list of "
                   + ",".join(k for k, *_ in callgrind.WORKLOADS) + " (default: all)")
    p.add_argument("--no-oha", action="store_true", help="leave out the oha rows (and do not install oha)")
    p.add_argument("--out", help="the report's path (default: benches/results/<date>[-quick][-<scenarios>].md)")
    return p


def options(argv: Sequence[str]) -> Options:
    p = parser()
    args = p.parse_args(argv)
    for flag, settings in [("--rebound-env", args.rebound_env), ("--compare-env", args.compare_env)]:
        for kv in settings:
            if "=" not in kv or not kv.split("=", 1)[0]:
                p.error(f"{flag} {kv!r}: expected NAME=VALUE")
    opts = Options(quick=args.quick, links=args.links, runs=args.runs, duration=args.duration,
                   connections=args.connections, list_size=args.list_size, only=args.only,
                   redis_links=args.redis_links, no_build=args.no_build, rebound_threads=args.rebound_threads,
                   rebound_env=list(args.rebound_env), cap=args.cap, no_cap=args.no_cap, no_oha=args.no_oha,
                   out=args.out, domains=args.domains, rebound_bin=args.rebound_bin,
                   compare_bin=args.compare_bin, compare_env=list(args.compare_env), servers=args.servers,
                   user_agent=args.user_agent, referer=args.referer, accept_language=args.accept_language, workloads=args.workloads,
                   link_rules=args.link_rules)
    if opts.quick:
        opts.links, opts.runs, opts.duration, opts.list_size = 100_000, 3, 5, 200_000
        opts.redis_links = min(opts.redis_links, 5_000)
    return opts


def run(b: Bench) -> None:
    a = b.args
    only = set(a.only.split(",")) if a.only else None
    log(f"raw outputs in {b.raw}")
    ensure_tools()
    if not a.no_oha and (only is None or only & {"side", "tls", "domains"}):
        b.oha = ensure_oha()
    if not a.no_build:
        b.build()
    data_dir = b.path("data-main")
    usable: list[tuple[str, str]] = []
    # The all-in-one's table, for the scenarios that use it (the distributed ones make their own).
    if only is None or only & {"side", "startup", "zipf", "tls", "abuse", "conns"}:
        table, rate = b.load_links(data_dir, b.links, "main")
        b.results["import_rate"] = rate
        usable = b.write_tables(table, "main")

    scenarios: list[tuple[str, Callable[[], None]]] = [
        ("side", lambda: side.run(b, data_dir, usable)), ("startup", lambda: startup.run(b, data_dir)),
        ("zipf", lambda: zipf.run(b, data_dir, usable)), ("redis", lambda: distributed.run_redis(b)),
        ("create", lambda: create.run(b)), ("tls", lambda: tls.run(b, data_dir, usable)),
        ("abuse", lambda: abuse.run(b, data_dir, usable)), ("conns", lambda: conns.run(b, data_dir)),
        ("fleet", lambda: distributed.run_fleet(b)), ("blip", lambda: blip.run(b)),
        ("regions", lambda: regions.run_regions(b)), ("domains", lambda: domains.run(b)),
        ("callgrind", lambda: callgrind.run(b)), ("idle", lambda: idle.run_idle(b))]
    # A VM's wall-clock figures move with what the hypervisor takes from it (steal): each
    # scenario's share goes into the report beside its figures.
    b.results["steal"] = {}
    for name, scenario in scenarios:
        if only is None or name in only:
            steal0, total0 = cpu_ticks()
            scenario()
            steal1, total1 = cpu_ticks()
            b.results["steal"][name] = 100.0 * (steal1 - steal0) / max(total1 - total0, 1)
    report.write(b)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run(Bench(options(argv), argv))
