"""zipf: Zipf-distributed codes from a cold start (store reads/s, single-flight)."""

from __future__ import annotations

from ..context import Bench, Table
from ..probes import ClickWatch, StatsFreshness
from ..tools.metrics import metric
from ..tools.wrk import wrk


def run(b: Bench, data_dir: str, usable: Table) -> None:
    request_file, distinct = b.zipf_list(usable, b.args.list_size)
    s = b.rebound_server(data_dir).start(b.path("zipf.log"))
    try:
        s.wait_ready("/readyz", 300)
        url = f"http://127.0.0.1:{s.metrics_port}/metrics"
        names = ['rebound_lookups_total{result="read",tier="store"}', "rebound_singleflight_waits_total",
                 'rebound_lookups_total{result="miss",tier="l1"}']
        before = [metric(url, n) for n in names]
        with ClickWatch(url) as clicks, StatsFreshness(s.port, s.api_port, usable[0][0]) as fresh:
            r = wrk(f"http://127.0.0.1:{s.port}", [request_file], b.args.duration, b.args.connections,
                    b.path("wrk-zipf.txt"))
        clicks.result["stats_freshness_s"] = fresh.result
        b.results.setdefault("click_persistence", {})["zipf"] = clicks.result
        after = [metric(url, n) for n in names]
        reads, waits, misses = (x - y for x, y in zip(after, before))
        b.results["zipf"] = {"rps": r["rps"], "p99_ms": r["p99_ms"], "requests": r["requests"],
                             "store_reads": reads, "store_reads_per_s": reads / b.args.duration,
                             "singleflight_waits": waits, "l1_misses": misses,
                             "distinct_codes_in_list": distinct}
    finally:
        s.stop()
