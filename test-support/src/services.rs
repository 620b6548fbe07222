//! The real services the distributed tests talk to: their environment for a process,
//! servers of a test's own that it may stop or restart from a snapshot (the shared ones
//! that `scripts/test` started are named in `env`), and a TCP relay that can freeze a
//! connection silently or fail over to another server.

use crate::env::shared_redis_is_a_cluster;
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
        // scripts/test runs the distributed suite again with the shared Redis a three-master
        // cluster; the servers a test starts of its own are single ones.
        if shared_redis_is_a_cluster() && std::env::var("REBOUND_TEST_REDIS_URL").is_ok_and(|s| s == r) {
            env.push(("REBOUND_REDIS_CLUSTER", "true".to_owned()));
        }
        if let Ok(ca) = std::env::var("REBOUND_TEST_REDIS_CA") {
            if r.starts_with("rediss://") {
                env.push(("REBOUND_REDIS_CA", ca));
            }
        }
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A port nothing listens on now (for a process whose port must be known before it starts),
/// below the kernel's ephemeral range where there is room. A port from `bind(0)` is one of
/// that range, which every outgoing connection and every `bind(0)` of the tests running
/// beside draws from: one of them could take it before the process bound it (tests/acme.rs
/// once failed so, "Address already in use"). Below the range only another `free_port` can,
/// so each process walks it from a start of its own.
pub fn free_port() -> u16 {
    const LOWEST: u32 = 10_000;
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicU32> = std::sync::OnceLock::new();
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST);
    if span >= 1_000 {
        let next = NEXT.get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            std::sync::atomic::AtomicU32::new(std::process::id().wrapping_mul(7_919).wrapping_add(nanos))
        });
        for _ in 0..span {
            let port = LOWEST + next.fetch_add(1, Ordering::Relaxed) % span;
            if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
                return port as u16;
            }
        }
    }
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

/// Waits until something accepts connections on `port`, which `child` was just started on,
/// at most 30 s: false as soon as `child` has exited (another process took a port it needs).
fn wait_for_port_of(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if child.try_wait().expect("a child's status").is_some() {
            return false;
        }
        assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    true
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

    /// A Redis of this test's own, started with `args` too (e.g. `--requirepass`), on a free
    /// port: another if the one `free_port` gave was taken before it started.
    pub fn redis_with(args: &[&str]) -> OwnServer {
        let dir = crate::temp_dir();
        let (child, port) = (0..PORT_TRIES)
            .find_map(|_| {
                let port = free_port();
                Self::try_spawn_redis(port, dir.path(), args).map(|child| (child, port))
            })
            .unwrap_or_else(|| panic!("no free port for a Redis in {PORT_TRIES} tries"));
        OwnServer {
            child: Some(child),
            port,
            kind: "redis",
            dir: Some(dir),
        }
    }

    /// A Redis on `port`, which must be free: this test's own that stopped.
    fn spawn_redis(port: u16, dir: &std::path::Path, args: &[&str]) -> Child {
        Self::try_spawn_redis(port, dir, args)
            .unwrap_or_else(|| panic!("port {port} is answered by another Redis than the one started on it"))
    }

    /// A Redis on `port`, if it is the one that answers there once the port accepts: `None`
    /// when another took the port first (`free_port` releases a port before the spawn, and
    /// the tests start their servers in parallel), ours then having exited.
    fn try_spawn_redis(port: u16, dir: &std::path::Path, args: &[&str]) -> Option<Child> {
        let mut child = Command::new("redis-server")
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
        if !wait_for_port_of(&mut child, port) {
            // It exited: a port it needs (the cluster bus too) was taken before it started.
            return None;
        }
        let password = args.iter().position(|a| *a == "--requirepass").map(|i| args[i + 1]);
        if answers_from(port, dir, password) {
            return Some(child);
        }
        let _ = child.kill();
        let _ = child.wait();
        None
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

    /// Starts this stopped Redis again on the same port, empty (its data was lost).
    pub fn restart_empty(&mut self) {
        self.stop();
        let dir = self.dir.as_ref().unwrap().path().to_owned();
        let _ = std::fs::remove_file(dir.join("dump.rdb"));
        self.child = Some(Self::spawn_redis(self.port, &dir, &[]));
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

/// A Redis Cluster of a test's own: three masters, no replicas (`redis-server
/// --cluster-enabled yes` x3 and `redis-cli --cluster create`), each node in a directory of
/// its own so that it can be restarted from a snapshot of its own.
pub struct OwnCluster {
    nodes: Vec<ClusterNode>,
}

struct ClusterNode {
    child: Option<Child>,
    port: u16,
    bus_port: u16,
    dir: tempfile::TempDir,
}

impl ClusterNode {
    /// Starts the node on its ports, which must be free (its own, after a stop).
    fn spawn(&mut self) {
        assert!(
            self.try_spawn(),
            "port {} is answered by another Redis than this node",
            self.port
        );
    }

    /// Starts the node on its ports: false when another Redis answers on them.
    fn try_spawn(&mut self) -> bool {
        let conf = self.dir.path().join("nodes.conf");
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &self.bus_port.to_string(),
            "--cluster-config-file",
            conf.to_str().expect("a UTF-8 temporary path"),
        ];
        self.child = OwnServer::try_spawn_redis(self.port, self.dir.path(), &args);
        self.child.is_some()
    }

    /// Starts the node on free ports: others if the ones `free_port` gave were taken first.
    fn spawn_on_free_ports(&mut self) {
        for _ in 0..PORT_TRIES {
            (self.port, self.bus_port) = (free_port(), free_port());
            if self.try_spawn() {
                return;
            }
        }
        panic!("no free ports for a cluster node in {PORT_TRIES} tries");
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Ports tried for a server of a test's own before giving up.
const PORT_TRIES: usize = 5;

/// Whether the Redis that answers on `port` runs in `dir` (`CONFIG GET dir`), so is the one
/// started there.
fn answers_from(port: u16, dir: &std::path::Path, password: Option<&str>) -> bool {
    let mut args = match password {
        Some(password) => vec!["--no-auth-warning", "-a", password],
        None => Vec::new(),
    };
    args.extend(["CONFIG", "GET", "dir"]);
    let stdout = redis_cli(port, &args);
    let Some(answered) = stdout.lines().nth(1) else {
        return false;
    };
    matches!(
        (std::fs::canonicalize(answered), std::fs::canonicalize(dir)),
        (Ok(a), Ok(b)) if a == b
    )
}

/// `redis-cli -p port args…`, its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl OwnCluster {
    /// Three masters sharing the 16,384 slots, every node seeing `cluster_state:ok`.
    pub fn start() -> OwnCluster {
        let mut nodes: Vec<ClusterNode> = (0..3)
            .map(|_| ClusterNode {
                child: None,
                port: 0,
                bus_port: 0,
                dir: tempfile::tempdir().unwrap(),
            })
            .collect();
        for node in &mut nodes {
            node.spawn_on_free_ports();
        }
        let cluster = OwnCluster { nodes };
        let addresses: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        cluster.wait_ok();
        cluster
    }

    /// Waits until every node says `cluster_state:ok`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .nodes
            .iter()
            .all(|n| redis_cli(n.port, &["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The seed nodes, as `REBOUND_REDIS_URL` lists them with `REBOUND_REDIS_CLUSTER=true`.
    pub fn url(&self) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        urls.join(",")
    }

    /// The nodes' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The keys node `i` holds that match `pattern`.
    pub fn keys(&self, i: usize, pattern: &str) -> Vec<String> {
        redis_cli(self.nodes[i].port, &["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Saves node `i`'s data set (`SAVE`) and returns a copy of its snapshot file.
    pub fn snapshot(&self, i: usize) -> Vec<u8> {
        let node = &self.nodes[i];
        assert_eq!(redis_cli(node.port, &["SAVE"]).trim(), "OK", "SAVE failed");
        std::fs::read(node.dir.path().join("dump.rdb")).unwrap()
    }

    /// Kills node `i` (SIGKILL: nothing saved) and starts it again from `snapshot`, with its
    /// cluster configuration (its id and slots), then waits for the cluster to be whole.
    pub fn restart_from(&mut self, i: usize, snapshot: &[u8]) {
        let node = &mut self.nodes[i];
        node.stop();
        std::fs::write(node.dir.path().join("dump.rdb"), snapshot).unwrap();
        node.spawn();
        self.wait_ok();
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs redis-server (the test services): scripts/test installs it and runs it"]
    fn a_redis_started_on_a_port_another_redis_holds_is_noticed_and_given_another() {
        let first = OwnServer::redis();
        let dir = crate::temp_dir();
        // Ours exits (the port is taken); the first answers the check from its own dir.
        assert!(OwnServer::try_spawn_redis(first.port, dir.path(), &[]).is_none());
        let mut node = ClusterNode {
            child: None,
            port: first.port,
            bus_port: free_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        assert!(!node.try_spawn(), "a node on the first's port");
        // A node whose cluster bus port is taken exits at once: that is seen (a wait for its
        // port until the deadline would panic).
        let bus = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        (node.port, node.bus_port) = (free_port(), bus.local_addr().unwrap().port());
        assert!(!node.try_spawn(), "a node on a taken bus port");
        drop(bus);
        node.spawn_on_free_ports();
        assert_ne!(node.port, first.port);
        assert!(answers_from(node.port, node.dir.path(), None));
        node.stop();
        let guarded = OwnServer::redis_with(&["--requirepass", "right"]);
        assert!(answers_from(
            guarded.port,
            guarded.dir.as_ref().unwrap().path(),
            Some("right")
        ));
    }

    #[test]
    fn a_free_port_is_below_the_ephemeral_range_and_not_handed_out_twice() {
        let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // One the process holds is skipped; none is handed out twice in a walk.
        let held = std::net::TcpListener::bind(("127.0.0.1", free_port())).unwrap();
        let held_port = held.local_addr().unwrap().port();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for &port in &ports {
            assert!((10_000..ephemeral).contains(&port), "{port}");
            assert_ne!(port, held_port);
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
    }
}
