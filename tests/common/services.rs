//! The real services the distributed tests talk to: their environment for a process,
//! servers of a test's own that it may stop or restart from a snapshot (the shared ones
//! that `scripts/test` started are named in `env`), and a TCP relay that can freeze a
//! connection silently or fail over to another server.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment of distributed processes: DynamoDB and SQS at `aws_url` (moto), tables
/// under `prefix`, clicks on `queue`, Redis (when given) with keys under `{prefix}:`. On a
/// `rediss://` Redis the test CA of `REBOUND_TEST_REDIS_CA` is trusted (scripts/test runs
/// the distributed suite a second time on a Redis behind TLS and a password).
pub fn distributed_env(aws_url: &str, redis_url: Option<&str>, prefix: &str, queue: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("REBOUND_STORE", "dynamodb".to_owned()),
        ("REBOUND_TABLE_PREFIX", prefix.to_owned()),
        ("REBOUND_QUEUE", "sqs".to_owned()),
        ("REBOUND_SQS_QUEUE", queue.to_owned()),
        ("REBOUND_REDIS_PREFIX", format!("{prefix}:")),
        // moto is one Python process shared by every test running at once: slower than
        // DynamoDB, so the store budget is wider here than in production.
        ("REBOUND_STORE_BUDGET_MS", "5000".to_owned()),
        ("AWS_ENDPOINT_URL", aws_url.to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
    ];
    if let Some(r) = redis_url {
        env.push(("REBOUND_REDIS_URL", r.to_owned()));
        if let Ok(ca) = std::env::var("REBOUND_TEST_REDIS_CA") {
            if r.starts_with("rediss://") {
                env.push(("REBOUND_REDIS_CA", ca));
            }
        }
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A port nothing listens on now (for a process whose port must be known before it starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port` (a server just spawned), at most 30 s.
pub fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server process of a test's own, killed when dropped.
pub struct OwnServer {
    child: Option<Child>,
    pub port: u16,
    kind: &'static str,
    dir: Option<tempfile::TempDir>,
}

impl OwnServer {
    /// A Redis of this test's own.
    pub fn redis() -> OwnServer {
        Self::redis_with(&[])
    }

    /// A Redis of this test's own, started with `args` too (e.g. `--requirepass`).
    pub fn redis_with(args: &[&str]) -> OwnServer {
        Self::redis_on(free_port(), args)
    }

    fn redis_on(port: u16, args: &[&str]) -> OwnServer {
        let dir = super::temp_dir();
        let child = Self::spawn_redis(port, dir.path(), args);
        OwnServer {
            child: Some(child),
            port,
            kind: "redis",
            dir: Some(dir),
        }
    }

    fn spawn_redis(port: u16, dir: &std::path::Path, args: &[&str]) -> Child {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test installs it)");
        wait_for_port(port, "redis-server");
        child
    }

    /// Saves this Redis's data set (`SAVE`) and returns a copy of the snapshot file.
    pub fn snapshot(&self) -> Vec<u8> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "SAVE"])
            .output()
            .expect("redis-cli");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK", "SAVE failed");
        std::fs::read(self.dir.as_ref().unwrap().path().join("dump.rdb")).unwrap()
    }

    /// Kills this Redis (SIGKILL: nothing saved) and starts it again on the same port from
    /// `snapshot` (what a restore from a backup, or a restart from an older RDB, does).
    pub fn restart_from(&mut self, snapshot: &[u8]) {
        self.stop();
        let dir = self.dir.as_ref().unwrap().path().to_owned();
        std::fs::write(dir.join("dump.rdb"), snapshot).unwrap();
        self.child = Some(Self::spawn_redis(self.port, &dir, &[]));
    }

    /// A moto server (DynamoDB + SQS) of this test's own.
    pub fn moto() -> OwnServer {
        Self::moto_on(free_port())
    }

    fn moto_on(port: u16) -> OwnServer {
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server on PATH (scripts/test installs it)");
        wait_for_port(port, "moto_server");
        OwnServer {
            child: Some(child),
            port,
            kind: "moto",
            dir: None,
        }
    }

    pub fn url(&self) -> String {
        match self.kind {
            "redis" => format!("redis://127.0.0.1:{}/", self.port),
            _ => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Stops the server (its data is gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
        drop(self.dir.take());
    }
}

/// A TCP relay in front of a server. Frozen, it keeps every connection open but moves no
/// byte in either direction: a connection that broke silently. Failed over, it closes every
/// connection and relays new ones to another server (a virtual address moved to a promoted
/// replica).
pub struct Relay {
    pub port: u16,
    frozen: Arc<AtomicBool>,
    target: Arc<AtomicU16>,
    cut: tokio::sync::watch::Sender<u64>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// A relay that delivers every byte `delay` after it arrived, in each direction (a distant
/// Redis), keeping the order and the throughput.
pub fn delayed_relay(target_port: u16, delay: Duration) -> Relay {
    Relay::start(target_port, delay)
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Tests drop it inside their own runtime, where a blocking shutdown is not allowed.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Relay {
    pub fn to(target_port: u16) -> Relay {
        Relay::start(target_port, Duration::ZERO)
    }

    fn start(target_port: u16, delay: Duration) -> Relay {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let target = Arc::new(AtomicU16::new(target_port));
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = std_listener.local_addr().unwrap().port();
        std_listener.set_nonblocking(true).unwrap();
        let (flag, to) = (frozen.clone(), target.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (flag, mut cuts) = (flag.clone(), cuts.clone());
                let target_port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await else {
                        return;
                    };
                    cuts.mark_unchanged();
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let mut up = tokio::spawn(pump(cr, sw, flag.clone(), delay));
                    let mut down = tokio::spawn(pump(sr, cw, flag, delay));
                    // A failover closes the connection: both halves dropped.
                    tokio::select! {
                        _ = cuts.changed() => {}
                        _ = async { let _ = tokio::join!(&mut up, &mut down); } => {}
                    }
                    up.abort();
                    down.abort();
                });
            }
        });
        Relay {
            port,
            frozen,
            target,
            cut,
            runtime: Some(runtime),
        }
    }

    /// Closes every relayed connection and relays new ones to `port`.
    pub fn fail_over_to(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if !delay.is_zero() {
        // Read as it comes, write each chunk `delay` after it was read.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx
                            .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            // Frozen, the bytes due are held until the thaw.
            while frozen.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        reader.abort();
        return;
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a freeze are held until the thaw.
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
