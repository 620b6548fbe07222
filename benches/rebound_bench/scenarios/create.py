"""create: creation through the API with generated codes (links/s)."""

from __future__ import annotations

import os

from ..context import Bench
from ..tools.wrk import wrk
from ..util import CREATE, KEY, log, summary


def run(b: Bench) -> None:
    data_dir = b.path("data-create")
    s = b.rebound_server(data_dir).start(b.path("create.log"))
    try:
        s.wait_ready("/readyz", 120)
        env = dict(os.environ, REBOUND_API_KEY=KEY)
        runs = []
        for i in range(3):
            r = wrk(f"http://127.0.0.1:{s.api_port}", [], b.args.duration, 32, b.path("wrk-create.txt"),
                    script=CREATE, env=env)
            if r["non_2xx_3xx"]:
                log(f"create: {r['non_2xx_3xx']} answers were not 201")
            runs.append(r["rps"])
        b.results["create"] = {"links_per_s": summary(runs)}
        b.commands.append(f"wrk -t 1 -c 32 -d {b.args.duration}s -s benches/wrk/create.lua API_URL  # x3")
    finally:
        s.stop()
