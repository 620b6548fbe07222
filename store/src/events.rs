//! The link-event port: what the control plane tells the data plane's caches. Creates are
//! written through to L2 and announced on the creation feed (so alias filters learn the
//! code); every KGS lease announces the counter's new high-water mark before a code of it
//! is handed out; deletes and takedowns write the tombstone at the new version and publish
//! the invalidation; an edit writes its new record and publishes the invalidation of every
//! older version. The all-in-one carries it in process, distributed mode over Redis.

use async_trait::async_trait;
use rebound_core::Link;

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
#[error("link event not delivered: {0}")]
pub struct EventError(pub String);

/// A store error as an undelivered event, with its causes in the text.
impl From<crate::StoreError> for EventError {
    fn from(e: crate::StoreError) -> Self {
        EventError(rebound_core::Causes(&e).to_string())
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
    /// `link` (active, at its new version) was edited: no cache may answer with an older
    /// version once this returns Ok (I1 for the old destination). Success must not be
    /// reported to the caller before this returns Ok.
    async fn changed(&self, link: &Link) -> Result<(), EventError>;
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
    async fn changed(&self, _link: &Link) -> Result<(), EventError> {
        Ok(())
    }
}

/// Every region's link events (docs/regions.md): each event goes to every region at once,
/// and succeeds only when it succeeded in every one. A delete therefore returns only once
/// every region's Redis holds the tombstone and every region's proxies acknowledged it (or
/// were waited out); a region that cannot be reached makes it fail (503), and the
/// reconciler finishes it everywhere later, which is harmless where it had succeeded.
pub struct FanOutLinkEvents {
    regions: Vec<(String, std::sync::Arc<dyn LinkEvents>)>,
}

impl FanOutLinkEvents {
    /// Events to every one of `regions`, each named for the errors.
    pub fn new(regions: Vec<(String, std::sync::Arc<dyn LinkEvents>)>) -> FanOutLinkEvents {
        FanOutLinkEvents { regions }
    }

    /// Runs `event` in every region at once; the failures, each under its region's name.
    async fn everywhere<'a, F, Fut>(&'a self, event: F) -> Result<(), EventError>
    where
        F: Fn(&'a dyn LinkEvents) -> Fut,
        Fut: std::future::Future<Output = Result<(), EventError>> + 'a,
    {
        let results =
            futures_util::future::join_all(self.regions.iter().map(|(_, region)| event(region.as_ref()))).await;
        let failed: Vec<String> = self
            .regions
            .iter()
            .zip(results)
            .filter_map(|((name, _), r)| r.err().map(|e| format!("{name}: {}", e.0)))
            .collect();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(EventError(failed.join("; "))),
        }
    }
}

#[async_trait]
impl LinkEvents for FanOutLinkEvents {
    async fn created(&self, link: &Link) -> Result<(), EventError> {
        self.everywhere(|region| region.created(link)).await
    }
    async fn leased(&self, high_water: u64) -> Result<(), EventError> {
        self.everywhere(|region| region.leased(high_water)).await
    }
    async fn deactivated(&self, link: &Link) -> Result<(), EventError> {
        self.everywhere(|region| region.deactivated(link)).await
    }
    async fn changed(&self, link: &Link) -> Result<(), EventError> {
        self.everywhere(|region| region.changed(link)).await
    }
}

/// A recorder for tests: remembers every event and can be told to fail deactivations and
/// edits.
#[derive(Debug, Default)]
pub struct RecordedLinkEvents {
    pub created: std::sync::Mutex<Vec<Link>>,
    pub leased: std::sync::Mutex<Vec<u64>>,
    pub deactivated: std::sync::Mutex<Vec<Link>>,
    pub changed: std::sync::Mutex<Vec<Link>>,
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
    async fn changed(&self, link: &Link) -> Result<(), EventError> {
        if self.fail_deactivations.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EventError("invalidation refused by the test".into()));
        }
        self.changed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::RedirectKind;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    fn link() -> Link {
        Link::new_active(
            "abc1234".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "o".into(),
            None,
        )
    }

    #[tokio::test]
    async fn every_region_hears_every_event_and_one_failing_region_fails_it() {
        let (a, b, c) = (
            Arc::new(RecordedLinkEvents::default()),
            Arc::new(RecordedLinkEvents::default()),
            Arc::new(RecordedLinkEvents::default()),
        );
        let fan = FanOutLinkEvents::new(vec![
            ("home".into(), a.clone() as Arc<dyn LinkEvents>),
            ("eu".into(), b.clone() as Arc<dyn LinkEvents>),
            ("ap".into(), c.clone() as Arc<dyn LinkEvents>),
        ]);
        fan.created(&link()).await.unwrap();
        fan.leased(42).await.unwrap();
        fan.deactivated(&link()).await.unwrap();
        for region in [&a, &b, &c] {
            assert_eq!(region.created.lock().unwrap().len(), 1);
            assert_eq!(*region.leased.lock().unwrap(), [42]);
            assert_eq!(region.deactivated.lock().unwrap().len(), 1);
        }
        // One region refuses: the delete fails, naming it, and the others were still told.
        b.fail_deactivations.store(true, Ordering::SeqCst);
        let e = fan.deactivated(&link()).await.unwrap_err();
        assert!(
            e.0.starts_with("eu: ") && !e.0.contains("home") && !e.0.contains("ap"),
            "{e}"
        );
        assert_eq!(a.deactivated.lock().unwrap().len(), 2);
        assert_eq!(c.deactivated.lock().unwrap().len(), 2);
        c.fail_deactivations.store(true, Ordering::SeqCst);
        let e = fan.deactivated(&link()).await.unwrap_err();
        assert!(e.0.contains("eu: ") && e.0.contains("ap: "), "{e}");
    }
}
