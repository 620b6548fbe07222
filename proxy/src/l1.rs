//! L1: the in-process cache of cache records (quick_cache). A fill never replaces a newer
//! version (the Lua rule, in memory), so a late populate can never overwrite the tombstone
//! a delete wrote; check-and-insert is atomic per code through striped locks.

use quick_cache::sync::Cache;
use rebound_core::{CacheRecord, CachedVerdict, UnixMillis};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

const STRIPES: usize = 64;

/// One cached code.
#[derive(Debug)]
pub struct L1Entry {
    /// The code, shared with the clicks it produces.
    pub code: Arc<str>,
    pub record: CacheRecord,
    /// When this process cached it: while the invalidation channel is broken, an entry
    /// older than `l1_ttl` is not trusted.
    pub filled_at: UnixMillis,
}

impl L1Entry {
    /// How the entry may be used at `now`.
    #[inline]
    pub fn verdict(&self, now: UnixMillis) -> CachedVerdict {
        self.record.verdict(now)
    }
}

/// The cache.
pub struct L1 {
    cache: Cache<Arc<str>, Arc<L1Entry>>,
    stripes: Vec<Mutex<()>>,
}

impl L1 {
    /// A cache holding up to `capacity` codes.
    pub fn new(capacity: usize) -> L1 {
        L1 {
            cache: Cache::new(capacity),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    /// The entry for `code`, whatever its state.
    #[inline]
    pub fn get(&self, code: &str) -> Option<Arc<L1Entry>> {
        self.cache.get(code)
    }

    fn stripe(&self, code: &str) -> std::sync::MutexGuard<'_, ()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        code.hash(&mut h);
        self.stripes[(h.finish() as usize) % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `record` unless the cache holds a newer version; returns what the cache holds
    /// for the code afterwards.
    pub fn fill(&self, code: &str, record: CacheRecord, now: UnixMillis) -> Arc<L1Entry> {
        let _guard = self.stripe(code);
        if let Some(existing) = self.cache.get(code) {
            if !record.may_replace(&existing.record) {
                return existing;
            }
        }
        let code: Arc<str> = Arc::from(code);
        let entry = Arc::new(L1Entry {
            code: code.clone(),
            record,
            filled_at: now,
        });
        self.cache.insert(code, entry.clone());
        entry
    }

    /// Drops the entry of `code` (used when a proxy cannot trust the version it holds).
    pub fn remove(&self, code: &str) {
        let _guard = self.stripe(code);
        self.cache.remove(code);
    }

    /// Empties the cache.
    pub fn clear(&self) {
        self.cache.clear();
    }

    /// Codes held now.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.cache.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{Link, RedirectKind};

    fn active(version: u64) -> CacheRecord {
        let mut l = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            None,
        );
        l.version = version;
        CacheRecord::active(&l, 0, &CachePolicy::default())
    }

    #[test]
    fn a_late_fill_never_overwrites_a_newer_tombstone() {
        let l1 = L1::new(100);
        l1.fill("abc", active(1), 0);
        let tomb = CacheRecord::tombstone(2, 0, &CachePolicy::default());
        assert!(l1.fill("abc", tomb, 0).record.is_tombstone());
        // The read that started before the delete comes back with version 1.
        let held = l1.fill("abc", active(1), 0);
        assert!(held.record.is_tombstone(), "the tombstone stays");
        assert_eq!(l1.get("abc").unwrap().record.version, 2);
        // Equal versions may overwrite (retries are idempotent).
        let again = l1.fill("abc", CacheRecord::tombstone(2, 5, &CachePolicy::default()), 5);
        assert_eq!(again.record.fresh_until, 5 + CachePolicy::default().tombstone_millis);
    }

    #[test]
    fn remove_and_clear() {
        let l1 = L1::new(100);
        l1.fill("abc", active(1), 0);
        l1.fill("abd", active(1), 0);
        l1.remove("abc");
        assert!(l1.get("abc").is_none());
        assert_eq!(l1.len(), 1);
        l1.clear();
        assert!(l1.is_empty());
    }
}
