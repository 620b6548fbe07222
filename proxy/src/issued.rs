//! The issued-code filter (docs/spec.md §3 step 4): which codes can exist, known without reading
//! the links. A generated code is the permutation of a counter value, so it can exist only
//! if that value is below the high-water mark of its region slot's counter (each region
//! of a fleet leases from its own range of values); every other code is an alias, kept
//! in a Bloom filter loaded from the alias index. The gate answers "never issued" only while
//! it is current, otherwise it is bypassed, so it can never 404 a code that exists. The
//! rule, the slack above the mark and why they are safe: docs/records-and-invariants.md,
//! "Issued codes: known without reading the links".

use bloomfilter::Bloom;
use rebound_core::domain::split_key;
use rebound_core::generated::{
    key_from_hex, region_counter, split_value, store_permutation_key, CodeKeyMismatch, GeneratedCodes,
    ALIAS_INDEX_SETTING, CODE_KEY_SETTING, REGION_SLOTS, REGION_SPAN,
};
use rebound_store::{LinkReads, StoreError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

/// False-positive rate the alias filters are sized for.
const FP_RATE: f64 = 0.001;
/// Aliases that look like generated codes (7 base62 characters) have a filter of their
/// own, small enough to stay in the CPU's cache: a never-issued 7-character code, the
/// prober's usual guess, then costs its inverse permutation and a cache hit.
const CODE_SHAPED_ALIASES: usize = 65_536;
/// Aliases read from the store per page while loading.
const LOAD_PAGE: usize = 10_000;
/// How far above the known high-water mark a generated code still goes to the store
/// (26,843 default blocks): the planes' contract, declared in core.
pub use rebound_core::generated::HIGH_WATER_SLACK;

/// Why the gate could not be synced from the store.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store cannot tell yet (no control plane of this version has started on it); the
    /// gate stays bypassed, which is safe, and is synced again later.
    #[error("the store cannot tell issued codes yet: {0}")]
    NotYet(&'static str),
    /// The configured key is not the store's: the gate stays bypassed (the store still
    /// answers every code) until the configuration is fixed.
    #[error(transparent)]
    CodeKey(#[from] CodeKeyMismatch),
}

/// The permutation key the control planes recorded in the store, checked against the
/// `configured` one (which is never used in its place: the store's key is fixed for its life).
pub async fn stored_permutation_key(
    store: &dyn LinkReads,
    configured: Option<[u8; 16]>,
) -> Result<[u8; 16], SyncError> {
    let stored = store.read_setting(CODE_KEY_SETTING).await?.ok_or(SyncError::NotYet(
        "no permutation key stored (no control plane has started)",
    ))?;
    let stored = key_from_hex(&stored).ok_or(SyncError::Store(StoreError::Corrupt(
        "the stored code permutation key is malformed".into(),
    )))?;
    Ok(store_permutation_key(configured, stored)?)
}

/// The high-water marks (one per region slot), the alias filter and whether they may be
/// trusted.
pub struct IssuedCodeGate {
    codes: OnceLock<GeneratedCodes>,
    /// Each region slot's mark: offsets in its range below it have been leased.
    marks: [AtomicU64; REGION_SLOTS as usize],
    aliases: RwLock<AliasFilters>,
    alias_count: AtomicU64,
    current: AtomicBool,
    ready: AtomicBool,
}

/// The aliases, split by shape: 7 base62 characters (like a generated code) or not.
struct AliasFilters {
    code_shaped: Bloom<str>,
    other: Bloom<str>,
}

impl AliasFilters {
    /// Records the key of an alias, in the filter of its code's shape.
    fn set(&mut self, key: &str) {
        match is_code_shaped(split_key(key).0) {
            true => self.code_shaped.set(key),
            false => self.other.set(key),
        }
    }
}

#[inline]
fn is_code_shaped(code: &str) -> bool {
    rebound_core::base62::decode_bytes(code.as_bytes()).is_some()
}

impl IssuedCodeGate {
    /// A gate whose alias filter is sized for `expected_aliases`, not yet current. The
    /// filter never fails to answer "maybe" for an alias it holds; past its size it only
    /// lets more unknown codes through to the store.
    pub fn new(expected_aliases: usize) -> IssuedCodeGate {
        let filter = |n: usize| Bloom::new_for_fp_rate(n.max(1000), FP_RATE).expect("a positive size and rate");
        let filters = AliasFilters {
            code_shaped: filter(CODE_SHAPED_ALIASES.min(expected_aliases)),
            other: filter(expected_aliases),
        };
        IssuedCodeGate {
            codes: OnceLock::new(),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            aliases: RwLock::new(filters),
            alias_count: AtomicU64::new(0),
            current: AtomicBool::new(false),
            ready: AtomicBool::new(false),
        }
    }

    /// Uses the permutation key the control planes generate codes with.
    pub fn set_key(&self, key: [u8; 16]) {
        let _ = self.codes.set(GeneratedCodes::new(key));
    }

    /// `Some(false)` when the code was definitely never issued; `None` while bypassed.
    /// Allocates nothing.
    #[inline]
    pub fn may_exist(&self, key: &str) -> Option<bool> {
        if !self.current.load(Ordering::Acquire) {
            return None;
        }
        let codes = self.codes.get()?;
        // A key carries its domain (`rebound_core::domain`): a generated code is one on every
        // domain, an alias is one on its own.
        let code = split_key(key).0;
        let shaped = is_code_shaped(code);
        if shaped {
            if let Some((slot, offset)) = codes.value_of(code.as_bytes()).and_then(split_value) {
                let mark = self.marks[usize::from(slot)].load(Ordering::Acquire);
                // The slack covers leases not heard of yet in a slot in use: slot 0 (every
                // store's first counter) and any slot a lease was heard of. A slot never
                // heard of has no slack, or a probe of random codes would cost a store read
                // sixteen times as often.
                if offset < mark.saturating_add(HIGH_WATER_SLACK) && (slot == 0 || mark > 0) {
                    return Some(true);
                }
            }
        }
        let filters = self.aliases.read().unwrap_or_else(|e| e.into_inner());
        Some(match shaped {
            true => filters.code_shaped.check(key),
            false => filters.other.check(key),
        })
    }

    /// Counter values of the code space below `high_water`, in its region slot, have been
    /// leased (a lease's announced end: the value after its last). A mark only grows.
    pub fn raise_high_water(&self, high_water: u64) {
        if let Some((slot, last)) = high_water.checked_sub(1).and_then(split_value) {
            self.raise_slot(slot, last + 1);
        }
    }

    /// Offsets below `mark` of region slot `slot`'s range have been leased.
    pub fn raise_slot(&self, slot: u8, mark: u64) {
        if let Some(m) = self.marks.get(usize::from(slot)) {
            m.fetch_max(mark, Ordering::AcqRel);
        }
    }

    /// Whether the generated-code value `value` has been leased, by the marks known.
    fn leased(&self, value: u64) -> bool {
        split_value(value).is_some_and(|(slot, offset)| offset < self.marks[usize::from(slot)].load(Ordering::Acquire))
    }

    /// Reads every region slot's counter from the store and raises the marks.
    pub async fn read_marks(&self, store: &dyn LinkReads) -> Result<(), StoreError> {
        for slot in 0..REGION_SLOTS {
            self.raise_slot(slot, store.high_water(&region_counter(slot)).await?);
        }
        Ok(())
    }

    /// A link was created with `code`: an alias goes into the filter; a generated code is
    /// covered by the mark already (its lease was announced first), and is not stored.
    pub fn created(&self, key: &str) {
        let covered = self
            .codes
            .get()
            .and_then(|c| c.value_of(split_key(key).0.as_bytes()))
            .is_some_and(|v| self.leased(v));
        if !covered {
            self.insert_alias(key);
        }
    }

    fn insert_alias(&self, code: &str) {
        self.aliases.write().unwrap_or_else(|e| e.into_inner()).set(code);
        self.alias_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks the gate trusted (synced and fed) or not.
    pub fn set_current(&self, current: bool) {
        if current {
            self.ready.store(true, Ordering::Release);
        }
        self.current.store(current, Ordering::Release);
    }

    /// Readiness without trust: the store cannot tell yet, so the gate is bypassed, and the
    /// proxy serves (every unknown code then costs a store read).
    pub fn set_ready_bypassed(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the gate has been synced at least once (or found the store unable to tell):
    /// readiness.
    pub fn was_loaded(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Whether the gate is trusted.
    pub fn is_current(&self) -> bool {
        self.current.load(Ordering::Acquire)
    }

    /// The highest mark known, as a value of the whole code space (region slot 0's mark in
    /// a fleet of one region).
    pub fn high_water(&self) -> u64 {
        (0..REGION_SLOTS)
            .rev()
            .find_map(|slot| {
                let mark = self.marks[usize::from(slot)].load(Ordering::Acquire);
                (mark > 0).then(|| u64::from(slot) * REGION_SPAN + mark)
            })
            .unwrap_or(0)
    }

    /// Aliases inserted into the filter so far (a code inserted twice counts twice).
    pub fn aliases(&self) -> u64 {
        self.alias_count.load(Ordering::Relaxed)
    }

    /// Reads from the store what the gate needs: the permutation key the control planes
    /// stored (a `configured` one must equal it), the high-water mark and every alias of the index.
    /// Never reads the links. The caller marks the gate current once it also knows the
    /// creation feed has been followed from before this began. Returns the aliases loaded.
    pub async fn load_from(&self, store: &dyn LinkReads, configured: Option<[u8; 16]>) -> Result<u64, SyncError> {
        if self.codes.get().is_none() {
            self.set_key(stored_permutation_key(store, configured).await?);
        }
        if store.read_setting(ALIAS_INDEX_SETTING).await?.is_none() {
            return Err(SyncError::NotYet(
                "the alias index is not complete (no control plane of this version has started)",
            ));
        }
        self.read_marks(store).await?;
        let mut after: Option<String> = None;
        let mut loaded = 0u64;
        loop {
            let page = store.list_aliases(after.as_deref(), LOAD_PAGE).await?;
            if page.is_empty() {
                break;
            }
            {
                let mut filter = self.aliases.write().unwrap_or_else(|e| e.into_inner());
                for code in &page {
                    filter.set(code.as_str());
                }
            }
            loaded += page.len() as u64;
            self.alias_count.fetch_add(page.len() as u64, Ordering::Relaxed);
            after = page.last().cloned();
        }
        Ok(loaded)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rebound_core::generated::Generated;
    use rebound_core::generated::COUNTER;
    use rebound_store::{CounterStore, MemoryStore};

    const KEY: [u8; 16] = *b"0123456789abcdef";

    fn code(value: u64) -> String {
        match GeneratedCodes::new(KEY).code_for(value) {
            Generated::Code(c) => c,
            other => panic!("{other:?}"),
        }
    }

    /// A store as a control plane leaves it: the permutation key (hex) and a complete
    /// alias index.
    pub(crate) async fn store_keyed(key_hex: &str) -> MemoryStore {
        let store = MemoryStore::new();
        store.get_or_init_setting(CODE_KEY_SETTING, key_hex).await.unwrap();
        store
            .get_or_init_setting(ALIAS_INDEX_SETTING, "complete")
            .await
            .unwrap();
        store
    }

    async fn synced_store(leased: u64, aliases: &[&str]) -> MemoryStore {
        let store = store_keyed("30313233343536373839616263646566").await;
        store.lease_block(COUNTER, leased).await.unwrap();
        for a in aliases {
            rebound_store::LinkStore::record_alias(&store, a).await.unwrap();
        }
        store
    }

    #[tokio::test]
    async fn bypassed_until_synced_then_exact_for_generated_codes_and_aliases() {
        let store = synced_store(25_000, &["my-alias", "promo"]).await;
        let gate = IssuedCodeGate::new(1000);
        assert_eq!(gate.may_exist(&code(1)), None, "bypassed before loading");
        assert_eq!(gate.load_from(&store, None).await.unwrap(), 2);
        assert_eq!(gate.high_water(), 25_000);
        assert_eq!(gate.may_exist(&code(1)), None, "still bypassed until marked current");
        gate.set_current(true);
        for v in 0..25_000 {
            assert_eq!(gate.may_exist(&code(v)), Some(true), "never a false negative ({v})");
        }
        assert_eq!(gate.may_exist("my-alias"), Some(true));
        assert_eq!(gate.may_exist("promo"), Some(true));
        // Far above the mark, and codes that are no generated code nor an alias.
        let far = 25_000 + HIGH_WATER_SLACK;
        let rejected = (far..far + 10_000)
            .filter(|v| gate.may_exist(&code(*v)) == Some(false))
            .count();
        assert!(rejected > 9_950, "{rejected} of 10,000 unissued codes rejected");
        let others = (0..10_000)
            .filter(|i| gate.may_exist(&format!("nope{i}")) == Some(false))
            .count();
        assert!(others > 9_950, "{others} of 10,000 unknown aliases rejected");
        gate.set_current(false);
        assert_eq!(gate.may_exist("nope1"), None);
    }

    #[tokio::test]
    async fn keys_on_other_domains_are_judged_by_their_code_and_their_own_alias_entry() {
        // An alias on domain 1 (indexed by its key), one code-shaped, and one learnt from the
        // creation feed on domain 2.
        let shaped_alias = code(25_000 + 2 * HIGH_WATER_SLACK);
        let on_1 = format!("{shaped_alias}.1");
        let store = synced_store(25_000, &["promo.1", &on_1]).await;
        let gate = IssuedCodeGate::new(1000);
        gate.load_from(&store, None).await.unwrap();
        gate.set_current(true);
        gate.created("spring.2");
        // A generated code is one on every domain: its key on any domain may exist.
        for v in [0, 1, 24_999] {
            for id in ["1", "2", "zz"] {
                assert_eq!(gate.may_exist(&format!("{}.{id}", code(v))), Some(true), "{v} on {id}");
            }
        }
        assert_eq!(gate.may_exist("promo.1"), Some(true));
        assert_eq!(gate.may_exist(&on_1), Some(true), "a code-shaped alias on its domain");
        assert_eq!(gate.may_exist("spring.2"), Some(true));
        // An alias is one on its own domain only (the filters hold keys): on the others its
        // key was never issued (bar the filters' false positives, 0.1 %).
        let elsewhere: Vec<String> = (3..1_003)
            .flat_map(|id| {
                let id = rebound_core::domain::domain_id(id);
                [
                    format!("promo.{id}"),
                    format!("{shaped_alias}.{id}"),
                    format!("spring.{id}"),
                ]
            })
            .chain(["promo".to_owned(), shaped_alias.clone(), "spring".to_owned()])
            .collect();
        let refused = elsewhere.iter().filter(|k| gate.may_exist(k) == Some(false)).count();
        assert!(
            refused > elsewhere.len() * 98 / 100,
            "{refused} of {} refused",
            elsewhere.len()
        );
    }

    #[tokio::test]
    async fn each_region_slot_is_judged_by_its_own_mark() {
        use rebound_core::generated::{region_value, REGION_SPAN};
        let store = synced_store(1_000, &[]).await;
        // Region slot 3 has leased 500 values of its own range.
        store.lease_block(&region_counter(3), 500).await.unwrap();
        let gate = IssuedCodeGate::new(1000);
        gate.load_from(&store, None).await.unwrap();
        gate.set_current(true);
        let at = |slot, offset| code(region_value(slot, offset).unwrap());
        // (slot, offset, may exist): every slot's leased values, and the slack above each mark.
        let cases = [
            (0, 999, Some(true)),
            (0, 1_000 + HIGH_WATER_SLACK - 1, Some(true)),
            (0, 1_000 + HIGH_WATER_SLACK, Some(false)),
            (3, 0, Some(true)),
            (3, 499 + HIGH_WATER_SLACK, Some(true)),
            (3, 500 + HIGH_WATER_SLACK, Some(false)),
            // A slot no lease was heard of: no slack (slot 0 has one from the start).
            (1, 0, Some(false)),
            (1, HIGH_WATER_SLACK - 1, Some(false)),
            (15, REGION_SPAN - 1, Some(false)),
        ];
        for (slot, offset, want) in cases {
            assert_eq!(gate.may_exist(&at(slot, offset)), want, "slot {slot} offset {offset}");
        }
        // A lease announced by another region raises that region's mark, and no other.
        gate.raise_high_water(region_value(1, 2 * HIGH_WATER_SLACK).unwrap());
        assert_eq!(gate.may_exist(&at(1, 2 * HIGH_WATER_SLACK)), Some(true));
        assert_eq!(gate.may_exist(&at(0, 1_000 + HIGH_WATER_SLACK)), Some(false));
        // A lease that ends exactly at its range's end belongs to its slot, not the next.
        gate.raise_high_water(region_value(2, REGION_SPAN - 1).unwrap() + 1);
        assert_eq!(gate.may_exist(&at(2, REGION_SPAN - 1)), Some(true));
        assert_eq!(gate.may_exist(&at(3, 500 + HIGH_WATER_SLACK)), Some(false));
        assert_eq!(
            gate.high_water(),
            region_value(3, 500).unwrap(),
            "the highest slot's mark"
        );
        // A generated code of a leased value is not an alias: nothing is inserted.
        gate.created(&at(3, 10));
        assert_eq!(gate.aliases(), 0);
    }

    #[tokio::test]
    async fn a_code_just_above_the_known_mark_is_never_rejected() {
        let store = synced_store(1_000, &[]).await;
        let gate = IssuedCodeGate::new(1000);
        gate.load_from(&store, None).await.unwrap();
        gate.set_current(true);
        // A lease this gate has not heard of: its codes still go to the store.
        for v in [1_000, 1_001, 50_000, 1_000 + HIGH_WATER_SLACK - 1] {
            assert_eq!(gate.may_exist(&code(v)), Some(true), "value {v}");
        }
        assert_eq!(gate.may_exist(&code(1_000 + HIGH_WATER_SLACK)), Some(false));
        gate.raise_high_water(2_000);
        assert_eq!(
            gate.may_exist(&code(1_000 + HIGH_WATER_SLACK)),
            Some(true),
            "the mark moved up"
        );
        gate.raise_high_water(10);
        assert_eq!(gate.high_water(), 2_000, "the mark never goes down");
    }

    #[tokio::test]
    async fn created_aliases_enter_the_filter_and_generated_codes_do_not() {
        let store = synced_store(100, &[]).await;
        let gate = IssuedCodeGate::new(1000);
        gate.load_from(&store, None).await.unwrap();
        gate.set_current(true);
        assert_eq!(gate.may_exist("fresh-alias"), Some(false));
        gate.created("fresh-alias");
        gate.created(&code(5));
        assert_eq!(gate.may_exist("fresh-alias"), Some(true));
        assert_eq!(gate.aliases(), 1, "a generated code below the mark is not stored");
        // A generated-looking alias far above the mark is kept as an alias.
        let looks_generated = code(HIGH_WATER_SLACK * 3);
        assert_eq!(gate.may_exist(&looks_generated), Some(false));
        gate.created(&looks_generated);
        assert_eq!(gate.may_exist(&looks_generated), Some(true));
    }

    #[tokio::test]
    async fn a_store_that_cannot_tell_yet_keeps_the_gate_bypassed() {
        let gate = IssuedCodeGate::new(1000);
        let empty = MemoryStore::new();
        assert!(matches!(gate.load_from(&empty, None).await, Err(SyncError::NotYet(_))));
        // A key but no complete alias index (a store made by an older version).
        let old = MemoryStore::new();
        old.get_or_init_setting(CODE_KEY_SETTING, "30313233343536373839616263646566")
            .await
            .unwrap();
        assert!(matches!(gate.load_from(&old, None).await, Err(SyncError::NotYet(_))));
        let down = synced_store(10, &[]).await;
        down.set_unavailable(true);
        assert!(matches!(
            gate.load_from(&down, Some(KEY)).await,
            Err(SyncError::Store(_))
        ));
    }

    #[tokio::test]
    async fn the_gate_reads_codes_with_the_stored_key_and_refuses_another_configured_one() {
        let store = synced_store(100, &[]).await;
        let other = *b"fedcba9876543210";
        assert_eq!(stored_permutation_key(&store, None).await.unwrap(), KEY);
        assert_eq!(stored_permutation_key(&store, Some(KEY)).await.unwrap(), KEY);
        assert!(matches!(
            stored_permutation_key(&store, Some(other)).await,
            Err(SyncError::CodeKey(_))
        ));
        // A gate configured with another key stays bypassed: it never 404s a stored code.
        let gate = IssuedCodeGate::new(1000);
        assert!(matches!(
            gate.load_from(&store, Some(other)).await,
            Err(SyncError::CodeKey(_))
        ));
        assert_eq!(gate.may_exist(&code(5)), None);
        // Configured or not, a gate reads codes with the stored key.
        for configured in [None, Some(KEY)] {
            let gate = IssuedCodeGate::new(1000);
            gate.load_from(&store, configured).await.unwrap();
            gate.set_current(true);
            assert_eq!(gate.may_exist(&code(5)), Some(true), "{configured:?}");
        }
        // No key stored: not yet, even with one configured (the control plane records it).
        let gate = IssuedCodeGate::new(1000);
        assert!(matches!(
            gate.load_from(&MemoryStore::new(), Some(KEY)).await,
            Err(SyncError::NotYet(_))
        ));
        let bad = store_keyed("not hex").await;
        assert!(matches!(
            stored_permutation_key(&bad, None).await,
            Err(SyncError::Store(_))
        ));
    }
}
