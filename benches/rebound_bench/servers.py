"""The servers under test and the services beside them: started, probed, measured, stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import IO, Mapping, Sequence

from .tools import nginx, redis
from .tools.proc import children
from .util import http_status, wait_for


class Server:
    """A server under test: started, measured, stopped. `port` is the port it serves
    requests on; a Rebound all-in-one also has `api_port` and `metrics_port`."""

    def __init__(self, name: str, cmd: Sequence[str], port: int, env: Mapping[str, str] | None = None,
                 ready_url: str | None = None, cwd: str | None = None) -> None:
        self.name, self.cmd, self.port, self.env, self.cwd = name, list(cmd), port, env, cwd
        self.ready_url = ready_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.log: IO[str] | None = None
        self.api_port = 0
        self.metrics_port = 0

    def start(self, log_path: str) -> "Server":
        self.log = open(log_path, "w")
        self.started_at = time.time()
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def pids(self) -> list[int]:
        return [self.pid] + children(self.pid)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, probe_path: str, limit: float = 300) -> float:
        url = self.ready_url or f"http://127.0.0.1:{self.port}{probe_path}"
        want = 200 if self.ready_url else None

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                # Dead (a binary missing, a crash under valgrind): no use waiting out the limit.
                where = f" (its output: {self.log.name})" if self.log is not None else ""
                raise SystemExit(f"bench: {self.name} exited with {self.proc.returncode} before it was ready{where}")
            s = http_status(url, 1.0)
            return s is not None and (want is None or s == want)
        wait_for(ready, limit, f"{self.name} ready")
        return time.time() - self.started_at

    def terminate(self) -> None:
        """SIGTERM to its process group, without waiting (many told at once drain together)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def nginx_server(prefix: str, map_path: str, port: int, tls: tuple[str, str] | None = None) -> Server:
    """nginx in `prefix` (its config, pid and logs) on `port`, answering from the map at
    `map_path`; `listen ssl http2` with `tls` (certificate, key)."""
    os.makedirs(os.path.join(prefix, "logs"), exist_ok=True)
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(nginx.config(prefix, map_path, nginx.listen_directive(port, tls)))
    return Server("nginx", nginx.command(prefix, conf), port)


def hyper_server(binary: str, table: str, port: int, wrapper: Sequence[str] = (),
                 runtime: str | None = None) -> Server:
    """benches/hyper-ref on tokio's default runtime (a worker per core), or on one thread with
    runtime="current_thread"."""
    env = dict(os.environ, HYPER_REF_RUNTIME=runtime) if runtime else None
    return Server("hyper", list(wrapper) + [binary, table, f"127.0.0.1:{port}"], port, env=env)


def rebound_all_in_one(binary: str, env: Mapping[str, str], ports: tuple[int, int, int],
                       wrapper: Sequence[str] = ()) -> Server:
    """`rebound` (the all-in-one) on (redirect, API, metrics) ports; ready when /readyz is 200."""
    s = Server("rebound", list(wrapper) + [binary], ports[0], env=env,
               ready_url=f"http://127.0.0.1:{ports[2]}/readyz")
    s.api_port, s.metrics_port = ports[1], ports[2]
    return s


def rebound_role(name: str, binary: str, role: str, base: Mapping[str, str], port: int, metrics_port: int,
                 addr_var: str) -> Server:
    """`rebound proxy` or `rebound control-plane` on `port` (set through `addr_var`, e.g.
    REBOUND_REDIRECT_ADDR) with its metrics on `metrics_port`."""
    s = Server(name, [binary, role], port,
               env=dict(base, **{addr_var: f"127.0.0.1:{port}", "REBOUND_METRICS_ADDR": f"127.0.0.1:{metrics_port}"}),
               ready_url=f"http://127.0.0.1:{metrics_port}/readyz")
    s.metrics_port = metrics_port
    return s


def redis_server(port: int) -> Server:
    return Server("redis", redis.command(port), port)


def moto_server(port: int) -> Server:
    return Server("moto", ["moto_server", "-H", "127.0.0.1", "-p", str(port)], port)
