//! The link-event port carried in process (the all-in-one): a lease raises the issued-code
//! filter's high-water mark before a code of it is handed out; a create goes into the
//! filter (an alias) and L1 before the API answers (I2); a delete or takedown puts the
//! tombstone with its version into L1 before the API answers (I1), and an edit its new
//! version.

use crate::issued::IssuedCodeGate;
use crate::l1::L1;
use async_trait::async_trait;
use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Clock, Link};
use rebound_store::{EventError, LinkEvents};
use std::sync::Arc;

/// Delivers link events to the caches of the proxy in this process.
pub struct InProcessLinkEvents {
    pub l1: Arc<L1>,
    pub issued: Arc<IssuedCodeGate>,
    pub clock: Arc<dyn Clock>,
    pub policy: CachePolicy,
}

#[async_trait]
impl LinkEvents for InProcessLinkEvents {
    async fn created(&self, link: &Link) -> Result<(), EventError> {
        self.issued.created(&link.code);
        let now = self.clock.now_millis();
        self.l1
            .fill(&link.code, CacheRecord::active(link, now, &self.policy), now);
        Ok(())
    }

    async fn leased(&self, high_water: u64) -> Result<(), EventError> {
        self.issued.raise_high_water(high_water);
        Ok(())
    }

    async fn deactivated(&self, link: &Link) -> Result<(), EventError> {
        let now = self.clock.now_millis();
        let held = self
            .l1
            .fill(&link.code, CacheRecord::tombstone(link.version, now, &self.policy), now);
        if held.is_tombstone() {
            Ok(())
        } else {
            Err(EventError(format!(
                "L1 holds version {} above the tombstone",
                held.version()
            )))
        }
    }

    async fn changed(&self, link: &Link) -> Result<(), EventError> {
        let now = self.clock.now_millis();
        // The new version itself (or a newer one, should another edit have come first): a
        // late fill of an older one cannot replace it.
        self.l1
            .fill(&link.code, CacheRecord::active(link, now, &self.policy), now);
        Ok(())
    }
}
