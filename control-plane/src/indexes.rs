//! The store's indexes of active links by target host and by domain, which the threat-list
//! rescan and a domain's removal and addition read instead of every link. Every link
//! written since they exist carries them; a store written by an older version has its
//! links put in them once, by the first control plane that needs them, and records that in
//! a setting, so no control plane does it again.

use rebound_core::Clock;
use rebound_store::{Store, StoreError};
use std::sync::Arc;

/// The setting recorded once every link of the store is in the indexes (its value: when).
pub(crate) const LINKS_INDEXED_SETTING: &str = "links_indexed:1";
/// Links read per page while older links are indexed.
const INDEX_PAGE: usize = 1000;

/// Whether the store's indexes hold every link, as this control plane knows.
pub(crate) struct LinkIndexes {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Set once the indexes hold every link; held while this control plane puts older links
    /// in them.
    complete: tokio::sync::OnceCell<()>,
}

impl LinkIndexes {
    pub(crate) fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> LinkIndexes {
        LinkIndexes {
            store,
            clock,
            complete: tokio::sync::OnceCell::new(),
        }
    }

    /// Returns once the store's indexes hold every link: at once when this control plane or
    /// another already made sure of it, else after putting the older links in them (one
    /// read of every link, once for the fleet; concurrent control planes doing it at once
    /// write the same attributes with conditional writes).
    pub(crate) async fn complete(&self) -> Result<(), StoreError> {
        self.complete
            .get_or_try_init(|| async {
                if self.store.read_setting(LINKS_INDEXED_SETTING).await?.is_some() {
                    return Ok(());
                }
                let (mut cursor, started) = (None::<String>, std::time::Instant::now());
                loop {
                    cursor = self.store.index_older_links(cursor.as_deref(), INDEX_PAGE).await?;
                    if cursor.is_none() {
                        break;
                    }
                }
                let now = self.clock.now_millis().to_string();
                self.store.get_or_init_setting(LINKS_INDEXED_SETTING, &now).await?;
                tracing::info!(
                    ms = started.elapsed().as_millis() as u64,
                    "every link is in the indexes by target host and by domain"
                );
                Ok(())
            })
            .await
            .map(|_| ())
    }
}
