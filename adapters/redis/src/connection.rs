//! [`RedisCache`]: one Redis or a Redis Cluster, its connections and the breaker in front
//! of them, TLS and AUTH, the start-up check that tells a wrong setting from an outage, and
//! the names of the keys and channels. The ports served over it are in `cache`, `channel`
//! and `feed`.

use crate::keys::{EpochSlot, Keys};
use crate::scripts::Scripts;
use crate::topology::{Deployment, RedisConn};
use rebound_store::StoreError;
use redis::aio::ConnectionManager;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// Pause between connection attempts while Redis is unreachable.
const RECONNECT_EVERY_MS: i64 = 500;

/// A Redis connection made on first use (so a process starts while Redis is down) and
/// re-made by the connection manager (the cluster client, on a cluster) afterwards.
pub struct RedisCache {
    pub(crate) deployment: Deployment,
    pub(crate) keys: Keys,
    conn: RwLock<Option<RedisConn>>,
    last_attempt: AtomicI64,
    /// After a connection failure, calls fail at once until then instead of waiting on a
    /// dead server (a breaker: a request never pays for Redis being down twice).
    down_until: AtomicI64,
    connect_lock: tokio::sync::Mutex<()>,
    /// The connection of the creation feed's blocking reads (one reader per process), kept
    /// from one read to the next: a new TCP and TLS handshake every read would make a
    /// distant Redis look stalled.
    pub(crate) feed_conn: tokio::sync::Mutex<Option<RedisConn>>,
    /// On a cluster, the node that held the fleet's slot at the last subscription (where
    /// the next one starts looking).
    pub(crate) fleet_node: std::sync::Mutex<Option<String>>,
    pub(crate) scripts: Scripts,
    /// The last epoch scripts reported for each [`EpochSlot`] (0: none yet), and how often
    /// one changed since.
    epochs: Box<[AtomicI64]>,
    identity_changes: AtomicU64,
}

fn redis_err(e: redis::RedisError) -> StoreError {
    StoreError::unavailable("Redis", e)
}

impl RedisCache {
    /// Classifies a failed call: a connection failure opens the breaker for a moment.
    pub(crate) fn failed(&self, e: redis::RedisError) -> StoreError {
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            self.down_until
                .store(now_millis() + RECONNECT_EVERY_MS, Ordering::Relaxed);
        }
        redis_err(e)
    }
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// For the tests against a real Redis: a cache on `REBOUND_TEST_REDIS_URL` whose keys and
/// channels are this call's alone (its prefix is `what`, the time, the process and a count).
/// With `REBOUND_TEST_REDIS_CLUSTER=true`, the URL is a comma-separated list of the seed
/// nodes of a Redis Cluster (scripts/test runs this crate's tests a second time so).
/// A loopback port nothing listens on now, for a test's own server.
#[cfg(test)]
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The next message of a test's subscription within 5 s (`None`: the subscription ended).
#[cfg(test)]
pub(crate) async fn next_message(
    messages: &mut futures_util::stream::BoxStream<'static, rebound_store::ChannelMessage>,
) -> Option<rebound_store::ChannelMessage> {
    use futures_util::StreamExt;
    tokio::time::timeout(std::time::Duration::from_secs(5), messages.next())
        .await
        .expect("a message or the end within 5 s")
}

/// What a restart from a snapshot or a promoted replica looks like to the scripts: the
/// identity at `key` names another server, with the epoch it held (which may have begun
/// within the millisecond of the next read: the new epoch must still differ).
#[cfg(test)]
pub(crate) async fn fake_identity_change(cache: &RedisCache, key: &str) {
    let mut conn = cache.conn().await.unwrap();
    let held: String = redis::cmd("GET").arg(key).query_async(&mut conn).await.unwrap();
    let epoch = held
        .split(' ')
        .nth(1)
        .expect("an identity is `<replication id> <epoch>`");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(format!("0000000000000000000000000000000000000000 {epoch}"))
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[cfg(test)]
pub(crate) fn test_cache(what: &str) -> RedisCache {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let url = std::env::var("REBOUND_TEST_REDIS_URL")
        .expect("REBOUND_TEST_REDIS_URL is not set: run scripts/test, which starts a Redis server");
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("{what}{}-{}-{n}:", now_millis(), std::process::id());
    if std::env::var("REBOUND_TEST_REDIS_CLUSTER").is_ok_and(|v| v == "true") {
        let seeds: Vec<&str> = url.split(',').collect();
        return RedisCache::cluster(&seeds, &prefix, None).unwrap();
    }
    RedisCache::new(&url, &prefix).unwrap()
}

/// A Redis setting that cannot work: found when the cache is made, or by
/// [`RedisCache::check_settings`]. It names no setting (this crate is given values, not
/// told where they came from): the binary adds the setting's name.
#[derive(Debug, thiserror::Error)]
pub enum RedisSettingError {
    /// The URL is not one of a Redis.
    #[error("not a Redis URL")]
    Url(#[source] redis::RedisError),
    /// Certificate authorities given for a URL that is not TLS.
    #[error("certificate authorities are given but the URL is not a rediss:// (TLS) URL")]
    CaWithoutTls,
    /// The seed nodes of a cluster do not agree (TLS or not, credentials), or none is given.
    #[error("the cluster's seed nodes must all be given, with the same scheme and credentials")]
    Seeds(#[source] redis::RedisError),
    /// A prefix with a brace would put its own hash tag in every key on a cluster.
    #[error("on a Redis Cluster the prefix must not contain '{{' or '}}' (the keys' hash tags follow it)")]
    PrefixWithBrace,
    /// The certificate authorities are not PEM certificates. Redis's error is printed, not
    /// returned as the source: it is one of I/O, whose text is its `io::Error`'s and whose
    /// source is that `io::Error` again, so a chain of causes would print it twice.
    #[error("the certificate authorities are not readable as PEM certificates: {0}")]
    Ca(redis::RedisError),
    /// The server refused the password or the ACL user.
    #[error("Redis refused the credentials (the password, or the ACL user and password, in the URL)")]
    Credentials(#[source] redis::RedisError),
    /// The server's certificate is not signed by a trusted authority, or not for this
    /// host: rustls' verdict.
    #[error(
        "Redis's TLS certificate is not trusted (it must be signed by the given certificate authorities, or by \
         the system's when none are given, and be for the URL's host)"
    )]
    Certificate(#[source] rustls::Error),
}

/// True when `e` is a wrong setting (see [`classify_connect_error`]).
fn is_a_setting(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        || certificate_verdict(e).is_some()
}

/// A connection failure that is a wrong setting rather than an outage, told by what the
/// error is, never by its text.
fn classify_connect_error(e: redis::RedisError) -> Result<RedisSettingError, redis::RedisError> {
    // The client's own kind, or the code the server answered with (`-WRONGPASS …` to AUTH
    // with wrong credentials, `-NOAUTH …` to a command before any AUTH).
    if e.kind() == redis::ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH")) {
        return Ok(RedisSettingError::Credentials(e));
    }
    match certificate_verdict(&e) {
        Some(verdict) => Ok(RedisSettingError::Certificate(verdict.clone())),
        None => Err(e),
    }
}

/// rustls' verdict on the server's certificate, when that is why `e` failed. tokio-rustls
/// wraps it in the handshake's `io::Error`, whose `source()` skips it (an `io::Error`
/// prints its inner error as its own text): `get_ref` reaches it.
fn certificate_verdict(e: &redis::RedisError) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let inner = c.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref);
        let found = c
            .downcast_ref::<rustls::Error>()
            .or_else(|| inner.and_then(|i| i.downcast_ref::<rustls::Error>()));
        if let Some(verdict @ rustls::Error::InvalidCertificate(_)) = found {
            return Some(verdict);
        }
        cause = c.source();
    }
    None
}

impl RedisCache {
    /// A cache on `url` with keys and channels under `prefix`. Does not connect yet.
    pub fn new(url: &str, prefix: &str) -> Result<RedisCache, RedisSettingError> {
        let client = redis::Client::open(url).map_err(RedisSettingError::Url)?;
        Ok(RedisCache::with_client(client, prefix))
    }

    /// [`RedisCache::new`] for a `rediss://` URL whose server certificate is signed by one
    /// of the authorities in `ca_pem` (PEM) instead of the system's trust store.
    pub fn with_ca(url: &str, prefix: &str, ca_pem: Vec<u8>) -> Result<RedisCache, RedisSettingError> {
        if !url.starts_with("rediss://") {
            return Err(RedisSettingError::CaWithoutTls);
        }
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem),
        };
        let client = redis::Client::build_with_tls(url, certificates).map_err(|e| match e.kind() {
            // The PEM is read into `io::Error`s; the URL's faults are the client's own kind.
            redis::ErrorKind::IoError => RedisSettingError::Ca(e),
            _ => RedisSettingError::Url(e),
        })?;
        Ok(RedisCache::with_client(client, prefix))
    }

    /// A cache on the Redis Cluster whose seed nodes are `seeds` (URLs, all `redis://` or
    /// all `rediss://`, with the same credentials), the server certificates signed by one of
    /// the authorities in `ca_pem` when given. Keys are named with hash tags (see `keys`).
    /// Does not connect yet.
    pub fn cluster(seeds: &[&str], prefix: &str, ca_pem: Option<Vec<u8>>) -> Result<RedisCache, RedisSettingError> {
        if prefix.contains(['{', '}']) {
            return Err(RedisSettingError::PrefixWithBrace);
        }
        let disagree = |why: &'static str| {
            RedisSettingError::Seeds(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, why)))
        };
        let Some(first) = seeds.first() else {
            return Err(disagree("no seed node"));
        };
        let tls = first.starts_with("rediss://");
        if seeds.iter().any(|s| s.starts_with("rediss://") != tls) {
            return Err(disagree("some seed nodes are rediss:// and others are not"));
        }
        if ca_pem.is_some() && !tls {
            return Err(RedisSettingError::CaWithoutTls);
        }
        let certificates = ca_pem.map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        });
        // Each seed as a client of that one node sees it (TLS with the authorities, the
        // credentials): for the start-up check and the subscriptions' own connections.
        let nodes = seeds
            .iter()
            .map(|seed| {
                let client = match &certificates {
                    Some(c) => redis::Client::build_with_tls(*seed, c.clone()).map_err(|e| match e.kind() {
                        // The PEM is read into `io::Error`s; the URL's faults are the client's own kind.
                        redis::ErrorKind::IoError => RedisSettingError::Ca(e),
                        _ => RedisSettingError::Url(e),
                    })?,
                    None => redis::Client::open(*seed).map_err(RedisSettingError::Url)?,
                };
                Ok(client.get_connection_info().clone())
            })
            .collect::<Result<Vec<_>, RedisSettingError>>()?;
        let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.to_vec()).retries(1);
        if let Some(c) = certificates {
            builder = builder.certs(c);
        }
        let client = builder.build().map_err(RedisSettingError::Seeds)?;
        Ok(RedisCache::with_deployment(
            Deployment::Cluster {
                client: Box::new(client),
                seeds: nodes,
            },
            Keys::new(prefix, true),
        ))
    }

    /// True on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.deployment, Deployment::Cluster { .. })
    }

    /// Connects once to tell a wrong setting from an outage: refused credentials or a
    /// certificate that is not trusted are errors telling what to fix (the process
    /// must not run on them); an unreachable server is not (the cache connects lazily and
    /// retries, and the process serves meanwhile), and is returned as `Ok(Some(outage))`.
    pub async fn check_settings(&self) -> Result<Option<StoreError>, RedisSettingError> {
        let attempt = tokio::time::timeout(Duration::from_secs(3), self.first_connection()).await;
        match attempt {
            Ok(Ok(_)) => Ok(None),
            Ok(Err(e)) => match classify_connect_error(e) {
                Ok(setting) => Err(setting),
                Err(outage) => Ok(Some(redis_err(outage))),
            },
            Err(_) => Ok(Some(StoreError::unavailable("Redis", "no answer within 3 s"))),
        }
    }

    /// One connection and a `PING`, as the start-up check makes it.
    async fn first_connection(&self) -> redis::RedisResult<()> {
        async fn ping(client: &redis::Client) -> redis::RedisResult<()> {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut c).await.map(drop)
        }
        match &self.deployment {
            Deployment::Single(client) => ping(client).await,
            Deployment::Cluster { client, seeds } => {
                // A seed node alone first: its errors keep their kind (the cluster client
                // turns the causes of a failed first connection into text).
                let mut unreachable = None;
                for seed in seeds {
                    match ping(&redis::Client::open(seed.clone())?).await {
                        Ok(()) => {
                            unreachable = None;
                            break;
                        }
                        Err(e) if is_a_setting(&e) => return Err(e),
                        Err(e) => unreachable = Some(e),
                    }
                }
                if let Some(e) = unreachable {
                    return Err(e);
                }
                // Connecting reads the slots from a seed node; PING then goes to every primary.
                let mut c = client.get_async_connection().await?;
                redis::cmd("PING").query_async::<redis::Value>(&mut c).await.map(drop)
            }
        }
    }

    fn with_client(client: redis::Client, prefix: &str) -> RedisCache {
        RedisCache::with_deployment(Deployment::Single(client), Keys::new(prefix, false))
    }

    fn with_deployment(deployment: Deployment, keys: Keys) -> RedisCache {
        RedisCache {
            epochs: (0..keys.epoch_slots()).map(|_| AtomicI64::new(0)).collect(),
            deployment,
            keys,
            conn: RwLock::new(None),
            last_attempt: AtomicI64::new(i64::MIN / 2),
            down_until: AtomicI64::new(i64::MIN / 2),
            connect_lock: tokio::sync::Mutex::new(()),
            feed_conn: tokio::sync::Mutex::new(None),
            fleet_node: std::sync::Mutex::new(None),
            scripts: Scripts::new(),
            identity_changes: AtomicU64::new(0),
        }
    }

    /// Notes the epoch a script reported for `slot`; a new one means Redis (on a cluster:
    /// the node holding that bucket, or the fleet's slot) changed identity.
    pub(crate) fn saw_epoch(&self, slot: EpochSlot, epoch: i64) {
        let Some(held) = self.epochs.get(slot) else { return };
        let before = held.swap(epoch, Ordering::Relaxed);
        if before != 0 && before != epoch {
            self.identity_changes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                epoch,
                slot,
                "Redis changed identity (a failover or a restart): it may have lost writes, so live records \
                 written before now are confirmed by the store before use"
            );
        }
    }

    /// Times this process saw Redis change identity (`rebound_redis_identity_changes_total`;
    /// on a cluster, once per bucket of records and once for the fleet's slot).
    pub fn identity_changes(&self) -> u64 {
        self.identity_changes.load(Ordering::Relaxed)
    }

    /// True while the breaker is open: calls fail at once after a connection failure.
    pub fn breaker_open(&self) -> bool {
        now_millis() < self.down_until.load(Ordering::Relaxed)
    }

    pub fn record_key(&self, code: &str) -> String {
        self.keys.record(code)
    }

    /// The identity key (the epoch) the record of `code` is checked against.
    pub fn record_identity_key(&self, code: &str) -> String {
        self.keys.record_identity(code)
    }

    /// The identity key of the fleet's keys (the registry, the invalidation log).
    pub fn fleet_identity_key(&self) -> String {
        self.keys.fleet("identity")
    }

    pub fn invalidations_key(&self) -> String {
        self.keys.fleet("invalidations")
    }
    pub fn invalidate_channel(&self) -> String {
        self.keys.fleet("invalidate")
    }
    /// The channel of `proxy`'s own keepalives.
    pub fn alive_channel(&self, proxy: &str) -> String {
        self.keys.fleet(&format!("alive:{proxy}"))
    }
    pub fn feed_key(&self) -> String {
        self.keys.fleet("created")
    }
    /// The channel on which proxies acknowledge invalidations.
    pub fn acks_channel(&self) -> String {
        self.keys.fleet("acks")
    }
    /// The sorted set of proxies, scored by their last keepalive (Redis's Unix milliseconds).
    pub fn proxies_key(&self) -> String {
        self.keys.fleet("proxies")
    }

    /// The command that publishes on the fleet's channels: `PUBLISH` on one Redis,
    /// `SPUBLISH` (a shard channel of the fleet's slot) on a cluster.
    pub fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// A connection, making the first one if needed (at most one attempt per 500 ms).
    pub async fn conn(&self) -> Result<RedisConn, StoreError> {
        if now_millis() < self.down_until.load(Ordering::Relaxed) {
            return Err(StoreError::unavailable("Redis", "down (retrying shortly)"));
        }
        if let Some(c) = self.conn.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Ok(c.clone());
        }
        let _one_at_a_time = self.connect_lock.lock().await;
        if let Some(c) = self.conn.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Ok(c.clone());
        }
        let now = now_millis();
        if now - self.last_attempt.load(Ordering::Relaxed) < RECONNECT_EVERY_MS {
            return Err(StoreError::unavailable("Redis", "not connected"));
        }
        self.last_attempt.store(now, Ordering::Relaxed);
        // Room for a TLS handshake and AUTH with a distant Redis (several round trips);
        // requests never wait on it longer than their L2 budget.
        let (connect, respond) = (Duration::from_secs(2), Duration::from_secs(2));
        let conn = match &self.deployment {
            Deployment::Single(client) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(connect)
                    .set_response_timeout(respond)
                    .set_number_of_retries(1)
                    .set_max_delay(500);
                RedisConn::Managed(
                    ConnectionManager::new_with_config(client.clone(), config)
                        .await
                        .map_err(|e| self.failed(e))?,
                )
            }
            Deployment::Cluster { client, .. } => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(connect)
                    .set_response_timeout(respond);
                RedisConn::Cluster(
                    client
                        .get_async_connection_with_config(config)
                        .await
                        .map_err(|e| self.failed(e))?,
                )
            }
        };
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// A connection of its own for blocking reads (no response timeout: the read's own
    /// block bounds it): to the one Redis, or a cluster connection of its own.
    pub(crate) async fn blocking_conn(&self) -> Result<RedisConn, StoreError> {
        Ok(match &self.deployment {
            Deployment::Single(client) => RedisConn::Plain(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| self.failed(e))?,
            ),
            Deployment::Cluster { client, .. } => RedisConn::Cluster(
                client
                    .get_async_connection_with_config(
                        redis::cluster::ClusterConfig::new().set_connection_timeout(Duration::from_secs(2)),
                    )
                    .await
                    .map_err(|e| self.failed(e))?,
            ),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rebound_core::CacheRecord;
    use rebound_store::fleet::FeedEntry;
    use rebound_store::{ChannelMessage, InvalidationChannel, L2Read, RecordCache};
    use std::path::Path;
    use std::process::{Child, Command, Stdio};

    #[tokio::test]
    async fn an_unreachable_redis_is_an_error_not_a_hang() {
        let c = RedisCache::new("redis://127.0.0.1:9/", "x:").unwrap();
        assert!(c.get_record("abc").await.is_err());
        assert!(
            c.get_record("abc").await.is_err(),
            "the second attempt is refused without connecting"
        );
    }

    #[test]
    fn connection_errors_are_told_apart_by_what_they_are_not_by_their_text() {
        use redis::{make_extension_error, ErrorKind, RedisError};
        use std::io;
        let tls = |e: rustls::Error| RedisError::from(io::Error::new(io::ErrorKind::InvalidData, e));
        let server = |code: &str| make_extension_error(code.to_owned(), Some("whatever the server says".into()));
        let unknown_issuer = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let table: Vec<(RedisError, &str)> = vec![
            (
                RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed")),
                "credentials",
            ),
            (server("WRONGPASS"), "credentials"),
            (server("NOAUTH"), "credentials"),
            // Texts that would have fooled a match on words are outages.
            (
                RedisError::from((
                    ErrorKind::ResponseError,
                    "An error was signalled by the server",
                    "WRONGPASS".into(),
                )),
                "outage",
            ),
            (
                RedisError::from(io::Error::other("invalid peer certificate: TLS says no")),
                "outage",
            ),
            (tls(unknown_issuer.clone()), "certificate"),
            (
                tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName,
                )),
                "certificate",
            ),
            (tls(rustls::Error::HandshakeNotComplete), "outage"),
            (
                RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused)),
                "outage",
            ),
            (RedisError::from(io::Error::from(io::ErrorKind::TimedOut)), "outage"),
        ];
        for (e, expected) in table {
            let shown = e.to_string();
            let told = match classify_connect_error(e) {
                Ok(RedisSettingError::Credentials(_)) => "credentials",
                Ok(RedisSettingError::Certificate(_)) => "certificate",
                Ok(other) => panic!("{shown}: {other}"),
                Err(_) => "outage",
            };
            assert_eq!(told, expected, "{shown}");
        }
        // The cause is kept: rustls' verdict under the certificate error, Redis's error under
        // the refusal, both reachable as `source()`.
        let verdict = classify_connect_error(tls(unknown_issuer.clone())).unwrap();
        let cause = std::error::Error::source(&verdict).and_then(|c| c.downcast_ref::<rustls::Error>());
        assert_eq!(cause, Some(&unknown_issuer));
        let refusal = classify_connect_error(server("WRONGPASS")).unwrap();
        let cause = std::error::Error::source(&refusal).and_then(|c| c.downcast_ref::<RedisError>());
        assert_eq!(cause.and_then(RedisError::code), Some("WRONGPASS"));
    }

    #[test]
    fn an_outage_keeps_redis_s_error() {
        let e = redis_err(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(matches!(e, StoreError::Unavailable { what: "Redis", .. }));
        let kept = std::error::Error::source(&e).and_then(|c| c.downcast_ref::<redis::RedisError>());
        assert!(kept.is_some_and(redis::RedisError::is_connection_refusal), "{e}");
    }

    // Redis with TLS and with authentication: servers of the test's own, started from the
    // `redis-server` that the test services use.

    struct OwnRedis {
        child: Child,
        port: u16,
    }

    impl Drop for OwnRedis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A `redis-server` with `args`, its port (`--port`, or `--tls-port` when `tls`) ready.
    async fn start_redis(dir: &Path, tls: bool, args: &[&str]) -> OwnRedis {
        let port = free_port();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir);
        if tls {
            cmd.args(["--port", "0", "--tls-port", &port.to_string()]);
        } else {
            cmd.args(["--port", &port.to_string()]);
        }
        let child = cmd
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        // Owned at once: killed and waited for however the test ends.
        let redis = OwnRedis { child, port };
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return redis;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("redis-server did not listen on {port}");
    }

    fn openssl(args: &[&str], dir: &Path) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// A test CA (`ca.crt`) and a certificate it signed for localhost and 127.0.0.1
    /// (`server.crt`, `server.key`); and a second, unrelated CA (`other.crt`).
    pub(crate) fn certificates(dir: &Path) {
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for ca in ["ca", "other"] {
            let (key, crt, subj) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN=rebound test {ca}"),
            );
            let mut args = vec![
                "req", "-x509", "-days", "2", "-subj", &subj, "-keyout", &key, "-out", &crt,
            ];
            args.extend(ec);
            openssl(&args, dir);
        }
        let mut args = vec![
            "req",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ];
        args.extend(ec);
        openssl(&args, dir);
        std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                "san.ext",
                "-out",
                "server.crt",
            ],
            dir,
        );
    }

    /// An active record at `version`, fresh from now, as the write-through makes it.
    pub(crate) fn record(version: u64) -> CacheRecord {
        let now = now_millis();
        let link = rebound_core::Link {
            version,
            ..rebound_core::Link::new_active(
                "tlscode".into(),
                "https://example.com/".into(),
                rebound_core::RedirectKind::Found,
                false,
                now,
                "t".into(),
                None,
            )
        };
        CacheRecord::active(&link, now, &rebound_core::cache::CachePolicy::default())
    }

    #[tokio::test]
    #[ignore = "needs redis-server and openssl (the test services): scripts/test runs it"]
    async fn over_tls_with_the_configured_ca_everything_works_and_an_untrusted_certificate_is_a_setting_error() {
        let dir = tempfile::tempdir().unwrap();
        certificates(dir.path());
        let (crt, key, ca) = (
            dir.path().join("server.crt"),
            dir.path().join("server.key"),
            dir.path().join("ca.crt"),
        );
        let redis = start_redis(
            dir.path(),
            true,
            &[
                "--tls-cert-file",
                crt.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
                "--tls-ca-cert-file",
                ca.to_str().unwrap(),
                "--tls-auth-clients",
                "no",
            ],
        )
        .await;
        let url = format!("rediss://localhost:{}/", redis.port);
        let ca_pem = std::fs::read(&ca).unwrap();
        let cache = RedisCache::with_ca(&url, "tls:", ca_pem).unwrap();
        assert!(matches!(cache.check_settings().await, Ok(None)));
        // Records, the channel and the feed all go over the TLS connections.
        let now = now_millis();
        assert!(cache.put_record("tlscode", &record(3), now).await.unwrap());
        assert!(matches!(cache.get_record("tlscode").await.unwrap(), L2Read::Found(r) if r.version == 3));
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        cache.publish_invalidation("tlscode", 4, false).await.unwrap();
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Invalidate {
                version: 4,
                code: "tlscode".into()
            })
        );
        cache.announce_created("tlscode").await.unwrap();
        assert_eq!(
            cache.read_feed("0-0", Duration::from_millis(100)).await.unwrap().1,
            vec![FeedEntry::Created("tlscode".to_owned())]
        );

        // Signed by another authority, or checked against the system's store: refused, with
        // rustls' verdict as the cause.
        let other = RedisCache::with_ca(&url, "tls:", std::fs::read(dir.path().join("other.crt")).unwrap()).unwrap();
        let refused = other.check_settings().await.unwrap_err();
        assert!(
            matches!(
                refused,
                RedisSettingError::Certificate(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer
                ))
            ),
            "{refused}"
        );
        let system = RedisCache::new(&url, "tls:").unwrap();
        assert!(matches!(
            system.check_settings().await,
            Err(RedisSettingError::Certificate(_))
        ));
        // A CA for a cleartext URL is a mistake, said at once; so is one that is no PEM.
        let mixed = RedisCache::with_ca(&format!("redis://127.0.0.1:{}/", redis.port), "tls:", Vec::new());
        assert!(matches!(mixed.err(), Some(RedisSettingError::CaWithoutTls)));
        let garbled = RedisCache::with_ca(&url, "tls:", b"-----BEGIN CERTIFICATE-----\nnot base64!\n".to_vec());
        assert!(matches!(garbled.err(), Some(RedisSettingError::Ca(_))));
    }

    #[tokio::test]
    #[ignore = "needs redis-server (the test services): scripts/test runs it"]
    async fn a_password_or_an_acl_user_is_used_and_wrong_credentials_are_a_setting_error() {
        let dir = tempfile::tempdir().unwrap();
        let redis = start_redis(
            dir.path(),
            false,
            &[
                "--requirepass",
                "s3cret",
                "--user",
                "proxy",
                "on",
                ">pr0xy",
                "~*",
                "&*",
                "+@all",
            ],
        )
        .await;
        let url = |auth: &str| format!("redis://{auth}127.0.0.1:{}/", redis.port);
        for good in [":s3cret@", "proxy:pr0xy@"] {
            let cache = RedisCache::new(&url(good), "auth:").unwrap();
            assert!(matches!(cache.check_settings().await, Ok(None)), "{good}");
            let now = now_millis();
            assert!(cache.put_record("tlscode", &record(1), now).await.unwrap(), "{good}");
            let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
            InvalidationChannel::keepalive(&cache, "p1", 9).await.unwrap();
            assert_eq!(
                crate::connection::next_message(&mut messages).await,
                Some(ChannelMessage::Keepalive { sent: 9 }),
                "{good}"
            );
        }
        for bad in ["", ":wrong@", "proxy:wrong@", "nobody:s3cret@"] {
            let cache = RedisCache::new(&url(bad), "auth:").unwrap();
            let refused = cache.check_settings().await.unwrap_err();
            assert!(matches!(refused, RedisSettingError::Credentials(_)), "{bad}: {refused}");
        }
        // Unreachable is an outage, not a setting: the process starts and connects later.
        let down = RedisCache::new("redis://127.0.0.1:9/", "auth:").unwrap();
        assert!(matches!(down.check_settings().await, Ok(Some(_))));
    }
}
