"""Certificates for many domains, as ACME would have stored them: one self-signed ECDSA P-256
certificate per domain, each with a key of its own, and the rows of Rebound's SQLite
`certificates` table (there is no API to upload a certificate: only the issuer writes it).

Made with Python's `cryptography` where it is installed (10,000 in about 4 s), with one
`openssl req` per domain otherwise (about a minute)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..util import log, run


@dataclass(frozen=True)
class DomainCert:
    domain: str
    chain_pem: str
    key_pem: str
    not_after_ms: int
    # SHA-256 of the certificate's DER: which certificate a handshake was answered with.
    der_sha256: str


def pem_der_sha256(pem: str) -> str:
    """SHA-256 (hex) of the DER of the first certificate of a PEM text."""
    body = pem.split("-----BEGIN CERTIFICATE-----", 1)[1].split("-----END CERTIFICATE-----", 1)[0]
    return hashlib.sha256(base64.b64decode("".join(body.split()))).hexdigest()


def _with_cryptography(domains: Sequence[str], days: int) -> list[DomainCert] | None:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return None
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    not_after = now + datetime.timedelta(days=days)
    out = []
    for domain in domains:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
                .sign(key, hashes.SHA256()))
        chain = cert.public_bytes(serialization.Encoding.PEM).decode()
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        out.append(DomainCert(domain, chain, key_pem, int(not_after.timestamp()) * 1000,
                              hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()))
    return out


def _with_openssl(domains: Sequence[str], days: int) -> list[DomainCert]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        for domain in domains:
            run(["openssl", "req", "-x509", "-nodes", "-days", str(days), "-subj", f"/CN={domain}",
                 "-addext", f"subjectAltName=DNS:{domain}", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-keyout", key_path, "-out", cert_path],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(cert_path) as c, open(key_path) as k:
                chain, key_pem = c.read(), k.read()
            end = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", cert_path], capture_output=True,
                                 text=True, check=True).stdout
            out.append(DomainCert(domain, chain, key_pem, parse_openssl_enddate(end), pem_der_sha256(chain)))
    return out


def parse_openssl_enddate(text: str) -> int:
    """`openssl x509 -noout -enddate`'s `notAfter=Mar  5 10:00:00 2027 GMT` in Unix milliseconds."""
    value = text.strip().split("=", 1)[1]
    when = datetime.datetime.strptime(" ".join(value.split()), "%b %d %H:%M:%S %Y %Z")
    return int(when.replace(tzinfo=datetime.timezone.utc).timestamp()) * 1000


def domain_certificates(domains: Sequence[str], days: int = 90) -> tuple[list[DomainCert], str]:
    """A self-signed ECDSA P-256 certificate valid `days` for each domain, each with its own
    key; and how they were made."""
    made = _with_cryptography(domains, days)
    if made is not None:
        return made, "Python cryptography"
    log("Python's cryptography is not installed: one openssl req per domain (about a minute for 10,000)")
    return _with_openssl(domains, days), "openssl req, one per domain"


def store_certificates(data_dir: str, certs: Iterable[DomainCert]) -> int:
    """Writes the certificates into the `certificates` table of the data directory's
    rebound.db, as the ACME issuer stores them (`not_after` in Unix milliseconds). The
    process using the directory must be stopped. Returns the rows written."""
    rows = [(c.domain, c.chain_pem, c.key_pem, c.not_after_ms) for c in certs]
    db = sqlite3.connect(os.path.join(data_dir, "rebound.db"), timeout=30)
    try:
        with db:
            db.executemany("INSERT INTO certificates (domain, chain_pem, key_pem, not_after) VALUES (?, ?, ?, ?) "
                           "ON CONFLICT (domain) DO UPDATE SET chain_pem = excluded.chain_pem, "
                           "key_pem = excluded.key_pem, not_after = excluded.not_after", rows)
    finally:
        db.close()
    return len(rows)
