//! Memory that must not grow with traffic: every port, in clear and over TLS, serves many
//! short connections and gives back what each one took (docs/spec.md §7).
use rebound_test_support as common;

use common::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections served per port after the warm-up.
const CONNECTIONS: usize = 30_000;
/// Connections before the first reading: the allocator's and the runtime's first growth.
const WARM_UP: usize = 2_000;
/// Clients at once.
const CLIENTS: usize = 16;
/// What a port may keep after `CONNECTIONS` connections: a few MiB of allocator and
/// metric noise, where a leak of 100 bytes a connection would show as 3 MiB.
const ALLOWED_GROWTH_KIB: u64 = 2 * 1024;

/// The process's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// What one short connection does.
#[derive(Clone, Copy)]
enum Visit {
    /// One request with `Connection: close`, read to the end.
    Request,
    /// Connects and closes without sending a byte.
    Silent,
}

/// One connection, cleartext or TLS; every twentieth sends nothing.
async fn visit(
    addr: &str,
    tls: Option<&(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
    visit: Visit,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let request = b"GET /nosuchcode HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut answer = Vec::with_capacity(1024);
    match (tls, visit) {
        (_, Visit::Silent) => drop(tcp),
        (None, Visit::Request) => {
            let mut tcp = tcp;
            tcp.write_all(request).await.expect("send");
            tcp.read_to_end(&mut answer).await.expect("read");
            assert!(answer.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&answer));
        }
        (Some((connector, name)), Visit::Request) => {
            let mut tls = connector.connect(name.clone(), tcp).await.expect("TLS handshake");
            tls.write_all(request).await.expect("send");
            // The server may close without a close_notify once it has answered.
            let _ = tls.read_to_end(&mut answer).await;
            assert!(answer.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&answer));
        }
    }
}

/// `n` connections to `addr` from `CLIENTS` clients at once.
async fn connections(
    addr: &str,
    tls: Option<Arc<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>>,
    n: usize,
) {
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (addr, tls) = (addr.to_owned(), tls.clone());
        clients.spawn(async move {
            for i in (c..n).step_by(CLIENTS) {
                let how = if i % 20 == 0 { Visit::Silent } else { Visit::Request };
                visit(&addr, tls.as_deref(), how).await;
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.expect("client");
    }
}

/// A TLS client that trusts `cert` and makes a full handshake every time.
fn tls_client(cert: &Path) -> (tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>) {
    let mut config = trusting(cert);
    config.resumption = rustls::client::Resumption::disabled();
    (
        tokio_rustls::TlsConnector::from(Arc::new(config)),
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_connections_on_every_port_in_clear_and_over_tls_leave_memory_where_it_was() {
    let dir = temp_dir();
    let (cert, key) = self_signed(dir.path(), "localhost", "ec");
    let settings = [
        ("REBOUND_REDIRECT_THREADS", "1"),
        // Freed pages go back to the system at once, so that RSS shows what is still
        // allocated rather than what the allocator keeps for later.
        ("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0"),
    ];
    let run = start(
        &[],
        &dir.path().join("data"),
        &[&tls_env(&cert, &key)[..], &settings].concat(),
        &["redirect", "redirect TLS", "API", "metrics"],
    );
    wait_ready(&run).await;
    let tls = Arc::new(tls_client(&cert));
    let mut grew = Vec::new();
    for (port, tls) in [
        ("redirect", None),
        ("redirect TLS", Some(tls.clone())),
        ("API", None),
        ("metrics", None),
    ] {
        let addr = run.addrs[port].clone();
        connections(&addr, tls.clone(), WARM_UP).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_kib(run.pid());
        connections(&addr, tls, CONNECTIONS).await;
        // Lingering closes and the last tasks end; nothing waits on a timer longer.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib(run.pid());
        eprintln!("{port}: RSS {before} KiB before {CONNECTIONS} connections, {after} KiB after");
        grew.push((port, before, after));
    }
    for (port, before, after) in grew {
        assert!(
            after <= before + ALLOWED_GROWTH_KIB,
            "{port}: RSS grew by {} KiB over {CONNECTIONS} short connections ({before} -> {after} KiB)",
            after.saturating_sub(before)
        );
    }
}
