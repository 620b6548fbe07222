//! The fleet's budget of password attempts per link ([`AttemptBudget`]) over Redis: one key
//! per link, `attempts:{key}`, taken from by one script ([`crate::scripts`]'s
//! `TAKE_ATTEMPT`, a GCRA on Redis's clock), which expires the key once the budget is full.

use crate::RedisCache;
use async_trait::async_trait;
use rebound_store::{AttemptBudget, StoreError};
use std::time::Duration;

#[async_trait]
impl AttemptBudget for RedisCache {
    async fn take_attempt(&self, key: &str, burst: u32, every: Duration) -> Result<Option<Duration>, StoreError> {
        let mut c = self.conn().await?;
        let wait_ms: i64 = self
            .scripts
            .take_attempt
            .key(self.keys.attempts(key))
            .arg(burst.max(1))
            .arg(every.as_millis().max(1) as u64)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok((wait_ms > 0).then(|| Duration::from_millis(wait_ms as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (scripts/test sets it)"]
    async fn two_caches_take_from_one_budget_per_link() {
        // Two proxies' connections to one Redis (the same prefix): one budget per link.
        let a = crate::connection::test_cache("attempts");
        let prefix = a.keys.attempts("").trim_end_matches("attempts:").to_owned();
        let url = std::env::var("REBOUND_TEST_REDIS_URL").unwrap();
        let b = match a.is_cluster() {
            true => RedisCache::cluster(&url.split(',').collect::<Vec<_>>(), &prefix, None).unwrap(),
            false => RedisCache::new(&url, &prefix).unwrap(),
        };
        let every = Duration::from_secs(60);
        for i in 0..3 {
            let cache = if i % 2 == 0 { &a } else { &b };
            assert_eq!(
                cache.take_attempt("link1", 3, every).await.unwrap(),
                None,
                "attempt {i}"
            );
        }
        for cache in [&a, &b] {
            let wait = cache.take_attempt("link1", 3, every).await.unwrap();
            assert!(
                wait.is_some_and(|w| w > Duration::from_secs(50) && w <= every),
                "{wait:?}"
            );
        }
        // Another link has its own budget.
        assert_eq!(a.take_attempt("link2", 3, every).await.unwrap(), None);
    }
}
