//! The data plane's background tasks in distributed mode, over the fleet ports (Redis in
//! production, the fakes in the tests below): the invalidation listener (whose own
//! keepalives tell whether L1 may be trusted), the keepalive sender, and the creation feed
//! that keeps the issued-code filter current. None of them is ever awaited by a request.

use crate::issued::{IssuedCodeGate, SyncError};
use crate::l1::L1;
use crate::trust::InvalidationTrust;
use futures_util::StreamExt;
use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Clock, UnixMillis};
use rebound_store::{ChannelMessage, CreationFeed, FeedEntry, InvalidationChannel, LinkReads};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often each proxy sends its keepalive through its own subscription (and registers).
pub const KEEPALIVE_EVERY: Duration = Duration::from_millis(250);
/// Pause before reconnecting a broken subscription or feed.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// How long one creation-feed read blocks waiting for entries.
const FEED_BLOCK: Duration = Duration::from_millis(500);
/// How often a proxy following the feed reads the high-water mark from the store again,
/// so a lease announcement lost on the way to Redis is made up for (a point read per region
/// slot's counter).
pub const HIGH_WATER_REFRESH: Duration = Duration::from_secs(30);
/// Pause before syncing again while the store cannot tell issued codes yet.
const NOT_YET_RETRY: Duration = Duration::from_secs(5);

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Listens to the invalidations on this proxy's own subscription: an invalidation puts the
/// tombstone with its version into L1 (an edit's voids the older versions there) and is
/// then acknowledged as `proxy`; the proxy's own
/// keepalive proves the subscription still delivers. Any end of a subscription, and a
/// subscription silent for `silent_after` (a half-open connection), is a lapse: L1 is not
/// trusted until a new subscription is heard. Once the new subscription is made, what was
/// published since the last keepalive heard is replayed from the channel's log; when that
/// cannot be told in full, L1 is emptied when the new subscription is heard.
pub async fn run_invalidation_listener(
    channel: Arc<dyn InvalidationChannel>,
    proxy: Arc<str>,
    l1: Arc<L1>,
    trust: Arc<InvalidationTrust>,
    clock: Arc<dyn Clock>,
    silent_after: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let session = async {
            let mut messages = channel.subscribe(&proxy).await?;
            if trust.is_lapsed() {
                replay(&channel, &proxy, &l1, &trust, clock.now_millis()).await;
            }
            loop {
                let message = match tokio::time::timeout(silent_after, messages.next()).await {
                    Ok(Some(message)) => message,
                    Ok(None) => return Ok(Lapse::Ended),
                    Err(_) => return Ok(Lapse::Silent),
                };
                let now = clock.now_millis();
                match message {
                    ChannelMessage::Keepalive { sent } => trust.heard(sent, &l1),
                    message @ (ChannelMessage::Invalidate { .. } | ChannelMessage::Edited { .. }) => {
                        apply(&channel, &proxy, &l1, message, now)
                    }
                    ChannelMessage::Malformed => tracing::warn!("ignoring a malformed invalidation message"),
                }
            }
        };
        let ended: Result<Lapse, rebound_store::StoreError> = tokio::select! {
            result = session => result,
            _ = stopped(&mut shutdown) => return,
        };
        // Whatever ended it, invalidations sent from now until the next subscription is
        // heard are presumed missed.
        trust.lapse();
        match ended {
            Err(e) => tracing::warn!(error = %rebound_core::Causes(&e), "invalidation channel lost; L1 entries now live at most l1_ttl"),
            Ok(Lapse::Ended) => tracing::warn!("invalidation channel closed; L1 entries now live at most l1_ttl"),
            Ok(Lapse::Silent) => tracing::warn!(
                ms = silent_after.as_millis() as u64,
                "invalidation channel silent (no keepalive came back); replacing it, L1 entries live at most l1_ttl meanwhile"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_AFTER) => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Applies an invalidation to L1, then acknowledges it: the delete or edit waiting for this
/// proxy may answer. A delete's puts the tombstone of `code` at `version` into L1; an
/// edit's voids every older version there (the next request reads the new one from L2,
/// where the control plane wrote it first). Not awaited, so the next message is not held
/// up by a round trip.
fn apply(channel: &Arc<dyn InvalidationChannel>, proxy: &Arc<str>, l1: &L1, message: ChannelMessage, now: UnixMillis) {
    let (version, code) = match message {
        ChannelMessage::Invalidate { version, code } => {
            l1.fill(
                &code,
                CacheRecord::tombstone(version, now, &CachePolicy::default()),
                now,
            );
            (version, code)
        }
        ChannelMessage::Edited { version, code } => {
            l1.supersede(&code, version, now);
            (version, code)
        }
        ChannelMessage::Keepalive { .. } | ChannelMessage::Malformed => return,
    };
    let (channel, proxy) = (channel.clone(), proxy.clone());
    tokio::spawn(async move {
        let ack = channel.acknowledge(&proxy, version, &code);
        let _ = tokio::time::timeout(KEEPALIVE_EVERY * 4, ack).await;
    });
}

/// After a lapse, on a new subscription: applies the invalidations logged since the last
/// keepalive heard, so L1 need not be emptied; when they cannot all be told (no keepalive
/// heard yet, the log trimmed past it, a Redis that lost writes, an error), L1 will be.
async fn replay(
    channel: &Arc<dyn InvalidationChannel>,
    proxy: &Arc<str>,
    l1: &L1,
    trust: &InvalidationTrust,
    now: UnixMillis,
) {
    let Some(position) = trust.applied_position() else {
        return;
    };
    match tokio::time::timeout(KEEPALIVE_EVERY * 4, channel.replay(&position)).await {
        Ok(Ok(Some(missed))) => {
            let count = missed.len();
            for message in missed {
                apply(channel, proxy, l1, message, now);
            }
            trust.replayed();
            tracing::info!(
                count,
                "replayed the invalidations the lapse may have swallowed; L1 is kept"
            );
        }
        Ok(Ok(None)) => tracing::warn!("the invalidations since the lapse cannot all be told; L1 will be emptied"),
        Ok(Err(e)) => {
            tracing::warn!(error = %rebound_core::Causes(&e), "cannot replay the invalidations; L1 will be emptied")
        }
        Err(_) => tracing::warn!("replaying the invalidations took too long; L1 will be emptied"),
    }
}

/// How a subscription that did not fail ended.
enum Lapse {
    /// The stream ended (the connection was closed or cut).
    Ended,
    /// Nothing came, not even this proxy's keepalive.
    Silent,
}

/// Sends this proxy's keepalives, stamped with its own clock, through the channel (each
/// registers it as live, so deletes wait for its acknowledgements) until `shutdown`.
pub async fn run_keepalive(
    channel: Arc<dyn InvalidationChannel>,
    proxy: Arc<str>,
    trust: Arc<InvalidationTrust>,
    clock: Arc<dyn Clock>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(KEEPALIVE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let sent = clock.now_millis();
                if let Ok(Ok(position)) = tokio::time::timeout(KEEPALIVE_EVERY, channel.keepalive(&proxy, sent)).await {
                    trust.sent(sent, position);
                }
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Keeps the issued-code filter current: note the feed's position, read the high-water
/// mark and the alias index from the store (never the links: the time this takes does not
/// grow with the generated links), then follow the feed from that position, raising the
/// mark with every lease and adding every new alias. Whenever the feed cannot be read the
/// filter is bypassed, and it is synced again before it is trusted again. `key` is the
/// configured permutation key, checked against the one the control planes stored.
pub async fn run_creation_feed(
    feed: Arc<dyn CreationFeed>,
    issued: Arc<IssuedCodeGate>,
    store: Arc<dyn LinkReads>,
    key: Option<[u8; 16]>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        issued.set_current(false);
        let started = std::time::Instant::now();
        let synced = async {
            let position = feed.feed_position().await.map_err(SyncError::Store)?;
            let aliases = issued.load_from(store.as_ref(), key).await?;
            tracing::info!(
                aliases,
                high_water = issued.high_water(),
                ms = started.elapsed().as_millis() as u64,
                "issued-code filter synced; following the creation feed"
            );
            Ok::<String, SyncError>(position)
        };
        let position = tokio::select! {
            p = synced => p,
            _ = stopped(&mut shutdown) => return,
        };
        let mut last = match position {
            Ok(p) => p,
            Err(e) => {
                let pause = match e {
                    // A key other than the store's (recorded after this proxy started): as
                    // safe, and logged until the configuration is fixed.
                    SyncError::NotYet(_) | SyncError::CodeKey(_) => {
                        // Safe to serve: bypassed, every unknown code is read from the store.
                        issued.set_ready_bypassed();
                        NOT_YET_RETRY
                    }
                    SyncError::Store(_) => RETRY_AFTER * 4,
                };
                tracing::warn!(error = %rebound_core::Causes(&e), "cannot sync the issued-code filter yet; it is bypassed");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue,
                    _ = stopped(&mut shutdown) => return,
                }
            }
        };
        issued.set_current(true);
        let mut refreshed = tokio::time::Instant::now();
        loop {
            let read = tokio::time::timeout(FEED_BLOCK * 3, feed.read_feed(&last, FEED_BLOCK));
            let result = tokio::select! {
                r = read => r,
                _ = stopped(&mut shutdown) => return,
            };
            match result {
                Ok(Ok((id, entries))) => {
                    for entry in &entries {
                        match entry {
                            FeedEntry::HighWater(h) => issued.raise_high_water(*h),
                            FeedEntry::Created(code) => issued.created(code),
                        }
                    }
                    if let Some(id) = id {
                        last = id;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %rebound_core::Causes(&e), "creation feed lost; the issued-code filter is bypassed until it is synced again");
                    break;
                }
                Err(_) => {
                    tracing::warn!(
                        "creation feed stalled; the issued-code filter is bypassed until it is synced again"
                    );
                    break;
                }
            }
            if refreshed.elapsed() >= HIGH_WATER_REFRESH {
                refreshed = tokio::time::Instant::now();
                // Every region slot's counter: a point read each.
                let _ = tokio::time::timeout(FEED_BLOCK * 2, issued.read_marks(store.as_ref())).await;
            }
        }
    }
}

/// The all-in-one's sync of the issued-code filter: read the high-water mark and the alias
/// index once (retrying while the store fails), then trust the filter for good, since every
/// lease and create of the process reaches it directly ([`crate::events`]) and a lease or
/// create made during the sync only raises the mark or adds an alias.
pub async fn sync_embedded_filter(issued: Arc<IssuedCodeGate>, store: Arc<dyn LinkReads>, key: Option<[u8; 16]>) {
    let started = std::time::Instant::now();
    loop {
        match issued.load_from(store.as_ref(), key).await {
            Ok(aliases) => {
                issued.set_current(true);
                tracing::info!(
                    aliases,
                    high_water = issued.high_water(),
                    ms = started.elapsed().as_millis() as u64,
                    "issued-code filter loaded"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %rebound_core::Causes(&e), "loading the issued-code filter failed; retrying (it is bypassed meanwhile)");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::generated::COUNTER;
    use rebound_core::{Link, ManualClock, RedirectKind};
    use rebound_store::fleet::{MemoryChannel, MemoryFeed};
    use rebound_store::{CounterStore, LinkStore, MemoryStore};

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

    const SILENT_AFTER: Duration = Duration::from_secs(2);

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
            SILENT_AFTER,
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
        channel.send(ChannelMessage::Keepalive {
            sent: clock.now_millis(),
        });
        until(|| trust.is_trusted(now)).await;
        clock.advance(1);
        let now = clock.now_millis();
        l1.fill("abc", active("abc", 1, now), now);
        channel.send(ChannelMessage::Keepalive {
            sent: clock.now_millis(),
        });
        // Messages are handled in order: once this one is, the keepalive before it was.
        channel.send(ChannelMessage::Invalidate {
            version: 1,
            code: "zzz".into(),
        });
        until(|| l1.get("zzz").is_some()).await;
        assert!(
            l1.get("abc").is_some_and(|e| e.redirect().is_some()),
            "a keepalive invalidates nothing"
        );

        channel.send(ChannelMessage::Invalidate {
            version: 2,
            code: "abc".into(),
        });
        until(|| l1.get("abc").is_some_and(|e| e.redirect().is_none())).await;
        assert_eq!(l1.get("abc").unwrap().version(), 2);
        // Acknowledged once it is dropped, as this proxy.
        until(|| channel.acks().contains(&("p1".to_owned(), 2, "abc".to_owned()))).await;

        // Silent past the timeout, the subscription is not trusted; a malformed message
        // changes nothing. A keepalive sent since brings the trust back without emptying L1:
        // the subscription never ended, so it lost no message.
        clock.advance(3_000);
        let later = clock.now_millis();
        assert!(!trust.is_trusted(later));
        l1.fill("def", active("def", 1, later), later);
        channel.send(ChannelMessage::Malformed);
        channel.send(ChannelMessage::Keepalive { sent: later - 2_500 });
        channel.send(ChannelMessage::Invalidate {
            version: 1,
            code: "mark".into(),
        });
        until(|| l1.get("mark").is_some()).await;
        assert!(
            !trust.is_trusted(later),
            "a keepalive sent long ago proves nothing about now"
        );
        channel.send(ChannelMessage::Keepalive { sent: later });
        until(|| trust.is_trusted(later)).await;
        assert!(l1.get("def").is_some(), "a late subscription is not a lapse");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn an_edit_voids_the_older_versions_in_l1_and_is_acknowledged() {
        let channel = Arc::new(MemoryChannel::default());
        let (l1, _trust, clock, stop, task) = listening(channel.clone()).await;
        let now = clock.now_millis();
        l1.fill("abc", active("abc", 1, now), now);
        channel.send(ChannelMessage::Edited {
            version: 2,
            code: "abc".into(),
        });
        until(|| l1.get("abc").is_some_and(|e| e.is_superseded())).await;
        assert_eq!(l1.get("abc").unwrap().version(), 2);
        until(|| channel.acks().contains(&("p1".to_owned(), 2, "abc".to_owned()))).await;
        // A read of version 1 that was in flight cannot bring it back.
        assert!(l1.fill("abc", active("abc", 1, now), now).is_superseded());
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

    #[tokio::test]
    async fn a_cut_subscription_is_a_lapse_at_once_and_l1_is_emptied_when_the_next_one_is_heard() {
        let channel = Arc::new(MemoryChannel::default());
        let (l1, trust, clock, stop, task) = listening(channel.clone()).await;
        channel.send(ChannelMessage::Keepalive {
            sent: clock.now_millis(),
        });
        let now = clock.now_millis();
        until(|| trust.is_trusted(now)).await;
        clock.advance(1);
        let filled = clock.now_millis();
        l1.fill("abc", active("abc", 1, filled), filled);
        // The connection is cut and remade at once (a failover, a CLIENT KILL): well
        // within the timeout, but invalidations sent meanwhile are lost.
        channel.cut();
        until(|| !trust.is_trusted(clock.now_millis())).await;
        until(|| channel.subscribers() == 1).await;
        assert!(l1.get("abc").is_some(), "kept until the channel is heard again");
        channel.send(ChannelMessage::Keepalive {
            sent: clock.now_millis(),
        });
        until(|| trust.is_trusted(clock.now_millis())).await;
        assert!(l1.get("abc").is_none(), "emptied: an invalidation may have been missed");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    /// Sends a keepalive through the channel as the keepalive task does, noting its position.
    async fn keepalive(channel: &MemoryChannel, trust: &InvalidationTrust, clock: &ManualClock) {
        let sent = clock.now_millis();
        let position = channel.keepalive("p1", sent).await.unwrap();
        trust.sent(sent, position);
        until(|| trust.is_trusted(clock.now_millis())).await;
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_cut_what_was_missed_is_replayed_from_the_log_and_l1_is_kept() {
        let channel = Arc::new(MemoryChannel::default());
        let (l1, trust, clock, stop, task) = listening(channel.clone()).await;
        keepalive(&channel, &trust, &clock).await;
        assert!(trust.applied_position().is_some());
        clock.advance(1);
        let filled = clock.now_millis();
        l1.fill("kept", active("kept", 1, filled), filled);
        l1.fill("gone", active("gone", 1, filled), filled);
        l1.fill("moved", active("moved", 1, filled), filled);
        channel.cut();
        until(|| !trust.is_trusted(clock.now_millis())).await;
        // Deleted and edited while no subscription listened: only the log has them.
        channel.send(ChannelMessage::Invalidate {
            version: 2,
            code: "gone".into(),
        });
        channel.send(ChannelMessage::Edited {
            version: 2,
            code: "moved".into(),
        });
        until(|| l1.get("gone").is_some_and(|e| e.is_tombstone())).await;
        until(|| l1.get("moved").is_some_and(|e| e.is_superseded())).await;
        keepalive(&channel, &trust, &clock).await;
        assert!(
            l1.get("kept").is_some(),
            "kept: the log told everything that was missed"
        );
        until(|| channel.acks().contains(&("p1".to_owned(), 2, "gone".to_owned()))).await;
        // A log that cannot tell (trimmed, or a Redis that lost writes): emptied, as before.
        channel.cut();
        until(|| !trust.is_trusted(clock.now_millis())).await;
        channel.lose_log();
        until(|| channel.subscribers() == 1).await;
        keepalive(&channel, &trust, &clock).await;
        assert!(
            l1.get("kept").is_none(),
            "emptied: an invalidation may have been missed"
        );
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_that_hears_nothing_is_replaced_and_is_a_lapse() {
        let channel = Arc::new(MemoryChannel::default());
        let (_l1, trust, clock, stop, task) = listening(channel.clone()).await;
        channel.send(ChannelMessage::Keepalive {
            sent: clock.now_millis(),
        });
        until(|| trust.is_trusted(clock.now_millis())).await;
        // Half-open: the subscription stays, nothing arrives, not even the keepalives.
        let subscribed = channel.subscriptions();
        tokio::time::sleep(SILENT_AFTER + Duration::from_millis(10)).await;
        until(|| channel.subscriptions() > subscribed).await;
        assert!(!trust.is_trusted(clock.now_millis()), "silent for the timeout: a lapse");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn keepalives_register_the_proxy_and_reach_only_its_own_subscription() {
        let channel = Arc::new(MemoryChannel::default());
        let mut mine = channel.subscribe("p1").await.unwrap();
        let mut other = channel.subscribe("p2").await.unwrap();
        let (stop, shutdown) = watch::channel(false);
        let clock = Arc::new(ManualClock::at(77));
        let trust = Arc::new(InvalidationTrust::new(Duration::from_secs(2), Duration::from_secs(1)));
        let task = tokio::spawn(run_keepalive(channel.clone(), Arc::from("p1"), trust, clock, shutdown));
        let heard = tokio::time::timeout(Duration::from_secs(5), mine.next()).await.unwrap();
        assert_eq!(heard, Some(ChannelMessage::Keepalive { sent: 77 }));
        assert!(channel.registrations().iter().any(|(p, _)| p == "p1"));
        channel.send(ChannelMessage::Invalidate {
            version: 1,
            code: "abc".into(),
        });
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), other.next())
                .await
                .unwrap(),
            Some(ChannelMessage::Invalidate {
                version: 1,
                code: "abc".into()
            }),
            "p2 hears the invalidation and none of p1's keepalives"
        );
        stop.send(true).unwrap();
        task.await.unwrap();
        channel.deregister("p1").await.unwrap();
        assert!(channel.registrations().is_empty());
    }

    /// A store as a control plane leaves it: the permutation key, a complete alias index.
    async fn store_with_index() -> Arc<MemoryStore> {
        Arc::new(crate::issued::tests::store_keyed("07070707070707070707070707070707").await)
    }

    fn generated(value: u64) -> String {
        use rebound_core::generated::{Generated, GeneratedCodes};
        match GeneratedCodes::new([7; 16]).code_for(value) {
            Generated::Code(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_filter_is_current_only_while_the_feed_is_followed() {
        use crate::issued::HIGH_WATER_SLACK;
        let feed = Arc::new(MemoryFeed::default());
        let store = store_with_index().await;
        let now = 1_000_000;
        store.record_alias("old").await.unwrap();
        store.insert_link(&link("old", now), None).await.unwrap();
        store.lease_block(COUNTER, 100).await.unwrap();
        feed.announce("old");
        let issued = Arc::new(IssuedCodeGate::new(1_000));
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(run_creation_feed(
            feed.clone(),
            issued.clone(),
            store.clone(),
            None,
            shutdown,
        ));
        until(|| issued.is_current()).await;
        assert!(issued.was_loaded());
        assert_eq!(issued.may_exist("old"), Some(true), "loaded from the alias index");
        assert_eq!(issued.may_exist("new"), Some(false));
        assert_eq!(issued.may_exist(&generated(99)), Some(true), "below the stored mark");
        let next_lease = generated(100 + HIGH_WATER_SLACK);
        assert_eq!(issued.may_exist(&next_lease), Some(false));

        feed.announce("new");
        until(|| issued.may_exist("new") == Some(true)).await;
        feed.announce_high_water(200 + HIGH_WATER_SLACK);
        until(|| issued.may_exist(&next_lease) == Some(true)).await;

        feed.set_failing(true);
        until(|| !issued.is_current()).await;
        assert_eq!(
            issued.may_exist("other"),
            None,
            "bypassed while the feed cannot be read"
        );
        // Back: synced again from the store, then followed again.
        store.record_alias("meanwhile").await.unwrap();
        store.insert_link(&link("meanwhile", now), None).await.unwrap();
        store.lease_block(COUNTER, 4 * HIGH_WATER_SLACK).await.unwrap();
        feed.set_failing(false);
        until(|| issued.is_current()).await;
        assert_eq!(
            issued.may_exist("meanwhile"),
            Some(true),
            "created while the feed was lost"
        );
        assert_eq!(
            issued.may_exist(&generated(3 * HIGH_WATER_SLACK)),
            Some(true),
            "leased while the feed was lost"
        );
        feed.announce("after");
        until(|| issued.may_exist("after") == Some(true)).await;
        assert_eq!(store.link_reads(), 0, "the links themselves are never read");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_cannot_tell_yet_leaves_the_proxy_ready_but_bypassed() {
        let feed = Arc::new(MemoryFeed::default());
        let store = Arc::new(MemoryStore::new());
        let issued = Arc::new(IssuedCodeGate::new(1_000));
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(run_creation_feed(
            feed.clone(),
            issued.clone(),
            store.clone(),
            Some([7; 16]),
            shutdown,
        ));
        until(|| issued.was_loaded()).await;
        assert!(!issued.is_current());
        assert_eq!(issued.may_exist("anything"), None);
        // A control plane records the key and completes the index: the next sync trusts it.
        store
            .get_or_init_setting(rebound_core::generated::CODE_KEY_SETTING, &"07".repeat(16))
            .await
            .unwrap();
        store
            .get_or_init_setting(rebound_core::generated::ALIAS_INDEX_SETTING, "complete")
            .await
            .unwrap();
        until(|| issued.is_current()).await;
        assert_eq!(issued.may_exist("anything"), Some(false));
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
