//! The data plane's background tasks in distributed mode, over the fleet ports (Redis in
//! production, the fakes in the tests below): the invalidation listener (with heartbeats
//! that tell whether L1 may be trusted), the heartbeat publisher, and the creation feed
//! that keeps the Bloom filter current. None of them is ever awaited by a request.

use crate::bloom::BloomGate;
use crate::l1::L1;
use crate::path::InvalidationTrust;
use futures_util::StreamExt;
use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Clock};
use rebound_store::{ChannelMessage, CreationFeed, InvalidationChannel, LinkReads};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often each proxy publishes a heartbeat on the channel it listens to.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
/// Pause before reconnecting a broken subscription or feed.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// How long one creation-feed read blocks waiting for entries.
const FEED_BLOCK: Duration = Duration::from_millis(500);

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Listens to the invalidation and heartbeat channels: every message proves the channel
/// alive; an invalidation puts the tombstone with its version into L1, and is then
/// acknowledged as `proxy`.
pub async fn run_invalidation_listener(
    channel: Arc<dyn InvalidationChannel>,
    proxy: Arc<str>,
    l1: Arc<L1>,
    trust: Arc<InvalidationTrust>,
    clock: Arc<dyn Clock>,
    mut shutdown: watch::Receiver<bool>,
) {
    let policy = CachePolicy::default();
    loop {
        let session = async {
            let mut messages = channel.subscribe().await?;
            while let Some(message) = messages.next().await {
                let now = clock.now_millis();
                trust.heard(now, &l1);
                match message {
                    ChannelMessage::Invalidate { version, code } => {
                        l1.fill(&code, CacheRecord::tombstone(version, now, &policy), now);
                        // Dropped: the delete waiting for this proxy may answer. Not awaited
                        // here, so the next message is not held up by a round trip.
                        let (channel, proxy) = (channel.clone(), proxy.clone());
                        tokio::spawn(async move {
                            let ack = channel.acknowledge(&proxy, version, &code);
                            let _ = tokio::time::timeout(HEARTBEAT_EVERY * 4, ack).await;
                        });
                    }
                    ChannelMessage::Heartbeat => {}
                    ChannelMessage::Malformed => tracing::warn!("ignoring a malformed invalidation message"),
                }
            }
            Ok::<(), rebound_store::StoreError>(())
        };
        tokio::select! {
            result = session => {
                match result {
                    Err(e) => tracing::warn!(error = %e, "invalidation channel lost; L1 entries now live at most l1_ttl"),
                    Ok(()) => tracing::warn!("invalidation channel closed; L1 entries now live at most l1_ttl"),
                }
            }
            _ = stopped(&mut shutdown) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_AFTER) => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Publishes heartbeats so every proxy can tell a live channel from a silent one; each
/// registers this proxy (`proxy`) as live, so deletes wait for its acknowledgements.
pub async fn run_heartbeat(
    channel: Arc<dyn InvalidationChannel>,
    proxy: Arc<str>,
    clock: Arc<dyn Clock>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let _ = tokio::time::timeout(HEARTBEAT_EVERY, channel.publish_heartbeat(&proxy, clock.now_millis())).await;
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Keeps the Bloom filter current: note the feed's position, load every code from the
/// store, then follow the feed from that position. Whenever the feed cannot be read the
/// filter is bypassed, and it is loaded again before it is trusted again.
pub async fn run_creation_feed(
    feed: Arc<dyn CreationFeed>,
    bloom: Arc<BloomGate>,
    store: Arc<dyn LinkReads>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        bloom.set_current(false);
        let synced = async {
            let position = feed.feed_position().await.map_err(|e| e.to_string())?;
            let loaded = bloom.load_from(store.as_ref()).await.map_err(|e| e.to_string())?;
            tracing::info!(codes = loaded, "Bloom filter loaded; following the creation feed");
            Ok::<String, String>(position)
        };
        let position = tokio::select! {
            p = synced => p,
            _ = stopped(&mut shutdown) => return,
        };
        let mut last = match position {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sync the Bloom filter yet; it is bypassed");
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_AFTER * 4) => continue,
                    _ = stopped(&mut shutdown) => return,
                }
            }
        };
        bloom.set_current(true);
        loop {
            let read = tokio::time::timeout(FEED_BLOCK * 3, feed.read_feed(&last, FEED_BLOCK));
            let result = tokio::select! {
                r = read => r,
                _ = stopped(&mut shutdown) => return,
            };
            match result {
                Ok(Ok((id, codes))) => {
                    for code in &codes {
                        bloom.insert(code);
                    }
                    if let Some(id) = id {
                        last = id;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "creation feed lost; the Bloom filter is bypassed until it is synced again");
                    break;
                }
                Err(_) => {
                    tracing::warn!("creation feed stalled; the Bloom filter is bypassed until it is synced again");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{Link, ManualClock, RedirectKind};
    use rebound_store::fleet::{MemoryChannel, MemoryFeed};
    use rebound_store::{LinkStore, MemoryStore};

    fn link(code: &str, now: i64) -> Link {
        Link::new_active(
            code.into(),
            "https://example.com/".into(),
            RedirectKind::Found,
            false,
            now,
            "t".into(),
            None,
        )
    }

    fn active(code: &str, version: u64, now: i64) -> CacheRecord {
        let link = Link {
            version,
            ..link(code, now)
        };
        CacheRecord::active(&link, now, &CachePolicy::default())
    }

    /// Runs the listener on a fake channel; returns what it shares and the stop switch.
    async fn listening(
        channel: Arc<MemoryChannel>,
    ) -> (
        Arc<L1>,
        Arc<InvalidationTrust>,
        Arc<ManualClock>,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let (l1, clock) = (Arc::new(L1::new(100)), Arc::new(ManualClock::at(1_000_000)));
        let trust = Arc::new(InvalidationTrust::new(Duration::from_secs(2), Duration::from_secs(1)));
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(run_invalidation_listener(
            channel.clone(),
            Arc::from("p1"),
            l1.clone(),
            trust.clone(),
            clock.clone(),
            shutdown,
        ));
        while channel.subscribers() == 0 {
            tokio::task::yield_now().await;
        }
        (l1, trust, clock, stop, task)
    }

    /// Waits until `done` holds: polls it between short sleeps (under paused time they let
    /// the clock jump to the task's next timer), giving up after 10,000 of them.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the listener never got there");
    }

    #[tokio::test]
    async fn an_invalidation_puts_its_tombstone_in_l1_and_any_message_restores_trust() {
        let channel = Arc::new(MemoryChannel::default());
        let (l1, trust, clock, stop, task) = listening(channel.clone()).await;
        let now = clock.now_millis();
        assert!(!trust.is_trusted(now), "nothing heard yet");
        channel.send(ChannelMessage::Heartbeat);
        until(|| trust.is_trusted(now)).await;
        l1.fill("abc", active("abc", 1, now), now);
        channel.send(ChannelMessage::Heartbeat);
        // Messages are handled in order: once this one is, the heartbeat before it was.
        channel.send(ChannelMessage::Invalidate {
            version: 1,
            code: "zzz".into(),
        });
        until(|| l1.get("zzz").is_some()).await;
        assert!(
            l1.get("abc").is_some_and(|e| e.redirect().is_some()),
            "a heartbeat invalidates nothing"
        );

        channel.send(ChannelMessage::Invalidate {
            version: 2,
            code: "abc".into(),
        });
        until(|| l1.get("abc").is_some_and(|e| e.redirect().is_none())).await;
        assert_eq!(l1.get("abc").unwrap().version(), 2);
        // Acknowledged once it is dropped, as this proxy.
        until(|| channel.acks().contains(&("p1".to_owned(), 2, "abc".to_owned()))).await;

        // A malformed message changes no entry, but proves the channel alive.
        clock.advance(3_000);
        let later = clock.now_millis();
        assert!(!trust.is_trusted(later));
        l1.fill("def", active("def", 1, later), later);
        channel.send(ChannelMessage::Malformed);
        until(|| trust.is_trusted(later)).await;
        assert!(
            l1.get("def").is_none(),
            "the channel had lapsed: L1 was emptied when it came back"
        );
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_subscription_is_made_again() {
        let channel = Arc::new(MemoryChannel::default());
        let (l1, _trust, clock, stop, task) = listening(channel.clone()).await;
        channel.set_failing(true);
        until(|| channel.subscribers() == 0).await;
        channel.set_failing(false);
        // Paused time: the retry pause passes at once when the runtime is idle.
        until(|| channel.subscribers() == 1).await;
        let now = clock.now_millis();
        l1.fill("abc", active("abc", 1, now), now);
        channel.send(ChannelMessage::Invalidate {
            version: 5,
            code: "abc".into(),
        });
        until(|| l1.get("abc").is_some_and(|e| e.version() == 5)).await;
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_filter_is_current_only_while_the_feed_is_followed() {
        let (feed, store) = (Arc::new(MemoryFeed::default()), Arc::new(MemoryStore::new()));
        let now = 1_000_000;
        store.insert_link(&link("old", now), None).await.unwrap();
        feed.announce("old");
        let bloom = Arc::new(BloomGate::new(1_000));
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(run_creation_feed(feed.clone(), bloom.clone(), store.clone(), shutdown));
        until(|| bloom.is_current()).await;
        assert_eq!(bloom.may_contain("old"), Some(true), "loaded from the store");
        assert_eq!(bloom.may_contain("new"), Some(false));

        feed.announce("new");
        until(|| bloom.may_contain("new") == Some(true)).await;

        feed.set_failing(true);
        until(|| !bloom.is_current()).await;
        assert_eq!(
            bloom.may_contain("other"),
            None,
            "bypassed while the feed cannot be read"
        );
        // Back: loaded again from the store, then followed again.
        store.insert_link(&link("meanwhile", now), None).await.unwrap();
        feed.set_failing(false);
        until(|| bloom.is_current()).await;
        assert_eq!(
            bloom.may_contain("meanwhile"),
            Some(true),
            "created while the feed was lost"
        );
        feed.announce("after");
        until(|| bloom.may_contain("after") == Some(true)).await;
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
