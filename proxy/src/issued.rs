//! The Bloom filter of every code ever issued. It answers "definitely not" only while it is
//! known to be current (loaded, and fed every create since); otherwise it is bypassed, so
//! it can never 404 a code that exists.

use bloomfilter::Bloom;
use rebound_store::{LinkReads, StoreError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

/// False-positive rate the filter is sized for.
const FP_RATE: f64 = 0.001;
/// Codes read from the store per page while loading.
const LOAD_PAGE: usize = 10_000;

/// The filter and whether it may be trusted.
pub struct BloomGate {
    filter: RwLock<Bloom<str>>,
    current: AtomicBool,
    ever_current: AtomicBool,
    codes: AtomicU64,
}

impl BloomGate {
    /// An empty filter sized for `expected` codes, not yet current.
    pub fn new(expected: usize) -> BloomGate {
        let filter = Bloom::new_for_fp_rate(expected.max(1000), FP_RATE).expect("a positive size and rate");
        BloomGate {
            filter: RwLock::new(filter),
            current: AtomicBool::new(false),
            ever_current: AtomicBool::new(false),
            codes: AtomicU64::new(0),
        }
    }

    /// Records an issued code.
    pub fn insert(&self, code: &str) {
        self.filter.write().unwrap_or_else(|e| e.into_inner()).set(code);
        self.codes.fetch_add(1, Ordering::Relaxed);
    }

    /// `Some(false)` when the code was definitely never issued; `None` while bypassed.
    #[inline]
    pub fn may_contain(&self, code: &str) -> Option<bool> {
        if !self.current.load(Ordering::Acquire) {
            return None;
        }
        Some(self.filter.read().unwrap_or_else(|e| e.into_inner()).check(code))
    }

    /// Marks the filter trusted (loaded and fed) or not.
    pub fn set_current(&self, current: bool) {
        if current {
            self.ever_current.store(true, Ordering::Release);
        }
        self.current.store(current, Ordering::Release);
    }

    /// Whether the filter has been complete at least once (loaded): readiness.
    pub fn was_loaded(&self) -> bool {
        self.ever_current.load(Ordering::Acquire)
    }

    /// Whether the filter is trusted.
    pub fn is_current(&self) -> bool {
        self.current.load(Ordering::Acquire)
    }

    /// Codes inserted so far.
    pub fn codes(&self) -> u64 {
        self.codes.load(Ordering::Relaxed)
    }

    /// Loads every code from the store. The caller marks the filter current once it also
    /// knows the creation feed has been followed from before the load began.
    pub async fn load_from(&self, store: &dyn LinkReads) -> Result<u64, StoreError> {
        let mut after: Option<String> = None;
        let mut loaded = 0u64;
        loop {
            let page = store.scan_codes(after.as_deref(), LOAD_PAGE).await?;
            if page.is_empty() {
                break;
            }
            {
                let mut filter = self.filter.write().unwrap_or_else(|e| e.into_inner());
                for code in &page {
                    filter.set(code.as_str());
                }
            }
            loaded += page.len() as u64;
            self.codes.fetch_add(page.len() as u64, Ordering::Relaxed);
            after = page.last().cloned();
        }
        Ok(loaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::{Link, RedirectKind};
    use rebound_store::{LinkStore, MemoryStore};

    #[tokio::test]
    async fn bypassed_until_loaded_then_exact_for_known_codes() {
        let store = MemoryStore::new();
        for i in 0..25_000 {
            let l = Link::new_active(
                format!("code{i}"),
                "https://e.com/".into(),
                RedirectKind::Found,
                false,
                0,
                "k".into(),
                None,
            );
            store.insert_link(&l, None).await.unwrap();
        }
        let gate = BloomGate::new(100_000);
        assert_eq!(gate.may_contain("code1"), None, "bypassed before loading");
        assert_eq!(gate.load_from(&store).await.unwrap(), 25_000);
        assert_eq!(gate.may_contain("code1"), None, "still bypassed until marked current");
        gate.set_current(true);
        for i in 0..25_000 {
            assert_eq!(
                gate.may_contain(&format!("code{i}")),
                Some(true),
                "never a false negative"
            );
        }
        let false_positives = (0..10_000)
            .filter(|i| gate.may_contain(&format!("nope{i}")) == Some(true))
            .count();
        assert!(false_positives < 100, "{false_positives} false positives");
        gate.insert("fresh");
        assert_eq!(gate.may_contain("fresh"), Some(true));
        gate.set_current(false);
        assert_eq!(gate.may_contain("nope1"), None);
    }
}
