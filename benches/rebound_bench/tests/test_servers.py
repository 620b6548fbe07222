"""A server the bench starts is waited for only while it runs."""

from __future__ import annotations

import os

import pytest

from rebound_bench.servers import Server
from rebound_bench.util import free_port


def test_a_server_that_exits_is_reported_at_once_not_after_the_limit(tmp_path: object) -> None:
    log = os.path.join(str(tmp_path), "dead.log")
    s = Server("dead", ["sh", "-c", "echo no such binary; exit 3"], free_port()).start(log)
    # Waiting out the limit would end in "dead ready did not happen within 30 s" instead.
    with pytest.raises(SystemExit) as exited:
        s.wait_ready("/", 30)
    assert "dead exited with 3 before it was ready" in str(exited.value)
    assert log in str(exited.value)
