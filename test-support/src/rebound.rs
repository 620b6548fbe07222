//! One all-in-one `rebound` on port 0 with its every port, and the calls the black-box
//! tests make to it; and raw exchanges of bytes with a port, for what an HTTP client would
//! not send.

use crate::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;

/// The ports an all-in-one opens.
pub const ALL_PORTS: &[&str] = &["redirect", "API", "metrics"];

/// An all-in-one process and a client for it.
pub struct Rebound {
    pub run: Running,
    pub http: reqwest::Client,
}

impl From<Running> for Rebound {
    /// A client for an all-in-one started otherwise (other settings, other ports).
    fn from(run: Running) -> Rebound {
        Rebound { run, http: http() }
    }
}

impl Rebound {
    /// Starts the all-in-one with `env` on a data directory in `dir`, every port on port 0.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Rebound {
        Rebound::from(start(&[], dir, env, ALL_PORTS))
    }

    /// Starts the all-in-one with a TLS listener too (a self-signed ECDSA certificate made
    /// in `dir`) and `public_base_url`, every port on port 0; and the certificate, for a
    /// client to trust.
    pub fn start_tls(dir: &Path, public_base_url: &str) -> (Rebound, PathBuf) {
        let (cert, key) = self_signed(dir, "edge", "ec");
        let mut env = tls_env(&cert, &key).to_vec();
        env.push(("REBOUND_PUBLIC_BASE_URL", public_base_url));
        let run = start(
            &[],
            &dir.join("data"),
            &env,
            &["redirect", "redirect TLS", "API", "metrics"],
        );
        (Rebound::from(run), cert)
    }

    /// The redirect port's address (`host:port`).
    pub fn redirect(&self) -> String {
        self.run.addrs["redirect"].clone()
    }

    pub fn redirect_url(&self, path: &str) -> String {
        format!("{}{}", self.run.addr("redirect"), path)
    }

    pub async fn create(&self, body: Value) -> Value {
        create_link(&self.run, body).await
    }

    /// Creates a link; returns its code.
    pub async fn create_code(&self, body: Value) -> String {
        fleet::create(&self.run, body).await
    }

    /// An API call as the operator: the status and the JSON body (null when none).
    pub async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        fleet::api(&self.run, method, path, body).await
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.redirect_url(path)).send().await.unwrap()
    }

    pub async fn metric(&self, name: &str) -> f64 {
        metric(&self.run, name).await
    }

    pub async fn wait_ready(&self) {
        wait_ready(&self.run).await
    }

    /// The total clicks the stats report for `code`.
    pub async fn clicks(&self, code: &str) -> u64 {
        fleet::clicks(&self.run, code).await
    }

    /// Connections the edge refused on `port` for `reason`.
    pub async fn refusals(&self, port: &str, reason: &str) -> f64 {
        let series = format!(r#"rebound_edge_refusals_total{{port="{port}",reason="{reason}"}}"#);
        metric(&self.run, &series).await
    }

    pub async fn open_connections(&self, port: &str) -> f64 {
        metric(&self.run, &format!(r#"rebound_edge_open_connections{{port="{port}"}}"#)).await
    }
}

/// How a raw exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The server closed the connection cleanly (FIN).
    Closed,
    /// The server reset the connection.
    Reset,
    /// Still open when we stopped waiting.
    Open,
}

/// Sends `request` on a new connection and reads until the server closes it or `wait`
/// passes without data.
pub fn exchange(addr: &str, request: &[u8], wait: Duration) -> (String, End) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    // The server may refuse before reading everything: a failed write is part of the story.
    let _ = s.write_all(request);
    read_answer(&mut s)
}

/// Reads `s` until the server closes it or its read timeout passes without data: what
/// came, and how the connection ended.
pub fn read_answer(s: &mut std::net::TcpStream) -> (String, End) {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let end = loop {
        match s.read(&mut buf) {
            Ok(0) => break End::Closed,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break End::Reset,
            Err(_) => break End::Open,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), end)
}

/// Sends `head` on a new connection one byte every 100 ms, as a slow client would; returns
/// how many bytes went out before the server cut the connection (`usize::MAX`: never cut).
pub fn trickle(addr: &str, head: &[u8]) -> usize {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    for (i, b) in head.iter().enumerate() {
        if s.write_all(&[*b]).is_err() {
            return i;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    usize::MAX
}
