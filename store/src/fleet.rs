//! What a data plane hears from the rest of the fleet (Redis in distributed mode,
//! `rebound-redis`): the channel of invalidations and heartbeats, and the creation feed
//! that keeps its filter of issued codes current. In-memory fakes for tests.

use crate::StoreError;
use async_trait::async_trait;
use futures_util::stream::BoxStream;
use rebound_core::UnixMillis;
use std::time::Duration;

/// One message of the invalidation channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelMessage {
    /// `code` changed at `version` (deleted or taken down): drop it from L1.
    Invalidate { version: u64, code: String },
    /// A proxy's heartbeat: the channel is alive.
    Heartbeat,
    /// A message this code cannot read; it still proves the channel alive.
    Malformed,
}

/// The channel every data plane listens to and the control plane publishes on.
#[async_trait]
pub trait InvalidationChannel: Send + Sync {
    /// Subscribes to invalidations and heartbeats. The stream ends when the subscription
    /// is lost (the caller subscribes again).
    async fn subscribe(&self) -> Result<BoxStream<'static, ChannelMessage>, StoreError>;
    /// Publishes a heartbeat, so every listener can tell a live channel from a silent one,
    /// and registers `proxy` as live at `now` (the control plane waits for the
    /// acknowledgements of the proxies registered lately).
    async fn publish_heartbeat(&self, proxy: &str, now: UnixMillis) -> Result<(), StoreError>;
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

    /// An in-memory [`InvalidationChannel`]: what is sent reaches every subscriber; while
    /// `set_failing(true)`, subscribing fails and open subscriptions end.
    pub struct MemoryChannel {
        sender: broadcast::Sender<Option<ChannelMessage>>,
        failing: AtomicBool,
        registered: Mutex<Vec<(String, UnixMillis)>>,
        acks: Mutex<Vec<(String, u64, String)>>,
    }

    impl Default for MemoryChannel {
        fn default() -> Self {
            MemoryChannel {
                sender: broadcast::channel(1024).0,
                failing: AtomicBool::new(false),
                registered: Mutex::default(),
                acks: Mutex::default(),
            }
        }
    }

    impl MemoryChannel {
        /// Delivers `message` to every subscriber.
        pub fn send(&self, message: ChannelMessage) {
            let _ = self.sender.send(Some(message));
        }
        /// The registrations so far: (proxy, when).
        pub fn registrations(&self) -> Vec<(String, UnixMillis)> {
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
        async fn subscribe(&self) -> Result<BoxStream<'static, ChannelMessage>, StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("memory channel switched off".into()));
            }
            let receiver = self.sender.subscribe();
            Ok(Box::pin(futures_util::stream::unfold(receiver, |mut r| async move {
                loop {
                    match r.recv().await {
                        Ok(Some(m)) => return Some((m, r)),
                        Ok(None) | Err(broadcast::error::RecvError::Closed) => return None,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    }
                }
            })))
        }

        async fn publish_heartbeat(&self, proxy: &str, now: UnixMillis) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("memory channel switched off".into()));
            }
            self.registered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((proxy.to_owned(), now));
            self.send(ChannelMessage::Heartbeat);
            Ok(())
        }

        async fn acknowledge(&self, proxy: &str, version: u64, code: &str) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("memory channel switched off".into()));
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
                return Err(StoreError::Unavailable("memory feed switched off".into()));
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
