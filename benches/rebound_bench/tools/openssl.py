"""openssl: the benches' certificate, and what a server negotiates with an OpenSSL client."""

from __future__ import annotations

import re
import subprocess

from ..util import run


def self_signed(cert: str, key: str) -> None:
    """An ECDSA P-256 certificate for localhost and 127.0.0.1, valid two days."""
    run(["openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-newkey", "ec",
         "-pkeyopt", "ec_paramgen_curve:prime256v1", "-keyout", key, "-out", cert],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def parse_negotiated(text: str) -> str:
    """"TLSv1.3 TLS_AES_128_GCM_SHA256" from `openssl s_client` output, or "unknown"."""
    found = re.search(r"(New|Reused), (TLSv[\d.]+), Cipher is (\S+)", text)
    return f"{found.group(2)} {found.group(3)}" if found else "unknown"


def negotiated(port: int) -> str:
    hello = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}"], input=b"",
                           capture_output=True, timeout=30).stdout.decode(errors="replace")
    return parse_negotiated(hello)
