"""blip: a fleet-wide Redis blip under load. Two `rebound proxy` processes over one Redis
(links in DynamoDB on moto), `hot` links warm in both L1s, wrk replaying them uniformly on
both; Redis is frozen (SIGSTOP) for `blip` seconds; each proxy's lookups by tier are
sampled every second. It shows what Redis and the store see before, during and after the
blip: whether the fleet empties its L1s at once when Redis comes back (a stampede) or
replays what it missed and keeps them."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any, Mapping, Sequence

from ..context import Bench
from ..tools.install import ensure_services
from ..tools.metrics import fetch
from ..tools.wrk import wrk_command, parse_wrk
from ..util import log
from .distributed import distributed_env, new_control_plane, new_proxy, start_services, wait_services

# What each sample counts, summed over a series' labels: the lookups of each tier.
SERIES = {
    "l1_hits": ('rebound_lookups_total{', 'tier="l1"', 'result="hit"'),
    "l2_reads": ('rebound_lookups_total{', 'tier="l2"', ""),
    "store_reads": ('rebound_lookups_total{', 'tier="store"', 'result="read"'),
    "requests": ("rebound_redirect_requests_total{", "", ""),
}


def counts(text: str) -> dict[str, float]:
    """The SERIES of one scrape: each the sum of the samples whose name and labels match."""
    out = {name: 0.0 for name in SERIES}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        for name, (prefix, label, other) in SERIES.items():
            if line.startswith(prefix) and label in line and other in line:
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


def phase_rates(samples: Sequence[tuple[float, dict[str, float]]],
                phases: Mapping[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Per-second rates of each series over each phase: `samples` are (time, totals) in
    time order, `phases` name (start, end) times; a phase's rate is the difference of the
    last and first sample inside it over the time between them."""
    out: dict[str, dict[str, float]] = {}
    for phase, (start, end) in phases.items():
        inside = [(t, c) for t, c in samples if start <= t <= end]
        if len(inside) < 2:
            continue
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        out[phase] = {k: (c1[k] - c0[k]) / (t1 - t0) for k in c0}
    return out


class Sampler:
    """Every `every` seconds, the SERIES summed over `urls` (a proxy that does not answer
    in time skips that sample)."""

    def __init__(self, urls: Sequence[str], every: float = 1.0) -> None:
        self.urls, self.every = list(urls), every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            t = time.time()
            try:
                total = {name: 0.0 for name in SERIES}
                for url in self.urls:
                    for k, v in counts(fetch(url)).items():
                        total[k] += v
                self.samples.append((t, total))
            except OSError:
                pass
            if self.stopping.wait(max(0.0, self.every - (time.time() - t))):
                return

    def __enter__(self) -> "Sampler":
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join()


def run(b: Bench, hot: int = 20_000, blip: float = 5.0, before: int = 10, after: int = 20) -> None:
    ensure_services()
    services, redis_port, moto_port = start_services(b, "blip-")
    proxies = []
    try:
        wait_services(redis_port, services[1])
        base = distributed_env(b, "blip", redis_port, moto_port, {"REBOUND_L1_CAPACITY": str(2 * hot)})
        with open(b.path("blip-provision.log"), "w") as f:
            subprocess.run([b.rebound, "provision"], env=base, stdout=f, stderr=subprocess.STDOUT, check=True)
        cp = new_control_plane(b, base)
        cp.start(b.path("blip-control-plane.log"))
        try:
            cp.wait_ready("/readyz", 120)
            table, took = b.import_links_unkeyed("blip", hot, cp.port)
        finally:
            cp.stop()
        log(f"blip: {len(table)} links imported in {took:.0f} s")
        requests = b.request_lists(table, 0.0, "blip", max(200_000, 5 * hot))
        proxies = [new_proxy(b, base, f"blip-proxy-{i}") for i in range(2)]
        for i, p in enumerate(proxies):
            p.start(b.path(f"blip-proxy-{i}.log"))
        for p in proxies:
            p.wait_ready("/readyz", 120)
        # Warm: every code into both L1s.
        for p in proxies:
            b.sweep(p.port, table, f"blip-{p.port}")
        urls = [f"http://127.0.0.1:{p.metrics_port}/metrics" for p in proxies]
        duration = before + int(blip) + after
        with Sampler(urls) as sampler:
            loads = [subprocess.Popen(wrk_command(f"http://127.0.0.1:{p.port}", [requests], duration, 16),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for p in proxies]
            started = time.time()
            time.sleep(before)
            frozen = time.time()
            os.kill(services[0].pid, signal.SIGSTOP)
            try:
                time.sleep(blip)
            finally:
                os.kill(services[0].pid, signal.SIGCONT)
            thawed = time.time()
            outs = [load.communicate(timeout=duration + 60)[0] for load in loads]
            time.sleep(1.5)
        for i, out in enumerate(outs):
            with open(b.path(f"wrk-blip-{i}.txt"), "w") as f:
                f.write(out)
        wrk_results = [parse_wrk(out) for out in outs]
        phases = {"before": (started + 1, frozen), "during": (frozen, thawed),
                  "first_5_s_after": (thawed, thawed + 5), "after": (thawed + 5, started + duration)}
        rates = phase_rates(sampler.samples, phases)
        series = [(round(t - frozen, 1), c) for t, c in sampler.samples]
        result: dict[str, Any] = {"hot_links": len(table), "blip_s": blip, "proxies": len(proxies),
                                  "rates": rates, "series": series,
                                  "non_2xx_3xx": sum(r["non_2xx_3xx"] for r in wrk_results),
                                  "p99_ms": max(r["p99_ms"] for r in wrk_results)}
        b.results["blip"] = result
        b.commands.append(f"2 x rebound proxy on redis-server and moto, {len(table)} links warm in both L1s; "
                          f"wrk -c 16 -d {duration}s on each (uniform over the links); kill -STOP redis-server "
                          f"after {before} s, kill -CONT {blip:.0f} s later; /metrics of both every second")
        for phase, r in rates.items():
            log(f"blip {phase}: {r['requests']:.0f} requests/s, L1 hits {r['l1_hits']:.0f}/s, "
                f"Redis reads {r['l2_reads']:.0f}/s, store reads {r['store_reads']:.0f}/s (both proxies)")
    finally:
        for p in proxies:
            p.stop()
        for svc in services:
            if svc.running():
                os.kill(svc.pid, signal.SIGCONT)
            svc.stop()
