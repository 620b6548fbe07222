"""regions: deletes in a fleet of two regions (docs/regions.md). Region a and region b
each have a redis-server and two `rebound proxy` processes; region b's Redis is reached
from region a through a relay that delays every byte 40 ms each way (tools/relay.py: one
inter-region round trip is 80 ms). The store is one moto (standing for the replicated
table). The same deletes go, block by block in turn, through a control plane of region a
alone (it waits for a's proxies) and through one whose peer region is b (it also writes
the tombstone in b's Redis and waits for b's proxies): the difference is what the second
region costs a delete."""

from __future__ import annotations

import http.client
import subprocess
from typing import Any

from .. import servers
from ..context import Bench
from ..probes import delete_codes
from ..servers import Server
from ..tools import redis
from ..tools.install import ensure_services
from ..tools.metrics import fetch, parse_histogram_quantile
from ..tools.relay import DelayedRelay
from ..util import free_port, log, run, wait_for
from .distributed import STORE_CALLS_OF_A_DELETE, distributed_env, new_control_plane, new_proxy

ONE_WAY_S = 0.040


def run_regions(b: Bench, deletes: int = 200, blocks: int = 4) -> None:
    ensure_services()
    redis_a, redis_b, moto_port = free_port(), free_port(), free_port()
    services = [servers.redis_server(redis_a), servers.redis_server(redis_b), servers.moto_server(moto_port)]
    for n, svc in enumerate(services):
        svc.start(b.path(f"regions-{n}-{svc.name}.log"))
    relay = None
    running: list[Server] = []
    try:
        for port in (redis_a, redis_b):
            wait_for(lambda: redis.ping(port), 30, "redis ready")
        services[2].wait_ready("/", 60)
        relay = DelayedRelay(redis_b, ONE_WAY_S).start()
        base = distributed_env(b, "regions", redis_a, moto_port, {"REBOUND_REGION": "a"})
        with open(b.path("regions-provision.log"), "w") as f:
            run([b.rebound, "provision"], env=base, stdout=f, stderr=subprocess.STDOUT)
        alone = new_control_plane(b, base)
        both = new_control_plane(b, {**base, "REBOUND_PEER_REGIONS": f"b=redis://127.0.0.1:{relay.port}"})
        proxies = [new_proxy(b, base, "proxy-a0"), new_proxy(b, base, "proxy-a1"),
                   new_proxy(b, {**base, "REBOUND_REDIS_URL": f"redis://127.0.0.1:{redis_b}"}, "proxy-b0"),
                   new_proxy(b, {**base, "REBOUND_REDIS_URL": f"redis://127.0.0.1:{redis_b}"}, "proxy-b1")]
        for s in [alone, both, *proxies]:
            s.start(b.path(f"regions-{s.name}-{s.port}.log"))
            running.append(s)
        for s in running:
            s.wait_ready("/readyz", 120)
        table, _ = b.import_links_unkeyed("regions", 2 * deletes, alone.port)
        codes = [c for c, _ in table]
        conns = [http.client.HTTPConnection("127.0.0.1", p.port, timeout=10) for p in proxies]
        took: dict[str, list[float]] = {"a": [], "a+b": []}
        redirected = {"a": 0, "a+b": 0}
        per_block = deletes // blocks
        for block in range(blocks):
            for n, (name, cp, asked) in enumerate((("a", alone, conns[:2]), ("a+b", both, conns))):
                first = (2 * block + n) * per_block
                t, r = delete_codes(cp.port, codes[first:first + per_block], asked)
                took[name] += t
                redirected[name] += r
        text = fetch(f"http://127.0.0.1:{both.metrics_port}/metrics")
        share = {region: {q: 1000 * parse_histogram_quantile(
                     text, "rebound_region_propagation_seconds", q, f'region="{region}"')[0] for q in (0.5, 0.99)}
                 for region in ("a", "b")}
        store_p99 = {op: 1000 * parse_histogram_quantile(text, "rebound_adapter_call_duration_seconds", 0.99,
                                                         f'operation="{op}"')[0]
                     for op in STORE_CALLS_OF_A_DELETE}
    finally:
        for s in running:
            s.terminate()
        for s in running:
            s.stop()
        if relay is not None:
            relay.stop()
        for svc in services:
            svc.stop()
    rows: dict[str, Any] = {}
    for name, t in took.items():
        t.sort()
        rows[name] = {"deletes": len(t), "p50_ms": t[len(t) // 2], "p99_ms": t[min(len(t) - 1, int(len(t) * 0.99))],
                      "max_ms": t[-1], "redirected_after": redirected[name]}
    b.results["regions"] = {"one_way_ms": ONE_WAY_S * 1000, "deletes": rows, "share_ms": share,
                            "store_p99_ms": store_p99}
    log(f"regions: deletes in a alone p50 {rows['a']['p50_ms']:.1f} ms p99 {rows['a']['p99_ms']:.1f} ms; "
        f"in a and b p50 {rows['a+b']['p50_ms']:.1f} ms p99 {rows['a+b']['p99_ms']:.1f} ms")
    b.commands.append(f"2 x redis-server, moto; 2 x rebound proxy per region; region b's Redis behind a relay "
                      f"delaying {ONE_WAY_S * 1000:.0f} ms each way; {deletes} DELETEs through rebound control-plane "
                      f"(REBOUND_REGION=a) alone and with REBOUND_PEER_REGIONS=b=redis://RELAY, {blocks} blocks "
                      "each in turn; every proxy of the regions waited for asked after each")
