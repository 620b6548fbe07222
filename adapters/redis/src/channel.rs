//! The invalidation channel over Redis ([`InvalidationChannel`]): invalidations published
//! on `invalidate` and logged in the stream `invalidations` (replayed to a proxy whose
//! subscription lapsed), each proxy's keepalives on its own `alive:{proxy}` with the
//! registry `proxies` they keep, and the acknowledgements published on `acks`.

use crate::topology::{self, Deployment};
use crate::{decode_message, encode_ack, encode_invalidation, RedisCache};
use async_trait::async_trait;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use rebound_core::{CacheRecord, UnixMillis};
use rebound_store::{ChannelMessage, InvalidationChannel, StoreError};
use std::time::Duration;

/// The proxies registered within a window, as one read of the registry saw them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRead {
    pub proxies: Vec<String>,
    /// How long before the read each of `proxies` last registered, in milliseconds of
    /// Redis's clock (the same order).
    pub ages_ms: Vec<i64>,
    /// The epoch of the Redis they were read from.
    pub epoch: i64,
    /// False when the epoch is younger than the window: proxies registered before it (in
    /// a data set the Redis lost) may be missing.
    pub complete: bool,
}

/// The epoch of the fleet's keys (the registry, the log), kept apart from records' on a cluster.
const FLEET_EPOCH: crate::keys::EpochSlot = 0;

/// Invalidations kept in the log (about: trimmed in whole nodes).
const LOG_LEN: usize = 100_000;
/// Most invalidations a lapsed proxy replays; past that it empties its L1.
const REPLAY_MAX: usize = 10_000;

impl RedisCache {
    /// Publishes the invalidation of `code` at `version` (`edited`: an edit's, otherwise a
    /// delete's) to every proxy.
    pub async fn publish_invalidation(&self, code: &str, version: u64, edited: bool) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        self.scripts
            .invalidate
            .key(self.invalidations_key())
            .arg(encode_invalidation(version, code, edited))
            .arg(self.invalidate_channel())
            .arg(LOG_LEN)
            .arg(self.publish_command())
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// A delete's or an edit's three steps in one round trip, on one Redis: `record` (a
    /// delete's tombstone, an edit's new record) written for `code` (unless a newer version
    /// is there), its invalidation logged and published, then the registry read as
    /// [`RedisCache::registry`] does (`within`), in that order with no other client's
    /// command in between (the script `DEACTIVATE`). `None` on a cluster, where the record,
    /// the log and the registry are on different slots: the caller makes the three steps
    /// one after the other.
    pub async fn propagate_in_one_step(
        &self,
        code: &str,
        record: &CacheRecord,
        now: UnixMillis,
        within: Duration,
    ) -> Result<Option<RegistryRead>, StoreError> {
        let ttl = record.ttl_millis(now);
        if self.is_cluster() || ttl <= 0 {
            return Ok(None);
        }
        let mut c = self.conn().await?;
        type Registry = (i64, i64, Vec<String>, Vec<i64>);
        let (_, record_epoch, (epoch, age_ms, proxies, ages_ms)): (i64, i64, Registry) = self
            .scripts
            .deactivate
            .key(self.record_key(code))
            .key(self.record_identity_key(code))
            .key(self.invalidations_key())
            .key(self.proxies_key())
            .key(self.fleet_identity_key())
            .arg(record.version)
            .arg(serde_json::to_string(record).unwrap_or_default())
            .arg(ttl)
            .arg(encode_invalidation(record.version, code, !record.is_tombstone()))
            .arg(self.invalidate_channel())
            .arg(LOG_LEN)
            .arg(self.publish_command())
            .arg(within.as_millis() as u64)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(self.keys.record_epoch_slot(code), record_epoch);
        self.saw_epoch(FLEET_EPOCH, epoch);
        Ok(Some(RegistryRead {
            proxies,
            ages_ms,
            epoch,
            complete: age_ms >= within.as_millis() as i64,
        }))
    }

    /// The invalidations logged after `position` (as [`RedisCache::keepalive`] returned it),
    /// or `None` when they cannot all be told.
    pub async fn replay(&self, position: &str) -> Result<Option<Vec<ChannelMessage>>, StoreError> {
        let Some((epoch, id)) = position.split_once(' ') else {
            return Ok(None);
        };
        let mut c = self.conn().await?;
        let entries: Option<Vec<String>> = self
            .scripts
            .replay
            .key(self.fleet_identity_key())
            .key(self.invalidations_key())
            .arg(epoch)
            .arg(id)
            .arg(REPLAY_MAX)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(entries.map(|entries| entries.iter().filter_map(|e| decode_message(e)).collect()))
    }

    /// Sends `proxy`'s keepalive (its own send time `sent`) on its own channel and
    /// registers it as live, at Redis's time.
    pub async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError> {
        let mut c = self.conn().await?;
        let (_, epoch, position) = self
            .scripts
            .keepalive
            .key(self.proxies_key())
            .key(self.fleet_identity_key())
            .key(self.invalidations_key())
            .arg(proxy)
            .arg(self.alive_channel(proxy))
            .arg(sent)
            .arg(self.publish_command())
            .invoke_async::<(i64, i64, String)>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(FLEET_EPOCH, epoch);
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
        Ok(self.registry(within).await?.proxies)
    }

    /// [`RedisCache::live_proxies`], with the epoch they were read in and its age: a
    /// registry younger than `within` may miss proxies registered in the epoch before.
    pub async fn registry(&self, within: Duration) -> Result<RegistryRead, StoreError> {
        let mut c = self.conn().await?;
        let (epoch, age_ms, proxies, ages_ms): (i64, i64, Vec<String>, Vec<i64>) = self
            .scripts
            .live_proxies
            .key(self.proxies_key())
            .key(self.fleet_identity_key())
            .arg(within.as_millis() as u64)
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        self.saw_epoch(FLEET_EPOCH, epoch);
        Ok(RegistryRead {
            proxies,
            ages_ms,
            epoch,
            complete: age_ms >= within.as_millis() as i64,
        })
    }

    /// The messages of `channels` (the fleet's), on a connection of their own (a subscribed
    /// connection can do nothing else); on a cluster, shard channels subscribed on the node
    /// that owns the fleet's slot (see `topology`). The stream ends when the subscription does.
    pub async fn subscription(&self, channels: &[String]) -> Result<BoxStream<'static, redis::Msg>, StoreError> {
        match &self.deployment {
            Deployment::Single(client) => {
                let mut pubsub = client.get_async_pubsub().await.map_err(|e| self.failed(e))?;
                for channel in channels {
                    pubsub.subscribe(channel).await.map_err(|e| self.failed(e))?;
                }
                Ok(pubsub.into_on_message().boxed())
            }
            Deployment::Cluster { seeds, .. } => {
                // Asked first: the node that owned the slot last time, then each seed (any
                // live node names the owner), so a node gone for good is passed over.
                let remembered = self.fleet_node.lock().unwrap_or_else(|e| e.into_inner()).take();
                let mut candidates: Vec<String> = remembered.into_iter().collect();
                for seed in seeds {
                    let address = topology::address_of(seed);
                    if !candidates.contains(&address) {
                        candidates.push(address);
                    }
                }
                let mut unreachable = None;
                for first in candidates {
                    match topology::sharded_subscription(&seeds[0], first, channels).await {
                        Ok((messages, owner)) => {
                            *self.fleet_node.lock().unwrap_or_else(|e| e.into_inner()) = Some(owner);
                            return Ok(messages);
                        }
                        Err(e) if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() => {
                            unreachable = Some(e);
                        }
                        Err(e) => return Err(self.failed(e)),
                    }
                }
                Err(match unreachable {
                    Some(e) => self.failed(e),
                    None => StoreError::unavailable("Redis", "no seed node"),
                })
            }
        }
    }

    /// Publishes `proxy`'s acknowledgement of `code` at `version`.
    pub async fn publish_ack(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
        let mut c = self.conn().await?;
        redis::cmd(self.publish_command())
            .arg(self.acks_channel())
            .arg(encode_ack(proxy, version, code))
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
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
                decode_message(&payload).unwrap_or(ChannelMessage::Malformed)
            })
            .boxed())
    }

    async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError> {
        RedisCache::keepalive(self, proxy, sent).await
    }

    async fn replay(&self, position: &str) -> Result<Option<Vec<ChannelMessage>>, StoreError> {
        RedisCache::replay(self, position).await
    }

    async fn deregister(&self, proxy: &str) -> Result<(), StoreError> {
        RedisCache::deregister(self, proxy).await
    }

    async fn acknowledge(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
        self.publish_ack(proxy, version, code).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn the_log_replays_what_followed_a_keepalive_unless_redis_changed_identity() {
        let cache = crate::connection::test_cache("log");
        let empty = InvalidationChannel::keepalive(&cache, "p1", 1).await.unwrap();
        assert_eq!(cache.replay(&empty).await.unwrap(), Some(vec![]), "nothing logged yet");
        cache.publish_invalidation("one", 1, false).await.unwrap();
        let position = InvalidationChannel::keepalive(&cache, "p1", 2).await.unwrap();
        cache.publish_invalidation("two", 2, false).await.unwrap();
        cache.publish_invalidation("three", 3, true).await.unwrap();
        assert_eq!(
            cache.replay(&position).await.unwrap(),
            Some(vec![
                ChannelMessage::Invalidate {
                    version: 2,
                    code: "two".into()
                },
                ChannelMessage::Edited {
                    version: 3,
                    code: "three".into()
                }
            ])
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
        crate::connection::fake_identity_change(&cache, &cache.fleet_identity_key()).await;
        assert_eq!(cache.replay(&latest).await.unwrap(), None);
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_delete_in_one_step_writes_the_tombstone_publishes_logs_and_reads_the_registry() {
        use rebound_core::cache::CachePolicy;
        use rebound_store::{L2Read, RecordCache};
        let cache = crate::connection::test_cache("one-step");
        let policy = CachePolicy::default();
        let now = crate::connection::now_millis();
        cache
            .put_record("gone", &crate::connection::tests::record(1), now)
            .await
            .unwrap();
        let position = InvalidationChannel::keepalive(&cache, "p1", 1).await.unwrap();
        InvalidationChannel::keepalive(&cache, "p2", 1).await.unwrap();
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let tombstone = CacheRecord::tombstone(2, now, &policy);
        let read = cache
            .propagate_in_one_step("gone", &tombstone, now, Duration::from_secs(60))
            .await
            .unwrap();
        if cache.is_cluster() {
            // The record, the log and the registry are on different slots: three steps,
            // made by the caller, and nothing written here.
            assert_eq!(read, None);
            assert!(matches!(cache.get_record("gone").await.unwrap(), L2Read::Found(r) if r.version == 1));
            return;
        }
        let read = read.expect("one Redis: one step");
        let mut registered = read.proxies.clone();
        registered.sort();
        assert_eq!(registered, ["p1", "p2"]);
        assert!(
            matches!(cache.get_record("gone").await.unwrap(), L2Read::Found(r) if r.is_tombstone() && r.version == 2)
        );
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Invalidate {
                version: 2,
                code: "gone".into()
            })
        );
        assert_eq!(
            cache.replay(&position).await.unwrap(),
            Some(vec![ChannelMessage::Invalidate {
                version: 2,
                code: "gone".into()
            }])
        );
        // An older version does not replace a newer record, and is still published.
        let older = CacheRecord::tombstone(1, now, &policy);
        cache
            .propagate_in_one_step("gone", &older, now, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(matches!(cache.get_record("gone").await.unwrap(), L2Read::Found(r) if r.version == 2));
        assert_eq!(
            crate::connection::next_message(&mut messages).await,
            Some(ChannelMessage::Invalidate {
                version: 1,
                code: "gone".into()
            })
        );
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_subscriber_hears_invalidations_and_its_own_keepalives_in_order() {
        let cache = crate::connection::test_cache("ch");
        let mut messages = InvalidationChannel::subscribe(&cache, "p1").await.unwrap();
        let mut other = InvalidationChannel::subscribe(&cache, "p2").await.unwrap();
        cache.publish_invalidation("abc", 7, false).await.unwrap();
        InvalidationChannel::keepalive(&cache, "p1", 7).await.unwrap();
        // Garbage on the invalidation channel is heard (the channel is alive), not obeyed.
        let mut c = cache.conn().await.unwrap();
        redis::cmd(cache.publish_command())
            .arg(cache.invalidate_channel())
            .arg("not a message")
            .query_async::<i64>(&mut c)
            .await
            .unwrap();
        let mut heard = Vec::new();
        for _ in 0..3 {
            heard.push(crate::connection::next_message(&mut messages).await);
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
            theirs.push(crate::connection::next_message(&mut other).await);
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
