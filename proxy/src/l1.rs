//! L1: the in-process cache of cache records (quick_cache). A fill never replaces a newer
//! version (the Lua rule, in memory), so a late populate can never overwrite the tombstone
//! a delete wrote; check-and-insert is atomic per code through striped locks.
//!
//! Layout, for 1,000,000 cached links in little memory: the cache is keyed by a 64-bit hash
//! of the code (computed once per lookup, seeded per process), and an entry holds its code
//! and destination in one allocation next to packed fields. The entry's own copy of the
//! code settles a hash collision: a lookup whose code differs is a miss, and a fill may
//! replace the colliding entry (two live codes sharing a seeded 64-bit hash is a ~1e-8
//! event at a million codes; the store is asked again, as after an eviction).

use quick_cache::sync::Cache;
use rebound_core::cache::judge;
use rebound_core::{CacheRecord, CacheState, CachedVerdict, RedirectKind, UnixMillis};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use triomphe::HeaderSlice;

const STRIPES: usize = 64;
/// `expires_at` of a link that never expires.
const NEVER: UnixMillis = UnixMillis::MAX;

/// One cached code: what a redirect needs, and the clicks counted on it since the click
/// shipper last took them. A handle: clones share one allocation holding the fields and,
/// after them, the code and the destination.
#[derive(Debug, Clone)]
pub struct L1Entry(triomphe::Arc<HeaderSlice<Fields, str>>);

#[derive(Debug)]
struct Fields {
    version: u64,
    expires_at: UnixMillis,
    fresh_until: UnixMillis,
    stale_until: UnixMillis,
    /// When this process cached it.
    filled_at: UnixMillis,
    /// Clicks since the last take. 32 bits keep the fields in 48 bytes; one code would
    /// need 4 billion clicks between two takes to wrap it.
    clicks: AtomicU32,
    code_len: u8,
    /// `None` for a tombstone.
    redirect: Option<RedirectKind>,
    forward_query: bool,
}

impl L1Entry {
    /// The entry for `code` holding `record`.
    pub fn new(code: &str, record: CacheRecord, filled_at: UnixMillis) -> L1Entry {
        let (redirect, forward_query, long_url) = match record.state {
            CacheState::Active {
                long_url,
                redirect,
                forward_query,
            } => (Some(redirect), forward_query, long_url),
            CacheState::Deleted => (None, false, String::new()),
        };
        let mut text = String::with_capacity(code.len() + long_url.len());
        text.push_str(code);
        text.push_str(&long_url);
        let fields = Fields {
            version: record.version,
            expires_at: record.expires_at.unwrap_or(NEVER),
            fresh_until: record.fresh_until,
            stale_until: record.stale_until,
            filled_at,
            clicks: AtomicU32::new(0),
            code_len: u8::try_from(code.len()).expect("codes are at most 32 bytes"),
            redirect,
            forward_query,
        };
        L1Entry(triomphe::Arc::from_header_and_str(fields, &text))
    }

    #[inline]
    fn fields(&self) -> &Fields {
        &self.0.header
    }

    /// The code, then the destination.
    #[inline]
    fn text(&self) -> &str {
        &self.0.slice
    }

    /// How the entry may be used at `now`.
    #[inline]
    pub fn verdict(&self, now: UnixMillis) -> CachedVerdict {
        let f = self.fields();
        judge(
            f.redirect.is_none(),
            self.expires_at(),
            f.fresh_until,
            f.stale_until,
            now,
        )
    }

    /// The code.
    #[inline]
    pub fn code(&self) -> &str {
        &self.text()[..self.fields().code_len as usize]
    }

    /// The code as bytes: what sorting and searching by code compare (no UTF-8 boundary
    /// check per comparison; it cost the click shipper's sort most of its time).
    #[inline]
    pub fn code_bytes(&self) -> &[u8] {
        &self.0.slice.as_bytes()[..self.fields().code_len as usize]
    }

    /// True when this is `code`'s entry (not another code's with the same hash).
    #[inline]
    fn is_for(&self, code: &str) -> bool {
        self.0.slice.as_bytes().get(..self.fields().code_len as usize) == Some(code.as_bytes())
    }

    /// The destination; empty for a tombstone.
    #[inline]
    pub fn long_url(&self) -> &str {
        &self.text()[self.fields().code_len as usize..]
    }

    /// How it redirects; `None` for a tombstone.
    #[inline]
    pub fn redirect(&self) -> Option<RedirectKind> {
        self.fields().redirect
    }

    #[inline]
    pub fn forward_query(&self) -> bool {
        self.fields().forward_query
    }

    #[inline]
    pub fn expires_at(&self) -> Option<UnixMillis> {
        let e = self.fields().expires_at;
        (e != NEVER).then_some(e)
    }

    pub fn version(&self) -> u64 {
        self.fields().version
    }

    pub fn fresh_until(&self) -> UnixMillis {
        self.fields().fresh_until
    }

    /// When this process cached it: while the invalidation channel is broken, an entry
    /// older than `l1_ttl` is not trusted.
    #[inline]
    pub fn filled_at(&self) -> UnixMillis {
        self.fields().filled_at
    }

    pub fn is_tombstone(&self) -> bool {
        self.fields().redirect.is_none()
    }

    /// Counts one click; true when it is the first since the clicks were last taken (the
    /// caller then hands the entry to the click shipper).
    #[inline]
    pub fn count_click(&self) -> bool {
        self.fields().clicks.fetch_add(1, Ordering::Relaxed) == 0
    }

    /// Takes the clicks counted so far, leaving zero.
    pub fn take_clicks(&self) -> u64 {
        u64::from(self.fields().clicks.swap(0, Ordering::Relaxed))
    }

    /// The clicks counted since the last take.
    pub fn clicks(&self) -> u64 {
        u64::from(self.fields().clicks.load(Ordering::Relaxed))
    }
}

/// The cache.
pub struct L1 {
    cache: Cache<u64, L1Entry>,
    hasher: ahash::RandomState,
    stripes: Vec<Mutex<()>>,
}

impl L1 {
    /// A cache holding up to `capacity` codes.
    pub fn new(capacity: usize) -> L1 {
        L1 {
            cache: Cache::new(capacity),
            hasher: ahash::RandomState::new(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    #[inline]
    fn key(&self, code: &str) -> u64 {
        self.hasher.hash_one(code)
    }

    /// The entry for `code`, whatever its state.
    #[inline]
    pub fn get(&self, code: &str) -> Option<L1Entry> {
        self.cache.get(&self.key(code)).filter(|e| e.is_for(code))
    }

    fn stripe(&self, key: u64) -> std::sync::MutexGuard<'_, ()> {
        self.stripes[(key as usize) % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `record` unless the cache holds a newer version; returns what the cache holds
    /// for the code afterwards.
    pub fn fill(&self, code: &str, record: CacheRecord, now: UnixMillis) -> L1Entry {
        let key = self.key(code);
        let _guard = self.stripe(key);
        if let Some(existing) = self.cache.get(&key).filter(|e| e.is_for(code)) {
            if !record.may_replace_version(existing.version()) {
                return existing;
            }
        }
        let entry = L1Entry::new(code, record, now);
        self.cache.insert(key, entry.clone());
        entry
    }

    /// Drops the entry of `code` (used when a proxy cannot trust the version it holds).
    pub fn remove(&self, code: &str) {
        let key = self.key(code);
        let _guard = self.stripe(key);
        if self.cache.get(&key).is_some_and(|e| e.is_for(code)) {
            self.cache.remove(&key);
        }
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
    use rebound_core::Link;

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
        assert!(l1.fill("abc", tomb, 0).is_tombstone());
        // The read that started before the delete comes back with version 1.
        let held = l1.fill("abc", active(1), 0);
        assert!(held.is_tombstone(), "the tombstone stays");
        assert_eq!(l1.get("abc").unwrap().version(), 2);
        // Equal versions may overwrite (retries are idempotent).
        let again = l1.fill("abc", CacheRecord::tombstone(2, 5, &CachePolicy::default()), 5);
        assert_eq!(again.fresh_until(), 5 + CachePolicy::default().tombstone_millis);
    }

    #[test]
    fn an_entry_keeps_every_field_of_its_record() {
        let p = CachePolicy::default();
        let link = Link::new_active(
            "Xy7_-".into(),
            "https://example.com/a?b=c".into(),
            RedirectKind::PermanentKeepMethod,
            true,
            0,
            "k".into(),
            Some(90_000),
        );
        let record = CacheRecord::active(&link, 1_000, &p);
        let e = L1Entry::new("Xy7_-", record.clone(), 1_000);
        assert_eq!(e.code(), "Xy7_-");
        assert_eq!(e.long_url(), "https://example.com/a?b=c");
        assert_eq!(e.redirect(), Some(RedirectKind::PermanentKeepMethod));
        assert!(e.forward_query());
        assert_eq!(e.expires_at(), Some(90_000));
        for now in [0, 1_000, 89_999, 90_000, 10_000_000] {
            assert_eq!(e.verdict(now), record.verdict(now), "at {now}");
        }
        let tomb = CacheRecord::tombstone(3, 0, &p);
        let t = L1Entry::new("Xy7_-", tomb.clone(), 0);
        assert_eq!(
            (t.code(), t.long_url(), t.redirect(), t.expires_at()),
            ("Xy7_-", "", None, None)
        );
        for now in [0, p.tombstone_millis - 1, p.tombstone_millis] {
            assert_eq!(t.verdict(now), tomb.verdict(now), "at {now}");
        }
        let forever = L1Entry::new("abc", active(1), 0);
        assert_eq!(forever.expires_at(), None);
    }

    #[test]
    fn clicks_count_until_taken() {
        let e = L1Entry::new("abc", active(1), 0);
        assert!(e.count_click(), "the first click asks to be queued");
        assert!(!e.count_click());
        assert!(!e.count_click());
        assert_eq!(e.take_clicks(), 3);
        assert_eq!(e.take_clicks(), 0);
        assert!(e.count_click(), "the first click after a take asks again");
    }

    #[test]
    fn a_colliding_entry_is_a_miss_not_an_answer() {
        // Force a collision: put another code's entry under abc's key.
        let l1 = L1::new(100);
        let key = l1.key("abc");
        l1.cache.insert(key, L1Entry::new("zzz", active(9), 0));
        assert!(l1.get("abc").is_none(), "zzz's entry does not answer for abc");
        l1.remove("abc");
        assert_eq!(l1.len(), 1, "removing abc leaves zzz's entry alone");
        // A fill for abc replaces the colliding entry whatever its version.
        assert_eq!(l1.fill("abc", active(1), 0).version(), 1);
        assert_eq!(l1.get("abc").unwrap().code(), "abc");
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
