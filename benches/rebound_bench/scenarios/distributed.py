"""redis and fleet: distributed mode, `rebound proxy` processes over one Redis, links in
DynamoDB and clicks to SQS (both on moto), a `rebound control-plane` for the API."""

from __future__ import annotations

import http.client
import random
import subprocess
import time
from typing import Any, Mapping

from .. import servers
from ..context import Bench, Table
from ..probes import delete_codes
from ..servers import Server
from ..tools import redis
from ..tools.install import ensure_services
from ..tools.metrics import histogram_quantile, metric
from ..tools.wrk import wrk
from ..util import free_port, log, run, summary, wait_for


def start_services(b: Bench, log_prefix: str) -> tuple[list[Server], int, int]:
    """redis-server and moto on free ports: (the services, Redis's port, moto's port)."""
    redis_port, moto_port = free_port(), free_port()
    services = [servers.redis_server(redis_port), servers.moto_server(moto_port)]
    for svc in services:
        svc.start(b.path(f"{log_prefix}{svc.name}.log"))
    return services, redis_port, moto_port


def wait_services(redis_port: int, moto: Server) -> None:
    wait_for(lambda: redis.ping(redis_port), 30, "redis ready")
    moto.wait_ready("/", 60)


def distributed_env(b: Bench, prefix: str, redis_port: int, moto_port: int,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return b.rebound_base_env({
        "REBOUND_STORE": "dynamodb", "REBOUND_TABLE_PREFIX": f"{prefix}-", "REBOUND_QUEUE": "sqs",
        "REBOUND_SQS_QUEUE": f"{prefix}-clicks", "REBOUND_REDIS_URL": f"redis://127.0.0.1:{redis_port}",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{moto_port}", "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", **(extra or {}),
    })


def new_proxy(b: Bench, base: Mapping[str, str], name: str) -> Server:
    return servers.rebound_role(name, b.rebound, "proxy", base, free_port(), free_port(), "REBOUND_REDIRECT_ADDR")


def new_control_plane(b: Bench, base: Mapping[str, str]) -> Server:
    return servers.rebound_role("control-plane", b.rebound, "control-plane", base, free_port(), free_port(),
                                "REBOUND_API_ADDR")


def run_redis(b: Bench) -> None:
    """Distributed mode: links created through a control plane on DynamoDB (moto), whose
    write-through leaves every record in Redis; then a fresh `rebound proxy` (cold L1)
    replays Zipf codes over them. The control plane is stopped before the run, so its
    click consumer does not share the CPU."""
    ensure_services()
    a = b.args
    services, redis_port, moto_port = start_services(b, "")
    try:
        wait_services(redis_port, services[1])
        base = distributed_env(b, "bench", redis_port, moto_port)
        with open(b.path("provision.log"), "w") as f:
            run([b.rebound, "provision"], env=base, stdout=f, stderr=subprocess.STDOUT)

        def ready_time(name: str) -> float:
            p = new_proxy(b, base, name).start(b.path(f"{name}.log"))
            try:
                return p.wait_ready("/readyz", 120)
            finally:
                p.stop()

        # Time to ready does not grow with the links: on the empty table, and below on
        # the imported one.
        ready_empty = [ready_time(f"proxy-ready-empty-{i}") for i in range(3)]
        cp = new_control_plane(b, base)
        cp.start(b.path("redis-control-plane.log"))
        try:
            cp.wait_ready("/readyz", 120)
            table, took = b.import_links_unkeyed("redis", a.redis_links, cp.port)
        finally:
            cp.stop()
        log(f"imported {len(table)} links into DynamoDB (moto) and Redis in {took:.1f} s")
        b.commands.append(f"rebound provision; rebound control-plane; POST /api/v1/links/import x{len(table) // 1000}  "
                          f"# {len(table)} links, DynamoDB and SQS on moto, Redis")
        ready_full = [ready_time(f"proxy-ready-full-{i}") for i in range(3)]
        request_file, distinct = b.zipf_list(table, a.list_size, "redis")
        proxy = new_proxy(b, base, "proxy")
        proxy.start(b.path("redis-proxy.log"))
        try:
            proxy.wait_ready("/readyz", 300)
            url = f"http://127.0.0.1:{proxy.metrics_port}/metrics"
            names = ['rebound_lookups_total{result="hit",tier="l2"}',
                     'rebound_lookups_total{result="read",tier="store"}',
                     "rebound_singleflight_waits_total", 'rebound_lookups_total{result="miss",tier="l1"}']
            before = [metric(url, n) for n in names]
            r = wrk(f"http://127.0.0.1:{proxy.port}", [request_file], a.duration, a.connections,
                    b.path("wrk-redis.txt"))
            after = [metric(url, n) for n in names]
            l2_hits, reads, waits, misses = (x - y for x, y in zip(after, before))
            b.commands.append(f"rebound proxy; wrk -t 1 -c {a.connections} -d {a.duration}s --latency "
                              f"-s benches/wrk/replay.lua URL -- requests-redis.txt  # cold L1")
            b.results["redis"] = {"links": len(table), "rps": r["rps"], "p99_ms": r["p99_ms"],
                                  "requests": r["requests"], "redis_hits": l2_hits,
                                  "redis_hits_per_s": l2_hits / a.duration, "store_reads": reads,
                                  "singleflight_waits": waits, "l1_misses": misses,
                                  "distinct_codes_in_list": distinct,
                                  "ready_empty": summary(ready_empty), "ready_full": summary(ready_full)}
            b.results["fleet_delete"] = delete_latency(b, base, table, proxy, new_proxy(b, base, "proxy-2"))
        finally:
            proxy.stop()
    finally:
        for svc in services:
            svc.stop()


def delete_latency(b: Bench, base: Mapping[str, str], table: Table, first: Server, second: Server,
                   deletes: int = 200) -> dict[str, Any]:
    """Deletes with two healthy proxies: both warmed on every code first, then each
    DELETE is timed through the control plane (it answers once both proxies have
    acknowledged), and both proxies are asked right after it returned."""
    cp = new_control_plane(b, base)
    cp.start(b.path("delete-control-plane.log"))
    second.start(b.path("delete-proxy-2.log"))
    try:
        cp.wait_ready("/readyz", 120)
        second.wait_ready("/readyz", 120)
        codes = [c for c, _ in random.Random(7).sample(table, min(deletes, len(table)))]
        proxies = [http.client.HTTPConnection("127.0.0.1", p.port, timeout=10) for p in (first, second)]
        took, redirected = delete_codes(cp.port, codes, proxies)
        # The part of each delete spent waiting for the proxies' acknowledgements (the
        # rest is the store, here moto, and the audit write).
        cp_url = f"http://127.0.0.1:{cp.metrics_port}/metrics"
        ack_p50, acks = histogram_quantile(cp_url, "rebound_invalidation_ack_wait_seconds", 0.5)
        ack_p99, _ = histogram_quantile(cp_url, "rebound_invalidation_ack_wait_seconds", 0.99)
        b.commands.append(f"rebound control-plane + 2 x rebound proxy; GET every code on both; "
                          f"DELETE /api/v1/links/CODE x{len(codes)}, then GET on both")
        return {"deletes": len(codes), "p50_ms": took[len(took) // 2],
                "p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))], "max_ms": took[-1],
                "redirected_after": redirected, "ack_waits": acks,
                "ack_p50_ms": ack_p50 * 1000, "ack_p99_ms": ack_p99 * 1000}
    finally:
        second.stop()
        cp.stop()


STORE_CALLS_OF_A_DELETE = ("get_link", "deactivate_link", "finish_propagation", "append_audit")


def run_fleet(b: Bench, sizes: tuple[int, ...] = (4, 50), deletes: int = 100, window: int = 20) -> None:
    """The fleet's own bookkeeping as it grows: N idle proxies on one Redis (moto for the
    store); Redis's commands, bytes sent and CPU over `window` seconds at rest, divided
    by N; then `deletes` deletes through a control plane, each waiting for every
    proxy's acknowledgement, every proxy asked right after each one returned."""
    ensure_services()
    services, redis_port, moto_port = start_services(b, "fleet-")
    out = []
    try:
        wait_services(redis_port, services[1])
        base = distributed_env(b, "fleet", redis_port, moto_port, {"REBOUND_L1_CAPACITY": "10000"})
        with open(b.path("fleet-provision.log"), "w") as f:
            run([b.rebound, "provision"], env=base, stdout=f, stderr=subprocess.STDOUT)
        cp = new_control_plane(b, base)
        cp.start(b.path("fleet-control-plane.log"))
        try:
            cp.wait_ready("/readyz", 120)
            table, _ = b.import_links_unkeyed("fleet", deletes * len(sizes), cp.port)
        finally:
            cp.stop()
        codes = [c for c, _ in table]
        for n, size in enumerate(sizes):
            proxies: list[Server] = []
            try:
                for i in range(size):
                    p = new_proxy(b, base, f"proxy-{i}")
                    p.start(b.path(f"fleet-{size}-proxy-{i}.log"))
                    proxies.append(p)
                for p in proxies:
                    p.wait_ready("/readyz", 120)
                time.sleep(5)
                i0, t0 = redis.info(redis_port), time.time()
                time.sleep(window)
                i1, t1 = redis.info(redis_port), time.time()
                secs = t1 - t0
                at_rest = {"commands_per_proxy_s": (i1["commands"] - i0["commands"]) / secs / size,
                           "bytes_sent_per_proxy_s": (i1["bytes_sent"] - i0["bytes_sent"]) / secs / size,
                           "cpu_share_per_proxy": (i1["cpu_s"] - i0["cpu_s"]) / secs / size,
                           "cpu_share": (i1["cpu_s"] - i0["cpu_s"]) / secs}
                mine = codes[n * deletes:(n + 1) * deletes]
                conns = [http.client.HTTPConnection("127.0.0.1", p.port, timeout=10) for p in proxies]
                # A control plane of its own for each size: its histogram of the
                # acknowledgement waits covers these deletes alone.
                cp = new_control_plane(b, base)
                cp.start(b.path(f"fleet-{size}-control-plane.log"))
                proxies.append(cp)  # stopped with them if anything fails
                cp.wait_ready("/readyz", 120)
                took, redirected = delete_codes(cp.port, mine, conns)
                cp_url = f"http://127.0.0.1:{cp.metrics_port}/metrics"
                ack_p50, _ = histogram_quantile(cp_url, "rebound_invalidation_ack_wait_seconds", 0.5)
                ack_p99, _ = histogram_quantile(cp_url, "rebound_invalidation_ack_wait_seconds", 0.99)
                waited_out = metric(cp_url, "rebound_invalidation_waited_out_total")
                # The store's part: each delete's read and three writes (the conditional update, the
                # pending propagation cleared, the audit event), p99 of each.
                store_p99 = {op: 1000 * histogram_quantile(cp_url, "rebound_adapter_call_duration_seconds", 0.99,
                                                           f'operation="{op}"')[0]
                             for op in STORE_CALLS_OF_A_DELETE}
                cp.stop()
                row: dict[str, Any] = dict(at_rest, proxies=size, deletes=len(mine), p50_ms=took[len(took) // 2],
                                           p99_ms=took[min(len(took) - 1, int(len(took) * 0.99))], max_ms=took[-1],
                                           redirected_after=redirected, ack_p50_ms=ack_p50 * 1000,
                                           ack_p99_ms=ack_p99 * 1000, waited_out=waited_out, store_p99_ms=store_p99)
                out.append(row)
                log(f"fleet {size} proxies: {row['commands_per_proxy_s']:.1f} commands/s, "
                    f"{row['bytes_sent_per_proxy_s'] / 1024:.2f} KiB/s sent, "
                    f"{100 * row['cpu_share_per_proxy']:.3f} % of a core per proxy; deletes p50 "
                    f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms (waiting for the proxies: p99 "
                    f"<= {row['ack_p99_ms']:.0f} ms), {redirected} redirected after")
            finally:
                # All told at once: each drains for a few seconds.
                for p in proxies:
                    p.terminate()
                for p in proxies:
                    p.stop()
    finally:
        for svc in services:
            svc.stop()
    b.results["fleet"] = out
    b.commands.append(f"N x rebound proxy (N = {', '.join(map(str, sizes))}) on one redis-server, moto; "
                      f"redis-cli info all before and after {window} s at rest; then {deletes} DELETEs "
                      "through rebound control-plane, every proxy asked after each")
