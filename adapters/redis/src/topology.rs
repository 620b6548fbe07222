//! One Redis or a Redis Cluster: the clients, the connection type every port uses, and
//! the sharded subscription of a cluster.
//!
//! On a cluster the fleet's channels are shard channels (`SSUBSCRIBE`, `SPUBLISH`) of the
//! `{fleet}` slot: a subscription is held on the very node that runs the scripts publishing
//! on them, so the order of one subscription's messages (an invalidation before the
//! keepalive that follows it) is the order of that node's scripts, with no cluster bus in
//! between. The subscription is a connection of its own to that node, found by asking a
//! node (its `MOVED` answer names the owner); it ends, and so lapses, when the connection
//! does or when the slot moves (the server's `sunsubscribe`), and the next one finds the
//! new owner. The cluster client's own pub/sub is not used: it resubscribes by itself
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
    /// A cluster, and the first seed node's connection settings (TLS, credentials), used
    /// for the connections of its own a subscription makes to one node.
    Cluster {
        // Boxed: far larger than a single Redis's client.
        client: Box<redis::cluster::ClusterClient>,
        seed: ConnectionInfo,
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
                    moved = e.redirect_node().map(|(node, _)| node.to_owned());
                    break;
                }
                Err(e) => return Err(e),
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
