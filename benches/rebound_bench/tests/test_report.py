"""The report: the package renders a run's results exactly as scripts/bench did before it
became a package (fixtures/report-*.md were written by the old script's report(), from the
results beside them), and renders the new rows."""

from __future__ import annotations

import json
import os

from rebound_bench import report
from rebound_bench.cli import options
from rebound_bench.context import Bench

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def normalized(text: str) -> list[str]:
    """The report without what depends on the day and the machine it is rendered on."""
    return [line for line in text.splitlines() if not line.startswith(("# Rebound bench, ", "Machine: "))]


def bench_from(md: str, results: dict[str, object], raw: str) -> Bench:
    """A run like the one that wrote `md`: its command line and commands from the report's
    Commands block, its results."""
    block = md.split("## Commands\n\n```\n", 1)[1].split("\n```", 1)[0].splitlines()
    argv = block[0].split()[1:]
    b = Bench(options(argv), argv, raw=raw)
    b.results = results
    b.commands = block[1:]
    return b


def check_same(name: str, raw: str) -> str:
    md = fixture(f"{name}.md")
    text = report.render(bench_from(md, json.loads(fixture(f"{name}.results.json")), raw))
    assert normalized(text) == normalized(md)
    return text


def test_side_run_as_before(tmp_path: object) -> None:
    """A real `scripts/bench --no-build --quick --only side` of the old script."""
    check_same("report-side", str(tmp_path))


def test_every_section_as_before(tmp_path: object) -> None:
    """Every section: the side and tls results of real runs, the others' figures from the
    2026-12 reports (fixtures/README.md)."""
    text = check_same("report-all", str(tmp_path))
    assert sum(line.startswith("## ") for line in text.splitlines()) == 18


def test_new_rows(tmp_path: object) -> None:
    """A real `--only side,tls` run of the package: oha's rows and the capped rows beside
    the rows of before, which keep their titles and columns."""
    results = json.loads(fixture("report-new.results.json"))
    b = Bench(options(["--no-build", "--quick", "--only", "side,tls"]), [], raw=str(tmp_path))
    b.results = results
    text = report.render(b)
    lines = text.splitlines()
    assert "## Random codes, warm L1, oha (HTTP/1.1 keep-alive)" in lines
    cores = results["tls_capped"]["cores"]
    start = lines.index("## TLS: the same ECDSA P-256 certificate, Rebound's TLS port and nginx `listen ssl http2`")
    table = lines[start + 4:lines.index("", start + 4)]
    assert all(line.count(" | ") == 6 for line in table)
    assert [line.split(" | ")[0][2:] for line in table] == [
        "HTTPS keep-alive req/s (wrk)",
        f"HTTPS keep-alive req/s (wrk), each server capped to {cores:.2f} core",
        "HTTPS keep-alive req/s (oha)",
        "HTTP/2 req/s (h2load, -m 10)",
        "HTTP/2 req/s (oha --http2, -p 10)",
        "TLS handshakes/s (wrk, Connection: close, 16 connections)",
        f"TLS handshakes/s (wrk, Connection: close, 16 connections), each server capped to {cores:.2f} core",
        "TLS connections/s (oha --disable-keepalive, 16 connections)",
    ]
    capped = [line for line in lines if line.startswith(("| HTTPS keep-alive (wrk) |", "| TLS handshakes (wrk,"))]
    assert len(capped) == 4 and all(line.count(" % |") == 3 for line in capped)
    # This run's caps had no cpu.shares (the later ones have).
    assert "cpu.shares" not in text
    results["tls_capped"]["shares"] = 262144
    assert "`cpu.shares` 262144" in report.render(b)
    # Without the new results, the TLS table is the one of before: three rows.
    for key in ["https_oha", "h2_oha", "handshakes_oha", "https_capped", "handshakes_capped"]:
        for name in ["rebound", "nginx"]:
            del results["tls"][f"{key}:{name}"], results["tls_per_cpu_s"][f"{key}:{name}"]
    del results["tls_capped"], results["warm_oha"]
    text = report.render(b)
    assert "oha" not in text and "capped" not in text


def test_side_capped_rows(tmp_path: object) -> None:
    """The side scenario's capped runs: a table under each scenario's, a row per server, the
    ratios against nginx's and hyper's capped medians; none without them."""
    results = json.loads(fixture("report-new.results.json"))
    b = Bench(options(["--no-build", "--quick", "--only", "side"]), [], raw=str(tmp_path))
    b.results = results
    assert "capped" not in report.render(b).split("## TLS")[0]

    def s(median: float) -> dict[str, float]:
        return {"median": median, "min": median * 0.9, "max": median * 1.1}
    for scenario, rps in [("warm", {"rebound": 30_000.0, "nginx": 25_000.0, "hyper": 24_000.0}),
                          ("unknown", {"rebound": 27_000.0, "nginx": 30_000.0, "hyper": 20_000.0})]:
        results[f"{scenario}_capped"] = {
            name: {"rps": s(v), "server_core_share": s(0.25), "client_core_share": s(0.31),
                   "throttled_share": s(0.93)} for name, v in rps.items()}
    results["side_capped"] = {"quota_us": 2500, "period_us": 10000, "cores": 0.25, "shares": 262144}
    lines = report.render(b).splitlines()
    rows = [line for line in lines if line.startswith(("| rebound | 30,000", "| rebound | 27,000"))]
    assert rows == ["| rebound | 30,000 (27,000-33,000) | 1.20x | 1.25x | 25 % | 31 % | 93 % |",
                    "| rebound | 27,000 (24,300-29,700) | 0.90x | 1.35x | 25 % | 31 % | 93 % |"]
    warm = lines.index("## Random codes, warm L1")
    assert lines.index(rows[0]) < lines.index("## 10 % unknown codes") < lines.index(rows[1])
    assert warm < lines.index("| server, capped | req/s | vs nginx | vs hyper | server's share of a core | "
                              "wrk's share of a core | periods throttled |")


def test_idle_rows(tmp_path: object) -> None:
    """The idle scenario's table: a row per process and binary, in that order."""
    row = {"cpu_s_per_min": 0.01234, "wakeups_per_min": 1234.0}
    b = Bench(options(["--no-build", "--only", "idle", "--compare-bin", "/old/rebound"]), [], raw=str(tmp_path))
    b.results = {"idle": {"seconds": 60, "binaries": {"this": "/new/rebound", "compared": "/old/rebound"},
                          **{f"{role}:{label}": row for role in ("all-in-one", "control-plane", "proxy")
                             for label in ("this", "compared")}}}
    lines = report.render(b).splitlines()
    start = lines.index("## Idle: no traffic, 60 s per process")
    table = lines[start + 4:lines.index("", start + 4)]
    assert table[0] == "| all-in-one | this (`/new/rebound`) | 0.0123 | 1,234 |"
    assert [line.split(" | ")[0][2:] for line in table] == [
        "all-in-one", "all-in-one", "control-plane", "control-plane", "proxy", "proxy"]


def test_a_process_cost_counts_every_thread(tmp_path: object) -> None:
    """The idle scenario's reading of /proc: CPU time and sleeps of this process's threads."""
    import threading
    import time

    from rebound_bench.scenarios.idle import process_cost

    ns0, sw0 = process_cost(os.getpid())
    slept, release = threading.Event(), threading.Event()

    def sleeper() -> None:
        for _ in range(20):
            time.sleep(0.001)
        slept.set()
        release.wait()

    thread = threading.Thread(target=sleeper)
    thread.start()
    sum(i * i for i in range(200_000))
    slept.wait()
    ns1, sw1 = process_cost(os.getpid())
    release.set()
    thread.join()
    assert ns1 > ns0
    assert sw1 - sw0 >= 10, "each sleep of the thread is a voluntary switch"
