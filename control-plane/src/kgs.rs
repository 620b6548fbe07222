//! The key generation service: counter blocks leased from the store, handed out from
//! memory and turned into codes by the keyed permutation. The next block is fetched in
//! the background before the current one runs dry; a value is never reused across
//! restarts (a crash wastes at most the blocks in memory).

use crate::metrics::KgsLeaseMetrics;
use rebound_core::base62;
use rebound_core::code::is_reserved;
use rebound_core::permute::CodePermutation;
use rebound_store::{Store, StoreError};
use std::ops::Range;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The counter the blocks are leased from.
pub const COUNTER: &str = "codes";

#[derive(Debug, Default)]
struct Leases {
    current: Range<u64>,
    next: Option<Range<u64>>,
    refilling: bool,
}

/// Hands out generated codes.
pub struct KeyRangeLease {
    store: Arc<dyn Store>,
    permutation: CodePermutation,
    block_size: u64,
    leases: Arc<Mutex<Leases>>,
    lease_metrics: Option<KgsLeaseMetrics>,
}

impl KeyRangeLease {
    pub fn new(store: Arc<dyn Store>, permutation: CodePermutation, block_size: u64) -> Self {
        KeyRangeLease {
            store,
            permutation,
            block_size,
            leases: Arc::new(Mutex::new(Leases::default())),
            lease_metrics: None,
        }
    }

    /// Counts every lease by outcome.
    pub(crate) fn counting_leases(mut self, metrics: KgsLeaseMetrics) -> Self {
        self.lease_metrics = Some(metrics);
        self
    }

    fn count_lease<T, E>(metrics: &Option<KgsLeaseMetrics>, result: &Result<T, E>) {
        if let Some(m) = metrics {
            match result {
                Ok(_) => m.ok.inc(),
                Err(_) => m.failed.inc(),
            }
        }
    }

    /// The next generated code: 7 base62 characters, never a reserved word.
    pub async fn next_code(&self) -> Result<String, StoreError> {
        loop {
            let value = self.next_value().await?;
            let permuted = self.permutation.permute(value).ok_or(StoreError::Exhausted)?;
            let code = base62::encode(permuted).ok_or(StoreError::Exhausted)?;
            if !is_reserved(&code) {
                return Ok(code);
            }
        }
    }

    async fn next_value(&self) -> Result<u64, StoreError> {
        let mut leases = self.leases.lock().await;
        if leases.current.is_empty() {
            leases.current = match leases.next.take() {
                Some(block) => block,
                None => {
                    let block = self.store.lease_block(COUNTER, self.block_size).await;
                    Self::count_lease(&self.lease_metrics, &block);
                    block?
                }
            };
        }
        let value = leases.current.start;
        leases.current.start += 1;
        // Refill when a tenth of the block is left, so creates never wait on the store.
        let low = leases.current.end - leases.current.start <= (self.block_size / 10).max(1);
        if low && leases.next.is_none() && !leases.refilling {
            leases.refilling = true;
            let (store, shared, size) = (self.store.clone(), self.leases.clone(), self.block_size);
            let lease_metrics = self.lease_metrics.clone();
            tokio::spawn(async move {
                let block = store.lease_block(COUNTER, size).await;
                Self::count_lease(&lease_metrics, &block);
                let mut leases = shared.lock().await;
                leases.refilling = false;
                match block {
                    Ok(b) => leases.next = Some(b),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not lease the next code block; will retry on demand")
                    }
                }
            });
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_store::{CounterStore, MemoryStore};
    use std::collections::HashSet;

    #[tokio::test]
    async fn codes_are_unique_across_blocks_and_restarts() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let perm = CodePermutation::for_codes(*b"0123456789abcdef");
        let mut seen = HashSet::new();
        let kgs = KeyRangeLease::new(store.clone(), perm.clone(), 50);
        for _ in 0..500 {
            let code = kgs.next_code().await.unwrap();
            assert_eq!(code.len(), 7);
            assert!(seen.insert(code));
            tokio::task::yield_now().await;
        }
        // A restart starts from a fresh block: no value is reused.
        let restarted = KeyRangeLease::new(store.clone(), perm, 50);
        for _ in 0..200 {
            assert!(seen.insert(restarted.next_code().await.unwrap()));
        }
    }

    #[tokio::test]
    async fn the_next_block_is_fetched_before_the_current_runs_dry() {
        let store = Arc::new(MemoryStore::new());
        let kgs = KeyRangeLease::new(store.clone(), CodePermutation::for_codes([7; 16]), 100);
        for _ in 0..95 {
            kgs.next_code().await.unwrap();
        }
        // Let the background refill run.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            kgs.leases.lock().await.next.is_some(),
            "the next block is ready while 5 values remain"
        );
        // The store's counter has moved two blocks.
        assert_eq!(store.lease_block(COUNTER, 1).await.unwrap().start, 200);
    }
}
