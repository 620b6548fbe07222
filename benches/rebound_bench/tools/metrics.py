"""Prometheus' text format, as Rebound's /metrics serves it: one sample, one histogram."""

from __future__ import annotations

import urllib.request
from typing import Mapping


def fetch(url: str) -> str:
    text: str = urllib.request.urlopen(url, timeout=5).read().decode()
    return text


def parse_metric(text: str, name: str) -> float:
    """The value of the sample `name` (with its labels, exactly as written: `a{b="c"}`),
    0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def parse_labels(text: str) -> dict[str, str]:
    """`a="x",b="y"` (the inside of a sample's braces) as a dict; values without escapes,
    as Rebound's are."""
    out = {}
    for part in text.split('",'):
        if "=" in part:
            key, value = part.split("=", 1)
            out[key.strip()] = value.strip().strip('"')
    return out


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of the series `name` (exactly that name, not its `_bucket`s): labels
    and value."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") and "} " in line:
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            out.append((parse_labels(labels), float(value)))
        elif line.startswith(name + " "):
            out.append(({}, float(line.rsplit(" ", 1)[1])))
    return out


def parse_series_count(text: str, name: str) -> int:
    """How many series `name` has (one per label set: the domains of a per-domain gauge)."""
    return len(samples(text, name))


def parse_metric_sum(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sum of the samples of `name` whose labels include `labels` (all of them without)."""
    want = dict(labels or {})
    return sum(v for got, v in samples(text, name) if all(got.get(k) == x for k, x in want.items()))


def parse_histogram_quantile(text: str, name: str, q: float, labels: str = "") -> tuple[float, float]:
    """The upper bound of the first bucket of histogram `name` holding quantile `q`, and
    the count (Prometheus' `le` buckets); with `labels` (e.g. `operation="get_link"`), only
    the series whose labels contain it (one series: the buckets of several would add up)."""
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith(name + "_bucket{") and labels in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    for bound, count in buckets:
        if total and count >= q * total:
            return bound, total
    return float("nan"), total


def metric(url: str, name: str) -> float:
    return parse_metric(fetch(url), name)


def histogram_quantile(url: str, name: str, q: float, labels: str = "") -> tuple[float, float]:
    return parse_histogram_quantile(fetch(url), name, q, labels)
