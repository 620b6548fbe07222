//! The link-event port: what the control plane tells the data plane's caches. Creates are
//! written through to L2 and announced on the creation feed (so alias filters learn the
//! code); every KGS lease announces the counter's new high-water mark before a code of it
//! is handed out; deletes and takedowns write the tombstone at the new version and publish
//! the invalidation. The all-in-one carries it in process, distributed mode over Redis.

use async_trait::async_trait;
use rebound_core::Link;

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
#[error("link event not delivered: {0}")]
pub struct EventError(pub String);

/// A store error as an undelivered event, with its causes in the text.
impl From<crate::StoreError> for EventError {
    fn from(e: crate::StoreError) -> Self {
        EventError(crate::Causes(&e).to_string())
    }
}

/// Receives link lifecycle events from the control plane.
#[async_trait]
pub trait LinkEvents: Send + Sync {
    /// `link` was just created: make it visible to every proxy's filter and L2.
    async fn created(&self, link: &Link) -> Result<(), EventError>;
    /// Counter values below `high_water` were just leased: every proxy must know before a
    /// code of the lease is handed out (a code at or above the mark a proxy knows is 404
    /// there). Nothing to tell by default.
    async fn leased(&self, _high_water: u64) -> Result<(), EventError> {
        Ok(())
    }
    /// `link` (inactive, at its new version) went down: write its tombstone and publish
    /// the invalidation. Success must not be reported to the caller before this returns Ok.
    async fn deactivated(&self, link: &Link) -> Result<(), EventError>;
}

/// Delivers nothing: for a control plane with no data plane to tell.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLinkEvents;

#[async_trait]
impl LinkEvents for NoLinkEvents {
    async fn created(&self, _link: &Link) -> Result<(), EventError> {
        Ok(())
    }
    async fn deactivated(&self, _link: &Link) -> Result<(), EventError> {
        Ok(())
    }
}

/// A recorder for tests: remembers every event and can be told to fail deactivations.
#[derive(Debug, Default)]
pub struct RecordedLinkEvents {
    pub created: std::sync::Mutex<Vec<Link>>,
    pub leased: std::sync::Mutex<Vec<u64>>,
    pub deactivated: std::sync::Mutex<Vec<Link>>,
    pub fail_deactivations: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl LinkEvents for RecordedLinkEvents {
    async fn created(&self, link: &Link) -> Result<(), EventError> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.clone());
        Ok(())
    }
    async fn leased(&self, high_water: u64) -> Result<(), EventError> {
        self.leased.lock().unwrap_or_else(|e| e.into_inner()).push(high_water);
        Ok(())
    }
    async fn deactivated(&self, link: &Link) -> Result<(), EventError> {
        if self.fail_deactivations.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EventError("tombstone write refused by the test".into()));
        }
        self.deactivated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.clone());
        Ok(())
    }
}
