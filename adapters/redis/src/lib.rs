//! Redis for the distributed mode: the L2 cache of cache records, written only through one
//! Lua script that refuses a lower version; the invalidation channel (pub/sub) with each
//! proxy's own keepalives and the registry of live proxies; and the creation feed (a
//! stream), so every proxy learns new aliases and the counter's high-water mark.
//!
//! Keys and channels all start with a configurable prefix (default `rebound:`):
//! `invalidations` (a stream: every invalidation, field `i`, so a proxy whose subscription
//! lapsed replays what it missed instead of emptying its L1),
//! `url:{code}` (a record: `"<version> <json>"`, TTL = `stale_until`, the JSON stamped by
//! the write script with the epoch it was written in, `{"e":<epoch>,…}`), `identity` (the
//! epoch: `"<run_id> <epoch>"`, see [`IDENTITY`]), `invalidate`
//! (`"<version> <code>"`), `alive:{proxy}` (each proxy's keepalives, heard by itself
//! alone), `acks` (`"<proxy> <version> <code>"`), the sorted set `proxies` (each proxy
//! scored by its last keepalive, in Redis's own time), and the stream `created` (field
//! `code` for a created link, field `hwm` for a KGS lease's high-water mark).
//!
//! # Layout
//!
//! - this file: [`RedisCache`] (connections with a breaker, TLS and AUTH, the start-up
//!   check of the settings), the L2, channel and feed ports over it, the wire formats, and
//!   [`RedisLinkEvents`], the control plane's side.
//! - `acks`: strict I1 across proxies, the deletes waiting for acknowledgements.

pub mod acks;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use rebound_core::{CacheRecord, UnixMillis};
use rebound_store::fleet::{FeedEntry, FeedRead};
use rebound_store::{ChannelMessage, CreationFeed, InvalidationChannel, L2Read, RecordCache, StoreError};
use redis::aio::ConnectionManager;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// The epoch of this Redis's data set, a Lua function the scripts below start with. A
/// Redis that restarted (from a snapshot older than its last writes, say) or a replica
/// promoted in a failover (that may have missed the last writes) has another `run_id`
/// than the one recorded in the key `identity` (the key came back from the snapshot, or
/// was replicated from the old primary): the first script to run there starts a new epoch,
/// the Redis time of that moment. Records carry the epoch they were written in; a live
/// record of an earlier epoch may predate a tombstone the Redis lost, and is confirmed by
/// the store before use.
const IDENTITY: &str = r"
local function epoch(key)
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local held = redis.call('GET', key)
  if held then
    local r, e = string.match(held, '^(%x+) (%d+)$')
    if r == run then return tonumber(e) end
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', key, run .. ' ' .. now)
  return now
end
";

/// A read: the record and the current epoch.
const READ: &str = r"
local e = epoch(KEYS[2])
return {redis.call('GET', KEYS[1]), e}
";

/// The versioned write: replaces the record unless the stored one has a higher version
/// (equal versions overwrite, so retries are idempotent), stamping it with the epoch.
/// Returns 1 when written, and the epoch.
const VERSIONED_SET: &str = r#"
local e = epoch(KEYS[2])
local current = redis.call('GET', KEYS[1])
if current then
  local v = tonumber(string.match(current, '^(%d+) '))
  if v and v > tonumber(ARGV[1]) then
    return {0, e}
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' {"e":' .. e .. ',' .. string.sub(ARGV[2], 2), 'PX', ARGV[3])
return {1, e}
"#;

/// A proxy's keepalive: registers it in `proxies` at Redis's time (never a process's own
/// clock, which may be skewed), drops registrations older than an hour, and publishes on
/// the proxy's own channel, which only its subscription hears.
const KEEPALIVE: &str = r"
local e = epoch(KEYS[2])
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local position = '0-0'
if last[1] then position = last[1][1] end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600000)
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {now, e, position}
";

/// An invalidation: logged in the stream `invalidations` (trimmed to about `ARGV[3]`
/// entries) and published, in one step, so the log and the channel agree on the order.
const INVALIDATE: &str = r"
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'i', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
";

/// The invalidations logged after the stream id `ARGV[2]` of epoch `ARGV[1]`, at most
/// `ARGV[3]` of them; nil when that cannot be told in full: the epoch changed (the Redis
/// may have lost entries), entries after the position were trimmed, or there are more.
const REPLAY: &str = r"
if epoch(KEYS[1]) ~= tonumber(ARGV[1]) then return false end
local limit = tonumber(ARGV[3])
local entries
if ARGV[2] == '0-0' then
  -- Nothing was logged then: complete if nothing was ever trimmed.
  if redis.call('EXISTS', KEYS[2]) == 0 then return {} end
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if not fields['entries-added'] or fields['entries-added'] ~= fields['length'] then return false end
  entries = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', limit + 1)
else
  -- The log is trimmed from its oldest end only: while the entry at the position is
  -- still there, everything after it is too.
  entries = redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', limit + 2)
  if #entries == 0 or entries[1][1] ~= ARGV[2] then return false end
  table.remove(entries, 1)
end
if #entries > limit then return false end
local out = {}
for i, entry in ipairs(entries) do out[i] = entry[2][2] end
return out
";

/// Invalidations kept in the log (about: trimmed in whole nodes).
const LOG_LEN: usize = 100_000;
/// Most invalidations a lapsed proxy replays; past that it empties its L1.
const REPLAY_MAX: usize = 10_000;

/// The proxies registered within the last `ARGV[1]` milliseconds of Redis's time.
const LIVE_PROXIES: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')
";

/// Longest the creation stream grows (older entries are trimmed).
const FEED_MAX_LEN: usize = 2_000_000;
/// Longest a create waits on the write-through and the announcement.
const CREATE_ANNOUNCE_BUDGET: Duration = Duration::from_millis(300);
/// Longest a delete or takedown waits on its tombstone and invalidation before answering 503.
const DEACTIVATE_BUDGET: Duration = Duration::from_secs(1);
/// Pause between connection attempts while Redis is unreachable.
const RECONNECT_EVERY_MS: i64 = 500;

/// A Redis connection made on first use (so a process starts while Redis is down) and
/// re-made by the connection manager afterwards.
pub struct RedisCache {
    client: redis::Client,
    prefix: String,
    conn: RwLock<Option<ConnectionManager>>,
    last_attempt: AtomicI64,
    /// After a connection failure, calls fail at once until then instead of waiting on a
    /// dead server (a breaker: a request never pays for Redis being down twice).
    down_until: AtomicI64,
    connect_lock: tokio::sync::Mutex<()>,
    /// The connection of the creation feed's blocking reads (one reader per process), kept
    /// from one read to the next: a new TCP and TLS handshake every read would make a
    /// distant Redis look stalled.
    feed_conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    script: redis::Script,
    read: redis::Script,
    keepalive: redis::Script,
    live_proxies: redis::Script,
    invalidate: redis::Script,
    replay: redis::Script,
    /// The last epoch a script reported (0: none yet), and how often it changed since.
    epoch: AtomicI64,
    identity_changes: AtomicU64,
}

fn redis_err(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

impl RedisCache {
    /// Classifies a failed call: a connection failure opens the breaker for a moment.
    fn failed(&self, e: redis::RedisError) -> StoreError {
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
            self.down_until
                .store(now_millis() + RECONNECT_EVERY_MS, Ordering::Relaxed);
        }
        redis_err(e)
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The invalidation message of `code` at `version`: `"<version> <code>"`.
pub fn encode_invalidation(version: u64, code: &str) -> String {
    format!("{version} {code}")
}

/// A proxy's acknowledgement of an invalidation: `"<proxy> <version> <code>"`.
pub fn encode_ack(proxy: &str, version: u64, code: &str) -> String {
    format!("{proxy} {version} {code}")
}

/// Reads an acknowledgement that [`encode_ack`] wrote: `(proxy, version, code)`.
pub fn decode_ack(payload: &str) -> Option<(&str, u64, &str)> {
    let (proxy, rest) = payload.split_once(' ')?;
    let (version, code) = decode_invalidation(rest)?;
    (!proxy.is_empty() && proxy.bytes().all(|b| b.is_ascii_alphanumeric())).then_some((proxy, version, code))
}

/// Reads an invalidation message that [`encode_invalidation`] wrote; `None` when malformed.
pub fn decode_invalidation(payload: &str) -> Option<(u64, &str)> {
    let (version, code) = payload.split_once(' ')?;
    let version = version.parse().ok()?;
    rebound_core::code::is_valid_code(code.as_bytes()).then_some((version, code))
}

/// The cache's own state, read at scrape time: `rebound_redis_breaker_open` (1 while Redis
/// calls fail fast after a connection failure) and `rebound_redis_identity_changes_total`.
pub struct RedisBreakerState {
    cache: std::sync::Arc<RedisCache>,
    gauge: prometheus::IntGauge,
    identity_changes: prometheus::IntCounter,
}

impl RedisBreakerState {
    /// Declares the metrics of `cache` in `registry`.
    pub fn register(registry: &prometheus::Registry, cache: std::sync::Arc<RedisCache>) -> prometheus::Result<()> {
        let gauge = prometheus::IntGauge::new(
            "rebound_redis_breaker_open",
            "1 while the Redis breaker is open (calls fail at once after a connection failure), else 0.",
        )?;
        let identity_changes = prometheus::IntCounter::new(
            "rebound_redis_identity_changes_total",
            "Times Redis was seen to change identity (a failover to a replica, a restart): live records written before are confirmed by the store before use.",
        )?;
        registry.register(Box::new(RedisBreakerState {
            cache,
            gauge,
            identity_changes,
        }))
    }
}

impl prometheus::core::Collector for RedisBreakerState {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut descs = self.gauge.desc();
        descs.extend(self.identity_changes.desc());
        descs
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.gauge.set(i64::from(self.cache.breaker_open()));
        let seen = self.cache.identity_changes();
        self.identity_changes
            .inc_by(seen.saturating_sub(self.identity_changes.get()));
        let mut families = self.gauge.collect();
        families.extend(self.identity_changes.collect());
        families
    }
}

/// A Redis setting that cannot work, found by [`RedisCache::check_settings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisSettingError {
    /// The server refused the password or the ACL user (`REBOUND_REDIS_URL`).
    Credentials(String),
    /// The server's certificate is not signed by a trusted authority, or not for this
    /// host (`REBOUND_REDIS_CA`, `REBOUND_REDIS_URL`).
    Certificate(String),
}

impl std::fmt::Display for RedisSettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisSettingError::Credentials(e) => write!(
                f,
                "REBOUND_REDIS_URL: Redis refused the credentials (the password, or the ACL user and password, in the URL): {e}"
            ),
            RedisSettingError::Certificate(e) => write!(
                f,
                "REBOUND_REDIS_CA: Redis's TLS certificate is not trusted (set REBOUND_REDIS_CA to the PEM of the authority that signed it, and check the host in REBOUND_REDIS_URL): {e}"
            ),
        }
    }
}

impl std::error::Error for RedisSettingError {}

/// A connection failure that is a wrong setting rather than an outage.
fn classify_connect_error(e: &redis::RedisError) -> Option<RedisSettingError> {
    let text = e.to_string();
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code().is_some_and(|c| c == "WRONGPASS" || c == "NOAUTH")
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
    {
        return Some(RedisSettingError::Credentials(text));
    }
    // rustls' verdicts on the server's certificate ("invalid peer certificate: …").
    if text.contains("invalid peer certificate") || text.contains("certificate") && text.contains("TLS") {
        return Some(RedisSettingError::Certificate(text));
    }
    None
}

/// Reads a stored record.
pub fn decode_record(raw: &str) -> Result<CacheRecord, StoreError> {
    decode_stamped_record(raw).map(|(record, _)| record)
}

/// Reads a stored record and the epoch it was written in (none: written by a version
/// before epochs, or not through the write script).
pub fn decode_stamped_record(raw: &str) -> Result<(CacheRecord, Option<i64>), StoreError> {
    let (_, json) = raw
        .split_once(' ')
        .ok_or_else(|| StoreError::Corrupt("cache record without version".into()))?;
    let epoch = json
        .strip_prefix(r#"{"e":"#)
        .and_then(|rest| rest.split_once(',')?.0.parse().ok());
    let record = serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("cache record: {e}")))?;
    Ok((record, epoch))
}

impl RedisCache {
    /// A cache on `url` with keys and channels under `prefix`. Does not connect yet.
    pub fn new(url: &str, prefix: &str) -> Result<RedisCache, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::Unavailable(format!("REBOUND_REDIS_URL: {e}")))?;
        Ok(RedisCache::with_client(client, prefix))
    }

    /// [`RedisCache::new`] for a `rediss://` URL whose server certificate is signed by one
    /// of the authorities in `ca_pem` (PEM) instead of the system's trust store.
    pub fn with_ca(url: &str, prefix: &str, ca_pem: Vec<u8>) -> Result<RedisCache, StoreError> {
        if !url.starts_with("rediss://") {
            return Err(StoreError::Unavailable(
                "REBOUND_REDIS_CA is set but REBOUND_REDIS_URL is not a rediss:// (TLS) URL".into(),
            ));
        }
        let certificates = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem),
        };
        let client = redis::Client::build_with_tls(url, certificates)
            .map_err(|e| StoreError::Unavailable(format!("REBOUND_REDIS_URL with REBOUND_REDIS_CA: {e}")))?;
        Ok(RedisCache::with_client(client, prefix))
    }

    /// Connects once to tell a wrong setting from an outage: refused credentials or a
    /// certificate that is not trusted are errors naming the setting to fix (the process
    /// must not run on them); an unreachable server is not (the cache connects lazily and
    /// retries, and the process serves meanwhile), and is returned as `Ok(Some(why))`.
    pub async fn check_settings(&self) -> Result<Option<String>, RedisSettingError> {
        let attempt = tokio::time::timeout(Duration::from_secs(3), async {
            let mut c = self.client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        })
        .await;
        match attempt {
            Ok(Ok(_)) => Ok(None),
            Ok(Err(e)) => match classify_connect_error(&e) {
                Some(error) => Err(error),
                None => Ok(Some(e.to_string())),
            },
            Err(_) => Ok(Some("no answer within 3 s".into())),
        }
    }

    fn with_client(client: redis::Client, prefix: &str) -> RedisCache {
        RedisCache {
            client,
            prefix: prefix.to_owned(),
            conn: RwLock::new(None),
            last_attempt: AtomicI64::new(i64::MIN / 2),
            down_until: AtomicI64::new(i64::MIN / 2),
            connect_lock: tokio::sync::Mutex::new(()),
            feed_conn: tokio::sync::Mutex::new(None),
            script: redis::Script::new(&format!("{IDENTITY}{VERSIONED_SET}")),
            read: redis::Script::new(&format!("{IDENTITY}{READ}")),
            keepalive: redis::Script::new(&format!("{IDENTITY}{KEEPALIVE}")),
            live_proxies: redis::Script::new(LIVE_PROXIES),
            invalidate: redis::Script::new(INVALIDATE),
            replay: redis::Script::new(&format!("{IDENTITY}{REPLAY}")),
            epoch: AtomicI64::new(0),
            identity_changes: AtomicU64::new(0),
        }
    }

    /// Notes the epoch a script reported; a new one means Redis changed identity.
    fn saw_epoch(&self, epoch: i64) {
        let before = self.epoch.swap(epoch, Ordering::Relaxed);
        if before != 0 && before != epoch {
            self.identity_changes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                epoch,
                "Redis changed identity (a failover or a restart): it may have lost writes, so live records \
                 written before now are confirmed by the store before use"
            );
        }
    }

    /// Times this process saw Redis change identity (`rebound_redis_identity_changes_total`).
    pub fn identity_changes(&self) -> u64 {
        self.identity_changes.load(Ordering::Relaxed)
    }

    /// True while the breaker is open: calls fail at once after a connection failure.
    pub fn breaker_open(&self) -> bool {
        now_millis() < self.down_until.load(Ordering::Relaxed)
    }

    /// The client, for connections of its own (pub/sub).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    pub fn record_key(&self, code: &str) -> String {
        format!("{}url:{}", self.prefix, code)
    }

    pub fn identity_key(&self) -> String {
        format!("{}identity", self.prefix)
    }

    pub fn invalidations_key(&self) -> String {
        format!("{}invalidations", self.prefix)
    }
    pub fn invalidate_channel(&self) -> String {
        format!("{}invalidate", self.prefix)
    }
    /// The channel of `proxy`'s own keepalives.
    pub fn alive_channel(&self, proxy: &str) -> String {
        format!("{}alive:{}", self.prefix, proxy)
    }
    pub fn feed_key(&self) -> String {
        format!("{}created", self.prefix)
    }
    /// The channel on which proxies acknowledge invalidations.
    pub fn acks_channel(&self) -> String {
        format!("{}acks", self.prefix)
    }
    /// The sorted set of proxies, scored by their last keepalive (Redis's Unix milliseconds).
    pub fn proxies_key(&self) -> String {
        format!("{}proxies", self.prefix)
    }

    /// A connection, making the first one if needed (at most one attempt per 500 ms).
    pub async fn conn(&self) -> Result<ConnectionManager, StoreError> {
        if now_millis() < self.down_until.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable("redis: down (retrying shortly)".into()));
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
            return Err(StoreError::Unavailable("redis: not connected".into()));
        }
        self.last_attempt.store(now, Ordering::Relaxed);
        let config = redis::aio::ConnectionManagerConfig::new()
            // Room for a TLS handshake and AUTH with a distant Redis (several round trips);
            // requests never wait on it longer than their L2 budget.
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(1)
            .set_max_delay(500);
        let conn = ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map_err(|e| self.failed(e))?;
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Publishes the invalidation of `code` at `version` to every proxy.
    pub async fn publish_invalidation(&self, code: &str, version: u64) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        self.invalidate
            .key(self.invalidations_key())
            .arg(encode_invalidation(version, code))
            .arg(self.invalidate_channel())
            .arg(LOG_LEN)
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// The invalidations logged after `position` (as [`RedisCache::keepalive`] returned it),
    /// or `None` when they cannot all be told.
    pub async fn replay(&self, position: &str) -> Result<Option<Vec<(u64, String)>>, StoreError> {
        let Some((epoch, id)) = position.split_once(' ') else {
            return Ok(None);
        };
        let mut c = self.conn().await?;
        let entries: Option<Vec<String>> = self
            .replay
            .key(self.identity_key())
            .key(self.invalidations_key())
            .arg(epoch)
            .arg(id)
            .arg(REPLAY_MAX)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(entries.map(|entries| {
            entries
                .iter()
                .filter_map(|e| decode_invalidation(e).map(|(v, code)| (v, code.to_owned())))
                .collect()
        }))
    }

    /// Sends `proxy`'s keepalive (its own send time `sent`) on its own channel and
    /// registers it as live, at Redis's time.
    pub async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError> {
        let mut c = self.conn().await?;
        let (_, epoch, position) = self
            .keepalive
            .key(self.proxies_key())
            .key(self.identity_key())
            .key(self.invalidations_key())
            .arg(proxy)
            .arg(self.alive_channel(proxy))
            .arg(sent)
            .invoke_async::<(i64, i64, String)>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(epoch);
        Ok(format!("{epoch} {position}"))
    }

    /// Removes `proxy` from the registry.
    pub async fn deregister(&self, proxy: &str) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd("ZREM")
            .arg(self.proxies_key())
            .arg(proxy)
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// The proxies whose last keepalive reached Redis within `within`, by Redis's clock.
    pub async fn live_proxies(&self, within: Duration) -> Result<Vec<String>, StoreError> {
        let mut c = self.conn().await?;
        self.live_proxies
            .key(self.proxies_key())
            .arg(within.as_millis() as u64)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))
    }

    /// The messages of `channels`, on a connection of their own (a subscribed connection
    /// can do nothing else).
    pub async fn subscription(&self, channels: &[String]) -> Result<redis::aio::PubSubStream, StoreError> {
        let mut pubsub = self.client.get_async_pubsub().await.map_err(|e| self.failed(e))?;
        for channel in channels {
            pubsub.subscribe(channel).await.map_err(|e| self.failed(e))?;
        }
        Ok(pubsub.into_on_message())
    }

    /// Publishes `proxy`'s acknowledgement of `code` at `version`.
    pub async fn publish_ack(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd("PUBLISH")
            .arg(self.acks_channel())
            .arg(encode_ack(proxy, version, code))
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// Appends `code` to the creation feed.
    pub async fn announce_created(&self, code: &str) -> Result<(), StoreError> {
        self.append_to_feed("code", code).await
    }

    /// Appends a KGS lease's high-water mark to the creation feed.
    pub async fn announce_high_water(&self, high_water: u64) -> Result<(), StoreError> {
        self.append_to_feed("hwm", &high_water.to_string()).await
    }

    async fn append_to_feed(&self, field: &str, value: &str) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd("XADD")
            .arg(self.feed_key())
            .arg("MAXLEN")
            .arg("~")
            .arg(FEED_MAX_LEN)
            .arg("*")
            .arg(field)
            .arg(value)
            .query_async::<String>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// The id of the newest feed entry (`0-0` when empty): where a reader that has just
    /// loaded every code from the store starts.
    pub async fn feed_position(&self) -> Result<String, StoreError> {
        let mut c = self.conn().await?;
        let newest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
            .arg(self.feed_key())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(newest.into_iter().next().map_or_else(|| "0-0".to_owned(), |(id, _)| id))
    }

    /// The oldest id still in the feed, if any (to tell whether a reader fell behind a trim).
    pub async fn feed_oldest(&self) -> Result<Option<String>, StoreError> {
        let mut c = self.conn().await?;
        let oldest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(self.feed_key())
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(oldest.into_iter().next().map(|(id, _)| id))
    }

    /// Feed entries after `after`, waiting up to `block` for one: `(last id, entries)`.
    pub async fn read_feed(&self, after: &str, block: Duration) -> Result<FeedRead, StoreError> {
        // A connection of its own: a blocking read must not hold up the shared one.
        let mut held = self.feed_conn.lock().await;
        let mut c = match held.take() {
            Some(c) => c,
            None => self
                .client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| self.failed(e))?,
        };
        type Reply = Option<Vec<(String, Vec<(String, Vec<(String, String)>)>)>>;
        let reply: Reply = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(10_000)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(self.feed_key())
            .arg(after)
            .query_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        // Kept only after a read that worked (a cancelled or failed one drops it).
        *held = Some(c);
        let mut last = None;
        let mut read = Vec::new();
        for (_, entries) in reply.unwrap_or_default() {
            for (id, fields) in entries {
                read.extend(fields.into_iter().filter_map(|(k, v)| match k.as_str() {
                    "code" => Some(FeedEntry::Created(v)),
                    // A mark this code cannot read is skipped: it only raises a mark, and the
                    // store's counter is read again at every sync.
                    "hwm" => v.parse().ok().map(FeedEntry::HighWater),
                    _ => None,
                }));
                last = Some(id);
            }
        }
        Ok((last, read))
    }
}

#[async_trait]
impl RecordCache for RedisCache {
    async fn get_record(&self, code: &str) -> Result<L2Read, StoreError> {
        let mut c = self.conn().await?;
        let (raw, epoch): (Option<String>, i64) = self
            .read
            .key(self.record_key(code))
            .key(self.identity_key())
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(epoch);
        let Some(raw) = raw else { return Ok(L2Read::Miss) };
        let (record, written_in) = decode_stamped_record(&raw)?;
        Ok(if record.is_tombstone() || written_in == Some(epoch) {
            L2Read::Found(record)
        } else {
            L2Read::Unconfirmed
        })
    }

    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
        let ttl = record.ttl_millis(now);
        if ttl <= 0 {
            return Ok(false);
        }
        let mut c = self.conn().await?;
        let (written, epoch): (i64, i64) = self
            .script
            .key(self.record_key(code))
            .key(self.identity_key())
            .arg(record.version)
            .arg(serde_json::to_string(record).unwrap_or_default())
            .arg(ttl)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(epoch);
        Ok(written == 1)
    }
}

#[async_trait]
impl InvalidationChannel for RedisCache {
    async fn subscribe(&self, proxy: &str) -> Result<BoxStream<'static, ChannelMessage>, StoreError> {
        let invalidate = self.invalidate_channel();
        Ok(self
            .subscription(&[invalidate.clone(), self.alive_channel(proxy)])
            .await?
            .map(move |msg| {
                let payload: String = msg.get_payload().unwrap_or_default();
                if msg.get_channel_name() != invalidate {
                    return match payload.parse() {
                        Ok(sent) => ChannelMessage::Keepalive { sent },
                        Err(_) => ChannelMessage::Malformed,
                    };
                }
                match decode_invalidation(&payload) {
                    Some((version, code)) => ChannelMessage::Invalidate {
                        version,
                        code: code.to_owned(),
                    },
                    None => ChannelMessage::Malformed,
                }
            })
            .boxed())
    }

    async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError> {
        RedisCache::keepalive(self, proxy, sent).await
    }

    async fn replay(&self, position: &str) -> Result<Option<Vec<(u64, String)>>, StoreError> {
        RedisCache::replay(self, position).await
    }

    async fn deregister(&self, proxy: &str) -> Result<(), StoreError> {
        RedisCache::deregister(self, proxy).await
    }

    async fn acknowledge(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
        self.publish_ack(proxy, version, code).await
    }
}

#[async_trait]
impl CreationFeed for RedisCache {
    async fn feed_position(&self) -> Result<String, StoreError> {
        RedisCache::feed_position(self).await
    }

    async fn read_feed(&self, after: &str, block: Duration) -> Result<FeedRead, StoreError> {
        RedisCache::read_feed(self, after, block).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{Link, RedirectKind};

    fn cache() -> RedisCache {
        let url = std::env::var("REBOUND_TEST_REDIS_URL")
            .expect("REBOUND_TEST_REDIS_URL is not set: run scripts/test, which starts a Redis server");
        let prefix = format!("t{}:", now_millis() * 1000 + (std::process::id() as i64 % 1000));
        RedisCache::new(&url, &prefix).unwrap()
    }

    fn active(version: u64, now: i64) -> CacheRecord {
        let mut l = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            None,
        );
        l.version = version;
        CacheRecord::active(&l, now, &CachePolicy::default())
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_populate_with_an_older_version_never_overwrites_a_tombstone() {
        let c = cache();
        let now = now_millis();
        // The race, driven through the script itself: a reader fetched version 1, then the
        // delete wrote its tombstone at version 2, then the reader's populate arrives.
        assert!(c.put_record("race", &active(1, now), now).await.unwrap());
        let tomb = CacheRecord::tombstone(2, now, &CachePolicy::default());
        assert!(c.put_record("race", &tomb, now).await.unwrap());
        assert!(!c.put_record("race", &active(1, now), now).await.unwrap(), "refused");
        assert_eq!(c.get_record("race").await.unwrap(), L2Read::Found(tomb.clone()));
        // The same version again is an idempotent retry.
        assert!(c.put_record("race", &tomb, now).await.unwrap());
        // The TTL is the record's stale_until.
        let mut conn = c.conn().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(c.record_key("race"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= tomb.ttl_millis(now), "{ttl}");
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn live_records_from_before_an_identity_change_need_the_store_and_tombstones_do_not() {
        let c = cache();
        let now = now_millis();
        let policy = CachePolicy::default();
        assert!(c.put_record("kept", &active(1, now), now).await.unwrap());
        assert!(c
            .put_record("gone", &CacheRecord::tombstone(2, now, &policy), now)
            .await
            .unwrap());
        assert_eq!(c.get_record("kept").await.unwrap(), L2Read::Found(active(1, now)));
        let mut conn = c.conn().await.unwrap();
        // A record of the format before epochs, as an older version wrote it.
        let old = format!("1 {}", serde_json::to_string(&active(1, now)).unwrap());
        let _: () = redis::cmd("SET")
            .arg(c.record_key("unstamped"))
            .arg(&old)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(c.get_record("unstamped").await.unwrap(), L2Read::Unconfirmed);
        assert_eq!(decode_record(&old).unwrap(), active(1, now), "still readable");
        // What a restart from a snapshot or a promoted replica looks like: the identity key
        // names another server.
        let _: () = redis::cmd("SET")
            .arg(c.identity_key())
            .arg("0000000000000000000000000000000000000000 5")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(c.get_record("kept").await.unwrap(), L2Read::Unconfirmed);
        assert_eq!(c.identity_changes(), 1);
        assert_eq!(
            c.get_record("gone").await.unwrap(),
            L2Read::Found(CacheRecord::tombstone(2, now, &policy)),
            "a tombstone is never wrong"
        );
        assert_eq!(c.get_record("nothing").await.unwrap(), L2Read::Miss);
        // Written again (the store confirmed it), it is found again.
        assert!(c.put_record("kept", &active(1, now), now).await.unwrap());
        assert_eq!(c.get_record("kept").await.unwrap(), L2Read::Found(active(1, now)));
        assert_eq!(c.identity_changes(), 1, "one change, seen once");
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn records_never_outlive_expiry() {
        let c = cache();
        let now = now_millis();
        let mut l = Link::new_active(
            "exp".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            Some(now + 1500),
        );
        l.version = 1;
        let rec = CacheRecord::active(&l, now, &CachePolicy::default());
        assert!(c.put_record("exp", &rec, now).await.unwrap());
        let mut conn = c.conn().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(c.record_key("exp"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl <= 1500, "TTL {ttl} past expiry");
        // An already expired record is not written at all.
        let gone = CacheRecord::active(&l, now, &CachePolicy::default());
        assert!(!c.put_record("exp2", &gone, now + 2000).await.unwrap());
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn the_creation_feed_reads_in_order_from_a_position() {
        let c = cache();
        assert_eq!(c.feed_position().await.unwrap(), "0-0");
        c.announce_created("first").await.unwrap();
        let pos = c.feed_position().await.unwrap();
        c.announce_created("second").await.unwrap();
        c.announce_high_water(20_000).await.unwrap();
        c.announce_created("third").await.unwrap();
        let (last, codes) = c.read_feed(&pos, Duration::from_millis(100)).await.unwrap();
        assert_eq!(
            codes,
            [
                FeedEntry::Created("second".into()),
                FeedEntry::HighWater(20_000),
                FeedEntry::Created("third".into())
            ]
        );
        let (none, empty) = c
            .read_feed(last.as_deref().unwrap(), Duration::from_millis(50))
            .await
            .unwrap();
        assert!(none.is_none() && empty.is_empty());
        assert!(c.feed_oldest().await.unwrap().is_some());
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_an_error_not_a_hang() {
        let c = RedisCache::new("redis://127.0.0.1:9/", "x:").unwrap();
        assert!(c.get_record("abc").await.is_err());
        assert!(
            c.get_record("abc").await.is_err(),
            "the second attempt is refused without connecting"
        );
    }
}

/// The link-event port over Redis (the control plane's side): a create is written through
/// to L2 and appended to the creation feed; a delete or takedown writes the tombstone with
/// its version (synchronously), publishes the invalidation, and then waits until every
/// live proxy has acknowledged it, or `invalidation_bound` for those that do not (see
/// [`acks`]).
pub struct RedisLinkEvents {
    pub cache: std::sync::Arc<RedisCache>,
    pub clock: std::sync::Arc<dyn rebound_core::Clock>,
    pub policy: rebound_core::cache::CachePolicy,
    pub acks: std::sync::Arc<acks::Acknowledgements>,
    /// `invalidation_timeout + l1_ttl`: the longest a proxy that heard nothing may still
    /// redirect from its L1, and so the longest a delete waits for one.
    pub invalidation_bound: Duration,
}

impl RedisLinkEvents {
    /// How far back the registry counts a proxy as one a delete must wait for.
    fn registry_window(&self) -> Duration {
        self.invalidation_bound * rebound_store::fleet::REGISTRY_WINDOW_BOUNDS
    }
}

#[async_trait]
impl rebound_store::LinkEvents for RedisLinkEvents {
    async fn created(&self, link: &rebound_core::Link) -> Result<(), rebound_store::EventError> {
        let now = self.clock.now_millis();
        let record = CacheRecord::active(link, now, &self.policy);
        let announce = async {
            self.cache.put_record(&link.code, &record, now).await?;
            self.cache.announce_created(&link.code).await
        };
        // Bounded: proxies that miss the announcement bypass their filter, so a create never
        // waits long on a sick Redis.
        match tokio::time::timeout(CREATE_ANNOUNCE_BUDGET, announce).await {
            Ok(result) => result.map_err(|e| rebound_store::EventError(e.to_string())),
            Err(_) => Err(rebound_store::EventError("redis did not answer in time".into())),
        }
    }

    async fn leased(&self, high_water: u64) -> Result<(), rebound_store::EventError> {
        match tokio::time::timeout(CREATE_ANNOUNCE_BUDGET, self.cache.announce_high_water(high_water)).await {
            Ok(result) => result.map_err(|e| rebound_store::EventError(e.to_string())),
            Err(_) => Err(rebound_store::EventError("redis did not answer in time".into())),
        }
    }

    async fn deactivated(&self, link: &rebound_core::Link) -> Result<(), rebound_store::EventError> {
        let now = self.clock.now_millis();
        let tomb = CacheRecord::tombstone(link.version, now, &self.policy);
        // Counting before the publish: no acknowledgement can come before it.
        let expectation = self.acks.expect(&link.code, link.version);
        let invalidate = async {
            self.cache.put_record(&link.code, &tomb, now).await?;
            self.cache.publish_invalidation(&link.code, link.version).await
        };
        match tokio::time::timeout(DEACTIVATE_BUDGET, invalidate).await {
            Ok(result) => result.map_err(|e| rebound_store::EventError(e.to_string()))?,
            Err(_) => return Err(rebound_store::EventError("redis did not answer in time".into())),
        }
        // The bound counts from the publish: a proxy that missed it stops trusting its L1
        // within invalidation_timeout of it, and what it kept then lives l1_ttl more.
        let deadline = tokio::time::Instant::now() + self.invalidation_bound;
        // Every proxy registered within the window (by Redis's clock) may still hold the
        // code, even one that stopped sending keepalives (cut off from Redis, it still
        // serves). Not knowing which (the registry unreadable), the bound is waited out.
        let registry = self.cache.live_proxies(self.registry_window());
        let proxies = match tokio::time::timeout(DEACTIVATE_BUDGET, registry).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) | Err(_) => vec![String::from("(registry unreadable)")],
        };
        if let acks::WaitOutcome::WaitedOut(missing) = expectation.wait_for(&proxies, deadline).await {
            tracing::warn!(code = %link.code, proxies = ?missing, "no acknowledgement within invalidation_timeout + l1_ttl; their L1 entries have expired by now");
        }
        Ok(())
    }
}

#[cfg(test)]
mod channel_tests {
    use super::*;

    #[test]
    fn invalidation_messages_round_trip_and_garbage_is_refused() {
        assert_eq!(decode_invalidation(&encode_invalidation(3, "abc")), Some((3, "abc")));
        for bad in ["x abc", "3 a/b", "3", "", " abc", "-1 abc", "3 "] {
            assert_eq!(decode_invalidation(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn the_log_replays_what_followed_a_keepalive_unless_redis_changed_identity() {
        let url = std::env::var("REBOUND_TEST_REDIS_URL").unwrap();
        let cache = RedisCache::new(&url, &format!("log{}:", now_millis())).unwrap();
        let empty = InvalidationChannel::keepalive(&cache, "p1", 1).await.unwrap();
        assert_eq!(cache.replay(&empty).await.unwrap(), Some(vec![]), "nothing logged yet");
        cache.publish_invalidation("one", 1).await.unwrap();
        let position = InvalidationChannel::keepalive(&cache, "p1", 2).await.unwrap();
        cache.publish_invalidation("two", 2).await.unwrap();
        cache.publish_invalidation("three", 3).await.unwrap();
        assert_eq!(
            cache.replay(&position).await.unwrap(),
            Some(vec![(2, "two".to_owned()), (3, "three".to_owned())])
        );
        assert_eq!(cache.replay(&empty).await.unwrap().map(|v| v.len()), Some(3));
        assert_eq!(cache.replay("garbage").await.unwrap(), None);
        // Trimmed past the position: cannot be told.
        let mut c = cache.conn().await.unwrap();
        let _: i64 = redis::cmd("XTRIM")
            .arg(cache.invalidations_key())
            .arg("MAXLEN")
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(cache.replay(&position).await.unwrap(), None);
        let latest = InvalidationChannel::keepalive(&cache, "p1", 3).await.unwrap();
        assert_eq!(cache.replay(&latest).await.unwrap(), Some(vec![]));
        // A Redis that changed identity may have lost entries.
        let _: () = redis::cmd("SET")
            .arg(cache.identity_key())
            .arg("0000000000000000000000000000000000000000 5")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(cache.replay(&latest).await.unwrap(), None);
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_subscriber_hears_invalidations_and_its_own_keepalives_in_order() {
        let url = std::env::var("REBOUND_TEST_REDIS_URL").unwrap();
        let cache = RedisCache::new(&url, &format!("ch{}:", now_millis())).unwrap();
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let mut other = InvalidationChannel::subscribe(&cache, "p2").await.unwrap();
        cache.publish_invalidation("abc", 7).await.unwrap();
        InvalidationChannel::keepalive(&cache, "p1", 7).await.unwrap();
        // Garbage on the invalidation channel is heard (the channel is alive), not obeyed.
        let mut c = cache.conn().await.unwrap();
        redis::cmd("PUBLISH")
            .arg(cache.invalidate_channel())
            .arg("not a message")
            .query_async::<i64>(&mut c)
            .await
            .unwrap();
        let mut heard = Vec::new();
        for _ in 0..3 {
            heard.push(
                tokio::time::timeout(Duration::from_secs(5), messages.next())
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(
            heard,
            vec![
                Some(ChannelMessage::Invalidate {
                    version: 7,
                    code: "abc".into()
                }),
                Some(ChannelMessage::Keepalive { sent: 7 }),
                Some(ChannelMessage::Malformed),
            ]
        );
        // p2 heard the invalidation and the garbage, never p1's keepalive.
        let mut theirs = Vec::new();
        for _ in 0..2 {
            theirs.push(
                tokio::time::timeout(Duration::from_secs(5), other.next())
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(theirs[1], Some(ChannelMessage::Malformed));
        assert!(
            tokio::time::timeout(Duration::from_millis(200), other.next())
                .await
                .is_err(),
            "nothing more for p2"
        );
    }
}

#[cfg(test)]
mod ack_tests {
    use super::*;
    use rebound_store::LinkEvents;
    use std::sync::Arc;

    fn link(code: &str, version: u64) -> rebound_core::Link {
        rebound_core::Link {
            version,
            is_active: false,
            ..rebound_core::Link::new_active(
                code.into(),
                "https://example.com/".into(),
                rebound_core::RedirectKind::Found,
                false,
                now_millis(),
                "t".into(),
                None,
            )
        }
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_delete_waits_for_each_live_proxy_to_acknowledge_or_for_the_bound() {
        let url = std::env::var("REBOUND_TEST_REDIS_URL").unwrap();
        let cache = Arc::new(RedisCache::new(&url, &format!("ack{}:", now_millis())).unwrap());
        let metrics = acks::AckMetrics::register(&prometheus::Registry::new()).unwrap();
        let acks = acks::Acknowledgements::new(metrics.clone());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let listener = tokio::spawn(acks.clone().listen(cache.clone(), shutdown));
        while metrics.listening.get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let events = Arc::new(RedisLinkEvents {
            cache: cache.clone(),
            clock: Arc::new(rebound_core::SystemClock),
            policy: rebound_core::cache::CachePolicy::default(),
            acks,
            invalidation_bound: Duration::from_secs(30),
        });
        // Two live proxies; one that left is not waited for.
        cache.keepalive("pa", 1).await.unwrap();
        cache.keepalive("pb", 1).await.unwrap();
        cache.keepalive("gone", 1).await.unwrap();
        cache.deregister("gone").await.unwrap();
        let mut live = cache.live_proxies(Duration::from_secs(30)).await.unwrap();
        live.sort();
        assert_eq!(live, ["pa", "pb"]);

        let mut invalidations = InvalidationChannel::subscribe(cache.as_ref(), "pa").await.unwrap();
        let delete = tokio::spawn({
            let events = events.clone();
            async move { events.deactivated(&link("gone", 4)).await }
        });
        // The invalidation goes out; one acknowledgement is not enough.
        let heard = tokio::time::timeout(Duration::from_secs(5), invalidations.next())
            .await
            .unwrap();
        assert_eq!(
            heard,
            Some(ChannelMessage::Invalidate {
                version: 4,
                code: "gone".into()
            })
        );
        cache.publish_ack("pa", 4, "gone").await.unwrap();
        cache.publish_ack("pb", 3, "gone").await.unwrap(); // an older version
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!delete.is_finished(), "answered before every live proxy acknowledged");
        cache.publish_ack("pb", 4, "gone").await.unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(5), delete).await;
        assert!(matches!(answered, Ok(Ok(Ok(())))), "{answered:?}");
        assert_eq!(metrics.received.get(), 2);
        assert_eq!(metrics.waited_out.get(), 0);

        // A proxy that never acknowledges holds a delete for the bound, and no longer.
        let short = RedisLinkEvents {
            cache: cache.clone(),
            clock: Arc::new(rebound_core::SystemClock),
            policy: rebound_core::cache::CachePolicy::default(),
            acks: acks::Acknowledgements::new(acks::AckMetrics::register(&prometheus::Registry::new()).unwrap()),
            invalidation_bound: Duration::from_millis(300),
        };
        let started = std::time::Instant::now();
        short.deactivated(&link("other", 2)).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "the bound was not waited out"
        );
        stop.send(true).unwrap();
        listener.await.unwrap();
    }
}

/// Redis with TLS and with authentication: servers of the test's own, started from the
/// `redis-server` that the test services use.
#[cfg(test)]
mod settings_tests {
    use super::*;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};

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

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
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
    fn certificates(dir: &Path) {
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

    fn record(version: u64) -> CacheRecord {
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
        assert_eq!(cache.check_settings().await, Ok(None));
        // Records, the channel and the feed all go over the TLS connections.
        let now = now_millis();
        assert!(cache.put_record("tlscode", &record(3), now).await.unwrap());
        assert!(matches!(cache.get_record("tlscode").await.unwrap(), L2Read::Found(r) if r.version == 3));
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        cache.publish_invalidation("tlscode", 4).await.unwrap();
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), messages.next())
                .await
                .unwrap(),
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

        // Signed by another authority, or checked against the system's store: refused, and
        // the error names the setting.
        let other = RedisCache::with_ca(&url, "tls:", std::fs::read(dir.path().join("other.crt")).unwrap()).unwrap();
        let refused = other.check_settings().await.unwrap_err();
        assert!(matches!(refused, RedisSettingError::Certificate(_)), "{refused}");
        assert!(refused.to_string().starts_with("REBOUND_REDIS_CA: "), "{refused}");
        let system = RedisCache::new(&url, "tls:").unwrap();
        assert!(matches!(
            system.check_settings().await,
            Err(RedisSettingError::Certificate(_))
        ));
        // A CA for a cleartext URL is a mistake, said at once.
        let mixed = RedisCache::with_ca(&format!("redis://127.0.0.1:{}/", redis.port), "tls:", Vec::new());
        assert!(mixed.err().unwrap().to_string().contains("REBOUND_REDIS_CA"));
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
            assert_eq!(cache.check_settings().await, Ok(None), "{good}");
            let now = now_millis();
            assert!(cache.put_record("tlscode", &record(1), now).await.unwrap(), "{good}");
            let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
            InvalidationChannel::keepalive(&cache, "p1", 9).await.unwrap();
            assert_eq!(
                tokio::time::timeout(Duration::from_secs(5), messages.next())
                    .await
                    .unwrap(),
                Some(ChannelMessage::Keepalive { sent: 9 }),
                "{good}"
            );
        }
        for bad in ["", ":wrong@", "proxy:wrong@", "nobody:s3cret@"] {
            let cache = RedisCache::new(&url(bad), "auth:").unwrap();
            let refused = cache.check_settings().await.unwrap_err();
            assert!(matches!(refused, RedisSettingError::Credentials(_)), "{bad}: {refused}");
            assert!(refused.to_string().starts_with("REBOUND_REDIS_URL: "), "{refused}");
        }
        // Unreachable is an outage, not a setting: the process starts and connects later.
        let down = RedisCache::new("redis://127.0.0.1:9/", "auth:").unwrap();
        assert!(matches!(down.check_settings().await, Ok(Some(_))));
    }
}
