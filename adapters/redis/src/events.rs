//! The control plane's side of Redis: the link events ([`RedisLinkEvents`]) that write
//! creates through to L2 and the feed, and deletes (as tombstones) and edits (as their new
//! records) with invalidations that wait for the proxies' acknowledgements.

use crate::{acks, RedisCache};
use async_trait::async_trait;
use rebound_core::{CacheRecord, UnixMillis};
use rebound_store::RecordCache;
use std::time::Duration;

/// Longest a create waits on the write-through and the announcement.
const CREATE_ANNOUNCE_BUDGET: Duration = Duration::from_millis(300);
/// Longest a delete, takedown or edit waits on its record and invalidation before answering 503.
const DEACTIVATE_BUDGET: Duration = Duration::from_secs(1);

/// The link-event port over Redis (the control plane's side): a create is written through
/// to L2 and appended to the creation feed; a delete or takedown writes the tombstone with
/// its version (an edit its new record), publishes the invalidation, and then waits until
/// every live proxy has acknowledged it, or `invalidation_bound` for those that do not (see
/// [`acks`](crate::acks)).
pub struct RedisLinkEvents {
    pub cache: std::sync::Arc<RedisCache>,
    pub clock: std::sync::Arc<dyn rebound_core::Clock>,
    pub policy: rebound_core::cache::CachePolicy,
    pub acks: std::sync::Arc<acks::Acknowledgements>,
    /// `invalidation_timeout + l1_ttl`: the longest a proxy that heard nothing may still
    /// redirect from its L1, and so the longest a delete waits for one.
    pub invalidation_bound: Duration,
    /// `l1_ttl`: how long a proxy that no longer trusts its L1 keeps an entry, and so how
    /// long a delete waits for a proxy silent for longer than the invalidation timeout.
    pub l1_ttl: Duration,
}

impl RedisLinkEvents {
    /// How far back the registry counts a proxy as one a delete must wait for.
    fn registry_window(&self) -> Duration {
        self.invalidation_bound * rebound_store::fleet::REGISTRY_WINDOW_BOUNDS
    }

    /// A delete's or an edit's propagation: `record` (the tombstone, or the edited link's
    /// record) written for `code` at its version, the invalidation published, and every
    /// live proxy's acknowledgement waited for (or the bound).
    async fn propagate(
        &self,
        code: &str,
        record: CacheRecord,
        now: UnixMillis,
    ) -> Result<(), rebound_store::EventError> {
        let version = record.version;
        // Counting before the publish: no acknowledgement can come before it.
        let expectation = self.acks.expect(code, version);
        // On one Redis the record, the publish and the registry read are one step (one
        // round trip: what a far region's Redis costs); on a cluster, three.
        let one_step = self
            .cache
            .propagate_in_one_step(code, &record, now, self.registry_window());
        let read = match tokio::time::timeout(DEACTIVATE_BUDGET, one_step).await {
            Ok(result) => result.map_err(rebound_store::EventError::from)?,
            Err(_) => return Err(rebound_store::EventError("redis did not answer in time".into())),
        };
        let registry = match read {
            Some(registry) => Ok(registry),
            None => {
                let invalidate = async {
                    self.cache.put_record(code, &record, now).await?;
                    self.cache
                        .publish_invalidation(code, version, !record.is_tombstone())
                        .await
                };
                match tokio::time::timeout(DEACTIVATE_BUDGET, invalidate).await {
                    Ok(result) => result.map_err(rebound_store::EventError::from)?,
                    Err(_) => return Err(rebound_store::EventError("redis did not answer in time".into())),
                }
                match tokio::time::timeout(DEACTIVATE_BUDGET, self.cache.registry(self.registry_window())).await {
                    Ok(Ok(registry)) => Ok(registry),
                    Ok(Err(_)) | Err(_) => Err(()),
                }
            }
        };
        // Each proxy's deadline counts from the read, which came after the publish: a proxy
        // that missed it stops trusting its L1 within invalidation_timeout of the last
        // keepalive it sent, and what it kept then lives l1_ttl more; one silent for longer
        // than the timeout (dead, or cut off from Redis) serves only entries filled in the
        // last l1_ttl, before the change was written.
        let read_at = tokio::time::Instant::now();
        let timeout = self.invalidation_bound.saturating_sub(self.l1_ttl);
        // Every proxy registered within the window (by Redis's clock) may still hold the
        // code, even one that stopped sending keepalives (cut off from Redis, it still
        // serves). Not knowing which (the registry unreadable), the bound is waited out.
        // A Redis that lost its data (a failover to a replica that had not synced, a
        // restore) lost registrations: the proxies seen before are waited for too.
        let proxies: Vec<(String, tokio::time::Instant)> = match registry {
            Ok(registry) => self
                .acks
                .to_wait_for(&registry, self.registry_window(), timeout, self.l1_ttl)
                .into_iter()
                .map(|(proxy, serves)| (proxy, read_at + serves))
                .collect(),
            Err(()) => vec![(String::from("(registry unreadable)"), read_at + self.invalidation_bound)],
        };
        if let acks::WaitOutcome::WaitedOut(missing) = expectation.wait_for(&proxies).await {
            tracing::warn!(code, proxies = ?missing, "no acknowledgement before what they cached could expire; their L1 entries have expired by now");
        }
        Ok(())
    }
}

#[async_trait]
impl rebound_store::LinkEvents for RedisLinkEvents {
    async fn created(&self, link: &rebound_core::Link) -> Result<(), rebound_store::EventError> {
        let now = self.clock.now_millis();
        let record = CacheRecord::active(link, now, &self.policy);
        // Both at once (one round trip to a far region's Redis): the link is in the store
        // already, so a proxy that hears of it before L2 holds it reads it there.
        let announce = async {
            tokio::try_join!(
                self.cache.put_record(&link.code, &record, now),
                self.cache.announce_created(&link.code)
            )
            .map(|_| ())
        };
        // Bounded: proxies that miss the announcement bypass their filter, so a create never
        // waits long on a sick Redis.
        match tokio::time::timeout(CREATE_ANNOUNCE_BUDGET, announce).await {
            Ok(result) => result.map_err(rebound_store::EventError::from),
            Err(_) => Err(rebound_store::EventError("redis did not answer in time".into())),
        }
    }

    async fn leased(&self, high_water: u64) -> Result<(), rebound_store::EventError> {
        match tokio::time::timeout(CREATE_ANNOUNCE_BUDGET, self.cache.announce_high_water(high_water)).await {
            Ok(result) => result.map_err(rebound_store::EventError::from),
            Err(_) => Err(rebound_store::EventError("redis did not answer in time".into())),
        }
    }

    async fn deactivated(&self, link: &rebound_core::Link) -> Result<(), rebound_store::EventError> {
        let now = self.clock.now_millis();
        let tomb = CacheRecord::tombstone(link.version, now, &self.policy);
        self.propagate(&link.code, tomb, now).await
    }

    async fn changed(&self, link: &rebound_core::Link) -> Result<(), rebound_store::EventError> {
        let now = self.clock.now_millis();
        // The new record goes into L2 before the invalidation: a proxy that drops the old
        // version reads the new one there.
        let record = CacheRecord::active(link, now, &self.policy);
        self.propagate(&link.code, record, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::now_millis;
    use futures_util::StreamExt;
    use rebound_store::LinkEvents;
    use rebound_store::{ChannelMessage, InvalidationChannel};
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

    /// A control plane's acknowledgement listener on `cache`, listening: the listener, its
    /// metrics, what stops it and its task.
    async fn listening(
        cache: &Arc<RedisCache>,
    ) -> (
        Arc<acks::Acknowledgements>,
        acks::AckMetrics,
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let metrics = acks::AckMetrics::register(&prometheus::Registry::new()).unwrap();
        let acks = acks::Acknowledgements::new(metrics.clone());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let listener = tokio::spawn(acks.clone().listen(cache.clone(), shutdown));
        while metrics.listening.get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (acks, metrics, stop, listener)
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_delete_waits_for_each_live_proxy_to_acknowledge_or_for_the_bound() {
        let cache = Arc::new(crate::connection::test_cache("ack"));
        let (acks, metrics, stop, listener) = listening(&cache).await;
        let events = Arc::new(RedisLinkEvents {
            cache: cache.clone(),
            clock: Arc::new(rebound_core::SystemClock),
            policy: rebound_core::cache::CachePolicy::default(),
            acks,
            invalidation_bound: Duration::from_secs(30),
            l1_ttl: Duration::from_secs(1),
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
        let heard = crate::connection::next_message(&mut invalidations).await;
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

        // A proxy that never acknowledges holds a delete while it may still answer from its
        // L1: at least l1_ttl, however long ago it last registered.
        let short = RedisLinkEvents {
            cache: cache.clone(),
            clock: Arc::new(rebound_core::SystemClock),
            policy: rebound_core::cache::CachePolicy::default(),
            acks: acks::Acknowledgements::new(acks::AckMetrics::register(&prometheus::Registry::new()).unwrap()),
            invalidation_bound: Duration::from_millis(300),
            l1_ttl: Duration::from_millis(100),
        };
        let started = std::time::Instant::now();
        short.deactivated(&link("other", 2)).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "l1_ttl was not waited out"
        );
        // How long ago each proxy last registered is read by Redis's clock: a proxy silent for
        // longer than the invalidation timeout is waited for l1_ttl, not the whole bound.
        cache.keepalive("mute", 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let read = cache.registry(Duration::from_secs(30)).await.unwrap();
        let at = read.proxies.iter().position(|p| p == "mute").unwrap();
        assert!(read.ages_ms[at] >= 400, "{read:?}");
        let waited = short
            .acks
            .to_wait_for(&read, Duration::from_secs(30), Duration::from_millis(200), short.l1_ttl);
        assert!(
            waited.contains(&("mute".to_owned(), Duration::from_millis(100))),
            "{waited:?}"
        );
        stop.send(true).unwrap();
        listener.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_delete_with_two_healthy_proxies_takes_under_50_ms_at_p99() {
        // Redis's part of a delete (the tombstone, the invalidation, the registry read, both
        // acknowledgements), with two proxies that acknowledge what they hear, as the
        // proxies' listeners do. On a cluster the tombstones land on every shard. An edit's
        // part (the new record instead of the tombstone) is timed in the same run, printed.
        let cache = Arc::new(crate::connection::test_cache("p99"));
        let (acks, metrics, stop, listener) = listening(&cache).await;
        let mut proxies = Vec::new();
        for proxy in ["pa", "pb"] {
            let mut heard = InvalidationChannel::subscribe(cache.as_ref(), proxy).await.unwrap();
            cache.keepalive(proxy, 1).await.unwrap();
            let cache = cache.clone();
            proxies.push(tokio::spawn(async move {
                while let Some(message) = heard.next().await {
                    if let ChannelMessage::Invalidate { version, code } | ChannelMessage::Edited { version, code } =
                        message
                    {
                        cache.publish_ack(proxy, version, &code).await.unwrap();
                    }
                }
            }));
        }
        let events = RedisLinkEvents {
            cache: cache.clone(),
            clock: Arc::new(rebound_core::SystemClock),
            policy: rebound_core::cache::CachePolicy::default(),
            acks,
            invalidation_bound: Duration::from_secs(3),
            l1_ttl: Duration::from_secs(1),
        };
        let (mut took, mut edits) = (Vec::new(), Vec::new());
        for i in 0..500 {
            let started = std::time::Instant::now();
            events.deactivated(&link(&format!("del{i}"), 2)).await.unwrap();
            took.push(started.elapsed());
            let edited = rebound_core::Link {
                is_active: true,
                ..link(&format!("edit{i}"), 2)
            };
            let started = std::time::Instant::now();
            events.changed(&edited).await.unwrap();
            edits.push(started.elapsed());
        }
        for (what, took) in [("a delete's", &mut took), ("an edit's", &mut edits)] {
            took.sort();
            let p50 = took[took.len() / 2];
            eprintln!(
                "{what} Redis part, 2 proxies, {}: p50 {p50:?}, p99 {:?}, max {:?}",
                if cache.is_cluster() {
                    "a Redis Cluster"
                } else {
                    "one Redis"
                },
                took[took.len() * 99 / 100],
                took[took.len() - 1]
            );
        }
        assert_eq!(metrics.waited_out.get(), 0, "every delete and edit was acknowledged");
        let p99 = took[took.len() * 99 / 100];
        assert!(p99 <= Duration::from_millis(50), "p99 {p99:?}");
        stop.send(true).unwrap();
        listener.await.unwrap();
        for p in proxies {
            p.abort();
        }
    }
}
