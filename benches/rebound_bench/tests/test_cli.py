"""The command line stays the one docs/benchmarks.md and the results name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rebound_bench.cli import SCENARIOS, options
from rebound_bench.context import Bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_quick_only() -> None:
    o = options(["--no-build", "--quick", "--only", "side,tls"])
    assert (o.no_build, o.quick, o.only) == (True, True, "side,tls")
    assert (o.links, o.runs, o.duration, o.list_size, o.redis_links) == (100_000, 3, 5, 200_000, 5_000)


def test_defaults(tmp_path: object) -> None:
    o = options([])
    assert (o.links, o.runs, o.duration, o.connections, o.list_size, o.redis_links) == (
        1_000_000, 5, 10, 64, 1_000_000, 20_000)
    assert (o.rebound_threads, o.rebound_env, o.only, o.no_build) == (1, [], None, False)
    assert (o.cap, o.no_cap, o.no_oha, o.out) == ("2500/10000", False, False, None)
    assert (o.domains, o.rebound_bin, o.servers, o.user_agent) == (10_000, None, None, None)
    assert Bench(o, raw=str(tmp_path)).rebound == os.path.join(ROOT, "target", "release", "rebound")


def test_another_rebound_binary_and_domains(tmp_path: object) -> None:
    o = options(["--no-build", "--quick", "--only", "callgrind", "--rebound-bin", "/work/rebound-before",
                 "--domains", "500"])
    assert (o.rebound_bin, o.domains, o.only) == ("/work/rebound-before", 500, "callgrind")
    # Every Rebound process of the run, and its CLI's import, run that binary.
    assert Bench(o, raw=str(tmp_path)).rebound == "/work/rebound-before"


def test_every_option() -> None:
    o = options(["--links", "5000", "--runs", "2", "--duration", "3", "--connections", "16", "--list-size", "900",
                 "--redis-links", "70", "--rebound-threads", "0", "--rebound-env", "A=1", "--rebound-env", "B=2",
                 "--cap", "2500/10000", "--no-oha", "--out", "/tmp/x.md", "--servers", "rebound",
                 "--user-agent", "Mozilla/5.0 (X11)", "--compare-env", "REBOUND_BREAKDOWNS=none"])
    assert (o.links, o.runs, o.duration, o.connections, o.list_size, o.redis_links, o.rebound_threads) == (
        5000, 2, 3, 16, 900, 70, 0)
    assert (o.rebound_env, o.cap, o.no_oha, o.out) == (["A=1", "B=2"], "2500/10000", True, "/tmp/x.md")
    assert (o.servers, o.user_agent) == ("rebound", "Mozilla/5.0 (X11)")
    # The compared process alone gets it; without --compare-bin it runs the run's own binary.
    assert (o.compare_env, o.compare_bin) == (["REBOUND_BREAKDOWNS=none"], None)


def test_a_setting_without_its_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ["--rebound-env", "--compare-env"]:
        for bad in ["REBOUND_BREAKDOWNS", "=none"]:
            with pytest.raises(SystemExit) as refused:
                options([flag, bad])
            assert refused.value.code == 2
            assert f"{flag} '{bad}': expected NAME=VALUE" in capsys.readouterr().err


def test_scripts_bench_help() -> None:
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench"), "--help"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1")).stdout
    assert out.startswith("usage: scripts/bench")
    for scenario in SCENARIOS.split(","):
        assert scenario in out
    for flag in ["--no-build", "--quick", "--only", "--cap", "--no-oha", "--rebound-bin", "--domains", "--servers",
                 "--user-agent", "--compare-env"]:
        assert flag in out
