//! Redis for the distributed mode: the L2 cache of cache records, written only through one
//! Lua script that refuses a lower version; the invalidation and heartbeat channels
//! (pub/sub); and the creation feed (a stream), so every proxy's Bloom filter learns new codes.
//!
//! Keys and channels all start with a configurable prefix (default `rebound:`):
//! `url:{code}` (a record: `"<version> <json>"`, TTL = `stale_until`), `invalidate`
//! (`"<version> <code>"`), `heartbeat`, and the stream `created` (field `code`).

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::{CacheRecord, UnixMillis};
use redis::aio::ConnectionManager;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// The versioned write: replaces the record unless the stored one has a higher version
/// (equal versions overwrite, so retries are idempotent). Returns 1 when written.
const VERSIONED_SET: &str = r"
local current = redis.call('GET', KEYS[1])
if current then
  local v = tonumber(string.match(current, '^(%d+) '))
  if v and v > tonumber(ARGV[1]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Longest the creation stream grows (older entries are trimmed).
const FEED_MAX_LEN: usize = 2_000_000;
/// Longest a create waits on the write-through and the announcement.
const CREATE_ANNOUNCE_BUDGET: Duration = Duration::from_millis(300);
/// Longest a delete or takedown waits on its tombstone and invalidation before answering 503.
const DEACTIVATE_BUDGET: Duration = Duration::from_secs(1);
/// Pause between connection attempts while Redis is unreachable.
const RECONNECT_EVERY_MS: i64 = 500;

/// An L2 of cache records.
#[async_trait]
pub trait RecordCache: Send + Sync {
    /// The record of `code`, if cached.
    async fn get_record(&self, code: &str) -> Result<Option<CacheRecord>, StoreError>;
    /// Writes `record` unless a newer version is cached; true when written.
    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError>;
}

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
    script: redis::Script,
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

/// Encodes a record as stored: version first, so the Lua script reads it without JSON.
pub fn encode_record(record: &CacheRecord) -> String {
    format!(
        "{} {}",
        record.version,
        serde_json::to_string(record).unwrap_or_default()
    )
}

/// Reads a stored record.
pub fn decode_record(raw: &str) -> Result<CacheRecord, StoreError> {
    let (_, json) = raw
        .split_once(' ')
        .ok_or_else(|| StoreError::Corrupt("cache record without version".into()))?;
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("cache record: {e}")))
}

impl RedisCache {
    /// A cache on `url` with keys and channels under `prefix`. Does not connect yet.
    pub fn new(url: &str, prefix: &str) -> Result<RedisCache, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::Unavailable(format!("REBOUND_REDIS_URL: {e}")))?;
        Ok(RedisCache {
            client,
            prefix: prefix.to_owned(),
            conn: RwLock::new(None),
            last_attempt: AtomicI64::new(i64::MIN / 2),
            down_until: AtomicI64::new(i64::MIN / 2),
            connect_lock: tokio::sync::Mutex::new(()),
            script: redis::Script::new(VERSIONED_SET),
        })
    }

    /// The client, for connections of its own (pub/sub).
    /// True while the breaker is open: calls fail at once after a connection failure.
    pub fn breaker_open(&self) -> bool {
        now_millis() < self.down_until.load(Ordering::Relaxed)
    }

    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    pub fn record_key(&self, code: &str) -> String {
        format!("{}url:{}", self.prefix, code)
    }
    pub fn invalidate_channel(&self) -> String {
        format!("{}invalidate", self.prefix)
    }
    pub fn heartbeat_channel(&self) -> String {
        format!("{}heartbeat", self.prefix)
    }
    pub fn feed_key(&self) -> String {
        format!("{}created", self.prefix)
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
            .set_connection_timeout(Duration::from_millis(500))
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
        redis::cmd("PUBLISH")
            .arg(self.invalidate_channel())
            .arg(format!("{version} {code}"))
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// Publishes a heartbeat on the invalidation connection's channel.
    pub async fn publish_heartbeat(&self) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd("PUBLISH")
            .arg(self.heartbeat_channel())
            .arg("1")
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// Appends `code` to the creation feed.
    pub async fn announce_created(&self, code: &str) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd("XADD")
            .arg(self.feed_key())
            .arg("MAXLEN")
            .arg("~")
            .arg(FEED_MAX_LEN)
            .arg("*")
            .arg("code")
            .arg(code)
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

    /// Feed entries after `after`, waiting up to `block` for one: `(last id, codes)`.
    pub async fn read_feed(&self, after: &str, block: Duration) -> Result<(Option<String>, Vec<String>), StoreError> {
        // A connection of its own: a blocking read must not hold up the shared one.
        let mut c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| self.failed(e))?;
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
        let mut last = None;
        let mut codes = Vec::new();
        for (_, entries) in reply.unwrap_or_default() {
            for (id, fields) in entries {
                codes.extend(fields.into_iter().filter(|(k, _)| k == "code").map(|(_, v)| v));
                last = Some(id);
            }
        }
        Ok((last, codes))
    }
}

#[async_trait]
impl RecordCache for RedisCache {
    async fn get_record(&self, code: &str) -> Result<Option<CacheRecord>, StoreError> {
        let mut c = self.conn().await?;
        let raw: Option<String> = redis::cmd("GET")
            .arg(self.record_key(code))
            .query_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        raw.as_deref().map(decode_record).transpose()
    }

    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
        let ttl = record.ttl_millis(now);
        if ttl <= 0 {
            return Ok(false);
        }
        let mut c = self.conn().await?;
        let written: i64 = self
            .script
            .key(self.record_key(code))
            .arg(record.version)
            .arg(encode_record(record))
            .arg(ttl)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(written == 1)
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
        assert_eq!(c.get_record("race").await.unwrap(), Some(tomb.clone()));
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
        c.announce_created("third").await.unwrap();
        let (last, codes) = c.read_feed(&pos, Duration::from_millis(100)).await.unwrap();
        assert_eq!(codes, ["second", "third"]);
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

/// An in-memory [`RecordCache`] with the Lua script's version rule, for unit tests.
#[derive(Default)]
pub struct MemoryRecordCache {
    records: std::sync::Mutex<std::collections::HashMap<String, CacheRecord>>,
    failing: std::sync::atomic::AtomicBool,
    reads: std::sync::atomic::AtomicU64,
}

impl MemoryRecordCache {
    /// While true, every call fails.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
    /// Reads served so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    /// The record held for `code`.
    pub fn peek(&self, code: &str) -> Option<CacheRecord> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(code)
            .cloned()
    }
    fn check(&self) -> Result<(), StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("memory cache switched off".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl RecordCache for MemoryRecordCache {
    async fn get_record(&self, code: &str) -> Result<Option<CacheRecord>, StoreError> {
        self.check()?;
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.peek(code))
    }

    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
        self.check()?;
        if record.ttl_millis(now) <= 0 {
            return Ok(false);
        }
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.get(code).is_some_and(|existing| !record.may_replace(existing)) {
            return Ok(false);
        }
        records.insert(code.to_owned(), record.clone());
        Ok(true)
    }
}

/// The link-event port over Redis (the control plane's side): a create is written through
/// to L2 and appended to the creation feed; a delete or takedown writes the tombstone with
/// its version (synchronously) and then publishes the invalidation.
pub struct RedisLinkEvents {
    pub cache: std::sync::Arc<RedisCache>,
    pub clock: std::sync::Arc<dyn rebound_core::Clock>,
    pub policy: rebound_core::cache::CachePolicy,
}

#[async_trait]
impl crate::LinkEvents for RedisLinkEvents {
    async fn created(&self, link: &rebound_core::Link) -> Result<(), crate::EventError> {
        let now = self.clock.now_millis();
        let record = CacheRecord::active(link, now, &self.policy);
        let announce = async {
            self.cache.put_record(&link.code, &record, now).await?;
            self.cache.announce_created(&link.code).await
        };
        // Bounded: proxies that miss the announcement bypass their filter, so a create never
        // waits long on a sick Redis.
        match tokio::time::timeout(CREATE_ANNOUNCE_BUDGET, announce).await {
            Ok(result) => result.map_err(|e| crate::EventError(e.to_string())),
            Err(_) => Err(crate::EventError("redis did not answer in time".into())),
        }
    }

    async fn deactivated(&self, link: &rebound_core::Link) -> Result<(), crate::EventError> {
        let now = self.clock.now_millis();
        let tomb = CacheRecord::tombstone(link.version, now, &self.policy);
        let invalidate = async {
            self.cache.put_record(&link.code, &tomb, now).await?;
            self.cache.publish_invalidation(&link.code, link.version).await
        };
        match tokio::time::timeout(DEACTIVATE_BUDGET, invalidate).await {
            Ok(result) => result.map_err(|e| crate::EventError(e.to_string())),
            Err(_) => Err(crate::EventError("redis did not answer in time".into())),
        }
    }
}
