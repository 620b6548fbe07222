//! Starts the real `rebound` binary on port 0 and talks HTTP to it.
#![allow(dead_code)]

pub mod fleet;
pub mod history;
pub mod rebound;
pub mod services;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub const OPERATOR_KEY: &str = "blackbox-operator-key-0001";

/// A running `rebound` process and where it listens.
pub struct Running {
    child: Option<Child>,
    pub addrs: HashMap<String, String>,
    pub stdout_lines: Vec<String>,
    lines: mpsc::Receiver<String>,
    /// What the process wrote to stderr (its log), also passed on to the test's stderr.
    stderr_lines: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
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
        .stderr(Stdio::piped());
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
    let stderr = child.stderr.take().unwrap();
    let stderr_lines = Arc::new(Mutex::new(Vec::new()));
    let kept = stderr_lines.clone();
    let stderr_reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            kept.lock().unwrap().push(line);
        }
    });
    let mut running = Running {
        child: Some(child),
        addrs: HashMap::new(),
        stdout_lines: Vec::new(),
        lines: rx,
        stderr_lines,
        stderr_reader: Some(stderr_reader),
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

    /// What the process logged (its stderr) so far; every line of it once it has exited.
    pub fn log(&mut self) -> Vec<String> {
        if self.child.is_none() {
            if let Some(reader) = self.stderr_reader.take() {
                let _ = reader.join();
            }
        }
        self.stderr_lines.lock().unwrap().clone()
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

    /// Sends SIGTERM and waits for the exit status. The 30 s limit catches a hang; it is no
    /// bound under test (the shared machine is too noisy for one).
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

/// The value of one series (`name` or `name{label="value",...}`, labels in the order the
/// scrape prints them) on a process's `/metrics`. A series the process does not export fails
/// the test, naming the series of the same metric it does export: a renamed metric or label
/// must not read as a zero.
pub async fn metric(p: &Running, series: &str) -> f64 {
    let text = scrape(p).await;
    series_value(&text, series).unwrap_or_else(|| panic!("{}", missing_series(&text, series)))
}

/// The value of one labelled series, 0 when it is absent: a labelled counter is printed only
/// once something touched it. Still fails the test when the series has no labels (those
/// are always printed), or when the metric is printed with other label names.
pub async fn metric_absent_or_zero(p: &Running, series: &str) -> f64 {
    let text = scrape(p).await;
    if let Some(value) = series_value(&text, series) {
        return value;
    }
    let (family, labels) = split_series(series);
    assert!(!labels.is_empty(), "{}", missing_series(&text, series));
    let printed = label_names_printed(&text, family);
    assert!(
        printed.is_empty() || printed.contains(&label_names(labels)),
        "{}",
        missing_series(&text, series)
    );
    0.0
}

async fn scrape(p: &Running) -> String {
    let res = http()
        .get(format!("{}/metrics", p.addr("metrics")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK, "GET /metrics");
    res.text().await.unwrap()
}

/// The value of `series` in a Prometheus text scrape.
fn series_value(text: &str, series: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))?;
    // The value, then an optional timestamp.
    let value = line[series.len()..].split_whitespace().next().unwrap_or_default();
    Some(
        value
            .parse()
            .unwrap_or_else(|e| panic!("{series}: value {value:?}: {e}")),
    )
}

/// `name{a="x"}` as (`name`, `a="x"`).
fn split_series(series: &str) -> (&str, &str) {
    match series.split_once('{') {
        Some((family, rest)) => (family, rest.trim_end_matches('}')),
        None => (series, ""),
    }
}

/// The label names of `a="x",b="y"`, in order (a value may hold an escaped quote).
fn label_names(labels: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').to_owned());
        let mut escaped = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map_or(after.len(), |(i, _)| i + 1);
        rest = &after[end..];
    }
    names
}

/// Every set of label names `family`'s samples are printed with.
fn label_names_printed(text: &str, family: &str) -> Vec<Vec<String>> {
    samples(text)
        .filter(|s| split_series(s).0 == family)
        .map(|s| label_names(split_series(s).1))
        .collect()
}

/// The series of each sample line of a scrape (`name` or `name{...}`).
fn samples(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| match l.rfind('}') {
            Some(end) => &l[..=end],
            None => l.split(' ').next().unwrap_or(l),
        })
}

/// The failure message for a series that is not in the scrape: the series whose name shares
/// the longest prefix with it.
fn missing_series(text: &str, series: &str) -> String {
    let samples: Vec<&str> = samples(text).collect();
    let (family, _) = split_series(series);
    let shared = |s: &str| {
        let (other, _) = split_series(s);
        family.chars().zip(other.chars()).take_while(|(a, b)| a == b).count()
    };
    let best = samples.iter().map(|s| shared(s)).max().unwrap_or(0);
    let nearby: Vec<&str> = samples.into_iter().filter(|s| shared(s) == best).take(20).collect();
    format!("the process exports no series {series}; nearest: {nearby:#?}")
}

/// Starts `rebound --upgrade` beside `old` (same data dir and environment), which then hands
/// its listeners over on SIGQUIT and drains; returns the new process once `old` exited
/// successfully and the new one has bound its API and metrics ports. Needs a multi-threaded
/// runtime (it blocks in place).
pub async fn upgrade(old: &mut Running, data: &Path, env: &[(&str, &str)]) -> Running {
    let mut new = start(&["--upgrade"], data, env, &["redirect"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(Command::new("kill")
        .args(["-QUIT", &old.pid().to_string()])
        .status()
        .unwrap()
        .success());
    let status = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(30)));
    assert!(status.success(), "the old process drained and exited: {status:?}");
    tokio::task::block_in_place(|| {
        new.wait_for_addr("API", Duration::from_secs(30));
        new.wait_for_addr("metrics", Duration::from_secs(30));
    });
    new
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
