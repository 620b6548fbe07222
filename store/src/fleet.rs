//! What a data plane hears from the rest of the fleet (Redis in distributed mode,
//! `rebound-redis`): the channel of invalidations and keepalives with the registry of live
//! proxies, and the creation feed that keeps its filter of issued codes current.
//! In-memory fakes for tests.

use crate::StoreError;
use async_trait::async_trait;
use futures_util::stream::BoxStream;
use rebound_core::UnixMillis;
use std::time::Duration;

/// How long a proxy stays in the registry after its last keepalive, in multiples of the
/// delete bound (`invalidation_timeout + l1_ttl`): deletes wait for every proxy
/// registered within it, even one that stopped sending (a partition from Redis, a crash),
/// and a proxy that could not register for longer than this less the bound stops serving
/// anything it cached itself (a delete may no longer wait for it).
pub const REGISTRY_WINDOW_BOUNDS: u32 = 20;

/// One message of the invalidation channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelMessage {
    /// `code` went down at `version` (deleted or taken down): its tombstone goes into L1.
    Invalidate { version: u64, code: String },
    /// `code` was edited at `version`: every older version of it is void, in L1 at once.
    Edited { version: u64, code: String },
    /// This proxy's own keepalive, sent at `sent` by its own clock, back through its
    /// subscription: every message published before it was delivered before it.
    Keepalive { sent: UnixMillis },
    /// A message this code cannot read; it still proves the subscription alive.
    Malformed,
}

/// The channel every data plane listens to and the control plane publishes on, with the
/// registry of live proxies that a delete waits for.
///
/// Liveness is each proxy's own business: it sends keepalives through the channel to
/// itself alone, so the fleet's traffic grows with the number of proxies, not its square.
#[async_trait]
pub trait InvalidationChannel: Send + Sync {
    /// Subscribes `proxy` to the invalidations and to its own keepalives. The stream ends
    /// when the subscription is lost (the caller counts that as a lapse and subscribes again).
    async fn subscribe(&self, proxy: &str) -> Result<BoxStream<'static, ChannelMessage>, StoreError>;
    /// Sends `proxy`'s keepalive, stamped `sent` by the proxy's own clock, through the
    /// channel to be heard on its own subscription, and registers `proxy` as live now by
    /// the channel's clock (never the caller's). Returns the channel's position in its log
    /// of invalidations at that moment: once the keepalive is heard back, every
    /// invalidation up to that position has been heard.
    async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError>;
    /// The invalidations (`Invalidate` and `Edited` messages) published after `position`
    /// (one a keepalive returned), in order; `None` when they cannot all be told: the log
    /// was trimmed past the position, the server lost writes since (its epoch changed), or
    /// they are too many.
    async fn replay(&self, position: &str) -> Result<Option<Vec<ChannelMessage>>, StoreError>;
    /// Removes `proxy` from the registry: it serves no more, deletes stop waiting for it.
    async fn deregister(&self, proxy: &str) -> Result<(), StoreError>;
    /// Tells the control plane that `proxy` has dropped `code` at `version` from its L1.
    async fn acknowledge(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError>;
}

/// One entry of the creation feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEntry {
    /// A link was created with this code (an alias or a generated code).
    Created(String),
    /// A control plane leased counter values up to (not including) this one: announced
    /// before any code of the lease is handed out.
    HighWater(u64),
}

/// Password attempts on links, counted for the whole fleet (docs/spec.md §12): every proxy takes
/// from one budget per link, so N proxies let no more guesses through than one.
#[async_trait]
pub trait AttemptBudget: Send + Sync {
    /// Takes one attempt on the link `key` from its budget, `burst` at once and then one
    /// per `every`: `None` when taken, `Some(wait)` when spent (the next one comes after
    /// `wait`). An error when the budget cannot be reached: the caller counts on its own
    /// then, never not at all.
    async fn take_attempt(&self, key: &str, burst: u32, every: Duration) -> Result<Option<Duration>, StoreError>;
}

/// A new entry's position and the entries read from the creation feed.
pub type FeedRead = (Option<String>, Vec<FeedEntry>);

/// The creation feed: every code the control plane issues and every counter lease, in order.
#[async_trait]
pub trait CreationFeed: Send + Sync {
    /// The position of the newest entry: where a reader that then reads the high-water mark
    /// and the alias index from the store starts.
    async fn feed_position(&self) -> Result<String, StoreError>;
    /// Entries after `after`, waiting up to `block` for one: the last entry's position
    /// (none when nothing came) and the entries.
    async fn read_feed(&self, after: &str, block: Duration) -> Result<FeedRead, StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use fakes::{MemoryChannel, MemoryFeed};

#[cfg(any(test, feature = "test-util"))]
mod fakes {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use tokio::sync::{broadcast, Notify};

    /// An in-memory [`InvalidationChannel`]: what is sent reaches every subscriber (a
    /// keepalive only its own proxy's); while `set_failing(true)`, subscribing fails and
    /// open subscriptions end. Registrations are counted in keepalives, its clock.
    pub struct MemoryChannel {
        sender: broadcast::Sender<Option<(Option<String>, ChannelMessage)>>,
        failing: AtomicBool,
        registered: Mutex<Vec<(String, u64)>>,
        ticks: std::sync::atomic::AtomicU64,
        subscribed: std::sync::atomic::AtomicU64,
        acks: Mutex<Vec<(String, u64, String)>>,
        /// Every invalidation sent, in order; `None` once lost.
        log: Mutex<Option<Vec<ChannelMessage>>>,
    }

    impl Default for MemoryChannel {
        fn default() -> Self {
            MemoryChannel {
                sender: broadcast::channel(1024).0,
                failing: AtomicBool::new(false),
                registered: Mutex::default(),
                ticks: std::sync::atomic::AtomicU64::new(0),
                subscribed: std::sync::atomic::AtomicU64::new(0),
                acks: Mutex::default(),
                log: Mutex::new(Some(Vec::new())),
            }
        }
    }

    impl MemoryChannel {
        /// Delivers `message` to every subscriber (a keepalive to every one too); an
        /// invalidation goes into the log first.
        pub fn send(&self, message: ChannelMessage) {
            // Logged and sent under the lock a keepalive takes: a position never counts an
            // invalidation that is sent after the keepalive.
            let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            if let (ChannelMessage::Invalidate { .. } | ChannelMessage::Edited { .. }, Some(log)) =
                (&message, log.as_mut())
            {
                log.push(message.clone());
            }
            let _ = self.sender.send(Some((None, message)));
        }
        /// What a Redis that lost writes does: the log can no longer be replayed.
        pub fn lose_log(&self) {
            *self.log.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        /// Ends every open subscription (a connection cut), without failing the next one.
        pub fn cut(&self) {
            let _ = self.sender.send(None);
        }
        /// The registrations so far: (proxy, the channel's clock then), deregistered ones gone.
        pub fn registrations(&self) -> Vec<(String, u64)> {
            self.registered.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
        /// The acknowledgements so far: (proxy, version, code).
        pub fn acks(&self) -> Vec<(String, u64, String)> {
            self.acks.lock().unwrap_or_else(|e| e.into_inner()).clone()
        }
        /// Subscribers now connected.
        pub fn subscribers(&self) -> usize {
            self.sender.receiver_count()
        }
        /// Subscriptions made so far.
        pub fn subscriptions(&self) -> u64 {
            self.subscribed.load(Ordering::SeqCst)
        }
        /// While true, subscribing fails; turning it on ends every open subscription.
        pub fn set_failing(&self, failing: bool) {
            self.failing.store(failing, Ordering::SeqCst);
            if failing {
                let _ = self.sender.send(None);
            }
        }
    }

    #[async_trait]
    impl InvalidationChannel for MemoryChannel {
        async fn subscribe(&self, proxy: &str) -> Result<BoxStream<'static, ChannelMessage>, StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory channel", "switched off"));
            }
            let receiver = self.sender.subscribe();
            self.subscribed.fetch_add(1, Ordering::SeqCst);
            let me = proxy.to_owned();
            Ok(Box::pin(futures_util::stream::unfold(
                (receiver, me),
                |(mut r, me)| async move {
                    loop {
                        match r.recv().await {
                            Ok(Some((Some(to), _))) if to != me => continue,
                            Ok(Some((_, m))) => return Some((m, (r, me))),
                            Ok(None) | Err(broadcast::error::RecvError::Closed) => return None,
                            // Messages were lost: the subscription ends, as a cut connection would.
                            Err(broadcast::error::RecvError::Lagged(_)) => return None,
                        }
                    }
                },
            )))
        }

        async fn keepalive(&self, proxy: &str, sent: UnixMillis) -> Result<String, StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory channel", "switched off"));
            }
            let tick = self.ticks.fetch_add(1, Ordering::SeqCst);
            let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
            registered.retain(|(p, _)| p != proxy);
            registered.push((proxy.to_owned(), tick));
            drop(registered);
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            let position = log.as_ref().map_or(0, Vec::len).to_string();
            let _ = self
                .sender
                .send(Some((Some(proxy.to_owned()), ChannelMessage::Keepalive { sent })));
            drop(log);
            Ok(position)
        }

        async fn replay(&self, position: &str) -> Result<Option<Vec<ChannelMessage>>, StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory channel", "switched off"));
            }
            let from: usize = position.parse().map_err(|_| StoreError::Corrupt("position".into()))?;
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            Ok(log.as_ref().and_then(|log| log.get(from..).map(<[_]>::to_vec)))
        }

        async fn deregister(&self, proxy: &str) -> Result<(), StoreError> {
            self.registered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(p, _)| p != proxy);
            Ok(())
        }

        async fn acknowledge(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory channel", "switched off"));
            }
            self.acks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((proxy.to_owned(), version, code.to_owned()));
            Ok(())
        }
    }

    /// An in-memory [`CreationFeed`]: positions are entry numbers; while
    /// `set_failing(true)`, every call fails.
    #[derive(Default)]
    pub struct MemoryFeed {
        codes: Mutex<Vec<FeedEntry>>,
        appended: Notify,
        failing: AtomicBool,
    }

    impl MemoryFeed {
        /// Appends the creation of `code` to the feed.
        pub fn announce(&self, code: &str) {
            self.append(FeedEntry::Created(code.to_owned()));
        }
        /// Appends a lease up to `high_water` to the feed.
        pub fn announce_high_water(&self, high_water: u64) {
            self.append(FeedEntry::HighWater(high_water));
        }
        fn append(&self, entry: FeedEntry) {
            self.codes.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            self.appended.notify_waiters();
        }
        /// While true, every call fails.
        pub fn set_failing(&self, failing: bool) {
            self.failing.store(failing, Ordering::SeqCst);
            self.appended.notify_waiters();
        }
        fn check(&self) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory feed", "switched off"));
            }
            Ok(())
        }
    }

    #[async_trait]
    impl CreationFeed for MemoryFeed {
        async fn feed_position(&self) -> Result<String, StoreError> {
            self.check()?;
            Ok(self.codes.lock().unwrap_or_else(|e| e.into_inner()).len().to_string())
        }

        async fn read_feed(&self, after: &str, block: Duration) -> Result<FeedRead, StoreError> {
            let after: usize = after
                .parse()
                .map_err(|_| StoreError::Internal(format!("not a memory feed position: {after}")))?;
            let read = || -> Result<Option<FeedRead>, StoreError> {
                self.check()?;
                let codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
                Ok((codes.len() > after).then(|| (Some(codes.len().to_string()), codes[after..].to_vec())))
            };
            let appended = self.appended.notified();
            if let Some(r) = read()? {
                return Ok(r);
            }
            let _ = tokio::time::timeout(block, appended).await;
            Ok(read()?.unwrap_or((None, Vec::new())))
        }
    }
}
