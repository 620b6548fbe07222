//! The key generation service: counter blocks leased from the store, handed out from
//! memory and turned into codes by the keyed permutation. The next block is fetched in
//! the background before the current one runs dry; a value is never reused across
//! restarts (a crash wastes at most the blocks in memory). Every lease announces the
//! counter's new high-water mark to the proxies before a code of it is handed out, so a
//! proxy that follows the creation feed can answer 404 for a code above the mark it knows.

use crate::metrics::KgsLeaseMetrics;
use rebound_core::generated::{region_counter, Generated, GeneratedCodes, HIGH_WATER_SLACK, REGION_SPAN};
use rebound_store::{LinkEvents, Store, StoreError};
use std::ops::Range;
use std::sync::Arc;
use tokio::sync::Mutex;

pub use rebound_core::generated::COUNTER;

#[derive(Debug, Default)]
struct Leases {
    current: Range<u64>,
    next: Option<Range<u64>>,
    refilling: bool,
}

/// The largest block a control plane leases (the `api.kgs_block_size` setting's bound).
/// A block is used before every proxy has heard of its end: proxies answer generated codes
/// up to [`HIGH_WATER_SLACK`] above the mark they know, so the mark they know may lag by
/// 16 of the largest blocks (the block in use and the next, of 8 control planes) and no
/// code in them is ever answered 404.
pub const MAX_BLOCK_SIZE: u64 = 10_000_000;
const _: () = assert!(16 * MAX_BLOCK_SIZE <= HIGH_WATER_SLACK);

/// Hands out generated codes.
pub struct KeyRangeLease {
    store: Arc<dyn Store>,
    codes: GeneratedCodes,
    block_size: u64,
    /// This region's slot: its blocks come from its own counter and range of values.
    slot: u8,
    leases: Arc<Mutex<Leases>>,
    lease_metrics: Option<KgsLeaseMetrics>,
    events: Option<Arc<dyn LinkEvents>>,
}

impl KeyRangeLease {
    pub fn new(store: Arc<dyn Store>, codes: GeneratedCodes, block_size: u64) -> Self {
        KeyRangeLease {
            store,
            codes,
            block_size,
            slot: 0,
            leases: Arc::new(Mutex::new(Leases::default())),
            lease_metrics: None,
            events: None,
        }
    }

    /// Leases from region slot `slot`'s counter and range (slot 0, the default, is the
    /// store's one counter of a fleet of one region).
    pub fn in_region_slot(mut self, slot: u8) -> Self {
        self.slot = slot;
        self
    }

    /// Counts every lease by outcome.
    pub(crate) fn counting_leases(mut self, metrics: KgsLeaseMetrics) -> Self {
        self.lease_metrics = Some(metrics);
        self
    }

    /// Announces every lease's high-water mark on `events` before using the block.
    pub fn announcing(mut self, events: Arc<dyn LinkEvents>) -> Self {
        self.events = Some(events);
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

    /// Leases a block and announces its end before returning it. An announcement that
    /// fails does not hold creation up (the block is used anyway, as a create whose
    /// announcement fails is still answered): proxies that missed it still read the mark
    /// from the store at their next sync, and never 404 a code within
    /// [`HIGH_WATER_SLACK`] values above the mark they know.
    async fn lease(
        store: &dyn Store,
        events: &Option<Arc<dyn LinkEvents>>,
        metrics: &Option<KgsLeaseMetrics>,
        size: u64,
        slot: u8,
    ) -> Result<Range<u64>, StoreError> {
        let block = store.lease_block(&region_counter(slot), size).await;
        Self::count_lease(metrics, &block);
        // Offsets in the slot's range, as values of the whole code space.
        let offsets = block?;
        if offsets.start >= REGION_SPAN {
            return Err(StoreError::Exhausted);
        }
        let base = u64::from(slot) * REGION_SPAN;
        let block = base + offsets.start..base + offsets.end.min(REGION_SPAN);
        if let Some(events) = events {
            if let Err(e) = events.leased(block.end).await {
                tracing::warn!(high_water = block.end, error = %rebound_core::Causes(&e), "code block lease not announced");
            }
        }
        Ok(block)
    }

    /// The next generated code: 7 base62 characters, never a reserved word.
    pub async fn next_code(&self) -> Result<String, StoreError> {
        loop {
            let value = self.next_value().await?;
            match self.codes.code_for(value) {
                Generated::Code(code) => return Ok(code),
                Generated::Reserved => continue,
                Generated::Exhausted => return Err(StoreError::Exhausted),
            }
        }
    }

    async fn next_value(&self) -> Result<u64, StoreError> {
        let mut leases = self.leases.lock().await;
        if leases.current.is_empty() {
            leases.current = match leases.next.take() {
                Some(block) => block,
                None => {
                    Self::lease(
                        self.store.as_ref(),
                        &self.events,
                        &self.lease_metrics,
                        self.block_size,
                        self.slot,
                    )
                    .await?
                }
            };
        }
        let value = leases.current.start;
        leases.current.start += 1;
        // Refill when a tenth of the block is left, so creates never wait on the store.
        let low = leases.current.end - leases.current.start <= (self.block_size / 10).max(1);
        if low && leases.next.is_none() && !leases.refilling {
            leases.refilling = true;
            let (store, shared, size, slot) = (self.store.clone(), self.leases.clone(), self.block_size, self.slot);
            let (lease_metrics, events) = (self.lease_metrics.clone(), self.events.clone());
            tokio::spawn(async move {
                let block = Self::lease(store.as_ref(), &events, &lease_metrics, size, slot).await;
                let mut leases = shared.lock().await;
                leases.refilling = false;
                match block {
                    Ok(b) => leases.next = Some(b),
                    Err(e) => {
                        tracing::warn!(error = %rebound_core::Causes(&e), "could not lease the next code block; will retry on demand")
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
    use rebound_store::events::RecordedLinkEvents;
    use rebound_store::{CounterStore, LinkReads, MemoryStore};
    use std::collections::HashSet;

    #[tokio::test]
    async fn codes_are_unique_across_blocks_and_restarts() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let perm = GeneratedCodes::new(*b"0123456789abcdef");
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
    async fn two_regions_lease_from_their_own_ranges_and_never_give_a_code_twice() {
        use rebound_core::generated::split_value;
        // Two stores stand for two regions' replicas that have not seen each other's
        // leases (a counter `ADD` is atomic only within its region): the slots, not the
        // counter, keep the codes apart.
        let (a, b): (Arc<dyn Store>, Arc<dyn Store>) = (Arc::new(MemoryStore::new()), Arc::new(MemoryStore::new()));
        let codes = GeneratedCodes::new(*b"0123456789abcdef");
        let events = Arc::new(RecordedLinkEvents::default());
        let home = KeyRangeLease::new(a, codes.clone(), 64);
        let other = KeyRangeLease::new(b.clone(), codes.clone(), 64)
            .in_region_slot(5)
            .announcing(events.clone());
        let mut seen = HashSet::new();
        for _ in 0..1_000 {
            for (kgs, slot) in [(&home, 0), (&other, 5)] {
                let code = kgs.next_code().await.unwrap();
                let value = codes.value_of(code.as_bytes()).unwrap();
                assert_eq!(split_value(value).map(|(s, _)| s), Some(slot), "{code}");
                assert!(seen.insert(code), "a code given twice");
            }
            tokio::task::yield_now().await;
        }
        // Slot 5 leased from its own counter, and announced values of its own range.
        assert!(b.high_water(&region_counter(5)).await.unwrap() >= 1_000);
        assert_eq!(b.high_water(COUNTER).await.unwrap(), 0);
        let announced = events.leased.lock().unwrap().clone();
        assert!(
            announced
                .iter()
                .all(|&end| split_value(end - 1).map(|(s, _)| s) == Some(5)),
            "{announced:?}"
        );
    }

    #[tokio::test]
    async fn a_region_slot_that_has_used_its_whole_range_is_exhausted() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        store.lease_block(&region_counter(2), REGION_SPAN - 3).await.unwrap();
        let codes = GeneratedCodes::new(*b"0123456789abcdef");
        let kgs = KeyRangeLease::new(store, codes.clone(), 10).in_region_slot(2);
        let mut issued = 0;
        let exhausted = loop {
            match kgs.next_code().await {
                Ok(code) => {
                    let v = codes.value_of(code.as_bytes()).unwrap();
                    assert!(v < 3 * REGION_SPAN, "{v} is past slot 2's range");
                    issued += 1;
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(exhausted, StoreError::Exhausted), "{exhausted:?}");
        assert!(issued <= 3, "only the last three values of the range: {issued}");
    }

    #[tokio::test]
    async fn the_next_block_is_fetched_before_the_current_runs_dry() {
        let store = Arc::new(MemoryStore::new());
        let kgs = KeyRangeLease::new(store.clone(), GeneratedCodes::new([7; 16]), 100);
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

    #[tokio::test]
    async fn every_lease_is_announced_before_a_code_of_it_is_handed_out() {
        let store = Arc::new(MemoryStore::new());
        let events = Arc::new(RecordedLinkEvents::default());
        let codes = GeneratedCodes::new([9; 16]);
        let kgs = KeyRangeLease::new(store.clone(), codes.clone(), 10).announcing(events.clone());
        for _ in 0..35 {
            let code = kgs.next_code().await.unwrap();
            let value = codes.value_of(code.as_bytes()).expect("a generated code decodes");
            let announced = events.leased.lock().unwrap().iter().copied().max().unwrap_or(0);
            assert!(
                value < announced,
                "value {value} handed out above the announced {announced}"
            );
            tokio::task::yield_now().await;
        }
        let announced = events.leased.lock().unwrap().clone();
        assert!(announced.windows(2).all(|w| w[0] < w[1]), "{announced:?}");
        assert_eq!(
            announced.last().copied(),
            Some(store.high_water(COUNTER).await.unwrap()),
            "the last lease announced is the store's mark"
        );
    }
}
