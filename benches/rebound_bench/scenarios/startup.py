"""startup: start to ready with the whole table and with 1,000 links; nginx's first answer."""

from __future__ import annotations

from ..context import Bench
from ..util import summary


def run(b: Bench, data_dir: str) -> None:
    def ready_times(directory: str, name: str) -> list[float]:
        times = []
        for i in range(3):
            s = b.rebound_server(directory).start(b.path(f"startup-{name}-{i}.log"))
            try:
                times.append(s.wait_ready("/readyz", 300))
            finally:
                s.stop()
        return times
    # Start-up must not grow with the generated links (the filter reads the counter and
    # the alias index, never the links): the same start on a table of 1,000.
    small_dir = b.path("data-startup-small")
    b.load_links(small_dir, 1_000, "startup-small")
    small, times = ready_times(small_dir, "small"), ready_times(data_dir, "main")
    n = b.nginx_server("main").start(b.path("nginx-startup.log"))
    try:
        nginx_time = n.wait_ready("/", 300)
    finally:
        n.stop()
    b.results["startup"] = {"rebound": summary(times), "rebound_1000": summary(small), "nginx": nginx_time}
