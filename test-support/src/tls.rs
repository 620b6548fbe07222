//! TLS for the black-box tests: self-signed certificates, the settings of a TLS redirect
//! port on port 0, and a client that trusts one certificate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Writes a self-signed certificate for `localhost` and 127.0.0.1 (`kind`: `ec` or `rsa`).
pub fn self_signed(dir: &Path, name: &str, kind: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    let newkey: &[&str] = match kind {
        "ec" => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        _ => &["-newkey", "rsa:2048"],
    };
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "2", "-subj"])
        .arg(format!("/CN={name}"))
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        // An end entity that is its own trust anchor: webpki refuses a CA as the server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(newkey)
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (cert, key)
}

/// The settings of a TLS redirect port on port 0 serving `cert` and `key`.
pub fn tls_env<'a>(cert: &'a Path, key: &'a Path) -> [(&'static str, &'a str); 3] {
    [
        ("REBOUND_TLS_ADDR", "127.0.0.1:0"),
        ("REBOUND_TLS_CERT", cert.to_str().unwrap()),
        ("REBOUND_TLS_KEY", key.to_str().unwrap()),
    ]
}

/// A TLS client configuration that trusts only `cert` (a self-signed end entity).
pub fn trusting(cert: &Path) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(cert).expect("certificate"))
        .unwrap();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
