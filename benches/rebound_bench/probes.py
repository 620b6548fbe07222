"""Rebound's own figures over a stretch of a scenario, read from its metrics and API."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from types import TracebackType
from typing import Any, Literal

from .tools.metrics import fetch, metric, parse_metric
from .util import KEY, Summary, summary


class ClickWatch:
    """Rebound's click persistence over a stretch of a scenario: rollup rows and batches
    written per second, the share of a core spent writing, the largest persistence lag
    seen (sampled every `every` seconds) and the clicks dropped."""

    COUNTERS = ["rebound_click_rows_written_total", "rebound_click_batches_written_total",
                "rebound_click_write_seconds_total", "rebound_clicks_dropped_total"]

    def __init__(self, metrics_url: str, every: float = 1.0) -> None:
        self.url = metrics_url
        self.every = every
        self.max_lag = 0.0
        self.stopping = threading.Event()
        self.before: list[float] = []
        self.started = 0.0
        self.thread: threading.Thread | None = None
        self.result: dict[str, Any] = {}

    def _sample(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                self.max_lag = max(self.max_lag, metric(self.url, "rebound_click_persist_lag_seconds"))
            except OSError:
                pass

    def __enter__(self) -> "ClickWatch":
        page = fetch(self.url)
        self.before = [parse_metric(page, n) for n in self.COUNTERS]
        self.started = time.time()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        took = time.time() - self.started
        # One scrape at each end: under callgrind each costs the server millions of
        # instructions.
        page = fetch(self.url)
        rows, batches, seconds, dropped = (a - b for a, b in zip([parse_metric(page, n) for n in self.COUNTERS],
                                                                 self.before))
        self.result = {"seconds": took, "rows_per_s": rows / took, "batches_per_s": batches / took,
                       "write_share": seconds / took, "max_lag_s": self.max_lag, "dropped": dropped,
                       "pending_codes_at_end": parse_metric(page, "rebound_click_pending_codes")}
        return False


class StatsFreshness:
    """While a load runs, clicks one code a few times every two seconds and measures how
    long the API's stats take to show those clicks (the all-in-one's stats add what is
    still pending, so this should be about one API round trip)."""

    def __init__(self, redirect_port: int, api_port: int, code: str) -> None:
        self.redirect, self.api, self.code = redirect_port, api_port, code
        self.delays: list[float] = []
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.result: Summary | None = None

    def total(self) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{self.api}/api/v1/links/{self.code}/stats",
                                     headers={"Authorization": f"Bearer {KEY}"})
        total: int = json.loads(urllib.request.urlopen(req, timeout=10).read())["total"]
        return total

    def click(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.redirect, timeout=10)
        conn.request("GET", "/" + self.code)
        conn.getresponse().read()
        conn.close()

    def _probe(self) -> None:
        while not self.stopping.wait(2.0):
            try:
                before = self.total()
                for _ in range(3):
                    self.click()
                clicked = time.time()
                while self.total() < before + 3 and time.time() - clicked < 60:
                    time.sleep(0.05)
                self.delays.append(time.time() - clicked)
            except OSError:
                pass

    def __enter__(self) -> "StatsFreshness":
        self.thread = threading.Thread(target=self._probe, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        self.result = summary(self.delays) if self.delays else None
        return False


def delete_codes(api_port: int, codes: list[str], proxies: list[http.client.HTTPConnection]) -> tuple[list[float], int]:
    """DELETEs each code through the control plane on `api_port` and asks every proxy for
    it right after the answer: the sorted delete times (ms) and how many answers were still
    redirects. Every code is asked of every proxy first, to warm them."""
    def status(conn: http.client.HTTPConnection, code: str) -> int:
        conn.request("GET", "/" + code)
        res = conn.getresponse()
        res.read()
        return res.status

    for code in codes:
        for conn in proxies:
            status(conn, code)
    api = http.client.HTTPConnection("127.0.0.1", api_port, timeout=30)
    took: list[float] = []
    redirected = 0
    for code in codes:
        started = time.perf_counter()
        api.request("DELETE", f"/api/v1/links/{code}", headers={"Authorization": f"Bearer {KEY}"})
        res = api.getresponse()
        res.read()
        took.append((time.perf_counter() - started) * 1000)
        if res.status != 204:
            raise RuntimeError(f"DELETE /{code}: {res.status}")
        redirected += sum(status(conn, code) != 404 for conn in proxies)
    took.sort()
    return took, redirected
