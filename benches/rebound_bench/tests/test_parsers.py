"""The suite's parsers on real outputs saved in fixtures/ (capture_fixtures.py made them)."""

from __future__ import annotations

import math
import os

import pytest

from rebound_bench.context import parse_import_csv
from rebound_bench.tools import callgrind, cgroup, metrics, openssl, proc, redis
from rebound_bench.tools.h2load import parse_h2load
from rebound_bench.tools.oha import oha_command, parse_oha_json
from rebound_bench.tools.wrk import parse_latency, parse_wrk, wrk_command

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


# -- wrk -----------------------------------------------------------------------------------


def test_wrk_keepalive_with_unknown_codes() -> None:
    r = parse_wrk(fixture("wrk-unknown.txt"))
    assert r == {"rps": 87755.62, "requests": 175895, "p99_ms": 2.35, "non_2xx_3xx": 17155, "socket_errors": ""}


def test_wrk_https() -> None:
    r = parse_wrk(fixture("wrk-https.txt"))
    assert (r["rps"], r["requests"], r["p99_ms"], r["non_2xx_3xx"]) == (39248.00, 83179, 18.07, 0)


def test_wrk_handshakes() -> None:
    r = parse_wrk(fixture("wrk-handshakes.txt"))
    assert (r["rps"], r["requests"], r["p99_ms"]) == (806.60, 1621, 77.39)


def test_wrk_socket_errors_and_units() -> None:
    # The lines wrk adds when connections fail (not in the captured runs).
    text = fixture("wrk-handshakes.txt").replace(
        "Requests/sec:", "  Socket errors: connect 0, read 12, write 0, timeout 3\nRequests/sec:")
    assert parse_wrk(text)["socket_errors"] == "connect 0, read 12, write 0, timeout 3"
    assert parse_latency("343.00us") == pytest.approx(0.343)
    assert parse_latency("2.35ms") == 2.35
    assert parse_latency("1.20s") == 1200.0
    with pytest.raises(ValueError):
        parse_latency("fast")


def test_wrk_not_a_report() -> None:
    with pytest.raises(ValueError):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_wrk_command() -> None:
    assert wrk_command("https://127.0.0.1:1", ["list.txt"], 5, 16, headers=["Connection: close"], cpus="1",
                       script="replay.lua") == [
        "taskset", "-c", "1", "wrk", "-H", "Connection: close", "-t", "1", "-c", "16", "-d", "5s", "--latency",
        "-s", "replay.lua", "https://127.0.0.1:1", "--", "list.txt"]


# -- oha -----------------------------------------------------------------------------------


def test_oha_keepalive_with_unknown_codes() -> None:
    r = parse_oha_json(fixture("oha-unknown.json"))
    assert r["requests"] == 85516 + 9163
    assert r["non_2xx_3xx"] == 9163
    assert r["errors"] == 0 and r["aborted_at_deadline"] == 64
    assert r["rps"] == pytest.approx((85516 + 9163) / 2.004309285)
    assert r["p99_ms"] == pytest.approx(4.310666)


def test_oha_https_h2_and_connections() -> None:
    https, h2, conns = (parse_oha_json(fixture(f"oha-{n}.json")) for n in ["https", "h2", "handshakes"])
    assert (https["requests"], h2["requests"], conns["requests"]) == (92619, 112020, 4165)
    assert https["non_2xx_3xx"] == h2["non_2xx_3xx"] == conns["non_2xx_3xx"] == 0
    assert (https["aborted_at_deadline"], h2["aborted_at_deadline"], conns["aborted_at_deadline"]) == (64, 627, 16)
    for r in (https, h2, conns):
        assert r["rps"] > 0 and not math.isnan(r["p99_ms"])


def test_oha_errors_apart_from_the_deadline() -> None:
    text = fixture("oha-https.json").replace('"aborted due to deadline": 64',
                                             '"aborted due to deadline": 64, "connection reset": 3')
    r = parse_oha_json(text)
    assert (r["errors"], r["aborted_at_deadline"]) == (3, 64)


def test_oha_command() -> None:
    cmd = oha_command("urls.txt", 5, 16, keepalive=False, cpus="1")
    assert cmd[:3] == ["taskset", "-c", "1"]
    assert cmd[-2:] == ["--urls-from-file", "urls.txt"]
    # Never follow a redirect (the targets are not on this machine), JSON, one worker thread.
    for flag in [["--redirect", "0"], ["--output-format", "json"], ["--worker-threads", "1"], ["-z", "5s"]]:
        i = cmd.index(flag[0])
        assert cmd[i:i + 2] == flag
    assert "--disable-keepalive" in cmd
    h2 = oha_command("urls.txt", 5, 64, http2=True, streams=10)
    assert h2[h2.index("--http2"):h2.index("--http2") + 3] == ["--http2", "-p", "10"]


# -- h2load --------------------------------------------------------------------------------


def test_h2load() -> None:
    assert parse_h2load(fixture("h2load.txt")) == {"rps": 40043.00, "done": 80086}
    with pytest.raises(ValueError):
        parse_h2load("no protocol was negotiated\n")


# -- callgrind -----------------------------------------------------------------------------


def test_callgrind_dump_total() -> None:
    # The header's summary and the closing totals: the larger.
    assert callgrind.parse_total(fixture("callgrind-dump.txt").splitlines()) == 173910588


def test_callgrind_annotate_request_path() -> None:
    # A build from before the PROXY protocol names the task `serve`, a later one `serve_guarded`.
    before = fixture("callgrind-annotate.txt")
    assert callgrind.request_path(before) == 155069403
    after = before.replace("Edge::serve::{{closure}}", "Edge::serve_guarded::{{closure}}")
    assert after != before and callgrind.request_path(after) == 155069403
    assert callgrind.parse_annotate_inclusive(before, "no::such::function") == 0
    # A function that ran nothing in the stretch (the click writes of an 8 s one).
    idle = "          .           tokio-1.54.1/src/runtime/blocking/pool.rs:tokio::runtime::blocking::pool::Inner::run [x]\n"
    assert callgrind.parse_annotate_inclusive(before + idle, "blocking::pool::Inner::run [") == 0


def test_callgrind_dump_files(tmp_path: object) -> None:
    d = str(tmp_path)
    for name in ["k.out.rebound.1234", "k.out.rebound.1234.1", "k.out.rebound.99.1", "k.out.nginx.5.1"]:
        with open(os.path.join(d, name), "w") as f:
            f.write(fixture("callgrind-dump.txt"))
    assert callgrind.dump_files(d, "k.out.rebound.") == ["k.out.rebound.1234.1", "k.out.rebound.99.1"]
    assert callgrind.dumps_total(d, "k.out.rebound.") == (173910588, ["k.out.rebound.1234.1", "k.out.rebound.99.1"])


# -- /proc and perf ------------------------------------------------------------------------


def test_proc_pid_stat() -> None:
    assert proc.parse_stat_cpu(fixture("proc-stat-pid.txt")) == (186, 190)
    # A command name with spaces and brackets: fields are counted after the last ")".
    assert proc.parse_stat_cpu("7 (a) b (c)) S 1 7 7 0 -1 0 0 0 0 0 11 12 0 0") == (11, 12)


def test_proc_status() -> None:
    assert proc.parse_voluntary_switches(fixture("proc-task-status.txt")) == 22
    assert proc.parse_voluntary_switches(fixture("proc-status.txt")) == 5
    assert proc.parse_vmrss_kib(fixture("proc-status.txt")) == 36100
    assert proc.parse_vmrss_kib("Name:\tzombie\nState:\tZ (zombie)\n") == 0


def test_proc_net() -> None:
    assert proc.parse_snmp_table(fixture("proc-net-snmp.txt"), "Tcp:")["OutSegs"] == 70945826
    assert proc.parse_snmp_table(fixture("proc-net-netstat.txt"), "IpExt:")["OutOctets"] == 12629857342


def test_proc_stat_steal() -> None:
    # cpu  768412 194967 240111 936011 6239 0 28490 899 0 0
    assert proc.parse_cpu_ticks(fixture("proc-stat.txt")) == (899, 768412 + 194967 + 240111 + 936011 + 6239 + 28490 + 899)


def test_perf_stat_syscalls() -> None:
    assert proc.parse_perf_stat(fixture("perf-stat.txt")) == {
        "all": 124665, "receive": 59620, "send": 294 + 59492, "wait": 4968}
    # perf without the tracepoints (no permission, no tracefs).
    assert proc.parse_perf_stat("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n") is None


# -- the CPU cap ---------------------------------------------------------------------------


def test_cgroup_cpu_stat() -> None:
    st = cgroup.parse_cpu_stat(fixture("cgroup-cpu-stat.txt"))
    assert st["nr_periods"] == 202 and st["nr_throttled"] == 0 and st["throttled_time"] == 0


def test_cgroup_of_a_capped_process() -> None:
    assert cgroup.parse_cpu_cgroup(fixture("proc-cgroup-capped.txt")) == "/rebound-bench-fixture"
    assert cgroup.parse_cpu_cgroup("3:cpu,cpuacct:/user.slice\n") == "/user.slice"
    assert cgroup.parse_cpu_cgroup("0::/\n") == "/"


def test_cap_option() -> None:
    assert cgroup.parse_cap("5000/10000") == (5000, 10000)
    assert cgroup.parse_cap("50000") == (50000, 100000)
    for bad in ["0/10000", "-1/10000", "half"]:
        with pytest.raises(ValueError):
            cgroup.parse_cap(bad)


# -- Redis, Prometheus, openssl, the import ------------------------------------------------


def test_redis_info() -> None:
    assert redis.parse_info(fixture("redis-info.txt")) == {
        "commands": 1, "bytes_sent": 7, "cpu_s": pytest.approx(0.015076 + 0.014375)}


def test_prometheus_samples() -> None:
    text = fixture("metrics.txt")
    assert metrics.parse_metric(text, "rebound_click_pending_codes") == 1000
    assert metrics.parse_metric(text, "rebound_click_rows_written_total") == 7471
    assert metrics.parse_metric(text, 'rebound_lookups_total{result="error",tier="store"}') == 0
    assert metrics.parse_metric(text, "no_such_metric") == 0.0


def test_prometheus_histogram() -> None:
    text = fixture("metrics.txt")
    name = "rebound_redirect_lookup_duration_seconds"
    buckets = [(line.split('le="')[1].split('"')[0], float(line.rsplit(" ", 1)[1]))
               for line in text.splitlines() if line.startswith(name + "_bucket{")]
    total = buckets[-1][1]
    assert total > 0
    bound, count = metrics.parse_histogram_quantile(text, name, 0.99)
    assert count == total
    # The first bucket holding 99 % of the count.
    first = next(float(le) for le, c in buckets if c >= 0.99 * total)
    assert bound == first
    nan, zero = metrics.parse_histogram_quantile(text, "no_such_histogram", 0.5)
    assert math.isnan(nan) and zero == 0.0


def test_prometheus_histogram_of_one_series() -> None:
    text = fixture("metrics.txt")
    name = "rebound_adapter_call_duration_seconds"
    # get_link: 614 <= 0.5 ms, 694 <= 1 ms, 914 <= 2.5 ms, all 1,000 <= 5 ms.
    assert metrics.parse_histogram_quantile(text, name, 0.5, 'operation="get_link"') == (0.0005, 1000)
    assert metrics.parse_histogram_quantile(text, name, 0.9, 'operation="get_link"') == (0.0025, 1000)
    assert metrics.parse_histogram_quantile(text, name, 0.99, 'operation="get_link"') == (0.005, 1000)


def test_openssl_negotiated() -> None:
    assert openssl.parse_negotiated(fixture("s_client-rebound.txt")) == "TLSv1.3 TLS_AES_128_GCM_SHA256"
    assert openssl.parse_negotiated(fixture("s_client-nginx.txt")) == "TLSv1.3 TLS_AES_256_GCM_SHA384"
    assert openssl.parse_negotiated("connect: Connection refused\n") == "unknown"


def test_links_import_csv() -> None:
    table = parse_import_csv(fixture("links-import.csv"))
    assert table[0] == ("4rRFtx3", "https://example.com/page/0?ref=bench")
    assert len(table) == 5


# -- the blip scenario's samples -----------------------------------------------------------


def test_blip_counts_sum_each_series_over_its_labels() -> None:
    from rebound_bench.scenarios.blip import counts
    c = counts(fixture("metrics.txt"))
    assert c["l1_hits"] == 391838
    assert c["store_reads"] == 1000
    assert c["l2_reads"] == 0  # error, hit, miss and unconfirmed, all 0 in this scrape
    assert c["requests"] > 0


def test_blip_phase_rates_span_the_samples_inside_each_phase() -> None:
    from rebound_bench.scenarios.blip import phase_rates
    samples = [(float(t), {"store_reads": 10.0 * t * t}) for t in range(10)]
    rates = phase_rates(samples, {"a": (1, 3), "b": (3.5, 9), "empty": (20, 30)})
    assert rates["a"] == {"store_reads": (90 - 10) / 2}
    assert rates["b"] == {"store_reads": (810 - 160) / 5}
    assert "empty" not in rates


def test_callgrind_parts_are_read_off_the_annotated_dump() -> None:
    # callgrind_annotate --inclusive=yes of the release build's low-rate run, 2026-12-06,
    # cut to the lines the parts name.
    parts = callgrind.parts(fixture("callgrind-annotate-parts.txt"))
    assert list(parts) == [name for name, _ in callgrind.PARTS]
    # The dump is of a run without breakdowns and without rules: the parts only such runs
    # have read 0 in it.
    only_some_runs = {"- - - the click's capture (the bot verdict, the breakdowns)",
                      "- - - - a link's rules: the target chosen (older trees: and the answer built)"}
    assert only_some_runs <= set(parts)
    assert all(n > 0 for name, n in parts.items() if name not in only_some_runs), parts
    assert all(parts[name] == 0 for name in only_some_runs), parts
    path = parts["request path: each connection's task"]
    assert path == 832186038
    inside = [n for name, n in parts.items() if name.startswith("- ")]
    assert all(n < path for n in inside)
    assert parts["- - the redirect service"] < parts["- the edge's Host check with the service inside it"]
