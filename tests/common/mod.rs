//! Starts the real `rebound` binary on port 0 and talks HTTP to it.
#![allow(dead_code)]

pub mod fleet;
pub mod history;
pub mod services;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const OPERATOR_KEY: &str = "blackbox-operator-key-0001";

/// A running `rebound` process and where it listens.
pub struct Running {
    child: Option<Child>,
    pub addrs: HashMap<String, String>,
    pub stdout_lines: Vec<String>,
    lines: mpsc::Receiver<String>,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rebound")
}

/// Starts `rebound <args>` with a data dir and the bootstrap key, every listener on port 0,
/// and waits until it has printed the addresses named in `wait_for` (e.g. "API").
pub fn start(args: &[&str], data_dir: &Path, extra_env: &[(&str, &str)], wait_for: &[&str]) -> Running {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REBOUND_DATA_DIR", data_dir)
        .env("REBOUND_API_ADDR", "127.0.0.1:0")
        .env("REBOUND_REDIRECT_ADDR", "127.0.0.1:0")
        .env("REBOUND_METRICS_ADDR", "127.0.0.1:0")
        .env("REBOUND_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if !extra_env.iter().any(|(k, _)| *k == "REBOUND_BOOTSTRAP_KEY") {
        cmd.env("REBOUND_BOOTSTRAP_KEY", OPERATOR_KEY);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start rebound");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut running = Running {
        child: Some(child),
        addrs: HashMap::new(),
        stdout_lines: Vec::new(),
        lines: rx,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !wait_for.iter().all(|w| running.addrs.contains_key(*w)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match running.lines.recv_timeout(left) {
            Ok(line) => running.take_line(line),
            Err(_) => panic!(
                "rebound did not print its addresses {wait_for:?}; saw {:?}",
                running.stdout_lines
            ),
        }
    }
    running
}

impl Running {
    fn take_line(&mut self, line: String) {
        // "rebound: API listening on 127.0.0.1:1234"
        if let Some(rest) = line.strip_prefix("rebound: ") {
            if let Some((what, addr)) = rest.split_once(" listening on ") {
                self.addrs.insert(what.to_owned(), addr.trim().to_owned());
            }
        }
        self.stdout_lines.push(line);
    }

    pub fn api(&self) -> String {
        format!("http://{}", self.addrs["API"])
    }

    pub fn addr(&self, what: &str) -> String {
        format!("http://{}", self.addrs[what])
    }

    /// Waits until the process has printed where `what` listens (e.g. a port bound late).
    pub fn wait_for_addr(&mut self, what: &str, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while !self.addrs.contains_key(what) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.take_line(line),
                Err(_) => panic!("rebound did not print its {what} address; saw {:?}", self.stdout_lines),
            }
        }
    }

    /// Waits for the process to exit by itself, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("rebound did not exit within {limit:?} (of SIGTERM, or by itself)");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.pid();
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        self.wait_exit(Duration::from_secs(30))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

pub fn data_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().to_path_buf()
}

/// An HTTP client that never follows redirects.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Creates a link through the process's API with the operator key; returns the answer.
pub async fn create_link(p: &Running, body: serde_json::Value) -> serde_json::Value {
    let res = http()
        .post(format!("{}/api/v1/links", p.api()))
        .bearer_auth(OPERATOR_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    res.json().await.unwrap()
}

/// The value of one series on a process's `/metrics` (0 when absent).
pub async fn metric(p: &Running, name: &str) -> f64 {
    let text = http()
        .get(format!("{}/metrics", p.addr("metrics")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

/// Waits until the process's `/readyz` answers 200.
pub async fn wait_ready(p: &Running) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(res) = http().get(format!("{}/readyz", p.addr("metrics"))).send().await {
            if res.status() == reqwest::StatusCode::OK {
                return;
            }
        }
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 7-character base62 strings from a seeded generator: codes nobody issued, spread over the
/// whole code space as a prober's would be.
pub fn random_codes(n: usize, mut seed: u64) -> Vec<String> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..n)
        .map(|_| {
            (0..7)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ALPHABET[((seed >> 33) % 62) as usize] as char
                })
                .collect()
        })
        .collect()
}
