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

/// One cached code: what a redirect needs, and the clicks counted on it since the click
/// shipper last took them. A handle: clones share one allocation holding the fields and,
/// after them, the code and the destination.
///
/// Size, measured with 1,000,000 links cached (`https://example.com/page/N?ref=bench`, 7-
/// character codes): the allocation is the 8-byte count, the 32-byte [`Fields`] and the
/// ~44 bytes of text, 88 bytes requested, a 96-byte glibc chunk; with the earlier 48-byte
/// fields it was 104 bytes requested, a 112-byte chunk. Process RSS of the all-in-one
/// (one redirect thread) after one request for each of the million codes went from
/// 247-255 MiB to 208-215 MiB, and once the clicks were shipped from 242-248 to 194-197
/// MiB (two runs each; glibc also fragments less with the smaller chunks).
#[derive(Debug, Clone)]
pub struct L1Entry(triomphe::Arc<HeaderSlice<Fields, str>>);

/// What an entry holds besides its text, packed into 32 bytes (a size test keeps it
/// there): the times are 32-bit offsets from `filled_at`, and the code's length, the
/// redirect kind and `forward_query` share a word with `filled_at`.
///
/// The offsets are exact within ±24.8 days of the fill, which covers every policy (fresh
/// at most 24 h, plus the grace). Outside that range they saturate on the safe side: a
/// later `fresh_until`/`stale_until` is cut to the range's end (the store is asked again
/// sooner), and an expiry beyond it is kept as "none" (`FAR`), which can only turn an
/// `Expired` verdict into `Dead` (the store is asked, and answers 410): since
/// `fresh_until` and `stale_until` stay below `FAR`, a redirect or a stale answer past the
/// real expiry is impossible.
#[derive(Debug)]
struct Fields {
    version: u64,
    /// `filled_at` (when this process cached it) in the upper 48 bits (±4,400 years of
    /// milliseconds); below it the code's length, the redirect kind and `forward_query`
    /// (the masks below).
    stamp: i64,
    /// `fresh_until - filled_at`.
    fresh: i32,
    /// `stale_until - filled_at`.
    stale: i32,
    /// `expires_at - filled_at`, or `FAR` for none (or one beyond the range).
    expires: i32,
    /// Clicks since the last take. 32 bits: one code would need 4 billion clicks between
    /// two takes to wrap it.
    clicks: AtomicU32,
}

/// `Fields::expires` of an entry with no expiry (or one too far to hold).
const FAR: i32 = i32::MAX;
/// Bits of `Fields::stamp` below `filled_at`.
const STAMP_SHIFT: u32 = 16;
/// `filled_at` is clamped to what the upper 48 bits hold.
const FILLED_MIN: UnixMillis = i64::MIN >> STAMP_SHIFT;
const FILLED_MAX: UnixMillis = i64::MAX >> STAMP_SHIFT;
/// The code's length: bits 0-5 of the stamp.
const CODE_LEN_MASK: i64 = 0x3f;
/// The redirect kind, 0 for a tombstone: bits 6-8.
const REDIRECT_SHIFT: u32 = 6;
/// `forward_query`: bit 9.
const FORWARD_QUERY_BIT: i64 = 1 << 9;

/// The redirect kinds by their 3-bit number (0: a tombstone; 5-7 are never written).
const KINDS: [Option<RedirectKind>; 8] = [
    None,
    Some(RedirectKind::Permanent),
    Some(RedirectKind::Found),
    Some(RedirectKind::Temporary),
    Some(RedirectKind::PermanentKeepMethod),
    None,
    None,
    None,
];

fn kind_number(redirect: Option<RedirectKind>) -> i64 {
    match redirect {
        None => 0,
        Some(RedirectKind::Permanent) => 1,
        Some(RedirectKind::Found) => 2,
        Some(RedirectKind::Temporary) => 3,
        Some(RedirectKind::PermanentKeepMethod) => 4,
    }
}

/// `filled_at` and the small fields in one word.
fn stamp(filled_at: UnixMillis, code_len: usize, redirect: Option<RedirectKind>, forward_query: bool) -> i64 {
    assert!(code_len as i64 <= CODE_LEN_MASK, "codes are at most 32 bytes");
    (filled_at.clamp(FILLED_MIN, FILLED_MAX) << STAMP_SHIFT)
        | code_len as i64
        | kind_number(redirect) << REDIRECT_SHIFT
        | if forward_query { FORWARD_QUERY_BIT } else { 0 }
}

/// `at - base` as an offset, saturated to `[i32::MIN, FAR - 1]` (see [`Fields`]).
fn offset(at: UnixMillis, base: UnixMillis) -> i32 {
    at.saturating_sub(base).clamp(i64::from(i32::MIN), i64::from(FAR - 1)) as i32
}

/// The expiry as an offset from `base`: `FAR` for none or one past the range.
fn expiry_offset(expires_at: Option<UnixMillis>, base: UnixMillis) -> i32 {
    match expires_at {
        Some(e) if e.saturating_sub(base) < i64::from(FAR) => offset(e, base),
        _ => FAR,
    }
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
        let stamp = stamp(filled_at, code.len(), redirect, forward_query);
        let base = stamp >> STAMP_SHIFT;
        let fields = Fields {
            version: record.version,
            stamp,
            fresh: offset(record.fresh_until, base),
            stale: offset(record.stale_until, base),
            expires: expiry_offset(record.expires_at, base),
            clicks: AtomicU32::new(0),
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

    #[inline]
    fn code_len(&self) -> usize {
        (self.fields().stamp & CODE_LEN_MASK) as usize
    }

    /// How the entry may be used at `now`.
    #[inline]
    pub fn verdict(&self, now: UnixMillis) -> CachedVerdict {
        let f = self.fields();
        let base = f.stamp >> STAMP_SHIFT;
        judge(
            self.is_tombstone(),
            self.expires_at(),
            base + i64::from(f.fresh),
            base + i64::from(f.stale),
            now,
        )
    }

    /// The code.
    #[inline]
    pub fn code(&self) -> &str {
        &self.text()[..self.code_len()]
    }

    /// The code as bytes: what sorting and searching by code compare (no UTF-8 boundary
    /// check per comparison; it cost the click shipper's sort most of its time).
    #[inline]
    pub fn code_bytes(&self) -> &[u8] {
        &self.0.slice.as_bytes()[..self.code_len()]
    }

    /// True when this is `code`'s entry (not another code's with the same hash).
    #[inline]
    fn is_for(&self, code: &str) -> bool {
        self.0.slice.as_bytes().get(..self.code_len()) == Some(code.as_bytes())
    }

    /// The destination; empty for a tombstone.
    #[inline]
    pub fn long_url(&self) -> &str {
        &self.text()[self.code_len()..]
    }

    /// How it redirects; `None` for a tombstone.
    #[inline]
    pub fn redirect(&self) -> Option<RedirectKind> {
        KINDS[((self.fields().stamp >> REDIRECT_SHIFT) & 7) as usize]
    }

    #[inline]
    pub fn forward_query(&self) -> bool {
        self.fields().stamp & FORWARD_QUERY_BIT != 0
    }

    /// The expiry; `None` also for one more than ~24.8 days after the fill (see [`Fields`]).
    #[inline]
    pub fn expires_at(&self) -> Option<UnixMillis> {
        let f = self.fields();
        (f.expires != FAR).then(|| (f.stamp >> STAMP_SHIFT) + i64::from(f.expires))
    }

    pub fn version(&self) -> u64 {
        self.fields().version
    }

    pub fn fresh_until(&self) -> UnixMillis {
        self.filled_at() + i64::from(self.fields().fresh)
    }

    /// When this process cached it: while the invalidation channel is broken, an entry
    /// older than `l1_ttl` is not trusted.
    #[inline]
    pub fn filled_at(&self) -> UnixMillis {
        self.fields().stamp >> STAMP_SHIFT
    }

    #[inline]
    pub fn is_tombstone(&self) -> bool {
        (self.fields().stamp >> REDIRECT_SHIFT) & 7 == 0
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

    /// A record with every field given.
    fn record(
        redirect: Option<RedirectKind>,
        forward_query: bool,
        expires_at: Option<UnixMillis>,
        fresh_until: UnixMillis,
        stale_until: UnixMillis,
    ) -> CacheRecord {
        CacheRecord {
            state: match redirect {
                Some(redirect) => CacheState::Active {
                    long_url: "https://example.com/page/1?ref=bench".into(),
                    redirect,
                    forward_query,
                },
                None => CacheState::Deleted,
            },
            version: 7,
            expires_at,
            fresh_until,
            stale_until,
        }
    }

    const DAY: UnixMillis = 86_400_000;
    const T: UnixMillis = 1_796_000_000_000;

    #[test]
    fn the_fields_stay_32_bytes() {
        // With the 8-byte count and ~44 bytes of text an entry is an 88-byte allocation,
        // a 96-byte malloc chunk; 8 more bytes here would make it 112.
        assert_eq!(std::mem::size_of::<Fields>(), 32);
    }

    #[test]
    fn offsets_are_exact_in_range_and_saturate_on_the_safe_side() {
        let far = i64::from(FAR);
        for (at, base, want) in [
            (T + 5, T, 5),
            (T - 5, T, -5),
            (T + DAY + 900_000, T, (DAY + 900_000) as i32),
            (T + far - 1, T, FAR - 1),
            (T + far, T, FAR - 1),
            (i64::MAX, T, FAR - 1),
            (T + i64::from(i32::MIN), T, i32::MIN),
            (i64::MIN, T, i32::MIN),
            (0, FILLED_MIN, FAR - 1),
        ] {
            assert_eq!(offset(at, base), want, "offset({at}, {base})");
        }
        for (expires_at, want) in [
            (None, FAR),
            (Some(T), 0),
            (Some(T - 10), -10),
            (Some(T + far - 1), FAR - 1),
            (Some(T + far), FAR),
            (Some(i64::MAX), FAR),
            (Some(i64::MIN), i32::MIN),
        ] {
            assert_eq!(expiry_offset(expires_at, T), want, "expiry {expires_at:?}");
        }
    }

    #[test]
    fn every_small_field_round_trips_through_the_stamp() {
        let kinds = [
            None,
            Some(RedirectKind::Permanent),
            Some(RedirectKind::Found),
            Some(RedirectKind::Temporary),
            Some(RedirectKind::PermanentKeepMethod),
        ];
        let codes = ["abc", "Xy7_-aB", &"z".repeat(32), &"q".repeat(63)];
        for filled_at in [FILLED_MIN, -1, 0, 1, T, FILLED_MAX] {
            for code in codes {
                for kind in kinds {
                    for fq in [false, true] {
                        let r = record(kind, fq, Some(filled_at.saturating_add(DAY)), filled_at, filled_at);
                        let e = L1Entry::new(code, r, filled_at);
                        let url = if kind.is_some() {
                            "https://example.com/page/1?ref=bench"
                        } else {
                            ""
                        };
                        assert_eq!(
                            (e.filled_at(), e.code(), e.long_url(), e.redirect(), e.is_tombstone()),
                            (filled_at, code, url, kind, kind.is_none()),
                            "{filled_at} {code} {kind:?} {fq}"
                        );
                        assert_eq!(e.forward_query(), fq && kind.is_some());
                        assert!(e.is_for(code) && !e.is_for(&code[1..]));
                    }
                }
            }
        }
        // Beyond 48 bits of milliseconds (±4,000 years) the fill time is clamped.
        assert_eq!(L1Entry::new("abc", active(1), i64::MAX).filled_at(), FILLED_MAX);
        assert_eq!(L1Entry::new("abc", active(1), i64::MIN).filled_at(), FILLED_MIN);
    }

    #[test]
    #[should_panic(expected = "codes are at most 32 bytes")]
    fn a_code_longer_than_the_length_bits_is_refused() {
        L1Entry::new(&"a".repeat(64), active(1), 0);
    }

    /// Moments around every boundary of `r`, as seen from a fill at `T`.
    fn moments(r: &CacheRecord) -> Vec<UnixMillis> {
        let mut at = vec![
            i64::MIN,
            T - 30 * DAY,
            T - 1,
            T,
            T + 1,
            T + 60 * DAY,
            T + 400 * DAY,
            i64::MAX,
        ];
        for b in [Some(r.fresh_until), Some(r.stale_until), r.expires_at]
            .into_iter()
            .flatten()
        {
            at.extend([b.saturating_sub(1), b, b.saturating_add(1)]);
        }
        at
    }

    #[test]
    fn verdicts_match_the_record_wherever_the_offsets_hold_it() {
        let p = CachePolicy::default();
        let mut records = vec![CacheRecord::tombstone(3, T, &p), CacheRecord::tombstone(3, T - DAY, &p)];
        for kind in [Some(RedirectKind::Found), None] {
            for expires_at in [
                None,
                Some(T - DAY),
                Some(T),
                Some(T + 5_000),
                Some(T + DAY),
                Some(T + 20 * DAY),
            ] {
                for (fresh, stale) in [(T + DAY, T + DAY + 900_000), (T - 10, T + 5), (T - DAY, T - 1), (T, T)] {
                    let cap = |t: UnixMillis| expires_at.map_or(t, |e| t.min(e));
                    records.push(record(kind, false, expires_at, cap(fresh), cap(stale)));
                }
            }
        }
        for r in records {
            let e = L1Entry::new("abc", r.clone(), T);
            assert_eq!(e.expires_at(), r.expires_at, "{r:?}");
            for now in moments(&r) {
                assert_eq!(e.verdict(now), r.verdict(now), "{r:?} at {now}");
            }
        }
    }

    #[test]
    fn out_of_range_times_never_serve_longer_than_the_record() {
        // Fresh for 30 days, expiring in a year: both past the offsets' ±24.8 days.
        let far = [
            record(
                Some(RedirectKind::Found),
                false,
                Some(T + 365 * DAY),
                T + 30 * DAY,
                T + 31 * DAY,
            ),
            record(
                Some(RedirectKind::Found),
                false,
                Some(T + 365 * DAY),
                T + DAY,
                T + DAY + 900_000,
            ),
            record(Some(RedirectKind::Found), false, Some(i64::MAX - 1), T + DAY, T + DAY),
        ];
        for r in far {
            let e = L1Entry::new("abc", r.clone(), T);
            assert_eq!(e.expires_at(), None, "kept as no expiry: {r:?}");
            for now in moments(&r) {
                let (got, want) = (e.verdict(now), r.verdict(now));
                match got {
                    // A redirect only when the record would give it, a stale answer only
                    // when the record would give that or a redirect.
                    CachedVerdict::Redirect => assert_eq!(want, got, "{r:?} at {now}"),
                    CachedVerdict::Stale => assert!(
                        matches!(want, CachedVerdict::Redirect | CachedVerdict::Stale),
                        "{r:?} at {now}"
                    ),
                    // Dead where the record says Expired (the store then answers 410), or
                    // where it still says Redirect/Stale after the range (asked sooner).
                    CachedVerdict::Dead => {}
                    other => panic!("{other:?} for {r:?} at {now}"),
                }
                if now < T + i64::from(FAR) - 1 && now < r.fresh_until {
                    assert_eq!(got, want, "exact inside the range: {r:?} at {now}");
                }
            }
        }
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
