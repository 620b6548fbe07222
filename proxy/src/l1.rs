//! L1: the in-process cache of cache records, one entry per code, bounded by CLOCK eviction.
//! A fill never replaces a newer version (the Lua rule, in memory), so a late populate can
//! never overwrite the tombstone a delete wrote; check-and-insert is atomic per code under
//! its shard's write lock. How it is laid out for 1,000,000 links in little memory, and what
//! that costs a link: docs/architecture.md ("L1").

// The entry's reference count is triomphe's, its text `thin_text`'s: nothing here may be
// `unsafe`, not even with an `allow`.
#![forbid(unsafe_code)]

use crate::targeting::Ruled;
use crate::thin_text::ThinText;
use rebound_core::cache::judge;
use rebound_core::rules::{Rule, RuleSet};
use rebound_core::{CacheRecord, CacheState, CachedVerdict, RedirectKind, UnixMillis};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One cached code: what a redirect needs, and the clicks counted on it since the click
/// shipper last took them. A one-word handle ([`ThinText`], triomphe's `ThinArc`): clones
/// share one allocation holding the count, the [`Fields`], the text's length and, after
/// them, the code and the destination.
///
/// Size, with 1,000,000 bench-shaped links cached (7-character codes,
/// `https://example.com/page/N?ref=bench`): an 8-byte count, 32 bytes of fields, the text's
/// 8-byte length and up to 48 of text, 96 bytes asked for: a 96-byte chunk with glibc's
/// malloc and with jemalloc.
#[derive(Clone)]
pub struct L1Entry(ThinText<Fields>);

/// What an entry holds before its text, packed into 32 bytes (a size test keeps it
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
struct Fields {
    /// Clicks since the last take (bits 0-30) and the CLOCK bit (`REFERENCED`). One code
    /// would need 2 billion clicks between two takes to reach the bit.
    clicks: AtomicU32,
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
}

/// `Fields::clicks`: the CLOCK bit, set by a hit, cleared by the hand.
const REFERENCED: u32 = 1 << 31;
/// `Fields::clicks`: the count.
const CLICKS: u32 = REFERENCED - 1;

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
/// The link asks for a password: bit 10.
const PROTECTED_BIT: i64 = 1 << 10;
/// The link has rules (docs/spec.md §14): bit 11. Its text is then the code, the
/// destination, a line feed (never in a target: targets hold no whitespace or control
/// characters) and the rules' JSON.
const RULES_BIT: i64 = 1 << 11;

/// The redirect kind of a superseded entry (see [`L1Entry::superseded`]).
const SUPERSEDED: i64 = 5;

/// The redirect kinds by their 3-bit number (0: a tombstone; 5: superseded; 6-7 are never
/// written).
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
        let (redirect, forward_query, protected, long_url, rules) = match record.state {
            CacheState::Active {
                long_url,
                redirect,
                forward_query,
                protected,
                rules,
            } => (Some(redirect), forward_query, protected, long_url, rules),
            CacheState::Deleted => (None, false, false, String::new(), Vec::new()),
        };
        let mut stamp = stamp(filled_at, code.len(), redirect, forward_query);
        if protected {
            stamp |= PROTECTED_BIT;
        }
        let rules = match rebound_core::rules::stored_json(&rules) {
            None => String::new(),
            Some(json) => {
                stamp |= RULES_BIT;
                json
            }
        };
        let base = stamp >> STAMP_SHIFT;
        let fields = Fields {
            clicks: AtomicU32::new(0),
            version: record.version,
            stamp,
            fresh: offset(record.fresh_until, base),
            stale: offset(record.stale_until, base),
            expires: expiry_offset(record.expires_at, base),
        };
        let mut text = String::with_capacity(code.len() + long_url.len() + rules.len() + 1);
        text.push_str(code);
        text.push_str(&long_url);
        if !rules.is_empty() {
            text.push('\n');
            text.push_str(&rules);
        }
        L1Entry(ThinText::new(fields, &text))
    }

    /// What an edit leaves of `code` until the new version is read: no destination, no
    /// use (its verdict is `Dead`, so a reader goes below L1), and `version`, which keeps a
    /// late fill of an older version out.
    pub fn superseded(code: &str, version: u64, at: UnixMillis) -> L1Entry {
        let stamp = stamp(at, code.len(), None, false) | SUPERSEDED << REDIRECT_SHIFT;
        // Fresh and stale until ~24.8 days before `at`: `Dead` at any `now` a clock can
        // read near it, without a branch on the redirect path.
        let fields = Fields {
            clicks: AtomicU32::new(0),
            version,
            stamp,
            fresh: i32::MIN,
            stale: i32::MIN,
            expires: FAR,
        };
        L1Entry(ThinText::new(fields, code))
    }

    /// True for an entry an edit left (see [`L1Entry::superseded`]).
    #[inline]
    pub fn is_superseded(&self) -> bool {
        (self.fields().stamp >> REDIRECT_SHIFT) & 7 == SUPERSEDED
    }

    #[inline]
    fn fields(&self) -> &Fields {
        self.0.header()
    }

    /// The code, then the destination.
    #[inline]
    fn text(&self) -> &str {
        self.0.text()
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

    /// Whether both are the one entry (not two fills of a code).
    #[inline]
    pub fn is_same(&self, other: &L1Entry) -> bool {
        self.0.ptr_eq(&other.0)
    }

    /// A hash of where the entry lives (what [`L1Entry::is_same`] compares): equal for
    /// clones, and unequal for two entries alive at once but by chance.
    #[inline]
    pub(crate) fn address_hash(&self) -> u64 {
        rebound_core::rules::mix(self.0.address() as u64)
    }

    /// The code as bytes: what sorting and searching by code compare (no UTF-8 boundary
    /// check per comparison; it cost the click shipper's sort most of its time).
    #[inline]
    pub fn code_bytes(&self) -> &[u8] {
        &self.text().as_bytes()[..self.code_len()]
    }

    /// True when this is `code`'s entry.
    #[inline]
    fn is_for(&self, code: &str) -> bool {
        self.code_bytes() == code.as_bytes()
    }

    /// The destination; empty for a tombstone.
    #[inline]
    pub fn long_url(&self) -> &str {
        let rest = &self.text()[self.code_len()..];
        match self.has_rules() {
            false => rest,
            true => rest.split_once('\n').map_or(rest, |(url, _)| url),
        }
    }

    /// The link has rules: its redirect asks [`L1::rules`] for the target.
    #[inline]
    pub fn has_rules(&self) -> bool {
        self.fields().stamp & RULES_BIT != 0
    }

    /// The rules' JSON, for an entry that has rules.
    fn rules_json(&self) -> Option<&str> {
        match self.has_rules() {
            false => None,
            true => self.text()[self.code_len()..].split_once('\n').map(|(_, json)| json),
        }
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

    /// The link asks for a password before it redirects.
    #[inline]
    pub fn is_protected(&self) -> bool {
        self.fields().stamp & PROTECTED_BIT != 0
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
        self.fields().clicks.fetch_add(1, Ordering::Relaxed) & CLICKS == 0
    }

    /// Takes the clicks counted so far, leaving zero (and the CLOCK bit as it was).
    pub fn take_clicks(&self) -> u64 {
        u64::from(self.fields().clicks.fetch_and(REFERENCED, Ordering::Relaxed) & CLICKS)
    }

    /// The clicks counted since the last take.
    pub fn clicks(&self) -> u64 {
        u64::from(self.fields().clicks.load(Ordering::Relaxed) & CLICKS)
    }

    /// Sets the CLOCK bit: the entry was used since the hand last passed. A load first, so
    /// a hot entry costs no write.
    #[inline]
    fn mark_referenced(&self) {
        let clicks = &self.fields().clicks;
        if clicks.load(Ordering::Relaxed) & REFERENCED == 0 {
            clicks.fetch_or(REFERENCED, Ordering::Relaxed);
        }
    }

    /// Clears the CLOCK bit; true when it was set.
    fn take_referenced(&self) -> bool {
        self.fields().clicks.fetch_and(!REFERENCED, Ordering::Relaxed) & REFERENCED != 0
    }
}

impl std::fmt::Debug for L1Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("L1Entry")
            .field("code", &self.code())
            .field("version", &self.version())
            .field("redirect", &self.redirect())
            .field("long_url", &self.long_url())
            .field("clicks", &self.clicks())
            .finish_non_exhaustive()
    }
}

/// Shards of the table at most: enough that the two redirect threads and the fills rarely
/// meet on one lock.
const MAX_SHARDS: usize = 64;
/// Codes a shard is made for, when there are fewer than `MAX_SHARDS`: 7/8 of 32,768, the
/// most hashbrown keeps in a table of 32,768 buckets, so a full cache has no bucket to
/// spare (the shard count need not be a power of two).
const PER_SHARD: usize = 28_672;

/// The bits of the hash that choose a shard (above bit 32).
const SHARD_BITS: u64 = (1 << 25) - 1;

/// One shard: the entries, and where the CLOCK hand is (a bucket index).
struct Shard {
    table: hashbrown::HashTable<L1Entry>,
    hand: usize,
}

/// The rules of entries in the table that have rules and were asked for, compiled (a cache
/// of [`RuleSet::compile`] of each one's JSON, dropped with its entry), by entry: found by
/// the entry's address, without hashing its code again.
type Compiled = hashbrown::HashTable<(L1Entry, Arc<Ruled>)>;

/// The cache.
pub struct L1 {
    shards: Box<[RwLock<Shard>]>,
    /// As many as `shards`, chosen by [`L1Entry::address_hash`].
    compiled: Box<[RwLock<Compiled>]>,
    /// Codes one shard holds at most.
    per_shard: usize,
    hasher: ahash::RandomState,
}

impl L1 {
    /// A cache holding up to `capacity` codes (rounded up to a multiple of the shards).
    pub fn new(capacity: usize) -> L1 {
        let shards = capacity.div_ceil(PER_SHARD).clamp(1, MAX_SHARDS);
        let per_shard = capacity.div_ceil(shards).max(1);
        L1 {
            shards: (0..shards)
                .map(|_| {
                    RwLock::new(Shard {
                        // Room for a full shard from the start: it never rehashes while
                        // the redirect path waits on its lock.
                        table: hashbrown::HashTable::with_capacity(per_shard),
                        hand: 0,
                    })
                })
                .collect(),
            compiled: (0..shards).map(|_| RwLock::new(Compiled::new())).collect(),
            per_shard,
            hasher: ahash::RandomState::new(),
        }
    }

    #[inline]
    fn hash(&self, code: &[u8]) -> u64 {
        self.hasher.hash_one(code)
    }

    /// The shard of a hash, from bits 32-56, which neither hashbrown's bucket index (the
    /// low bits) nor its control byte (the top 7) uses: a shard's codes keep the full
    /// spread of both.
    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        let spread = (hash >> 32) & SHARD_BITS;
        &self.shards[((spread * self.shards.len() as u64) >> SHARD_BITS.count_ones()) as usize]
    }

    /// The entry for `code`, whatever its state.
    #[inline]
    pub fn get(&self, code: &str) -> Option<L1Entry> {
        let hash = self.hash(code.as_bytes());
        let shard = read(self.shard(hash));
        let entry = shard.table.find(hash, |e| e.is_for(code))?;
        entry.mark_referenced();
        Some(entry.clone())
    }

    /// Stores `record` unless the cache holds a newer version; returns what the cache holds
    /// for the code afterwards. A full shard first evicts one entry (CLOCK).
    pub fn fill(&self, code: &str, record: CacheRecord, now: UnixMillis) -> L1Entry {
        self.put(code, record.version, || L1Entry::new(code, record, now))
    }

    /// Voids every version of `code` below `version` (an edit): holds a superseded entry
    /// at `version` unless the cache holds that version or a newer one already; returns
    /// what the cache holds for the code afterwards.
    pub fn supersede(&self, code: &str, version: u64, now: UnixMillis) -> L1Entry {
        self.put(code, version.saturating_sub(1), || {
            L1Entry::superseded(code, version, now)
        })
    }

    /// Stores the entry `make` builds unless the cache holds a version above `at_least`
    /// (the fill rule: equal versions replace); what the cache holds afterwards.
    fn put(&self, code: &str, at_least: u64, make: impl FnOnce() -> L1Entry) -> L1Entry {
        let hash = self.hash(code.as_bytes());
        let mut shard = write(self.shard(hash));
        if let Some(existing) = shard.table.find_mut(hash, |e| e.is_for(code)) {
            if existing.version() > at_least {
                return existing.clone();
            }
            let entry = make();
            let old = std::mem::replace(existing, entry.clone());
            self.forget_rules(&old);
            return entry;
        }
        let entry = make();
        if shard.table.len() >= self.per_shard {
            if let Some(gone) = shard.evict_one() {
                self.forget_rules(&gone);
            }
        }
        shard
            .table
            .insert_unique(hash, entry.clone(), |e| self.hash(e.code_bytes()));
        entry
    }

    /// Drops the entry of `code` (used when a proxy cannot trust the version it holds).
    pub fn remove(&self, code: &str) {
        let hash = self.hash(code.as_bytes());
        let mut shard = write(self.shard(hash));
        if let Ok(found) = shard.table.find_entry(hash, |e| e.is_for(code)) {
            let (gone, _) = found.remove();
            self.forget_rules(&gone);
        }
    }

    /// The compiled rules of `entry` (one that [`L1Entry::has_rules`]): compiled from its
    /// JSON the first time, then kept while the cache holds the entry, found by the entry's
    /// address: one more read lock a redirect. Found by the code's hash in its shard, they
    /// cost 115 instructions under callgrind; a per-thread memory of the last 64 sets
    /// (gone) missed on the bench's 10,000 links with rules and cost 365
    /// (benches/results/2026-12-06k-callgrind-rules-costs.md,
    /// benches/results/2026-12-07d-callgrind-rules-margin.md). `None` for an entry without
    /// rules, or with rules no longer readable (never: they were written by this build's
    /// serializer).
    pub fn rules(&self, entry: &L1Entry) -> Option<Arc<Ruled>> {
        if !entry.has_rules() {
            return None;
        }
        let by_address = entry.address_hash();
        {
            let compiled = read(self.compiled_of(by_address));
            if let Some((_, rules)) = compiled.find(by_address, |(e, _)| e.is_same(entry)) {
                return Some(rules.clone());
            }
        }
        self.compile(entry, by_address)
    }

    /// [`L1::rules`] the first time: compiles them, and keeps them while the table holds
    /// `entry` (not for an entry that answers one flight only, nor for one replaced
    /// meanwhile).
    #[cold]
    fn compile(&self, entry: &L1Entry, by_address: u64) -> Option<Arc<Ruled>> {
        let code = entry.code();
        let rules: Vec<Rule> = serde_json::from_str(entry.rules_json()?).ok()?;
        let rules = Arc::new(Ruled::new(RuleSet::compile(code, &rules))?);
        let hash = self.hash(code.as_bytes());
        // Under the shard's lock, as a replacement forgets them: never kept for an entry
        // the table no longer holds.
        let shard = write(self.shard(hash));
        if shard.table.find(hash, |e| e.is_same(entry)).is_some() {
            let mut compiled = write(self.compiled_of(by_address));
            match compiled.find(by_address, |(e, _)| e.is_same(entry)) {
                // Compiled meanwhile by another thread.
                Some((_, kept)) => return Some(kept.clone()),
                None => {
                    compiled.insert_unique(by_address, (entry.clone(), rules.clone()), |(e, _)| e.address_hash());
                }
            }
        }
        Some(rules)
    }

    /// The compiled rules' table of an entry whose [`L1Entry::address_hash`] is `hash`.
    #[inline]
    fn compiled_of(&self, hash: u64) -> &RwLock<Compiled> {
        &self.compiled[(((hash >> 32) * self.compiled.len() as u64) >> 32) as usize]
    }

    /// Drops the compiled rules of `gone` (an entry the table no longer holds), if any.
    fn forget_rules(&self, gone: &L1Entry) {
        if !gone.has_rules() {
            return;
        }
        let by_address = gone.address_hash();
        let mut compiled = write(self.compiled_of(by_address));
        if let Ok(found) = compiled.find_entry(by_address, |(e, _)| e.is_same(gone)) {
            found.remove();
        }
    }

    /// Compiled rule sets held (for the memory figures and tests).
    pub fn compiled_rules(&self) -> usize {
        self.compiled.iter().map(|c| read(c).len()).sum()
    }

    /// Empties the cache.
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = write(shard);
            shard.table.clear();
            shard.hand = 0;
        }
        // After every shard: a compile that found its entry before the shard was cleared
        // has kept its rules by now.
        for compiled in self.compiled.iter() {
            write(compiled).clear();
        }
    }

    /// Codes held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).table.len()).sum()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the tables take (buckets and control bytes), the entries' allocations aside.
    pub fn table_bytes(&self) -> usize {
        let bucket = std::mem::size_of::<L1Entry>() + 1;
        self.shards.iter().map(|s| read(s).table.num_buckets() * bucket).sum()
    }
}

/// A shard to read. A poisoned lock is used as is: nothing done under these locks can
/// panic between two changes to a table (an entry is made before the table is touched).
fn read<T>(shard: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    shard.read().unwrap_or_else(|e| e.into_inner())
}

/// A shard to change (see [`read`] on poisoning).
fn write<T>(shard: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    shard.write().unwrap_or_else(|e| e.into_inner())
}

impl Shard {
    /// Moves the hand until it finds an entry not used since its last pass, and evicts it
    /// (returned); the entries it passes lose their bit. At most two turns: the first clears
    /// every bit.
    fn evict_one(&mut self) -> Option<L1Entry> {
        let buckets = self.table.num_buckets();
        for _ in 0..2 * buckets {
            let at = self.hand;
            self.hand = (at + 1) % buckets;
            if let Ok(found) = self.table.get_bucket_entry(at) {
                if !found.get().take_referenced() {
                    return Some(found.remove().0);
                }
            }
        }
        None
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
                    protected: false,
                    rules: Vec::new(),
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
    fn an_entry_is_one_word_and_its_fields_stay_32_bytes() {
        // With the bench's up to 48 bytes of text an entry is a 96-byte allocation (the 8-byte
        // count, the fields, the text's 8-byte length, the text), a 96-byte chunk; 8 more
        // bytes here would make it 112. The handle is one word in every table that holds it.
        assert_eq!(std::mem::size_of::<Fields>(), 32);
        assert_eq!(std::mem::size_of::<triomphe::HeaderWithLength<Fields>>(), 40);
        assert_eq!(std::mem::size_of::<L1Entry>(), 8);
        assert_eq!(std::mem::size_of::<Option<L1Entry>>(), 8);
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
    fn an_edit_voids_older_versions_and_the_new_one_replaces_it() {
        let l1 = L1::new(100);
        l1.fill("abc", active(1), 0);
        let held = l1.supersede("abc", 2, 10);
        assert!(held.is_superseded() && !held.is_tombstone());
        assert_eq!((held.version(), held.redirect(), held.long_url()), (2, None, ""));
        // Never usable, at any time near its making (a clock read a little before it too).
        for now in [-1_000_000, 9, 10, 11, 86_400_000] {
            assert_eq!(held.verdict(now), CachedVerdict::Dead, "{now}");
        }
        // The read that started before the edit comes back with version 1: kept out.
        assert!(l1.fill("abc", active(1), 0).is_superseded());
        // The new version replaces it, and an edit's message heard late leaves it.
        assert_eq!(l1.fill("abc", active(2), 20).redirect(), Some(RedirectKind::Found));
        assert!(!l1.supersede("abc", 2, 30).is_superseded());
        assert!(!l1.supersede("abc", 1, 30).is_superseded());
        assert!(l1.supersede("abc", 3, 30).is_superseded());
        // A code L1 did not hold is voided too: a read in flight may bring it.
        assert!(l1.supersede("new", 5, 0).is_superseded());
        assert!(l1
            .fill(
                "new",
                CacheRecord {
                    version: 4,
                    ..active(4)
                },
                0
            )
            .is_superseded());
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
        assert!(!e.is_protected());
        assert_eq!(e.expires_at(), Some(90_000));
        let locked = Link {
            password_hash: Some("$argon2id$…".into()),
            ..link.clone()
        };
        let p_entry = L1Entry::new("Xy7_-", CacheRecord::active(&locked, 1_000, &p), 1_000);
        assert!(p_entry.is_protected() && p_entry.forward_query());
        assert_eq!(p_entry.redirect(), Some(RedirectKind::PermanentKeepMethod));
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
    fn clicks_and_the_clock_bit_do_not_disturb_each_other() {
        let e = L1Entry::new("abc", active(1), 0);
        e.mark_referenced();
        assert!(
            e.count_click(),
            "a referenced entry's first click still asks to be queued"
        );
        assert!(!e.count_click());
        assert_eq!(e.clicks(), 2);
        assert_eq!(e.take_clicks(), 2, "the bit is not counted as clicks");
        assert!(e.take_referenced(), "taking the clicks leaves the bit");
        assert!(!e.take_referenced());
        assert!(e.count_click());
        assert!(!e.take_referenced(), "a click alone does not set the bit (a hit does)");
        assert_eq!(e.take_clicks(), 1);
    }

    #[test]
    fn a_handle_outlives_its_eviction_and_clones_share_one_allocation() {
        let l1 = L1::new(1);
        let held = l1.fill("abc", active(1), 0);
        let again = l1.get("abc").unwrap();
        assert!(held.0.ptr_eq(&again.0), "one allocation");
        l1.fill("abd", active(1), 0);
        assert!(l1.get("abc").is_none(), "a one-code cache holds the newest");
        assert_eq!(
            (held.code(), held.long_url(), again.version()),
            ("abc", "https://e.com/", 1)
        );
        assert_eq!(held.0.strong_count(), 2);
        drop(again);
        assert_eq!(held.0.strong_count(), 1);
    }

    #[test]
    fn handles_cloned_and_dropped_on_many_threads_free_the_entry_once() {
        let l1 = std::sync::Arc::new(L1::new(16));
        l1.fill("abc", active(1), 0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l1 = l1.clone();
                std::thread::spawn(move || {
                    let mut kept = Vec::new();
                    for i in 0..20_000 {
                        let e = l1.get("abc").unwrap();
                        e.count_click();
                        if i % 7 == 0 {
                            kept.push(e.clone());
                        }
                    }
                    kept.len()
                })
            })
            .collect();
        let kept: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let e = l1.get("abc").unwrap();
        assert_eq!(kept, 4 * 2858);
        assert_eq!(e.0.strong_count(), 2, "the table's and this one");
        assert_eq!(e.take_clicks(), 80_000);
    }

    #[test]
    fn a_full_cache_evicts_an_entry_not_used_since_the_hand_passed() {
        let l1 = L1::new(4);
        for code in ["a1", "a2", "c1", "c2"] {
            l1.fill(code, active(1), 0);
        }
        l1.get("a1").unwrap();
        l1.get("a2").unwrap();
        l1.fill("new", active(1), 0);
        assert_eq!(l1.len(), 4);
        assert!(
            l1.get("a1").is_some() && l1.get("a2").is_some(),
            "used entries had a second chance"
        );
        assert!(l1.get("new").is_some());
        let kept = ["c1", "c2"].iter().filter(|c| l1.get(c).is_some()).count();
        assert_eq!(kept, 1, "one entry that was not used went");
    }

    #[test]
    fn a_code_asked_between_turns_of_the_hand_survives_a_scan_of_codes_asked_once() {
        let l1 = L1::new(64);
        l1.fill("hot", active(1), 0);
        for i in 0..5_000 {
            l1.fill(&format!("once{i}"), active(1), 0);
            assert!(l1.get("hot").is_some(), "evicted after {i} codes asked once");
            assert!(l1.len() <= 64);
        }
        assert_eq!(l1.len(), 64);
    }

    #[test]
    fn a_cache_is_split_into_at_most_64_full_sized_shards_and_holds_its_capacity() {
        for (capacity, shards, buckets) in [
            (1, 1, 4),
            (100, 1, 128),
            (28_672, 1, 32_768),
            (28_673, 2, 32_768),
            (1_200_000, 42, 32_768),
            (10_000_000, 64, 262_144),
        ] {
            let l1 = L1::new(capacity);
            assert_eq!(l1.shards.len(), shards, "capacity {capacity}");
            assert!(l1.per_shard * shards >= capacity);
            let table = l1.shards[0].read().unwrap().table.num_buckets();
            assert_eq!(table, buckets, "capacity {capacity}");
        }
        let l1 = L1::new(100_000);
        for i in 0..100_000 {
            l1.fill(&format!("c{i}"), active(1), 0);
        }
        // The codes spread over the 4 shards, a little unevenly; a full one evicts.
        assert!(l1.len() > 97_000 && l1.len() <= 100_000, "{}", l1.len());
        let sizes: Vec<usize> = l1.shards.iter().map(|s| s.read().unwrap().table.len()).collect();
        assert!(sizes.iter().all(|&n| n > 24_000), "{sizes:?}");
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

    /// A record of `code` at `version` whose link has one rule sending iOS to `ios`.
    fn ruled(code: &str, version: u64, ios: &str) -> CacheRecord {
        let mut l = Link::new_active(
            code.into(),
            "https://e.com/web".into(),
            RedirectKind::Found,
            true,
            0,
            "k".into(),
            None,
        );
        l.version = version;
        l.rules = vec![rebound_core::rules::Rule {
            os: vec![rebound_core::rules::Os::Ios],
            target: Some(ios.into()),
            ..Default::default()
        }];
        CacheRecord::active(&l, 0, &CachePolicy::default())
    }

    struct Ios;
    impl rebound_core::rules::Visitor for Ios {
        fn country(&mut self) -> rebound_core::dimensions::Country {
            rebound_core::dimensions::Country::UNKNOWN
        }
        fn agent(&mut self) -> (rebound_core::rules::Os, rebound_core::rules::Device) {
            (rebound_core::rules::Os::Ios, rebound_core::rules::Device::Mobile)
        }
        fn language(&mut self, _: &RuleSet) -> u32 {
            0
        }
        fn stickiness(&mut self) -> u64 {
            0
        }
    }

    fn chosen(l1: &L1, entry: &L1Entry) -> String {
        let rules = l1.rules(entry).expect("rules");
        rules.set.choose(&mut Ios).map(|(t, _)| t.to_owned()).unwrap()
    }

    #[test]
    fn an_entry_with_rules_keeps_its_target_and_its_rules_compiled_once() {
        let l1 = L1::new(100);
        let plain = l1.fill("abc", active(1), 0);
        assert!(!plain.has_rules() && l1.rules(&plain).is_none());
        let entry = l1.fill("xyz", ruled("xyz", 1, "https://e.com/ios-1"), 0);
        assert!(entry.has_rules());
        assert_eq!((entry.long_url(), entry.forward_query()), ("https://e.com/web", true));
        assert_eq!(chosen(&l1, &entry), "https://e.com/ios-1");
        // Compiled once, then shared.
        assert!(Arc::ptr_eq(&l1.rules(&entry).unwrap(), &l1.rules(&entry).unwrap()));
        assert_eq!(l1.compiled_rules(), 1);
        // A new version replaces the entry and drops the old rules.
        let newer = l1.fill("xyz", ruled("xyz", 2, "https://e.com/ios-2"), 0);
        assert_eq!(l1.compiled_rules(), 0);
        assert_eq!(chosen(&l1, &newer), "https://e.com/ios-2");
        // The old handle still answers with its own rules (compiled for it, not kept).
        assert_eq!(chosen(&l1, &entry), "https://e.com/ios-1");
        assert_eq!(l1.compiled_rules(), 1);
        // An edit supersedes it: no rules, none kept.
        let superseded = l1.supersede("xyz", 3, 0);
        assert!(!superseded.has_rules());
        assert_eq!(l1.compiled_rules(), 0);
        // Removal and clearing drop them too.
        let again = l1.fill("xyz", ruled("xyz", 3, "https://e.com/ios-3"), 0);
        l1.rules(&again);
        l1.remove("xyz");
        assert_eq!(l1.compiled_rules(), 0);
        let again = l1.fill("xyz", ruled("xyz", 4, "https://e.com/ios-4"), 0);
        l1.rules(&again);
        l1.clear();
        assert_eq!(l1.compiled_rules(), 0);
    }

    #[test]
    fn an_evicted_entry_takes_its_compiled_rules_with_it() {
        let l1 = L1::new(4);
        for i in 0..40 {
            let code = format!("r{i:02}");
            let e = l1.fill(&code, ruled(&code, 1, "https://e.com/ios"), 0);
            l1.rules(&e);
            assert!(l1.compiled_rules() <= l1.len(), "{i}");
        }
        assert!(l1.compiled_rules() <= 4);
    }
}
