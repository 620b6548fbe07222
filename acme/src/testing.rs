//! A real ACME server for tests (feature `test-util`): Debian's `pebble`, with
//! `pebble-challtestsrv` as its DNS (every name resolves to 127.0.0.1), both started on free
//! loopback ports and killed when the [`Pebble`] is dropped; and the TLS client pieces to
//! reach what it serves and what it issued.

use crate::{ChallengeKind, IssuerConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A port free on loopback now (the servers this test runs itself keep their listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// pebble and its DNS, with what a client needs to trust it.
pub struct Pebble {
    pub directory_url: String,
    pub management: SocketAddr,
    /// The CA of pebble's own HTTPS certificate (the ACME API and the management API).
    pub https_ca_pem: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
    _children: Vec<Child>,
}

impl Pebble {
    /// Starts pebble validating HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port`, its
    /// certificates valid for `validity` seconds.
    pub async fn start(http_port: u16, tls_port: u16, validity: Option<u64>) -> Pebble {
        let dir = tempfile::tempdir().unwrap();
        // pebble's HTTPS certificate, from a CA of this test's own.
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "pebble test HTTPS CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let ca = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();

        let (listen, management, dns, dns_management) = (free_port(), free_port(), free_port(), free_port());
        let mut config = serde_json::json!({
            "pebble": {
                "listenAddress": format!("127.0.0.1:{listen}"),
                "managementListenAddress": format!("127.0.0.1:{management}"),
                "certificate": dir.path().join("cert.pem"),
                "privateKey": dir.path().join("key.pem"),
                "httpPort": http_port,
                "tlsPort": tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false
            }
        });
        if let Some(validity) = validity {
            config["pebble"]["certificateValidityPeriod"] = validity.into();
        }
        let config_path = dir.path().join("pebble-config.json");
        std::fs::write(&config_path, config.to_string()).unwrap();

        let challtestsrv = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns}")])
            .args(["-management", &format!("127.0.0.1:{dns_management}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("pebble-challtestsrv (Debian's pebble package)");
        let log = dir.path().join("pebble.log");
        let out = std::fs::File::create(&log).unwrap();
        let pebble = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_AUTHZREUSE", "0")
            // Every nonce good: a retried request would count as a second order.
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("pebble (Debian's pebble package)");
        let pebble = Pebble {
            directory_url: format!("https://127.0.0.1:{listen}/dir"),
            management: ([127, 0, 0, 1], management).into(),
            https_ca_pem: ca_cert.pem(),
            log,
            _dir: dir,
            _children: vec![challtestsrv, pebble],
        };
        for port in [listen, management, dns_management] {
            wait_listening(port).await;
        }
        pebble
    }

    pub fn config(&self, owner: &str, prefer: ChallengeKind) -> IssuerConfig {
        let mut config = IssuerConfig::new(&self.directory_url, owner);
        config.acme_roots_pem = Some(self.https_ca_pem.clone());
        config.prefer = prefer;
        config.order_timeout = Duration::from_secs(60);
        config.poll_first = Duration::from_millis(100);
        config.poll_max = Duration::from_secs(1);
        config
    }

    /// The orders pebble received (its log line for each new-order request).
    pub fn orders(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .filter(|l| l.contains("/order-plz"))
            .count()
    }

    /// pebble's issuing root, from its management API.
    pub async fn issuing_root(&self) -> CertificateDer<'static> {
        let body = https_get(self.management, &self.https_ca_pem, "/roots/0").await;
        CertificateDer::from_pem_slice(body.as_bytes()).expect("a root certificate")
    }
}

/// Waits (bounded) until something listens on `port`.
pub async fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "nothing listens on port {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn client_config(roots: &[CertificateDer<'static>], alpn: &[&[u8]]) -> rustls::ClientConfig {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// The body of `GET path` over HTTPS from `addr`, trusting `ca_pem`.
pub async fn https_get(addr: SocketAddr, ca_pem: &str, path: &str) -> String {
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&[ca], &[b"http/1.1"])));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    tls.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}
