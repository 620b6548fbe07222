"""One run of the suite: its options, its raw directory, the links, the servers it makes,
and the results and commands that go into the report."""

from __future__ import annotations

import datetime
import itertools
import json
import os
import random
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import servers
from .servers import Server
from .tools.wrk import wrk
from .util import ALPHABET, KEY, ROOT, free_port, log, run

Table = list[tuple[str, str]]  # (code, target)


@dataclass
class Options:
    """The command line (see cli.py)."""
    quick: bool = False
    links: int = 1_000_000
    runs: int = 5
    duration: int = 10
    connections: int = 64
    list_size: int = 1_000_000
    only: str | None = None
    redis_links: int = 20_000
    no_build: bool = False
    rebound_threads: int = 1
    rebound_env: list[str] = field(default_factory=list)
    cap: str = "2500/10000"
    no_cap: bool = False
    no_oha: bool = False
    out: str | None = None
    domains: int = 10_000
    rebound_bin: str | None = None
    compare_bin: str | None = None
    compare_env: list[str] = field(default_factory=list)
    servers: str | None = None
    user_agent: str | None = None
    referer: str | None = None
    accept_language: str | None = None
    workloads: str | None = None
    link_rules: int = 0


class Bench:
    def __init__(self, opts: Options, argv: Sequence[str] = (), raw: str | None = None) -> None:
        """`raw`: where the raw outputs go (benches/results/raw/<UTC time> by default)."""
        self.args = opts
        self.argv = list(argv)
        self.links = opts.links
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
        self.raw = raw or os.path.join(ROOT, "benches", "results", "raw", stamp)
        os.makedirs(self.raw, exist_ok=True)
        # --rebound-bin: another build of Rebound (the one before a change, say) for every
        # Rebound process of the run, its CLI's import included.
        self.rebound = os.path.abspath(opts.rebound_bin) if opts.rebound_bin else os.path.join(
            ROOT, "target", "release", "rebound")
        self.hyper = os.path.join(ROOT, "target", "release", "hyper-ref")
        self.results: dict[str, Any] = {}
        self.commands: list[str] = []
        self.oha = False  # set by cli.main once oha is found or installed

    def path(self, name: str) -> str:
        return os.path.join(self.raw, name)

    # -- set-up ------------------------------------------------------------------------

    def build(self) -> None:
        log("building release binaries (a cold build takes about 15 minutes)")
        run(["cargo", "build", "--release", "-p", "rebound", "-p", "hyper-ref"], cwd=ROOT)

    def rebound_base_env(self, settings: Mapping[str, str]) -> dict[str, str]:
        """The environment every Rebound process of the bench gets, with `settings` added and
        the --rebound-env experiments on top."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REBOUND_")}
        env.update({
            "REBOUND_BOOTSTRAP_KEY": KEY,
            "REBOUND_PUBLIC_BASE_URL": "https://sho.rt",
            "REBOUND_LOG": "warn",
            "REBOUND_REDIRECT_THREADS": str(self.args.rebound_threads),
        })
        env.update(settings)
        env.update(dict(kv.split("=", 1) for kv in self.args.rebound_env))
        return env

    def rebound_env(self, data_dir: str, redirect_port: int, api_port: int, metrics_port: int,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = self.rebound_base_env({
            "REBOUND_DATA_DIR": data_dir,
            "REBOUND_REDIRECT_ADDR": f"127.0.0.1:{redirect_port}",
            "REBOUND_API_ADDR": f"127.0.0.1:{api_port}",
            "REBOUND_METRICS_ADDR": f"127.0.0.1:{metrics_port}",
        })
        env.update(extra or {})
        return env

    def rebound_server(self, data_dir: str, wrapper: Sequence[str] = (),
                       extra: Mapping[str, str] | None = None, binary: str | None = None) -> Server:
        """Rebound's all-in-one on `data_dir`: this build, or `binary` (--compare-bin's)."""
        ports = (free_port(), free_port(), free_port())
        env = self.rebound_env(data_dir, *ports, extra=extra)
        return servers.rebound_all_in_one(binary or self.rebound, env, ports, wrapper)

    def import_links(self, name: str, count: int, api_port: int) -> tuple[Table, float]:
        """Imports `count` links with generated codes into the control plane on `api_port`
        through `rebound links import`; returns the (code, target) table and the seconds."""
        jsonl = self.path(f"{name}.jsonl")
        rules = self.args.link_rules
        with open(jsonl, "w") as f:
            for i in range(count):
                link: dict[str, Any] = {"long_url": f"https://example.com/page/{i}?ref=bench"}
                if rules:
                    link["rules"] = bench_rules(i)[:rules]
                f.write(json.dumps(link, separators=(",", ":")) + "\n")
        started = time.time()
        out = self.path(f"{name}.csv")
        env = dict(os.environ, REBOUND_API_URL=f"http://127.0.0.1:{api_port}", REBOUND_API_KEY=KEY)
        errors = self.path(f"{name}-import-errors.log")
        with open(out, "w") as f, open(errors, "w") as e:
            try:
                run([self.rebound, "links", "import", jsonl], stdout=f, env=env, stderr=e)
            except subprocess.CalledProcessError:
                with open(errors) as e2:
                    log(f"rebound links import {name}.jsonl failed: {e2.read()[-2000:]}")
                raise
        took = time.time() - started
        with open(out) as f:
            table = parse_import_csv(f.read())
        return table, took

    def import_links_unkeyed(self, name: str, count: int, api_port: int) -> tuple[Table, float]:
        """As import_links, but straight to the API without an idempotency key (one batch
        write per 1,000 links): moto's TransactWriteItems, which a keyed import makes per
        link, deep-copies the whole table each time, so keyed imports into moto slow down
        with the table and fail under concurrency."""
        started = time.time()
        table: Table = []
        for first in range(0, count, 1000):
            links = [{"long_url": f"https://example.com/page/{i}?ref=bench"}
                     for i in range(first, min(count, first + 1000))]
            req = urllib.request.Request(f"http://127.0.0.1:{api_port}/api/v1/links/import",
                                         data=json.dumps({"links": links}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {KEY}",
                                                  "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as res:
                answer = json.load(res)
            table += [(r["code"], r["long_url"]) for r in answer["results"] if "code" in r]
        if len(table) != count:
            raise RuntimeError(f"{name}: {count - len(table)} of {count} links not imported")
        return table, time.time() - started

    def load_links(self, data_dir: str, count: int, name: str) -> tuple[Table, float]:
        """Imports `count` links into the all-in-one on `data_dir`."""
        server = self.rebound_server(data_dir).start(self.path(f"{name}-import.log"))
        try:
            server.wait_ready("/readyz", 120)
            table, took = self.import_links(name, count, server.api_port)
        finally:
            server.stop()
        log(f"imported {len(table)} links in {took:.1f} s ({len(table) / took:.0f} links/s)")
        self.commands.append(f"rebound links import {name}.jsonl  # {count} links")
        return table, len(table) / took

    def write_tables(self, table: Table, name: str) -> Table:
        """nginx map and hyper-ref table of the same links; codes that collide when
        lower-cased (nginx map keys are case-insensitive) are left out of the requests."""
        lowered: dict[str, int] = {}
        for code, _ in table:
            lowered[code.lower()] = lowered.get(code.lower(), 0) + 1
        usable = [(c, t) for c, t in table if lowered[c.lower()] == 1]
        with open(self.path(f"{name}-nginx-map.conf"), "w") as f:
            for code, target in usable:
                f.write(f"/{code} {target};\n")
        with open(self.path(f"{name}-hyper-table.txt"), "w") as f:
            for code, target in usable:
                f.write(f"{code} {target}\n")
        return usable

    def nginx_server(self, name: str, tls: tuple[str, str] | None = None, map_name: str | None = None) -> Server:
        """nginx on the map of table `map_name` (`name` by default), its files in nginx-`name`."""
        return servers.nginx_server(self.path(f"nginx-{name}"), self.path(f"{map_name or name}-nginx-map.conf"),
                                    free_port(), tls)

    def hyper_server(self, name: str, wrapper: Sequence[str] = (), runtime: str | None = None) -> Server:
        return servers.hyper_server(self.hyper, self.path(f"{name}-hyper-table.txt"), free_port(), wrapper, runtime)

    def request_lists(self, usable: Table, unknown_share: float, name: str, size: int) -> str:
        rng = random.Random(20261130)
        codes = [c for c, _ in usable]
        known = set(codes)
        paths = []
        for _ in range(size):
            if rng.random() < unknown_share:
                while True:
                    u = "".join(rng.choice(ALPHABET) for _ in range(7))
                    if u not in known:
                        break
                paths.append("/" + u)
            else:
                paths.append("/" + rng.choice(codes))
        out = self.path(f"requests-{name}.txt")
        with open(out, "w") as f:
            f.write("\n".join(paths) + "\n")
        return out

    def zipf_list(self, usable: Table, size: int, name: str = "zipf") -> tuple[str, int]:
        rng = random.Random(7)
        codes = [c for c, _ in usable]
        rng.shuffle(codes)
        # Zipf with s = 1 over the table: weight of rank r is 1/r.
        weights = [1.0 / (r + 1) for r in range(len(codes))]
        picks = rng.choices(codes, weights=weights, k=size)
        out = self.path(f"requests-{name}.txt")
        with open(out, "w") as f:
            f.write("\n".join("/" + c for c in picks) + "\n")
        return out, len(set(picks))

    def sweep(self, server_port: int, usable: Table, name: str) -> None:
        """Requests every code once, to warm caches."""
        out = self.path(f"sweep-{name}.txt")
        with open(out, "w") as f:
            f.write("\n".join("/" + c for c, _ in usable) + "\n")
        duration = max(10, len(usable) // 20000)
        wrk(f"http://127.0.0.1:{server_port}", [out], duration, 32, self.path("wrk-warmup.txt"))


def parse_import_csv(text: str) -> Table:
    """`rebound links import`'s output: code,short URL,target a line -> (code, target)."""
    table = []
    for line in text.splitlines():
        code, _short, target = line.split(",", 2)
        table.append((code, target))
    return table


def first_paths(request_file: str, count: int) -> list[str]:
    """The first `count` paths of a request list (all of a shorter one)."""
    with open(request_file) as f:
        return [line.strip() for line in itertools.islice(f, count)]


def bench_rules(i: int) -> list[dict[str, Any]]:
    """The rules `--link-rules N` gives each link (the first N; docs/spec.md §14): a
    country rule, iOS, Android phones, two languages, then a 50/50 split. A desktop browser
    from loopback matches none but the split, with or without Accept-Language
    (`--accept-language`; Chrome's `en-US,en;q=0.9` matches neither language), so every
    rule is tried."""
    return [
        {"countries": ["US", "CA"], "target": f"https://example.com/us/{i}"},
        {"os": ["ios"], "target": f"https://example.com/ios/{i}"},
        {"os": ["android"], "devices": ["mobile"], "target": f"https://example.com/android/{i}"},
        {"languages": ["fr", "de"], "target": f"https://example.com/lang/{i}"},
        {"split": [{"target": f"https://example.com/a/{i}", "weight": 50},
                   {"target": f"https://example.com/b/{i}", "weight": 50}]},
    ]
