//! The L2 over Redis ([`RecordCache`]): records at `url:{code}`, read with the current
//! epoch (on a cluster, that of the record's bucket) and written only through the versioned
//! script, which refuses a lower version.

use crate::{decode_stamped_record, RedisCache};
use async_trait::async_trait;
use rebound_core::{CacheRecord, UnixMillis};
use rebound_store::{L2Read, RecordCache, StoreError};

#[async_trait]
impl RecordCache for RedisCache {
    async fn get_record(&self, code: &str) -> Result<L2Read, StoreError> {
        let mut c = self.conn().await?;
        let (raw, epoch): (Option<String>, i64) = self
            .scripts
            .read
            .key(self.record_key(code))
            .key(self.record_identity_key(code))
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(self.keys.record_epoch_slot(code), epoch);
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
            .scripts
            .versioned_set
            .key(self.record_key(code))
            .key(self.record_identity_key(code))
            .arg(record.version)
            .arg(serde_json::to_string(record).unwrap_or_default())
            .arg(ttl)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(self.keys.record_epoch_slot(code), epoch);
        Ok(written == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::now_millis;
    use crate::decode_record;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{Link, RedirectKind};

    fn cache() -> RedisCache {
        crate::connection::test_cache("t")
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
        // What a restart from a snapshot or a promoted replica looks like.
        crate::connection::fake_identity_change(&c, &c.record_identity_key("kept")).await;
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
}
