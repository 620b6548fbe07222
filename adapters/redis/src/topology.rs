//! One Redis or a Redis Cluster: the clients, the connection type every port uses, and
//! the sharded subscription of a cluster.
//!
//! On a cluster the fleet's channels are shard channels (`SSUBSCRIBE`, `SPUBLISH`) of the
//! `{fleet}` slot: a subscription is held on the very node that runs the scripts publishing
//! on them, so the order of one subscription's messages (an invalidation before the
//! keepalive that follows it) is the order of that node's scripts, with no cluster bus in
//! between. The subscription is a connection of its own to that node, found by asking a
//! node (its `MOVED` answer names the owner; a replica of the owner, which would accept the
//! subscription and relay the master's messages over the bus, names its master in
//! `CLUSTER NODES`); it ends, and so lapses, when the connection does or when the slot moves
//! or fails over (the server's `sunsubscribe`), and the next one finds the new owner. The cluster client's own pub/sub is not used: it resubscribes by itself
//! after a disconnection, and the messages published meanwhile would be lost unseen.

use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, PushInfo, PushKind, RedisFuture, Value};
use std::time::Duration;

/// Where the keys live.
pub(crate) enum Deployment {
    Single(redis::Client),
    /// A cluster, and its seed nodes' connection settings (TLS, credentials), used for the
    /// connections of their own that the start-up check and a subscription make to one node.
    Cluster {
        // Boxed: far larger than a single Redis's client.
        client: Box<redis::cluster::ClusterClient>,
        seeds: Vec<ConnectionInfo>,
    },
}

/// A connection to one Redis or to a cluster (the cluster client routes each command to
/// the node of its keys' slot, following `MOVED`).
#[derive(Clone)]
pub enum RedisConn {
    Managed(ConnectionManager),
    Plain(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Managed(c) => c.req_packed_command(cmd),
            RedisConn::Plain(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Managed(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Plain(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Managed(c) => c.get_db(),
            RedisConn::Plain(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// How many `MOVED` answers a subscription follows before giving up (a slot being moved
/// while it subscribes; the caller tries again later).
const MOVED_FOLLOWED: usize = 4;

/// The connection settings of `seed` for the node at `address` (`host:port`), speaking
/// RESP3 (whose push messages carry the shard channels' messages).
fn node_info(seed: &ConnectionInfo, address: &str) -> redis::RedisResult<ConnectionInfo> {
    let (host, port) = address
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::ClientError, "a node address without a port")))?;
    let addr = match &seed.addr {
        ConnectionAddr::TcpTls {
            insecure, tls_params, ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    let mut redis = seed.redis.clone();
    redis.protocol = redis::ProtocolVersion::RESP3;
    Ok(ConnectionInfo { addr, redis })
}

/// The address (`host:port`) of a connection's node.
pub(crate) fn address_of(info: &ConnectionInfo) -> String {
    match &info.addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
    }
}

/// Subscribes to the shard channels `channels` (all of one slot) on the node that owns
/// their slot, starting with the node at `first`. Returns the messages, which end when the
/// subscription does, and the owner's address (where the next subscription starts).
pub(crate) async fn sharded_subscription(
    seed: &ConnectionInfo,
    first: String,
    channels: &[String],
) -> redis::RedisResult<(BoxStream<'static, redis::Msg>, String)> {
    let mut address = first;
    let mut followed = 0;
    loop {
        let client = redis::Client::open(node_info(seed, &address)?)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(Duration::from_secs(2))
            .set_push_sender(tx);
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        let mut moved = None;
        // One channel per command: each `SSUBSCRIBE` is then answered by exactly one reply.
        for channel in channels {
            match redis::cmd("SSUBSCRIBE").arg(channel).exec_async(&mut conn).await {
                Ok(()) => {}
                Err(e) if followed < MOVED_FOLLOWED && e.kind() == redis::ErrorKind::Moved => {
                    match e.redirect_node() {
                        Some((node, _)) => moved = Some(node.to_owned()),
                        None => return Err(e),
                    }
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        // A replica of the owner accepts SSUBSCRIBE too, but hears the master's messages over
        // the cluster bus, where a lost message ends no subscription: only the master will do.
        if moved.is_none() {
            moved = master_of_replica(&mut conn).await?;
            if moved.is_some() && followed >= MOVED_FOLLOWED {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::ClientError,
                    "the shard channels' master could not be found",
                )));
            }
        }
        match moved {
            Some(owner) => {
                address = owner;
                followed += 1;
            }
            None => return Ok((messages(conn, rx), address)),
        }
    }
}

/// The address of the master when the node of `conn` is a replica, else `None`; from
/// `CLUSTER NODES` (ACL category `@slow` only, unlike `ROLE`).
async fn master_of_replica(conn: &mut MultiplexedConnection) -> redis::RedisResult<Option<String>> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    Ok(master_in(&nodes))
}

/// In a `CLUSTER NODES` answer (`<id> <ip:port@bus[,host]> <flags> <master id> …` a line),
/// the address of the master of the node that answered (`myself`), when it is a replica.
fn master_in(nodes: &str) -> Option<String> {
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split_whitespace().collect()).collect();
    let me = lines
        .iter()
        .find(|f| f.get(2).is_some_and(|flags| flags.split(',').any(|x| x == "myself")))?;
    if !me[2].split(',').any(|x| x == "slave") {
        return None;
    }
    let master = lines.iter().find(|f| f.first() == me.get(3))?;
    // `ip:port@bus`, then `,hostname` when the nodes announce one (as `MOVED` then names
    // them: TLS certificates are for the hostname).
    let (endpoint, hostname) = master.get(1)?.split_once(',').unwrap_or((master.get(1)?, ""));
    let (ip_port, _bus) = endpoint.split_once('@').unwrap_or((endpoint, ""));
    match hostname {
        "" => Some(ip_port.to_owned()),
        host => Some(format!("{host}:{}", ip_port.rsplit_once(':')?.1)),
    }
}

/// The messages of a shard subscription, ending at the first sign that it ended: the
/// connection closed, or the server unsubscribed it (its slot moved to another node).
fn messages(
    conn: MultiplexedConnection,
    rx: tokio::sync::mpsc::UnboundedReceiver<PushInfo>,
) -> BoxStream<'static, redis::Msg> {
    // The connection is held by the stream: dropping the stream closes it.
    futures_util::stream::unfold((conn, rx), |(conn, mut rx)| async move {
        loop {
            let push = rx.recv().await?;
            match push.kind {
                PushKind::SMessage => {
                    if let Some(msg) = redis::Msg::from_push_info(push) {
                        return Some((msg, (conn, rx)));
                    }
                }
                PushKind::SUnsubscribe | PushKind::Disconnection => return None,
                _ => {}
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use crate::connection::free_port;
    use crate::{RedisCache, RedisSettingError};
    use rebound_store::RecordCache;
    use rebound_store::{ChannelMessage, InvalidationChannel};
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    /// The password of the cluster that requires one.
    const PASSWORD: &str = "s3cret";

    /// A three-master cluster of the test's own (its slots are moved), killed when dropped.
    struct Cluster {
        nodes: Vec<(Child, u16)>,
        _dir: tempfile::TempDir,
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            for (child, _) in &mut self.nodes {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Waits until `done`, for at most 30 s (a test never hangs on a server that did not come).
    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// How redis-cli reaches a cluster's nodes: with a password, over TLS with a CA.
    #[derive(Default)]
    struct Access {
        password: Option<&'static str>,
        ca: Option<std::path::PathBuf>,
    }

    /// `redis-cli -p port args…`.
    fn cli(port: u16, args: &[&str]) -> String {
        cli_as(&Access::default(), port, args)
    }

    /// [`cli`] with a password or over TLS.
    fn cli_as(access: &Access, port: u16, args: &[&str]) -> String {
        let out = redis_cli(access)
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn redis_cli(access: &Access) -> Command {
        let mut cmd = Command::new("redis-cli");
        if let Some(p) = access.password {
            cmd.env("REDISCLI_AUTH", p);
        }
        if let Some(ca) = &access.ca {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        cmd
    }

    async fn start_cluster() -> Cluster {
        start_cluster_with(&[], &Access::default()).await
    }

    /// One cluster node on free ports, answering PING. Another test may take a port between
    /// `free_port` and the bind: a node that exits instead of answering is started again on
    /// other ports (at most five times).
    async fn start_node(dir: &std::path::Path, args: &[&str], access: &Access) -> (Child, u16) {
        for _ in 0..5 {
            let (port, bus) = (free_port(), free_port());
            let port_args = match access.ca {
                Some(_) => vec![
                    "--port".to_owned(),
                    "0".to_owned(),
                    "--tls-port".to_owned(),
                    port.to_string(),
                ]
                .into_iter()
                .chain(["--tls-cluster".to_owned(), "yes".to_owned()])
                .collect::<Vec<_>>(),
                None => vec!["--port".to_owned(), port.to_string()],
            };
            let mut child = Command::new("redis-server")
                .args([
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                ])
                .args(&port_args)
                .args(["--cluster-port", &bus.to_string()])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .arg("--dir")
                .arg(dir)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                if cli_as(access, port, &["ping"]) == "PONG" {
                    return (child, port);
                }
                if child.try_wait().expect("redis-server's status").is_some() {
                    break; // a port was taken: again, on others
                }
                assert!(std::time::Instant::now() < deadline, "a node answers PING within 30 s");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        panic!("no cluster node started in five tries");
    }

    /// [`start_cluster`], each node started with `args` too, reached with `access` (over
    /// TLS only, the cluster bus too, when it has a CA).
    async fn start_cluster_with(args: &[&str], access: &Access) -> Cluster {
        // The nodes started so far are killed if a later one does not start.
        let mut cluster = Cluster {
            nodes: Vec::new(),
            _dir: tempfile::tempdir().unwrap(),
        };
        for _ in 0..3 {
            let node = start_node(cluster._dir.path(), args, access).await;
            cluster.nodes.push(node);
        }
        let addresses: Vec<String> = cluster.nodes.iter().map(|(_, p)| format!("127.0.0.1:{p}")).collect();
        let out = redis_cli(access)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        for (_, port) in &cluster.nodes {
            wait_until("cluster_state:ok", || {
                cli_as(access, *port, &["cluster", "info"]).contains("cluster_state:ok")
            })
            .await;
        }
        cluster
    }

    /// Moves `slot`, with its keys, from the node at `from` to the node at `to` (what a
    /// resharding does, one slot).
    fn move_slot(cluster: &Cluster, slot: u16, from: u16, to: u16) {
        let (from_id, to_id) = (cli(from, &["cluster", "myid"]), cli(to, &["cluster", "myid"]));
        let slot = slot.to_string();
        cli(to, &["cluster", "setslot", &slot, "importing", &from_id]);
        cli(from, &["cluster", "setslot", &slot, "migrating", &to_id]);
        loop {
            let keys = cli(from, &["cluster", "getkeysinslot", &slot, "100"]);
            if keys.is_empty() {
                break;
            }
            let to = to.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &to, "", "0", "5000", "keys"];
            args.extend(keys.lines());
            assert_eq!(cli(from, &args), "OK");
        }
        for (_, port) in &cluster.nodes {
            cli(*port, &["cluster", "setslot", &slot, "node", &to_id]);
        }
    }

    #[test]
    fn a_replica_names_its_master_in_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30004@31004,host-a slave,myself e7d1 0 0 3 connected
e7d1 127.0.0.1:30001@31001,host-b master - 0 0 1 connected 0-5460
67ed 127.0.0.1:30002@31002 master - 0 0 2 connected 5461-10922
";
        assert_eq!(super::master_in(nodes).as_deref(), Some("host-b:30001"));
        let without_hostnames = nodes.replace(",host-a", "").replace(",host-b", "");
        assert_eq!(super::master_in(&without_hostnames).as_deref(), Some("127.0.0.1:30001"));
        let master = nodes
            .replace("slave,myself", "slave")
            .replace("master - 0 0 1", "myself,master - 0 0 1");
        assert_eq!(super::master_in(&master), None);
        assert_eq!(super::master_in(""), None);
    }

    /// True when the node at `port` serves `slot` (by its own line of `CLUSTER NODES`).
    fn serves(port: u16, slot: u32) -> bool {
        let within = |range: &str| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            a.parse::<u32>().is_ok_and(|a| a <= slot) && b.parse::<u32>().is_ok_and(|b| slot <= b)
        };
        cli(port, &["cluster", "nodes"])
            .lines()
            .filter(|l| l.contains("myself"))
            .any(|l| l.split_whitespace().skip(8).any(within))
    }

    /// Records on every shard are read, and the subscription on the fleet's node hears a
    /// keepalive: every connection the cluster client and the subscription make works.
    async fn reaches_every_shard_and_the_fleet_s_node(cache: &RedisCache) {
        for i in 0..30 {
            assert!(matches!(
                cache.get_record(&format!("code{i}")).await,
                Ok(rebound_store::L2Read::Miss)
            ));
        }
        let mut messages = InvalidationChannel::subscribe(cache, "p1").await.unwrap();
        InvalidationChannel::keepalive(cache, "p1", 9).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 9 })
        );
    }

    #[tokio::test]
    #[ignore = "needs redis-server and redis-cli (the test services): scripts/test runs it"]
    async fn the_subscription_ends_when_the_fleet_s_slot_moves_and_the_next_one_follows_it() {
        let cluster = start_cluster().await;
        let ports: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
        let seeds: Vec<String> = ports.iter().map(|p| format!("redis://127.0.0.1:{p}/")).collect();
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        let cache = RedisCache::cluster(&seeds, "mv:", None).unwrap();
        let slot: u16 = cli(ports[0], &["cluster", "keyslot", &cache.invalidations_key()])
            .parse()
            .unwrap();
        let owner = |cluster: &Cluster| {
            cluster
                .nodes
                .iter()
                .map(|(_, p)| *p)
                .find(|p| cli(*p, &["cluster", "countkeysinslot", &slot.to_string()]) != "0")
        };

        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let position = InvalidationChannel::keepalive(&cache, "p1", 1).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 1 })
        );
        cache.publish_invalidation("abc", 2, false).await.unwrap();
        assert!(matches!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Invalidate { version: 2, .. })
        ));

        // The fleet's slot moves to another master: the subscription ends (a lapse).
        let from = owner(&cluster).expect("the fleet's keys are somewhere");
        let to = *ports.iter().find(|p| **p != from).unwrap();
        move_slot(&cluster, slot, from, to);
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            None,
            "the subscription ended"
        );

        // The next subscription is made on the new owner (the old one answers MOVED).
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        InvalidationChannel::keepalive(&cache, "p1", 3).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 3 })
        );
        cache.publish_invalidation("abd", 4, false).await.unwrap();
        assert!(matches!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Invalidate { version: 4, .. })
        ));
        assert_eq!(owner(&cluster), Some(to));
        // The log moved with its identity key to a node with another replication id: a new epoch,
        // so a replay from before cannot be trusted.
        assert_eq!(cache.replay(&position).await.unwrap(), None);
    }

    #[test]
    fn cluster_settings_that_cannot_work_are_refused_before_connecting() {
        let refused = |seeds: &[&str], prefix: &str, ca: Option<Vec<u8>>| RedisCache::cluster(seeds, prefix, ca).err();
        assert!(matches!(
            refused(&["redis://127.0.0.1:7000/"], "a{b}:", None),
            Some(RedisSettingError::PrefixWithBrace)
        ));
        assert!(matches!(refused(&[], "p:", None), Some(RedisSettingError::Seeds(_))));
        assert!(matches!(
            refused(
                &["redis://:one@127.0.0.1:7000/", "redis://:two@127.0.0.1:7001/"],
                "p:",
                None
            ),
            Some(RedisSettingError::Seeds(_))
        ));
        assert!(matches!(
            refused(&["redis://127.0.0.1:7000/", "rediss://127.0.0.1:7001/"], "p:", None),
            Some(RedisSettingError::Seeds(_))
        ));
        assert!(matches!(
            refused(&["redis://127.0.0.1:7000/"], "p:", Some(Vec::new())),
            Some(RedisSettingError::CaWithoutTls)
        ));
        assert!(matches!(
            refused(&["http://x/"], "p:", None),
            Some(RedisSettingError::Url(_))
        ));
        assert!(RedisCache::cluster(&["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"], "p:", None).is_ok());
    }

    #[tokio::test]
    #[ignore = "needs redis-server and redis-cli (the test services): scripts/test runs it"]
    async fn a_cluster_s_password_reaches_every_node_and_a_wrong_one_is_a_setting_error() {
        let access = Access {
            password: Some(PASSWORD),
            ca: None,
        };
        let cluster = start_cluster_with(&["--requirepass", PASSWORD, "--masterauth", PASSWORD], &access).await;
        let seeds = |auth: &str| -> Vec<String> {
            cluster
                .nodes
                .iter()
                .map(|(_, p)| format!("redis://{auth}127.0.0.1:{p}/"))
                .collect()
        };
        let good = seeds(&format!(":{PASSWORD}@"));
        let good: Vec<&str> = good.iter().map(String::as_str).collect();
        let cache = RedisCache::cluster(&good, "auth:", None).unwrap();
        assert!(matches!(cache.check_settings().await, Ok(None)));
        // Records on every shard, and the subscription on the fleet's node, authenticate.
        reaches_every_shard_and_the_fleet_s_node(&cache).await;
        for bad in ["", ":wrong@"] {
            let seeds = seeds(bad);
            let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
            let refused = RedisCache::cluster(&seeds, "auth:", None)
                .unwrap()
                .check_settings()
                .await
                .unwrap_err();
            assert!(matches!(refused, RedisSettingError::Credentials(_)), "{bad}: {refused}");
        }
    }

    #[tokio::test]
    #[ignore = "needs redis-server and redis-cli (the test services): scripts/test runs it"]
    async fn a_subscription_passes_over_a_seed_node_that_is_gone() {
        // Without full coverage required, the live masters serve their slots while one is down.
        let mut cluster = start_cluster_with(&["--cluster-require-full-coverage", "no"], &Access::default()).await;
        let ports: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
        let fleet: u32 = cli(ports[0], &["cluster", "keyslot", "x:{fleet}invalidations"])
            .parse()
            .unwrap();
        // The first seed is a node that does not own the fleet's slot, and it is stopped.
        let gone = *ports.iter().find(|p| !serves(**p, fleet)).unwrap();
        let mut seeds: Vec<String> = vec![format!("redis://127.0.0.1:{gone}/")];
        seeds.extend(
            ports
                .iter()
                .filter(|p| **p != gone)
                .map(|p| format!("redis://127.0.0.1:{p}/")),
        );
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        for (child, port) in &mut cluster.nodes {
            if *port == gone {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let cache = RedisCache::cluster(&seeds, "x:", None).unwrap();
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        InvalidationChannel::keepalive(&cache, "p1", 5).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 5 })
        );
    }

    #[tokio::test]
    #[ignore = "needs redis-server, redis-cli and openssl (the test services): scripts/test runs it"]
    async fn over_tls_a_cluster_serves_records_the_subscription_and_the_feed_and_an_untrusted_certificate_is_refused() {
        let certs = tempfile::tempdir().unwrap();
        crate::connection::tests::certificates(certs.path());
        let file = |name: &str| certs.path().join(name).to_str().unwrap().to_owned();
        let access = Access {
            password: None,
            ca: Some(certs.path().join("ca.crt")),
        };
        let (crt, key, ca) = (file("server.crt"), file("server.key"), file("ca.crt"));
        let cluster = start_cluster_with(
            &[
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "no",
            ],
            &access,
        )
        .await;
        let seeds: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(_, p)| format!("rediss://127.0.0.1:{p}/"))
            .collect();
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        let pem = std::fs::read(certs.path().join("ca.crt")).unwrap();
        let cache = RedisCache::cluster(&seeds, "tls:", Some(pem)).unwrap();
        assert!(matches!(cache.check_settings().await, Ok(None)));
        reaches_every_shard_and_the_fleet_s_node(&cache).await;
        cache.announce_created("tlscode").await.unwrap();
        assert_eq!(
            cache.read_feed("0-0", Duration::from_millis(100)).await.unwrap().1,
            vec![rebound_store::fleet::FeedEntry::Created("tlscode".to_owned())]
        );
        // Checked against another authority: refused, with rustls' verdict.
        let other = std::fs::read(certs.path().join("other.crt")).unwrap();
        let refused = RedisCache::cluster(&seeds, "tls:", Some(other))
            .unwrap()
            .check_settings()
            .await
            .unwrap_err();
        assert!(matches!(refused, RedisSettingError::Certificate(_)), "{refused}");
    }

    /// Adds a replica of the master at `master` to `cluster`; returns its port once it is in sync.
    async fn add_replica(cluster: &mut Cluster, master: u16) -> u16 {
        let (replica, bus) = (free_port(), free_port());
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--cluster-enabled",
                "yes",
            ])
            .args(["--port", &replica.to_string(), "--cluster-port", &bus.to_string()])
            .args(["--cluster-config-file", &format!("nodes-{replica}.conf")])
            .arg("--dir")
            .arg(cluster._dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        cluster.nodes.push((child, replica));
        wait_until("the replica answers PING", || cli(replica, &["ping"]) == "PONG").await;
        let master_id = cli(master, &["cluster", "myid"]);
        let out = Command::new("redis-cli")
            .args([
                "--cluster",
                "add-node",
                &format!("127.0.0.1:{replica}"),
                &format!("127.0.0.1:{master}"),
            ])
            .args(["--cluster-slave", "--cluster-master-id", &master_id])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        wait_until("the replica in sync, the cluster ok", || {
            cli(replica, &["role"]).contains("connected")
                && cli(replica, &["cluster", "info"]).contains("cluster_state:ok")
        })
        .await;
        replica
    }

    #[tokio::test]
    #[ignore = "needs redis-server and redis-cli (the test services): scripts/test runs it"]
    async fn after_a_failover_of_the_fleet_s_master_the_subscription_ends_and_follows_the_new_one() {
        let mut cluster = start_cluster().await;
        let ports: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
        let fleet: u32 = cli(ports[0], &["cluster", "keyslot", "f:{fleet}invalidations"])
            .parse()
            .unwrap();
        let master = *ports.iter().find(|p| serves(**p, fleet)).unwrap();
        let replica = add_replica(&mut cluster, master).await;
        let seeds: Vec<String> = ports.iter().map(|p| format!("redis://127.0.0.1:{p}/")).collect();
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        let cache = RedisCache::cluster(&seeds, "f:", None).unwrap();
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let position = InvalidationChannel::keepalive(&cache, "p1", 1).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 1 })
        );
        // A coordinated failover: the replica takes the slots over, the master follows it.
        assert_eq!(cli(replica, &["cluster", "failover"]), "OK");
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            None,
            "the subscription on the old master ended"
        );
        wait_until("the replica serves the slot", || serves(replica, fleet)).await;
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let subscribed = |port: u16| cli(port, &["client", "list", "type", "pubsub"]).lines().count();
        assert_eq!(
            (subscribed(replica), subscribed(master)),
            (1, 0),
            "held on the new master"
        );
        InvalidationChannel::keepalive(&cache, "p1", 2).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 2 })
        );
        // The new master has a new replication id: a new epoch, the log from before not trusted.
        assert_eq!(cache.replay(&position).await.unwrap(), None);
    }

    #[tokio::test]
    #[ignore = "needs redis-server and redis-cli (the test services): scripts/test runs it"]
    async fn a_subscription_is_held_on_the_master_even_when_a_replica_is_asked_first() {
        // A replica of the fleet's master accepts SSUBSCRIBE, but hears the master's messages
        // over the cluster bus: the subscription must move to the master.
        let mut cluster = start_cluster().await;
        let ports: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
        let fleet: u32 = cli(ports[0], &["cluster", "keyslot", "r:{fleet}invalidations"])
            .parse()
            .unwrap();
        let master = *ports.iter().find(|p| serves(**p, fleet)).unwrap();
        let replica = add_replica(&mut cluster, master).await;
        // The replica is the first seed.
        let seeds = [
            format!("redis://127.0.0.1:{replica}/"),
            format!("redis://127.0.0.1:{master}/"),
        ];
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        let cache = RedisCache::cluster(&seeds, "r:", None).unwrap();
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let subscribed = |port: u16| cli(port, &["client", "list", "type", "pubsub"]).lines().count();
        assert_eq!((subscribed(master), subscribed(replica)), (1, 0), "held on the master");
        InvalidationChannel::keepalive(&cache, "p1", 4).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Keepalive { sent: 4 })
        );
    }
}
