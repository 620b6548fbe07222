//! Starts the real `rebound` binary on port 0 and talks HTTP to it. One module a concern:
//! the environment and unique names (`env`), scrapes (`metrics`), certificates (`tls`),
//! the all-in-one and raw exchanges (`rebound`), a distributed deployment (`fleet`), the
//! servers it runs on (`services`) and a fault test's history (`history`).

pub mod env;
pub mod fleet;
pub mod history;
pub mod metrics;
pub mod rebound;
pub mod replicator;
pub mod services;
pub mod stream;
pub mod tls;
pub mod visitors;

pub use env::*;
pub use metrics::*;
pub use tls::*;

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

/// The `rebound` binary the tests run: the one Cargo built with the test binary, in the
/// directory above the test's own (`target/<profile>/deps/<test>` → `target/<profile>/rebound`;
/// Cargo builds a package's binaries for its integration tests).
pub fn bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let test = std::env::current_exe().expect("the test binary's path");
        let bin = test
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join(format!("rebound{}", std::env::consts::EXE_SUFFIX)))
            .expect("the test binary is in target/<profile>/deps");
        assert!(
            bin.is_file(),
            "no rebound binary at {} (built by `cargo test`)",
            bin.display()
        );
        bin
    })
}

/// `rebound <args>` in an environment of its own: a data dir, the bootstrap key, every
/// listener on port 0 and the log at `warn`, with `extra_env` set over them.
pub fn command(args: &[&str], data_dir: &Path, extra_env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REBOUND_DATA_DIR", data_dir)
        .env("REBOUND_API_ADDR", "127.0.0.1:0")
        .env("REBOUND_REDIRECT_ADDR", "127.0.0.1:0")
        .env("REBOUND_METRICS_ADDR", "127.0.0.1:0")
        .env("REBOUND_LOG", "warn")
        .env("REBOUND_BOOTSTRAP_KEY", OPERATOR_KEY);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

/// Starts `rebound <args>` as [`command`] sets it up, and waits until it has printed the
/// addresses named in `wait_for` (e.g. "API").
pub fn start(args: &[&str], data_dir: &Path, extra_env: &[(&str, &str)], wait_for: &[&str]) -> Running {
    try_start(args, data_dir, extra_env, wait_for).unwrap_or_else(|e| panic!("{e}"))
}

/// [`start`], or why the process did not print its addresses within 60 s (it exited, say).
pub fn try_start(
    args: &[&str],
    data_dir: &Path,
    extra_env: &[(&str, &str)],
    wait_for: &[&str],
) -> Result<Running, String> {
    let mut child = command(args, data_dir, extra_env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rebound");
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
            Err(_) => {
                return Err(format!(
                    "rebound did not print its addresses {wait_for:?}; saw {:?}",
                    running.stdout_lines
                ))
            }
        }
    }
    Ok(running)
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
        signal(self.pid(), "TERM");
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

/// Starts `rebound <args>` expecting it to refuse: returns its log (stderr) once it has
/// exited with a failure. A start that serves instead fails the test after 20 s.
pub fn refused_start(args: &[&str], data_dir: &Path, extra_env: &[(&str, &str)]) -> String {
    let mut p = start(args, data_dir, extra_env, &[]);
    let status = p.wait_exit(Duration::from_secs(20));
    assert!(!status.success(), "the start was refused: {status:?}");
    p.log().join("\n")
}

/// Sends `signal` (`TERM`, `HUP`, `QUIT`, `STOP`…) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Runs the CLI `rebound <args>` against the API at `api`, with `key` as its API key;
/// whether it succeeded, its stdout and its stderr.
pub fn cli(api: &str, key: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args).env_clear().env("REBOUND_API_URL", api);
    if let Some(k) = key {
        cmd.env("REBOUND_API_KEY", k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `curl -s -o /dev/null -w <write_out> <args>`: what `write_out` asked for (e.g.
/// `%{http_code}`) about the answer.
pub fn curl(write_out: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", write_out])
        .args(args)
        .output()
        .expect("curl (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

pub fn data_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().to_path_buf()
}

/// A client builder: HTTPS with rustls over aws-lc-rs, the provider the binary uses
/// (reqwest's own choice would be ring, which nothing here builds).
pub fn http_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    reqwest::Client::builder()
}

/// An HTTP client that never follows redirects.
pub fn http() -> reqwest::Client {
    http_builder()
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
    let status = res.status();
    let body: serde_json::Value = res.json().await.unwrap_or_default();
    assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    body
}

/// Starts `rebound --upgrade` beside `old` (same data dir and environment), which then hands
/// its listeners over on SIGQUIT and drains; returns the new process once `old` exited
/// successfully and the new one has bound its API and metrics ports. Needs a multi-threaded
/// runtime (it blocks in place).
pub async fn upgrade(old: &mut Running, data: &Path, env: &[(&str, &str)]) -> Running {
    let mut new = start(&["--upgrade"], data, env, &["redirect"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(old.pid(), "QUIT");
    let status = tokio::task::block_in_place(|| old.wait_exit(Duration::from_secs(30)));
    assert!(status.success(), "the old process drained and exited: {status:?}");
    tokio::task::block_in_place(|| {
        new.wait_for_addr("API", Duration::from_secs(30));
        new.wait_for_addr("metrics", Duration::from_secs(30));
    });
    new
}

/// The environment of a process that a later `rebound --upgrade` takes over: its ports
/// fixed (free ones, so that the new process binds the same) and the hand-over socket at
/// `sock`.
pub fn upgradable_env(sock: &Path) -> Vec<(String, String)> {
    let port = || format!("127.0.0.1:{}", services::free_port());
    [
        ("REBOUND_REDIRECT_ADDR", port()),
        ("REBOUND_API_ADDR", port()),
        ("REBOUND_METRICS_ADDR", port()),
        ("REBOUND_UPGRADE_SOCK", sock.to_string_lossy().into_owned()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .to_vec()
}

/// Waits until the process's `/readyz` answers 200.
pub async fn wait_ready(p: &Running) {
    wait_ready_at(&p.addr("metrics")).await
}

/// Waits until `/readyz` under `metrics` (a metrics port's URL) answers 200.
pub async fn wait_ready_at(metrics: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(res) = http().get(format!("{metrics}/readyz")).send().await {
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
