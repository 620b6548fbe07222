#!/usr/bin/env python3
"""How long a link's breakdown takes to show its clicks, on an idle or a busy machine.

One all-in-one on a fresh data directory; ROUNDS times: a new link, three clicks from a
browser, then its `stats?by=referrer` read every 0.3 s until it counts the three (at most
90 s). With --busy N, N busy loops (normal priority) run meanwhile: the click writes run at
the lowest CPU priority (SCHED_IDLE) and get only what they leave. Prints, per round, the
seconds until the breakdown counted them, and the click writes' seconds so far
(`rebound_click_write_seconds_total`).

    benches/breakdown-lag.py BIN [--rounds N] [--busy N] [NAME=VALUE ...]

NAME=VALUE: Rebound's environment, e.g. REBOUND_CLICK_MAX_HOLD_MS=5000.
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rebound_bench.tools.metrics import metric  # noqa: E402
from rebound_bench.util import free_port, http_status, wait_for  # noqa: E402

KEY = "breakdown-lag-operator-key-000000"
CHROME = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
          "Chrome/131.0.0.0 Safari/537.36")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument("env", nargs="*")
    args = parser.parse_intermixed_args()
    api, redirect, metrics = (f"127.0.0.1:{free_port()}" for _ in range(3))
    data = tempfile.mkdtemp(prefix="breakdown-lag.")
    env = {
        "PATH": os.environ["PATH"],
        "REBOUND_DATA_DIR": data,
        "REBOUND_API_ADDR": api,
        "REBOUND_REDIRECT_ADDR": redirect,
        "REBOUND_METRICS_ADDR": metrics,
        "REBOUND_PUBLIC_BASE_URL": f"http://{redirect}",
        "REBOUND_BOOTSTRAP_KEY": KEY,
        "REBOUND_LOG": "warn",
        **dict(kv.split("=", 1) for kv in args.env),
    }
    rebound = subprocess.Popen([args.binary], env=env, stdout=subprocess.DEVNULL)
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]

    def click(code):
        host, port = redirect.split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("GET", f"/{code}", headers={"User-Agent": CHROME})
        connection.getresponse().read()  # the 302, not followed
        connection.close()

    def call(method, path, body=None):
        request = urllib.request.Request(
            f"http://{api}{path}", method=method, data=json.dumps(body).encode() if body else None,
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=30).read())

    try:
        wait_for(lambda: http_status(f"http://{api}/api/v1/openapi.json") == 200, 60, "rebound's start")
        for round_ in range(args.rounds):
            code = f"lag{round_}"
            call("POST", "/api/v1/links", {"long_url": "https://example.com/x", "custom_alias": code})
            time.sleep(2)
            started = time.time()
            for _ in range(3):
                click(code)
            shown = None
            while time.time() - started < 90:
                body = call("GET", f"/api/v1/links/{code}/stats?by=referrer")
                if body.get("breakdown", {}).get("counted") == 3:
                    shown = time.time() - started
                    break
                time.sleep(0.3)
            lag = "not within 90 s" if shown is None else f"{shown:.1f} s"
            print(f"round {round_}: breakdown counted the 3 clicks after {lag}; "
                  f"click writes so far {metric(f'http://{metrics}/metrics', 'rebound_click_write_seconds_total'):.3f} s", flush=True)
    finally:
        for p in busy:
            p.kill()
        rebound.kill()
        rebound.wait()
        subprocess.run(["rm", "-rf", data], check=False)


if __name__ == "__main__":
    main()
