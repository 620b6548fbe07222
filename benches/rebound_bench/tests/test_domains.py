"""The domains scenario's helpers: certificates as the store keeps them, /etc/hosts put back
as it was, the metrics it reads, and its figures."""

from __future__ import annotations

import os
import sqlite3

import pytest

from rebound_bench.scenarios import domains
from rebound_bench.tools import certs, metrics
from rebound_bench.tools.hosts import BEGIN, END, HostsEntries, with_block, without_block
from rebound_bench.tools.oha import oha_command

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


# -- certificates ----------------------------------------------------------------------------


def test_a_certificate_per_domain_with_a_key_of_its_own(tmp_path: object) -> None:
    pytest.importorskip("cryptography")
    made, how = certs.domain_certificates(["a.bench.example", "b.bench.example"], days=90)
    assert how == "Python cryptography"
    assert [c.domain for c in made] == ["a.bench.example", "b.bench.example"]
    assert made[0].key_pem != made[1].key_pem
    for c in made:
        assert c.chain_pem.startswith("-----BEGIN CERTIFICATE-----")
        assert c.key_pem.startswith("-----BEGIN PRIVATE KEY-----")
        # The hash a handshake's certificate is compared with: of the PEM's DER.
        assert certs.pem_der_sha256(c.chain_pem) == c.der_sha256
        # Whole seconds, in milliseconds, as the issuer stores notAfter; about 90 days on.
        assert c.not_after_ms % 1000 == 0
    from cryptography import x509
    leaf = x509.load_pem_x509_certificate(made[0].chain_pem.encode())
    assert int(leaf.not_valid_after_utc.timestamp()) * 1000 == made[0].not_after_ms
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days == 90
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["a.bench.example"]


def test_the_certificates_table_as_the_issuer_writes_it(tmp_path: object) -> None:
    pytest.importorskip("cryptography")
    data_dir = str(tmp_path)
    db = sqlite3.connect(os.path.join(data_dir, "rebound.db"))
    # adapters/sqlite/src/schema.rs
    db.execute("CREATE TABLE certificates (domain TEXT PRIMARY KEY, chain_pem TEXT NOT NULL, "
               "key_pem TEXT NOT NULL, not_after INTEGER NOT NULL) WITHOUT ROWID")
    db.commit()
    made, _ = certs.domain_certificates(["a.bench.example", "b.bench.example"])
    assert certs.store_certificates(data_dir, made) == 2
    # Written again: replaced, not added.
    assert certs.store_certificates(data_dir, made[:1]) == 1
    rows = db.execute("SELECT domain, chain_pem, key_pem, not_after FROM certificates ORDER BY domain").fetchall()
    assert rows == [(c.domain, c.chain_pem, c.key_pem, c.not_after_ms) for c in made]
    db.close()


def test_openssl_enddate() -> None:
    assert certs.parse_openssl_enddate("notAfter=Mar  5 10:00:00 2027 GMT\n") == 1804240800000
    assert certs.parse_openssl_enddate("notAfter=Dec 15 23:59:59 2026 GMT") == 1797379199000


# -- /etc/hosts ------------------------------------------------------------------------------


ORIGINAL = "127.0.0.1 localhost\n127.0.0.1 runsc\n127.0.0.1 vm\n"


def test_a_block_added_and_taken_away() -> None:
    added = with_block(ORIGINAL, ["a.bench.example", "b.bench.example"])
    assert added == ORIGINAL + f"{BEGIN}\n127.0.0.1 a.bench.example\n127.0.0.1 b.bench.example\n{END}\n"
    assert without_block(added) == ORIGINAL
    assert without_block(ORIGINAL) == ORIGINAL
    # A file without a final newline, and a block left by a killed run: one block only.
    assert with_block("127.0.0.1 localhost", ["x.example"]) == f"127.0.0.1 localhost\n{BEGIN}\n127.0.0.1 x.example\n{END}\n"
    assert with_block(added, ["c.example"]).count(BEGIN) == 1
    # Lines after a block are kept.
    assert without_block(added + "10.0.0.1 later\n") == ORIGINAL + "10.0.0.1 later\n"


def test_the_hosts_file_is_put_back_as_it_was(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "hosts")
    with open(path, "w") as f:
        f.write(ORIGINAL)
    with pytest.raises(RuntimeError):
        with HostsEntries(["a.bench.example"], path):
            with open(path) as f:
                assert "127.0.0.1 a.bench.example\n" in f.read()
            raise RuntimeError("a run that fails")
    with open(path) as f:
        assert f.read() == ORIGINAL
    # A block a killed run left is not put back.
    with open(path, "w") as f:
        f.write(with_block(ORIGINAL, ["old.example"]))
    with HostsEntries(["a.bench.example"], path):
        pass
    with open(path) as f:
        assert f.read() == ORIGINAL


# -- metrics and commands ----------------------------------------------------------------------


def test_per_domain_series_and_sums() -> None:
    text = fixture("metrics-acme.txt")
    assert metrics.parse_series_count(text, domains.EXPIRY) == 4
    assert metrics.parse_metric(text, domains.ROUTED) == 3
    counters = domains.acme_counters(text)
    assert counters == {"issued": 0, "renewed": 0, "failed": 0}
    full = metrics.parse_metric_sum(text, "rebound_edge_tls_handshakes_total", {"outcome": "full"})
    resumed = metrics.parse_metric_sum(text, "rebound_edge_tls_handshakes_total", {"outcome": "resumed"})
    assert (full, resumed) == (3, 1)
    assert metrics.parse_metric_sum(text, "rebound_edge_tls_handshakes_total", {"outcome": "failed"}) == 0
    # Neither a _bucket of a histogram nor a longer name counts as the series.
    assert metrics.parse_series_count("a_bucket{le=\"1\"} 1\na_total 2\na{x=\"y\"} 3\n", "a") == 1
    assert metrics.parse_labels('domain="d1.bench.example",kind="x"') == {"domain": "d1.bench.example", "kind": "x"}


def test_oha_connect_to() -> None:
    cmd = oha_command("urls.txt", 5, 16, keepalive=False, cpus="1", connect_to=["a.example:1:127.0.0.1:1"])
    assert cmd[:3] == ["taskset", "-c", "1"]
    assert cmd[-4:] == ["--connect-to", "a.example:1:127.0.0.1:1", "--urls-from-file", "urls.txt"]
    assert "--disable-keepalive" in cmd


def test_add_figures_and_names() -> None:
    f = domains.add_figures([0.001] * 98 + [0.010, 0.020])
    assert f["seconds"] == pytest.approx(0.128)
    assert f["per_s"] == pytest.approx(100 / 0.128)
    assert f["p50_ms"] == pytest.approx(1.0) and f["p99_ms"] == pytest.approx(20.0) and f["max_ms"] == pytest.approx(20.0)
    names = domains.domain_names(10_000)
    assert names[0] == "d00001.bench.example" and names[-1] == "d10000.bench.example" and len(set(names)) == 10_000
