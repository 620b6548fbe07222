"""The report: the markdown table of a run, to benches/results/<date>[-quick][-<scenarios>].md
(or --out) and stdout, and the results as JSON beside the raw outputs."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from typing import Any

from .context import Bench
from .scenarios import callgrind, side, tls
from .scenarios.domains import IDLE_S as IDLE_DOMAINS_S
from .util import ROOT, Summary, log


def fmt(s: Summary, digits: int = 0) -> str:
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def render(b: Bench) -> str:
    r: dict[str, Any] = b.results
    lines = [f"# Rebound bench, {datetime.date.today().isoformat()}", ""]
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    lines += [f"Machine: {os.cpu_count()} cores ({cpu}), {round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30)} GiB; "
              f"load generator (wrk, 1 thread) on the same machine. Links: {b.links:,}. "
              f"Runs: {b.args.runs} per server per scenario, alternating, {b.args.duration} s each, "
              f"{b.args.connections} keep-alive connections. Rebound's redirect server runs "
              f"{b.args.rebound_threads or 'one per core'} thread(s), nginx one worker, hyper tokio's default. "
              f"Medians (min-max).", ""]
    if r.get("steal"):
        lines += ["CPU time the hypervisor took from this VM (steal, `/proc/stat`) during each scenario: " +
                  ", ".join(f"{name} {share:.1f} %" for name, share in r["steal"].items()) +
                  ". Where it is high, the wall-clock figures are those of a slower, unsteady machine "
                  "(the instruction counts are not affected).", ""]

    for scenario, title in [("warm", "Random codes, warm L1"), ("unknown", "10 % unknown codes")]:
        if scenario not in r:
            continue
        sc = r[scenario]
        lines += [f"## {title}", "", "| server | req/s | p99 ms | req per CPU-second | vs nginx (req/s) | vs hyper (req/s) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name in ["rebound", "nginx", "hyper"]:
            s = sc[name]
            lines.append(f"| {name} | {fmt(s['rps'])} | {fmt(s['p99_ms'], 2)} | {fmt(s['rps_per_cpu_s'])} | "
                         f"{s['rps']['median'] / sc['nginx']['rps']['median']:.2f}x | "
                         f"{s['rps']['median'] / sc['hyper']['rps']['median']:.2f}x |")
        lines += ["", f"Rebound store reads during the runs: {sc['rebound_store_reads']:.0f}.", ""]
        if f"{scenario}_capped" in r:
            cc, cap = r[f"{scenario}_capped"], r["side_capped"]
            lines += [f"The same wrk runs with every process of each server in a cgroup of its own held to "
                      f"{cap['cores']:.2f} of a core (cgroup v1, `cpu.cfs_quota_us` {cap['quota_us']} per "
                      f"`cpu.cfs_period_us` {cap['period_us']}, `cpu.shares` {cap['shares']}; wrk in one with no "
                      "quota): the server is the bound, so the figure is what each server does with the same "
                      "CPU time. The p99 of a capped run is the quota's (a throttled server waits out the "
                      "period) and is left out.", "",
                      "| server, capped | req/s | vs nginx | vs hyper | server's share of a core | "
                      "wrk's share of a core | periods throttled |", "| --- | --- | --- | --- | --- | --- | --- |"]
            for name in ["rebound", "nginx", "hyper"]:
                c = cc[name]
                lines.append(f"| {name} | {fmt(c['rps'])} | "
                             f"{c['rps']['median'] / cc['nginx']['rps']['median']:.2f}x | "
                             f"{c['rps']['median'] / cc['hyper']['rps']['median']:.2f}x | "
                             f"{100 * c['server_core_share']['median']:.0f} % | "
                             f"{100 * c['client_core_share']['median']:.0f} % | "
                             f"{100 * c['throttled_share']['median']:.0f} % |")
            lines.append("")
    if "warm_oha" in r:
        sc = r["warm_oha"]
        lines += ["## Random codes, warm L1, oha (HTTP/1.1 keep-alive)", "",
                  "| server | req/s | p99 ms | req per CPU-second | vs nginx (req/s) | vs hyper (req/s) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name in ["rebound", "nginx", "hyper"]:
            s = sc[name]
            lines.append(f"| {name} | {fmt(s['rps'])} | {fmt(s['p99_ms'], 2)} | {fmt(s['rps_per_cpu_s'])} | "
                         f"{s['rps']['median'] / sc['nginx']['rps']['median']:.2f}x | "
                         f"{s['rps']['median'] / sc['hyper']['rps']['median']:.2f}x |")
        errors = sum(sc[n]["errors"] for n in ["rebound", "nginx", "hyper"])
        lines += ["", f"oha with one worker thread (`--worker-threads 1`, like wrk's one thread), the same "
                      f"connections, after wrk's runs; it picks each request's URL at random from the first "
                      f"{side.OHA_URLS:,} of the warm list (wrk replays the list in order). Errors (not counting the "
                      f"requests cut off at the end of each run): {errors}.", ""]

    def anatomy(key: str, title: str) -> None:
        nonlocal lines
        if key not in r:
            return
        an = r[key]
        lines += [f"## Where a redirect's CPU goes, {title} (one run per server)", "",
                  "| server | req/s | wrk µs a request (user + system) | wrk's share of a core | "
                  "server µs a request (user + system) | server's share of a core | system calls a request "
                  "(receive, send, wait) | server sleeps a request | TCP segments a request | bytes a request |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, a in an.items():
            sc = a.get("syscalls")
            calls = (f"{sc['all']:.2f} ({sc['receive']:.2f}, {sc['send']:.2f}, {sc['wait']:.2f})"
                     if sc else "not measured (no perf)")
            lines.append(f"| {name} | {a['rps']:,.0f} | {a['client_user_us'] + a['client_sys_us']:.1f} "
                         f"({a['client_user_us']:.1f} + {a['client_sys_us']:.1f}) | "
                         f"{100 * a['client_core_share']:.0f} % | {a['server_user_us'] + a['server_sys_us']:.1f} "
                         f"({a['server_user_us']:.1f} + {a['server_sys_us']:.1f}) | "
                         f"{100 * a['server_core_share']:.0f} % | {calls} | {a['server_sleeps']:.3f} | {a['segments']:.2f} | "
                         f"{a['bytes']:.0f} |")
        lines += ["", "Where wrk uses a whole core and a server less than one, the client is the bound: "
                      "the requests per second then measure what a server makes the client do more than "
                      "what the server costs, and the per CPU-second figures are the servers' own. The "
                      "server's figures include all its threads (Rebound's click writer among them). A server "
                      "sleeps when it has answered everything it was sent (its threads' voluntary context "
                      "switches); on the loopback, waking it again is work done in the client's send, so a "
                      "server that is idle more often costs a client-bound wrk more per request.", ""]

    anatomy("anatomy", "cleartext HTTP/1.1, random codes, warm L1")
    for key, *_ in callgrind.WORKLOADS:
        if key not in r:
            continue
        cg = r[key]
        lines += [f"## Instructions per L1-hit redirect (callgrind, user space): {cg['title']}", "",
                  "| server | instructions per redirect | vs nginx | redirects in the measured stretch |",
                  "| --- | --- | --- | --- |"]
        def vs_nginx(n: float) -> str:
            return f"{n / cg['nginx']['per_request']:.2f}x" if "nginx" in cg else "-"
        compared = "rebound, compared (" + ", ".join(
            [f"`{b.args.compare_bin}`"] * bool(b.args.compare_bin) + [f"`{kv}`" for kv in b.args.compare_env]) + ")"
        for name, label in [("rebound", "rebound"), ("rebound_compared", compared), ("nginx", "nginx"),
                            ("hyper", "hyper"), ("hyper_1", "hyper, one thread (`current_thread` runtime)")]:
            if name in cg:
                lines.append(f"| {label} | {cg[name]['per_request']:,.0f} | {vs_nginx(cg[name]['per_request'])} | "
                             f"{cg[name]['requests']:,} |")
        for name, label in [("rebound", "rebound"), ("rebound_compared", compared)]:
            if name in cg and cg[name].get("path_per_request"):
                p = cg[name]["path_per_request"]
                lines.append(f"| {label}, the request path alone (connection tasks, inclusive) | {p:,.0f} | "
                             f"{vs_nginx(p)} | |")
        with_parts = [n for n in ("rebound", "rebound_compared") if cg.get(n, {}).get("parts_per_request")]
        if with_parts:
            lines += ["", "Where Rebound's instructions per redirect go (inclusive counts of each part's "
                          "outermost functions, so nested parts overlap; see `PARTS` in tools/callgrind.py):", "",
                      "| part | " + " | ".join("rebound" if n == "rebound" else "compared" for n in with_parts) + " |",
                      "| --- |" + " --- |" * len(with_parts)]
            for part in cg[with_parts[0]]["parts_per_request"]:
                lines.append(f"| {part} | " + " | ".join(
                    f"{cg[n]['parts_per_request'].get(part, 0):,.0f}" for n in with_parts) + " |")
        lines += ["", "A server that finds more requests waiting at each wake-up spends fewer instructions "
                      "per request on waking up: the fewer redirects a stretch served, the more each cost."]
        for c in [cg[k] for k in ("rebound_clicks", "rebound_compared_clicks") if k in cg][:1]:
            lines += ["", f"Rebound's click persistence in the measured run (under callgrind): "
                          f"{c['rows_per_s']:,.0f} rows/s, {100 * c['write_share']:.2f} % of the run writing, "
                          f"largest lag {c['max_lag_s']:.1f} s (sampled every 10 s: a scrape of /metrics "
                          f"costs about 2M instructions), {c['dropped']:,.0f} clicks dropped."]
        lines.append("")
    if "idle" in r:
        i = r["idle"]
        lines += [f"## Idle: no traffic, {i['seconds']} s per process", "",
                  "| process | binary | CPU-seconds per minute | wake-ups per minute |", "| --- | --- | --- | --- |"]
        for role in ("all-in-one", "control-plane", "proxy"):
            for label in i["binaries"]:
                row = i.get(f"{role}:{label}")
                if row:
                    lines.append(f"| {role} | {label} (`{i['binaries'][label]}`) | {row['cpu_s_per_min']:.4f} | "
                                 f"{row['wakeups_per_min']:,.0f} |")
        lines += ["", "Wake-ups are the process's voluntary context switches (each a sleep); CPU time is every "
                      "thread's schedstat. The proxy and the control plane run on Redis and moto.", ""]
    if "tls" in r:
        t = r["tls"]
        c = r["tls_per_cpu_s"]
        lines += ["## TLS: the same ECDSA P-256 certificate, Rebound's TLS port and nginx `listen ssl http2`", "",
                  "| scenario | Rebound | nginx | vs nginx | Rebound per server CPU-second | nginx per server CPU-second | vs nginx |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for scenario, title in tls.rows(r):
            rb, ng = t[f"{scenario}:rebound"], t[f"{scenario}:nginx"]
            crb, cng = c[f"{scenario}:rebound"], c[f"{scenario}:nginx"]
            lines.append(f"| {title} | {fmt(rb)} | {fmt(ng)} | {rb['median'] / ng['median']:.2f}x | "
                         f"{fmt(crb)} | {fmt(cng)} | {crb['median'] / cng['median']:.2f}x |")
        lines += ["", "The load generator shares the 2 cores. In the handshake runs each server (every "
                  "thread of it) is pinned to CPU 0 and wrk to CPU 1: the client side of a handshake is "
                  "the heavier (it verifies the signature), so the per-second figure is bounded by the "
                  "client, and what a server makes the client do (records, tickets) counts in it; the per "
                  "server CPU-second figures say what each server costs.", ""]
        if "tls_capped" in r:
            cap = r["tls_capped"]
            lines += [f"In the capped rows every process of each server runs in a cgroup of its own (cgroup v1, "
                      f"`cpu.cfs_quota_us` {cap['quota_us']} per `cpu.cfs_period_us` {cap['period_us']}): both "
                      f"servers get the same CPU time, at most {cap['cores']:.2f} of a core over all their "
                      "threads, and wrk has more than it needs, so the server is the bound and the per-second "
                      "figure is what each server does with that share (the handshake runs pinned as above, the "
                      "server within its quota on CPU 0). The free and capped rows side by side: where the free "
                      "ratio is the client's and the capped one the servers', they differ." +
                      (f" Both the server's cgroup and one for the bench itself, so for wrk (no quota), have "
                       f"`cpu.shares` {cap['shares']} (a task weighs 1024): on a machine shared with other work "
                       "they go first, the server up to its quota." if "shares" in cap else ""), "",
                      "| capped run | server | per second | server's share of a core | wrk's share of a core | "
                      "periods throttled |", "| --- | --- | --- | --- | --- | --- |"]
            for key, title in [("https_capped", "HTTPS keep-alive (wrk)"),
                               ("handshakes_capped", "TLS handshakes (wrk, Connection: close)")]:
                for name in ["rebound", "nginx"]:
                    bd = cap["bound"].get(f"{key}:{name}")
                    if bd is None:
                        continue
                    lines.append(f"| {title} | {name} | {fmt(t[f'{key}:{name}'])} | "
                                 f"{100 * bd['server_core_share']['median']:.0f} % | "
                                 f"{100 * bd['client_core_share']['median']:.0f} % | "
                                 f"{100 * bd['throttled_share']['median']:.0f} % |")
            lines += ["", "Shares of a core are medians over the runs (CPU seconds over the run's seconds); "
                          "periods throttled: the share of the cap's periods in which the server had used up "
                          "its quota (`cpu.stat`), near 100 % where the server is the bound. In the handshake "
                          "runs wrk's share is no measure of its work: while a handshake waits for the server, "
                          "wrk's event loop keeps the connecting socket registered for writability as well as "
                          "readability (`connect_socket` in wrk.c), so it spins until the server answers.", ""]
        if "https_oha:rebound" in t:
            lines += ["The oha rows: oha with one worker thread (`--worker-threads 1`) and its rustls "
                      "client (`--insecure`: it verifies neither the certificate nor the handshake's signature), each request's URL picked at "
                      "random from the same 20,000 as h2load's; its connection rows open a connection for "
                      "each request (`--disable-keepalive`, pinned like wrk's handshake runs), and rustls "
                      "resumes TLS sessions where the server offers tickets, so they are not all full "
                      "handshakes.", ""]
        if "tls_negotiated" in r:
            n = r["tls_negotiated"]
            lines += [f"Negotiated with an OpenSSL client (which lists AES-256-GCM first): Rebound "
                      f"{n.get('rebound')}, nginx {n.get('nginx')}. Rebound prefers AES-128-GCM with SHA-256 "
                      "unless the client puts ChaCha20 first; nginx follows the client's order.", ""]
    anatomy("anatomy_https", "HTTPS keep-alive, random codes")
    if "abuse" in r:
        lines += ["## Abuse: 500 slow heads + 500 clients that pipeline and never read", "",
                  "| server | RSS before MiB | RSS peak MiB | growth MiB | all let go after |", "| --- | --- | --- | --- | --- |"]
        for name, v in r["abuse"].items():
            gone = f"{v['all_let_go_after_s']:.0f} s" if v["all_let_go_after_s"] is not None else "not within 120 s"
            lines.append(f"| {name} | {v['rss_before']:,.0f} | {v['rss_peak']:,.0f} | "
                         f"{v['rss_peak'] - v['rss_before']:,.0f} | {gone} |")
        lines.append("")
    if "fleet" in r:
        lines += ["## The fleet's bookkeeping: N idle proxies on one Redis, then deletes", "",
                  "| proxies | Redis commands/s per proxy | Redis bytes sent/s per proxy | Redis CPU per proxy "
                  "(all) | delete p50 ms | p99 ms | max ms | of which waiting for the proxies, p50 / p99 "
                  "(histogram bucket) | waited out | redirected after a delete |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for v in r["fleet"]:
            lines.append(f"| {v['proxies']} | {v['commands_per_proxy_s']:.1f} | "
                         f"{v['bytes_sent_per_proxy_s']:,.0f} | {100 * v['cpu_share_per_proxy']:.3f} % "
                         f"({100 * v['cpu_share']:.1f} %) | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | "
                         f"{v['max_ms']:.1f} | <= {v['ack_p50_ms']:.1f} / <= {v['ack_p99_ms']:.1f} ms | "
                         f"{v['waited_out']:.0f} | {v['redirected_after']} |")
        lines += ["", "Deletes go through moto's DynamoDB (a Python process on the same 2 cores): "
                  "most of each delete is the store and the audit write, not the wait for the proxies.", ""]
        if all("store_p99_ms" in v for v in r["fleet"]):
            ops = list(r["fleet"][0]["store_p99_ms"])
            lines += ["The store's calls in those deletes (the control plane's, all operations of the run), p99 (histogram bucket, ms):", "",
                      "| proxies | " + " | ".join(ops) + " |", "| --- |" + " --- |" * len(ops)]
            for v in r["fleet"]:
                lines.append(f"| {v['proxies']} | " + " | ".join(f"<= {v['store_p99_ms'][op]:g}" for op in ops) + " |")
            lines.append("")
        lines.append("")
    if "blip" in r:
        v = r["blip"]
        lines += [f"## A {v['blip_s']:.0f} s Redis blip under load: {v['proxies']} proxies, {v['hot_links']:,} hot "
                  "links warm in L1", "",
                  "| phase | requests/s | L1 hits/s | Redis reads/s | store reads/s |", "| --- | --- | --- | --- | --- |"]
        for phase, rates in v["rates"].items():
            lines.append(f"| {phase.replace('_', ' ')} | {rates['requests']:,.0f} | {rates['l1_hits']:,.0f} | "
                         f"{rates['l2_reads']:,.0f} | {rates['store_reads']:,.0f} |")
        lines += ["", f"Both proxies together; wrk saw {v['non_2xx_3xx']} answers that were not 2xx or 3xx and a "
                  f"p99 of {v['p99_ms']:.0f} ms at most. Redis frozen with SIGSTOP; the store is moto.", ""]
    if "regions" in r:
        v = r["regions"]
        lines += [f"## Deletes in two regions, region b's Redis {v['one_way_ms']:.0f} ms away each way", "",
                  "| control plane | deletes | p50 ms | p99 ms | max ms | redirected after a delete |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, d in v["deletes"].items():
            who = "region a alone (waits for a's 2 proxies)" if name == "a" else \
                "region a with peer region b (waits for all 4 proxies)"
            lines.append(f"| {who} | {d['deletes']} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} | {d['max_ms']:.1f} | "
                         f"{d['redirected_after']} |")
        share = v["share_ms"]
        lines += ["", "Each region's share of a delete with both (`rebound_region_propagation_seconds`: tombstone, "
                  "publish, registry, acknowledgements; histogram bucket bounds): "
                  + ", ".join(f"{region} p50 <= {s[0.5]:g} ms, p99 <= {s[0.99]:g} ms" for region, s in share.items())
                  + "; the regions run side by side. The store's calls (moto), p99: "
                  + ", ".join(f"{op} <= {ms:g} ms" for op, ms in v["store_p99_ms"].items()) + ".", ""]
    if "short_connections" in r:
        lines += ["## Memory after short connections (one request each, then closed)", "",
                  "| server | port | connections | connections/s | RSS before MiB | RSS after MiB | growth MiB |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for v in r["short_connections"]:
            lines.append(f"| {v['server']} | {v['port']} | {v['connections']:,} | {v['rps']:,.0f} | "
                         f"{v['rss_before']:,.1f} | {v['rss_after']:,.1f} | {v['rss_after'] - v['rss_before']:+,.1f} |")
        lines.append("")
    if "click_persistence" in r:
        lines += ["## Click persistence (Rebound, default pacing)", "",
                  "Over each scenario's stretch (the warm and unknown scenarios include the other servers' "
                  "turns, so the rates are averages over the whole alternation).", "",
                  "| scenario | rollup rows written/s | batches/s (SQS messages in distributed mode) | "
                  "share of a core writing | largest persistence lag s | codes pending at the end | clicks dropped | "
                  "stats show a click after, s (median, max) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for scenario, c in r["click_persistence"].items():
            f = c.get("stats_freshness_s")
            fresh = f"{f['median']:.3f}, {f['max']:.3f} ({f['runs']} probes)" if f else "no probe"
            lines.append(f"| {scenario} | {c['rows_per_s']:,.0f} | {c['batches_per_s']:,.1f} | "
                         f"{100 * c['write_share']:.2f} % | {c['max_lag_s']:.1f} | {c['pending_codes_at_end']:,.0f} | "
                         f"{c['dropped']:,.0f} | {fresh} |")
        lines.append("")
    if "zipf" in r:
        z = r["zipf"]
        lines += ["## Zipf codes, cold L1 (embedded store)", "",
                  f"{z['rps']:,.0f} req/s, p99 {z['p99_ms']:.2f} ms; {z['requests']:,} requests over "
                  f"{z['distinct_codes_in_list']:,} distinct codes in the list; store reads {z['store_reads']:,.0f} "
                  f"({z['store_reads_per_s']:,.0f}/s), L1 misses {z['l1_misses']:,.0f}, single-flight waits "
                  f"{z['singleflight_waits']:,.0f}.", ""]
    if "redis" in r:
        z = r["redis"]
        lines += ["## Zipf codes, distributed mode: cold L1 over a warm Redis", "",
                  f"`rebound proxy` on {z['links']:,} links (DynamoDB and SQS on moto, Redis): {z['rps']:,.0f} "
                  f"req/s, p99 {z['p99_ms']:.2f} ms; {z['requests']:,} requests over "
                  f"{z['distinct_codes_in_list']:,} distinct codes in the list; L1 misses {z['l1_misses']:,.0f}, "
                  f"Redis hits {z['redis_hits']:,.0f} ({z['redis_hits_per_s']:,.0f}/s), store reads "
                  f"{z['store_reads']:,.0f}, single-flight waits {z['singleflight_waits']:,.0f}.", "",
                  f"`rebound proxy` time to ready (`/readyz` 200): {fmt(z['ready_empty'], 2)} s on the empty "
                  f"table, {fmt(z['ready_full'], 2)} s on the {z['links']:,} links.", ""]
    if "fleet_delete" in r:
        d = r["fleet_delete"]
        lines += ["## Deletes with two healthy proxies (distributed mode)", "",
                  f"{d['deletes']} deletes through the control plane, each answered once both warm proxies "
                  f"acknowledged: p50 {d['p50_ms']:.1f} ms, p99 {d['p99_ms']:.1f} ms, max {d['max_ms']:.1f} ms; "
                  f"requests to either proxy right after the answer that were still redirected: "
                  f"{d['redirected_after']}. Of that, waiting for both proxies' acknowledgements "
                  f"({d['ack_waits']:.0f} waits, `rebound_invalidation_ack_wait_seconds`): p50 at most "
                  f"{d['ack_p50_ms']:g} ms, p99 at most {d['ack_p99_ms']:g} ms (histogram bucket bounds); "
                  f"the rest is the store (moto) and the audit write.", ""]
    if "create" in r:
        lines += ["## Creation through the API (generated codes, embedded store)", "",
                  f"{fmt(r['create']['links_per_s'])} links/s.", ""]
        if "import_rate" in r:
            lines += [f"Bulk import (`rebound links import`, 1,000 per request): {r['import_rate']:,.0f} links/s.", ""]
    if "startup" in r:
        st = r["startup"]
        lines += ["## Start-up to ready with the whole table", "",
                  f"Rebound (`/readyz` 200, issued-code filter synced) with {b.links:,} links: "
                  f"{fmt(st['rebound'], 2)} s; with 1,000 links: {fmt(st['rebound_1000'], 2)} s; "
                  f"nginx (first answer): {st['nginx']:.2f} s.", ""]
    if "rss" in r:
        lines += ["## RSS with every link requested once", "", "| server | RSS MiB |", "| --- | --- |"]
        for name, v in r["rss"].items():
            lines.append(f"| {name} | {v:,.0f} |")
        if "rss_rebound_cached" in r:
            lines += ["", f"Rebound's L1 filled {r['rss_rebound_cached']:,.0f} codes (its L1 misses) before "
                          f"the RSS was read, with their clicks pending."]
        lines.append("")
    if "domains" in r:
        lines += domains_section(r["domains"])
    lines += ["## Commands", "", "```", " ".join(["scripts/bench"] + b.argv)] + b.commands + ["```", ""]
    return "\n".join(lines)


def domains_section(d: dict[str, Any]) -> list[str]:
    """The domains scenario: adds, start-up and memory, handshakes, instructions."""
    n = d["domains"]
    ad, made, st = d["adds"], d["certs_made"], d["startup"]
    lines = [f"## Domains: {n:,} domains, a certificate each", "",
             f"{n:,} domains added through the API (`POST /api/v1/domains`, `certificate: acme`, one client, one "
             f"add after the other, ACME off) on a data directory of {d['links']:,} links: {fmt(ad['seconds'], 1)} s, "
             f"{fmt(ad['per_s'])} adds/s; one add p50 {fmt(ad['p50_ms'], 2)} ms, p99 {fmt(ad['p99_ms'], 2)} ms, "
             f"max {fmt(ad['max_ms'], 1)} ms ({ad['seconds']['runs']} directories).", "",
             f"Certificates: one self-signed ECDSA P-256 certificate per domain, each with its own key, valid "
             f"90 days, and one for the default domain ({n + 1:,}), made with {made['how']} in "
             f"{made['seconds']:.1f} s and written into the `certificates` table of the stopped directory in "
             f"{made['store_seconds']:.1f} s (there is no API to upload a certificate). The directory without "
             "domains holds the default domain's alone.", "",
             "| set-up | domains routed at ready | exec to ready s | exec to every expiry exported s | exec to "
             f"every certificate served s | RSS after load MiB | RSS after {IDLE_DOMAINS_S} s idle MiB | CPU s in "
             f"those {IDLE_DOMAINS_S} s |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    titles = {"files-0": "TLS port with the certificate files, no domain",
              "files-N": f"the same, {n:,} domains",
              "acme-0": "ACME on (nowhere to order from), no domain",
              "acme-N": f"ACME on, {n:,} domains and their certificates"}
    for key, title in titles.items():
        v = st[key]
        lines.append(f"| {title} | {v['routed_at_ready']['median']:,.0f} | {fmt(v['ready_s'], 2)} | "
                     f"{fmt(v['expiries_s'], 2) if 'expiries_s' in v else '-'} | "
                     f"{fmt(v['installed_s'], 2) if 'installed_s' in v else '-'} | {fmt(v['rss_loaded_mib'], 1)} | "
                     f"{fmt(v['rss_idle_mib'], 1)} | {fmt(v['idle_cpu_s'], 2)} |")
    per = st["bytes_per_domain"]
    lines += ["", f"Memory per domain (RSS with {n:,} domains less RSS without, in the same round, over {n:,}): "
              f"without certificates {fmt(per['files']['rss_loaded_mib'])} bytes after the load, "
              f"{fmt(per['files']['rss_idle_mib'])} after the idle stretch; with their certificates "
              f"{fmt(per['acme']['rss_loaded_mib'])} and {fmt(per['acme']['rss_idle_mib'])} bytes. "
              f"Each ACME round (every 15 s) costs {fmt(st['acme_round_cpu_s'], 3)} CPU-seconds more with "
              f"{n:,} certificates than with one (idle CPU difference over the rounds of the idle stretch). "
              f"Orders made in all the ACME starts (issued, renewed and failed, from the issuer's counters): "
              f"{st['acme_ordered']:.0f}; log lines about an order: {st['order_log_lines']}.", ""]
    hs = d["handshakes"]
    cap = hs["cap"]
    lines += [f"TLS handshakes per second with {n:,} certificates chosen by SNI (the ACME set-up) and with one "
              "certificate for every name (the certificate files, the same directory and domains), "
              + (f"each server capped to {cap['cores']:.2f} of a core" if cap else "not capped")
              + " and pinned to CPU 0, the client on CPU 1. Each run on a server started for it, once the first "
              "ACME round has served the certificates, after a 1 s warm-up; medians of the rounds (min-max), the "
              "ratio that of each round's two runs:", "",
              "| run | N certificates /s | one certificate /s | ratio | N per server CPU-second | one per "
              "server CPU-second | ratio | server's share of a core, N / one | periods throttled, N / one | "
              "handshakes resumed, N / one | run ended after the start, s (max) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, title in hs["rows"]:
        x, y = hs[f"{key}:acme"], hs[f"{key}:files"]
        lines.append(f"| {title} | {fmt(x['rate'])} | {fmt(y['rate'])} | {fmt(hs[f'{key}:ratio'], 3)} | "
                     f"{fmt(x['per_cpu_s'])} | {fmt(y['per_cpu_s'])} | {fmt(hs[f'{key}:ratio_per_cpu_s'], 3)} | "
                     f"{100 * x['server_core_share']['median']:.0f} % / {100 * y['server_core_share']['median']:.0f} % | "
                     f"{100 * x['throttled_share']['median']:.0f} % / {100 * y['throttled_share']['median']:.0f} % | "
                     f"{100 * x['resumed_share']['median']:.0f} % / {100 * y['resumed_share']['median']:.0f} % | "
                     f"{max(x['ended_after_start_s']['max'], y['ended_after_start_s']['max']):.1f} |")
    lines += ["", "The ACME rounds run 15 s apart from the start: a run that ended within 15 s of it had none in it "
              "but the first (before the warm-up). Resumed: the share of the handshakes the server counted as "
              "resumed (`rebound_edge_tls_handshakes_total`).", ""]
    c = d["callgrind"]
    lines += [f"Instructions per L1-hit redirect (callgrind, user space; {c['connections']} connections over "
              f"{c['codes']:,} codes, {c['seconds']} s, one redirect thread), the directory with the {n:,} domains:",
              "", "| requests | instructions per redirect | the request path alone | redirects measured | vs the "
              "default domain |", "| --- | --- | --- | --- | --- |"]
    for key, title in [("default", "default domain (by address)"), ("on_domain", f"`Host: {c['domain']}`")]:
        v = c[key]
        lines.append(f"| {title} | {v['per_request']:,.0f} | {v['path_per_request']:,.0f} | {v['requests']:,} | "
                     f"{v['per_request'] / c['default']['per_request']:.3f}x |")
    lines.append("")
    return lines


def write(b: Bench) -> str:
    """Writes the report and results.json; prints the report; returns the report's path."""
    text = render(b)
    # A partial run (--only) gets its own file: it never overwrites the day's full run.
    suffix = ("-quick" if b.args.quick else "") + ("-" + b.args.only.replace(",", "-") if b.args.only else "")
    out = b.args.out or os.path.join(ROOT, "benches", "results", f"{datetime.date.today().isoformat()}{suffix}.md")
    with open(out, "w") as f:
        f.write(text)
    with open(b.path("results.json"), "w") as f:
        json.dump(b.results, f, indent=2)
    print(text)
    log(f"wrote {out}")
    return out

