//! The creation feed over Redis ([`CreationFeed`]): the stream `created`, a field `code`
//! per created link and `hwm` per KGS lease, read by each proxy from its own position.

use crate::RedisCache;
use async_trait::async_trait;
use rebound_store::fleet::{FeedEntry, FeedRead};
use rebound_store::{CreationFeed, StoreError};
use std::time::Duration;

/// Longest the creation stream grows (older entries are trimmed).
const FEED_MAX_LEN: usize = 2_000_000;

impl RedisCache {
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
            None => self.blocking_conn().await?,
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

    fn cache() -> RedisCache {
        crate::connection::test_cache("t")
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
}
