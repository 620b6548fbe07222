"""nginx, the reference server: a `return 301` from a `map` of the same links."""

from __future__ import annotations

import shutil


def nginx_bin() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def listen_directive(port: int, tls: tuple[str, str] | None = None) -> str:
    """The `listen` lines: cleartext, or `ssl http2` with the certificate and key."""
    if tls:
        return (f"listen 127.0.0.1:{port} ssl http2 reuseport backlog=4096;\n"
                f"        ssl_certificate {tls[0]};\n        ssl_certificate_key {tls[1]};\n"
                f"        ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_session_cache shared:SSL:10m;")
    return f"listen 127.0.0.1:{port} reuseport backlog=4096;"


def config(prefix: str, map_path: str, listen: str) -> str:
    """One worker, no access log, the links' map; 404 for a code not in it."""
    return f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    map_hash_max_size 4194304;
    map_hash_bucket_size 256;
    map $uri $target {{
        default "";
        include {map_path};
    }}
    server {{
        {listen}
        keepalive_requests 1000000;
        location / {{
            if ($target = "") {{ return 404; }}
            return 301 $target;
        }}
    }}
}}
"""


def command(prefix: str, conf: str, directives: str = "daemon off;") -> list[str]:
    return [nginx_bin(), "-p", prefix, "-c", conf, "-g", directives]
