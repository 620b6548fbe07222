"""abuse: slow heads and clients that never read, against Rebound and nginx."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

from ..context import Bench, Table
from ..tools.proc import proc_rss_mib
from ..util import log


def run(b: Bench, data_dir: str, usable: Table) -> None:
    """How much RSS grows and how long until every abusive connection is let go."""
    long_target = max(usable, key=lambda ct: len(ct[1]))[0]
    out: dict[str, Any] = {}
    for name in ["rebound", "nginx"]:
        s = b.rebound_server(data_dir) if name == "rebound" else b.nginx_server("main")
        s.start(b.path(f"abuse-{name}.log"))
        socks = []
        try:
            s.wait_ready("/readyz" if name == "rebound" else "/", 300)
            before = proc_rss_mib(s.pids())
            started = time.time()
            pipelined = (f"GET /{long_target} HTTP/1.1\r\nHost: x\r\n\r\n" * 400).encode()
            for i in range(1000):
                c = socket.create_connection(("127.0.0.1", s.port))
                c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                c.setblocking(False)
                try:
                    c.send(b"GET /" + long_target.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: " if i % 2 else pipelined)
                except BlockingIOError:
                    pass
                socks.append(c)
            peak = before
            open_until = None
            deadline = started + 120
            while time.time() < deadline:
                peak = max(peak, proc_rss_mib(s.pids()))
                # The server's side of each connection, as the kernel sees it: closed once
                # it is no longer established (the client never reads, so it cannot tell).
                alive = len(subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{s.port} )"],
                                           capture_output=True, text=True).stdout.splitlines())
                if alive == 0:
                    open_until = time.time() - started
                    break
                time.sleep(1)
            out[name] = {"rss_before": before, "rss_peak": peak, "all_let_go_after_s": open_until}
            log(f"abuse {name}: RSS {before:.0f} -> {peak:.0f} MiB, all let go after {open_until} s")
        finally:
            for c in socks:
                c.close()
            s.stop()
    b.results["abuse"] = out
    b.commands.append("1,000 connections: 500 send half a head and stop, 500 pipeline 400 GETs for the longest "
                      "target with a 4 KiB receive buffer and never read; RSS sampled every second")
