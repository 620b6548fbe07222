//! The redirect path of docs/spec.md §3 after the request checks: L1 → L2 (Redis, when configured)
//! → issued-code filter → store, with one flight per code over L2 and the store, the core's pure
//! decision, and the stale-on-failure rule. Transport-free, so it is tested against fakes.

use crate::flight::SingleFlight;
use crate::issued::IssuedCodeGate;
use crate::l1::{L1Entry, L1};
use crate::metrics::ProxyMetrics;
/// At its old path too, for the crates that name it there.
pub use crate::trust::InvalidationTrust;
use rebound_core::cache::CachePolicy;
use rebound_core::{decide_redirect, CacheRecord, CacheState, CachedVerdict, Clock, Link, StoreVerdict, UnixMillis};
use rebound_store::LinkReads;
use rebound_store::{AttemptBudget, L2Read, RecordCache};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the path decided for a code.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// Redirect with this entry (active).
    Redirect(L1Entry),
    /// 404: unknown, deleted or taken down.
    NotFound,
    /// 410: expired.
    Gone,
    /// 503: the store failed and nothing may be served instead.
    Unavailable,
}

/// What one read below L1 learned, before anything is cached or answered:
/// [`RedirectPath::fetch`] finds it, [`RedirectPath::apply`] alone turns it into what L1 and
/// L2 hold and the answer.
enum Learned {
    /// The issued-code filter says the code was never issued.
    NeverIssued,
    /// L2 had a usable record (fresh active, tombstone, or expired).
    FromL2(CacheRecord),
    /// The store's item (`None`: no such code), and the version of the newest tombstone of
    /// the code that L1 or L2 held, however old (a replica behind it is not served).
    FromStore {
        item: Option<Link>,
        seen_tombstone: Option<u64>,
    },
    /// The store failed or timed out; a stale L2 record may stand in.
    StoreFailed {
        cause: Arc<str>,
        stale_l2: Option<CacheRecord>,
    },
}

/// The lookup tiers and what they share.
pub struct RedirectPath {
    pub l1: Arc<L1>,
    pub issued: Arc<IssuedCodeGate>,
    pub store: Arc<dyn LinkReads>,
    pub clock: Arc<dyn Clock>,
    pub metrics: ProxyMetrics,
    pub policy: CachePolicy,
    pub store_budget: Duration,
    /// Redis, when configured.
    pub l2: Option<Arc<dyn RecordCache>>,
    pub l2_budget: Duration,
    /// The invalidation channel's health; `None` when invalidation is in process.
    pub trust: Option<Arc<InvalidationTrust>>,
    /// The home region's replica (docs/regions.md), read before a 404 outside the home
    /// region: a code created in another region may not have reached this region yet.
    pub home: Option<Arc<dyn LinkReads>>,
    /// The fleet's budget of password attempts per link (Redis), when configured.
    pub attempts: Option<Arc<dyn AttemptBudget>>,
    flights: SingleFlight<(Resolution, bool)>,
    last_stale_warning: AtomicI64,
}

impl RedirectPath {
    pub fn new(
        l1: Arc<L1>,
        issued: Arc<IssuedCodeGate>,
        store: Arc<dyn LinkReads>,
        clock: Arc<dyn Clock>,
        metrics: ProxyMetrics,
        store_budget: Duration,
    ) -> RedirectPath {
        RedirectPath {
            l1,
            issued,
            store,
            clock,
            metrics,
            policy: CachePolicy::default(),
            store_budget,
            l2: None,
            l2_budget: Duration::from_millis(150),
            trust: None,
            home: None,
            attempts: None,
            flights: SingleFlight::default(),
            last_stale_warning: AtomicI64::new(0),
        }
    }

    /// Adds Redis as L2, with its read budget and the invalidation channel's health.
    pub fn with_l2(
        mut self,
        l2: Arc<dyn RecordCache>,
        budget: Duration,
        trust: Arc<InvalidationTrust>,
    ) -> RedirectPath {
        self.l2 = Some(l2);
        self.l2_budget = budget;
        self.trust = Some(trust);
        self
    }

    /// Counts password attempts per link in `budget`, the fleet's (docs/spec.md §12).
    pub fn with_attempt_budget(mut self, budget: Arc<dyn AttemptBudget>) -> RedirectPath {
        self.attempts = Some(budget);
        self
    }

    /// The L1 entry of `code` if this proxy may use it now.
    #[inline]
    fn usable_l1(&self, code: &str, now: UnixMillis) -> Option<L1Entry> {
        let entry = self.l1.get(code)?;
        match &self.trust {
            Some(t) if !t.allows(&entry, now) => None,
            _ => Some(entry),
        }
    }

    /// Resolves a code that passed the code rule.
    pub async fn resolve(&self, code: &str) -> Resolution {
        self.resolve_at(code, self.clock.now_millis()).await
    }

    /// [`RedirectPath::resolve`] with the caller's reading of the clock.
    pub async fn resolve_at(&self, code: &str, now: UnixMillis) -> Resolution {
        match self.resolve_from_memory(code, now) {
            Some(resolution) => resolution,
            None => self.resolve_beyond_memory(code).await,
        }
    }

    /// The tiers that need no waiting: L1 and, without L2, the issued-code filter. `None` means
    /// the code needs [`RedirectPath::resolve_beyond_memory`].
    pub fn resolve_from_memory(&self, code: &str, now: UnixMillis) -> Option<Resolution> {
        if let Some(entry) = self.usable_l1(code, now) {
            match entry.verdict(now) {
                CachedVerdict::Redirect => {
                    self.metrics.l1_hits.inc();
                    return Some(Resolution::Redirect(entry));
                }
                CachedVerdict::Tombstone => {
                    self.metrics.l1_tombstones.inc();
                    return Some(Resolution::NotFound);
                }
                CachedVerdict::Expired => return Some(Resolution::Gone),
                CachedVerdict::Stale | CachedVerdict::Dead => {}
            }
        }
        self.metrics.l1_misses.inc();
        // Without L2 the issued-code filter is the next tier: an unknown code stops here, before
        // it costs a flight.
        if self.l2.is_none() && self.never_issued(code) {
            return Some(Resolution::NotFound);
        }
        None
    }

    /// The tiers past memory (L2, the filter, the store) in one flight per code, for a code
    /// [`RedirectPath::resolve_from_memory`] could not answer.
    pub async fn resolve_beyond_memory(&self, code: &str) -> Resolution {
        let ((resolution, stale), waited) = self.flights.run(code, || self.fetch_and_cache(code)).await;
        if waited {
            self.metrics.singleflight_waits.inc();
        }
        if stale {
            self.metrics.stale_served.inc();
        }
        resolution
    }

    /// One flight: below L1, then L1 filled with what was found, all before the flight
    /// ends, so a request arriving after it finds L1 filled instead of starting another
    /// read. The answer is shared with the callers that waited; `true` with it when it is a
    /// stale record served because the store failed.
    async fn fetch_and_cache(&self, code: &str) -> (Resolution, bool) {
        // A read that took so long that a delete may have returned meanwhile without this
        // proxy hearing of it is made again, once; then the code is unavailable.
        for _ in 0..2 {
            match self.fetch_once(code).await {
                Some(answer) => return answer,
                None => self.metrics.reads_outdated.inc(),
            }
        }
        (Resolution::Unavailable, false)
    }

    /// One read below L1 and what it means; `None` when its active answer may predate a
    /// delete that returned while it was in flight.
    async fn fetch_once(&self, code: &str) -> Option<(Resolution, bool)> {
        // L1 entries are stamped with the start of the read they came from: what they hold
        // may be as old as that.
        let read_from = self.clock.now_millis();
        let epoch = self.trust.as_ref().map(|t| t.epoch());
        let learned = self.fetch(code).await;
        self.apply(code, learned, read_from, epoch, self.clock.now_millis())
    }

    /// What a read learned, kept and answered: the one place a miss fills L1 and populates L2.
    ///
    /// - L1 takes the record stamped `read_from` (never over a newer version), except an
    ///   active record read across a lapse (`epoch` moved), which answers this flight only.
    /// - L2 takes what the store said (an active record or a tombstone), off the request path.
    /// - The answer follows what L1 then holds (a newer tombstone wins), `None` when it
    ///   redirects from a read that may predate a delete that returned since.
    /// - A store failure answers from the newer of L1 and the stale L2 record, which goes
    ///   into L1 stamped `now` ([`RedirectPath::stale_or_unavailable`]) unless it was read
    ///   across a lapse, like any other record.
    /// - A tombstone is final (a deleted code is never active again), so the store's
    ///   tombstone answers 404 whatever L1 holds.
    /// - An edit's superseded entry in L1 keeps an older version out: a read that found
    ///   one is made again (`None`).
    fn apply(
        &self,
        code: &str,
        learned: Learned,
        read_from: UnixMillis,
        epoch: Option<u64>,
        now: UnixMillis,
    ) -> Option<(Resolution, bool)> {
        let (record, from_store) = match learned {
            Learned::NeverIssued => return Some((Resolution::NotFound, false)),
            Learned::FromL2(record) => (record, false),
            Learned::FromStore { item, seen_tombstone } => match decide_redirect(item.as_ref(), seen_tombstone, now) {
                StoreVerdict::Redirect => {
                    let link = item.as_ref().expect("a redirect has a link");
                    (CacheRecord::active(link, now, &self.policy), true)
                }
                StoreVerdict::Tombstone => {
                    let version = item.as_ref().map_or(0, |l| l.version);
                    (CacheRecord::tombstone(version, now, &self.policy), true)
                }
                StoreVerdict::NotFound => return Some((Resolution::NotFound, false)),
                StoreVerdict::Superseded => {
                    self.metrics.reads_superseded.inc();
                    return Some((Resolution::NotFound, false));
                }
                StoreVerdict::Gone => return Some((Resolution::Gone, false)),
            },
            Learned::StoreFailed { cause, stale_l2 } => {
                // Look again: a tombstone may have arrived while the store was failing.
                let from_l1 = self.usable_l1(code, now);
                let from_l2 = stale_l2.map(|record| self.keep(code, record, now, epoch));
                return Some(self.stale_or_unavailable(from_l1, from_l2, now, &cause));
            }
        };
        if from_store {
            self.populate_l2(code, &record, now);
        }
        let store_tombstone = from_store && record.is_tombstone();
        let held = self.keep(code, record, read_from, epoch);
        if store_tombstone {
            return Some((Resolution::NotFound, false));
        }
        if held.is_superseded() {
            // An edit voided what this read found while it was in flight: read again.
            self.metrics.reads_edited.inc();
            return None;
        }
        Some((self.current_answer(held, read_from, now, epoch)?, false))
    }

    /// `record`, read from `read_from`, into L1 (never over a newer version); an active
    /// record read across a lapse (`epoch` moved: it may predate an invalidation that the
    /// gap swallowed) answers this flight only.
    fn keep(&self, code: &str, record: CacheRecord, read_from: UnixMillis, epoch: Option<u64>) -> L1Entry {
        let lapsed = matches!((&self.trust, epoch), (Some(t), Some(e)) if t.epoch() != e);
        if lapsed && matches!(record.state, CacheState::Active { .. }) {
            self.metrics.fills_dropped.inc();
            L1Entry::new(code, record, read_from)
        } else {
            self.l1.fill(code, record, read_from)
        }
    }

    /// The answer `held` gives at `now`, unless it redirects from a read that may predate a
    /// delete that has returned since (with the invalidation channel of a proxy with L2).
    fn current_answer(
        &self,
        held: L1Entry,
        read_from: UnixMillis,
        now: UnixMillis,
        epoch: Option<u64>,
    ) -> Option<Resolution> {
        let answer = self.answer_from(held, now);
        if let (Resolution::Redirect(_), Some(trust), Some(_)) = (&answer, &self.trust, &self.l2) {
            if !trust.answer_is_current(read_from, now, epoch == Some(trust.epoch())) {
                return None;
            }
        }
        Some(answer)
    }

    fn answer_from(&self, held: L1Entry, now: UnixMillis) -> Resolution {
        match held.verdict(now) {
            CachedVerdict::Redirect => Resolution::Redirect(held),
            CachedVerdict::Expired => Resolution::Gone,
            _ => Resolution::NotFound,
        }
    }

    /// Below L1: L2 and then the issued-code filter (when there is an L2; otherwise the caller
    /// asked the filter already), then the store. One run per code at a time.
    async fn fetch(&self, code: &str) -> Learned {
        let mut stale_l2 = None;
        // A tombstone past its life in L2 (its key not expired yet) still shows the delete.
        let mut dead_l2 = None;
        // An unreachable Redis means the creation feed cannot be known to be current.
        let mut redis_failed = false;
        // A record L2 cannot vouch for (written before Redis changed identity) still shows
        // the code was issued: the filter, which may have missed what Redis lost, is skipped.
        let mut unconfirmed = false;
        if let Some(l2) = &self.l2 {
            match tokio::time::timeout(self.l2_budget, l2.get_record(code)).await {
                Ok(Ok(L2Read::Found(record))) => match record.verdict(self.clock.now_millis()) {
                    CachedVerdict::Redirect | CachedVerdict::Tombstone | CachedVerdict::Expired => {
                        self.metrics.l2_hits.inc();
                        return Learned::FromL2(record);
                    }
                    CachedVerdict::Stale => {
                        self.metrics.l2_misses.inc();
                        stale_l2 = Some(record);
                    }
                    CachedVerdict::Dead => {
                        self.metrics.l2_misses.inc();
                        dead_l2 = Some(record);
                    }
                },
                Ok(Ok(L2Read::Miss)) => self.metrics.l2_misses.inc(),
                Ok(Ok(L2Read::Unconfirmed)) => {
                    self.metrics.l2_unconfirmed.inc();
                    unconfirmed = true;
                }
                // An error or a timeout counts as a miss: the store decides.
                Ok(Err(_)) | Err(_) => {
                    self.metrics.l2_errors.inc();
                    redis_failed = true;
                }
            }
        }
        let seen = |path: &Self| path.seen_tombstone(code, stale_l2.as_ref().or(dead_l2.as_ref()));
        if self.l2.is_some() {
            if redis_failed {
                self.metrics.bloom_bypassed.inc();
            } else if !unconfirmed && self.never_issued(code) {
                // This region's filter has not heard of the code; another region may have
                // created it. The home region's answer decides; without it, 404.
                return match self.read_home(code).await {
                    Some(Some(link)) => Learned::FromStore {
                        item: Some(link),
                        seen_tombstone: seen(self),
                    },
                    _ => Learned::NeverIssued,
                };
            }
        }
        self.metrics.store_reads.inc();
        let cause: Arc<str> = match tokio::time::timeout(self.store_budget, self.store.get_link(code)).await {
            Ok(Ok(mut item)) => {
                if item.is_none() {
                    // Not in this region's replica (yet): the home region's, if it answers.
                    item = self.read_home(code).await.flatten();
                } else if self.edited_since(code, item.as_ref()) {
                    // This region's replica has not caught up with an edit this proxy heard
                    // of: the home region's, if it answers.
                    if let Some(Some(home)) = self.read_home(code).await {
                        item = Some(home);
                    }
                }
                return Learned::FromStore {
                    item,
                    seen_tombstone: seen(self),
                };
            }
            Ok(Err(e)) => Arc::from(rebound_core::Causes(&e).to_string()),
            Err(_) => Arc::from("store read timed out"),
        };
        self.metrics.store_errors.inc();
        Learned::StoreFailed { cause, stale_l2 }
    }

    /// `code` read from the home region's replica, strongly consistent: `None` without a home
    /// region or when it failed or took longer than the store's budget (counted; the local
    /// answer stands: a home region out of reach must not make every unknown code a 503).
    async fn read_home(&self, code: &str) -> Option<Option<Link>> {
        let home = self.home.as_ref()?;
        match tokio::time::timeout(self.store_budget, home.get_link(code)).await {
            Ok(Ok(item)) => {
                match item {
                    Some(_) => self.metrics.home_found.inc(),
                    None => self.metrics.home_absent.inc(),
                }
                Some(item)
            }
            Ok(Err(_)) | Err(_) => {
                self.metrics.home_errors.inc();
                None
            }
        }
    }

    /// True when L1 holds an edit's superseded entry of `code` newer than `item`.
    fn edited_since(&self, code: &str, item: Option<&Link>) -> bool {
        let Some(item) = item else { return false };
        self.l1
            .get(code)
            .is_some_and(|e| e.is_superseded() && e.version() > item.version)
    }

    /// The version of the newest tombstone of `code` that L1 (whether or not its entry is
    /// still usable) or `l2` (the record L2 returned, too old to answer) holds.
    fn seen_tombstone(&self, code: &str, l2: Option<&CacheRecord>) -> Option<u64> {
        let from_l1 = self.l1.get(code).filter(|e| e.is_tombstone()).map(|e| e.version());
        let from_l2 = l2.filter(|r| r.is_tombstone()).map(|r| r.version);
        from_l1.max(from_l2)
    }

    /// True when the issued-code filter says `code` was never issued; a filter not known to be
    /// current is bypassed (counted).
    #[inline]
    fn never_issued(&self, code: &str) -> bool {
        match self.issued.may_exist(code) {
            Some(false) => {
                self.metrics.bloom_rejects.inc();
                true
            }
            Some(true) => false,
            None => {
                self.metrics.bloom_bypassed.inc();
                false
            }
        }
    }

    /// Writes a record through to L2 off the request path.
    fn populate_l2(&self, code: &str, record: &CacheRecord, now: UnixMillis) {
        let Some(l2) = self.l2.clone() else { return };
        let (code, record, budget) = (code.to_owned(), record.clone(), self.l2_budget);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(budget, l2.put_record(&code, &record, now)).await;
        });
    }

    /// Store failure: the newer of L1's entry and the stale L2 record answers. A tombstone
    /// always wins; a stale active record inside its grace window and before expiry may be
    /// served (`true` with the answer); an expired one is 410; otherwise 503.
    fn stale_or_unavailable(
        &self,
        from_l1: Option<L1Entry>,
        from_l2: Option<L1Entry>,
        now: UnixMillis,
        cause: &str,
    ) -> (Resolution, bool) {
        // At one version, L2's record over an edit's superseded entry, which cannot answer.
        let newest = match (from_l1, from_l2) {
            (Some(a), Some(b)) => Some(
                match b.version() > a.version() || (b.version() == a.version() && a.is_superseded()) {
                    true => b,
                    false => a,
                },
            ),
            (a, b) => a.or(b),
        };
        match newest {
            Some(e) if e.is_tombstone() => (Resolution::NotFound, false),
            Some(e) if matches!(e.verdict(now), CachedVerdict::Stale | CachedVerdict::Redirect) => {
                let last = self.last_stale_warning.load(Ordering::Relaxed);
                if now - last > 1000
                    && self
                        .last_stale_warning
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    tracing::warn!(%cause, "store failing: serving stale records inside their grace window");
                }
                (Resolution::Redirect(e), true)
            }
            Some(e) if e.verdict(now) == CachedVerdict::Expired => (Resolution::Gone, false),
            _ => (Resolution::Unavailable, false),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::{ManualClock, RedirectKind};
    use rebound_store::{LinkStore, MemoryStore};

    struct Fixture {
        path: Arc<RedirectPath>,
        store: Arc<MemoryStore>,
        clock: ManualClock,
    }

    fn fixture() -> Fixture {
        let store = Arc::new(MemoryStore::new());
        let clock = ManualClock::at(1_000_000);
        let metrics = ProxyMetrics::register(&prometheus::Registry::new()).unwrap();
        let path = RedirectPath::new(
            Arc::new(L1::new(1000)),
            Arc::new(IssuedCodeGate::new(1000)),
            store.clone(),
            Arc::new(clock.clone()),
            metrics,
            Duration::from_secs(1),
        );
        Fixture {
            path: Arc::new(path),
            store,
            clock,
        }
    }

    async fn add(store: &MemoryStore, code: &str, expires_at: Option<i64>) -> Link {
        let l = Link::new_active(
            code.into(),
            format!("https://e.com/{code}"),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            expires_at,
        );
        store.insert_link(&l, None).await.unwrap();
        l
    }

    #[tokio::test]
    async fn outcomes_of_a_store_read() {
        let f = fixture();
        add(&f.store, "live", None).await;
        add(&f.store, "expired", Some(500)).await;
        let down = add(&f.store, "down", None).await;
        f.store
            .deactivate_link(
                "down",
                1,
                &rebound_core::link::Deletion {
                    at: 1,
                    by: "op".into(),
                    reason: None,
                },
            )
            .await
            .unwrap();
        assert!(matches!(f.path.resolve("live").await, Resolution::Redirect(_)));
        assert!(matches!(f.path.resolve("unknown").await, Resolution::NotFound));
        assert!(matches!(f.path.resolve("expired").await, Resolution::Gone));
        assert!(matches!(f.path.resolve("down").await, Resolution::NotFound));
        // Redirects and tombstones are cached; misses and expired links are not.
        assert!(f.path.l1.get("live").is_some());
        assert_eq!(f.path.l1.get("down").unwrap().version(), down.version + 1);
        assert!(
            f.path.l1.get("unknown").is_none(),
            "a cached miss would hide a link created a moment later"
        );
        assert!(f.path.l1.get("expired").is_none());
        let reads = f.store.link_reads();
        f.path.resolve("live").await;
        f.path.resolve("down").await;
        assert_eq!(f.store.link_reads(), reads, "served from L1");
    }

    #[tokio::test]
    async fn an_l1_entry_never_outlives_expiry() {
        let f = fixture();
        add(&f.store, "soon", Some(1_000_000 + 5_000)).await;
        assert!(matches!(f.path.resolve("soon").await, Resolution::Redirect(_)));
        f.clock.advance(5_000);
        assert!(matches!(f.path.resolve("soon").await, Resolution::Gone));
        // Even with the store down, an expired link is never served.
        f.store.set_unavailable(true);
        assert!(matches!(f.path.resolve("soon").await, Resolution::Gone));
    }

    #[tokio::test]
    async fn concurrent_misses_make_one_store_read() {
        let f = fixture();
        add(&f.store, "cold", None).await;
        let before = f.store.link_reads();
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let p = f.path.clone();
                tokio::spawn(async move { p.resolve("cold").await })
            })
            .collect();
        for t in tasks {
            assert!(matches!(t.await.unwrap(), Resolution::Redirect(_)));
        }
        // All 50 began before the one read finished (they are on one thread), so one read served them all.
        assert_eq!(f.store.link_reads() - before, 1);
    }

    #[tokio::test]
    async fn the_filter_rejects_only_once_current() {
        use rebound_core::generated::{Generated, GeneratedCodes, ALIAS_INDEX_SETTING, COUNTER};
        use rebound_store::CounterStore;
        let f = fixture();
        let codes = GeneratedCodes::new([5; 16]);
        let generated = |v| match codes.code_for(v) {
            Generated::Code(c) => c,
            other => panic!("{other:?}"),
        };
        f.store.lease_block(COUNTER, 100).await.unwrap();
        // As a control plane leaves the store: its key recorded, the index complete.
        f.store
            .get_or_init_setting(rebound_core::generated::CODE_KEY_SETTING, &"05".repeat(16))
            .await
            .unwrap();
        f.store
            .get_or_init_setting(ALIAS_INDEX_SETTING, "complete")
            .await
            .unwrap();
        add(&f.store, &generated(7), None).await;
        f.store.record_alias("my-alias").await.unwrap();
        add(&f.store, "my-alias", None).await;
        f.path.resolve("nothere").await;
        assert_eq!(f.store.link_reads(), 1, "bypassed while not loaded");
        f.path.issued.load_from(f.store.as_ref(), Some([5; 16])).await.unwrap();
        f.path.issued.set_current(true);
        let never_issued = generated(1 << 40);
        for _ in 0..5 {
            assert!(matches!(f.path.resolve("nothere").await, Resolution::NotFound));
            assert!(matches!(f.path.resolve(&never_issued).await, Resolution::NotFound));
        }
        assert_eq!(f.store.link_reads(), 1, "no store reads for unknown codes");
        assert_eq!(f.path.metrics.bloom_rejects.get(), 10);
        // A generated code below the mark and an alias of the index are read.
        assert!(matches!(f.path.resolve(&generated(7)).await, Resolution::Redirect(_)));
        assert!(matches!(f.path.resolve("my-alias").await, Resolution::Redirect(_)));
        assert!(matches!(f.path.resolve(&generated(8)).await, Resolution::NotFound));
        assert_eq!(f.store.link_reads(), 4);
    }

    #[tokio::test]
    async fn store_failure_serves_stale_only_inside_the_window() {
        let f = fixture();
        add(&f.store, "warm", None).await;
        f.path.resolve("warm").await;
        let policy = CachePolicy::default();
        f.store.set_unavailable(true);
        // Fresh: served from L1 without the store.
        assert!(matches!(f.path.resolve("warm").await, Resolution::Redirect(_)));
        // Stale: the store is asked, fails, and the stale record is served.
        f.clock.advance(policy.fresh_millis + 1);
        assert!(matches!(f.path.resolve("warm").await, Resolution::Redirect(_)));
        assert_eq!(f.path.metrics.stale_served.get(), 1);
        // Past the grace window: 503.
        f.clock.advance(policy.stale_grace_millis);
        assert!(matches!(f.path.resolve("warm").await, Resolution::Unavailable));
        // Never cached: 503.
        assert!(matches!(f.path.resolve("never").await, Resolution::Unavailable));
    }

    #[tokio::test]
    async fn a_tombstone_wins_over_a_stale_record() {
        let f = fixture();
        add(&f.store, "gone", None).await;
        f.path.resolve("gone").await;
        let policy = CachePolicy::default();
        f.clock.advance(policy.fresh_millis - 10_000);
        f.path.l1.fill(
            "gone",
            CacheRecord::tombstone(2, f.clock.now_millis(), &policy),
            f.clock.now_millis(),
        );
        f.store.set_unavailable(true);
        // Past the tombstone's freshness: the store is asked, fails, and the stale tombstone
        // still answers (not the older active record, not a 503).
        f.clock.advance(policy.fresh_millis + 1);
        let errors = f.path.metrics.store_errors.get();
        assert!(matches!(f.path.resolve("gone").await, Resolution::NotFound));
        assert_eq!(
            f.path.metrics.store_errors.get(),
            errors + 1,
            "the store was asked and failed"
        );
        assert_eq!(f.path.metrics.stale_served.get(), 0);
    }

    #[tokio::test]
    async fn a_read_an_edit_voided_in_flight_is_made_again_and_never_answers_the_old_target() {
        let f = fixture();
        let old = add(&f.store, "moved", None).await;
        f.path.resolve("moved").await;
        // The edit lands in the store and voids version 1 in L1 while a read of version 1
        // (begun before it) is still in flight.
        let edit = rebound_core::LinkEdit {
            long_url: "https://new.example/".into(),
            ..old.editable()
        };
        let lease = rebound_store::PropagationLease {
            owner: "cp".into(),
            until: 0,
        };
        f.store.edit_link_pending("moved", 1, &edit, &lease).await.unwrap();
        let now = f.clock.now_millis();
        f.path.l1.supersede("moved", 2, now);
        let late = Learned::FromStore {
            item: Some(old.clone()),
            seen_tombstone: None,
        };
        assert!(f.path.apply("moved", late, now - 5, None, now).is_none(), "read again");
        assert_eq!(f.path.metrics.reads_edited.get(), 1);
        // The next request: L1 cannot answer, the store's version 2 does, and L1 keeps it.
        match f.path.resolve("moved").await {
            Resolution::Redirect(e) => assert_eq!((e.long_url(), e.version()), ("https://new.example/", 2)),
            other => panic!("{other:?}"),
        }
        // The store failing, with nothing newer than the superseded entry: 503, never the
        // old target.
        f.path.l1.supersede("moved", 3, now);
        f.store.set_unavailable(true);
        assert!(matches!(f.path.resolve("moved").await, Resolution::Unavailable));
    }

    fn with_l2(
        f: Fixture,
    ) -> (
        Arc<RedirectPath>,
        Arc<rebound_store::MemoryRecordCache>,
        Arc<InvalidationTrust>,
        Fixture,
    ) {
        let (path, l2, trust) = l2_path(&f);
        (Arc::new(path), l2, trust, f)
    }

    /// A path with its own L1 and L2 over the fixture's store and clock.
    fn l2_path(
        f: &Fixture,
    ) -> (
        RedirectPath,
        Arc<rebound_store::MemoryRecordCache>,
        Arc<InvalidationTrust>,
    ) {
        let l2 = Arc::new(rebound_store::MemoryRecordCache::default());
        let trust = Arc::new(InvalidationTrust::new(
            Duration::from_millis(2000),
            Duration::from_millis(1000),
        ));
        let path = RedirectPath::new(
            Arc::new(L1::new(1000)),
            Arc::new(IssuedCodeGate::new(1000)),
            f.store.clone(),
            Arc::new(f.clock.clone()),
            ProxyMetrics::register(&prometheus::Registry::new()).unwrap(),
            Duration::from_secs(1),
        )
        .with_l2(l2.clone(), Duration::from_millis(150), trust.clone());
        (path, l2, trust)
    }

    /// A store whose point reads wait until released: a read in flight across an event.
    struct HeldReads {
        inner: Arc<MemoryStore>,
        started: tokio::sync::Notify,
        release: tokio::sync::Notify,
    }

    #[async_trait::async_trait]
    impl LinkReads for HeldReads {
        async fn get_link(&self, code: &str) -> Result<Option<Link>, rebound_store::StoreError> {
            self.started.notify_one();
            self.release.notified().await;
            self.inner.get_link(code).await
        }
        async fn high_water(&self, counter: &str) -> Result<u64, rebound_store::StoreError> {
            self.inner.high_water(counter).await
        }
        async fn list_aliases(
            &self,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<String>, rebound_store::StoreError> {
            self.inner.list_aliases(after, limit).await
        }
        async fn read_setting(&self, name: &str) -> Result<Option<String>, rebound_store::StoreError> {
            self.inner.read_setting(name).await
        }
    }

    /// A path with L2 over a store whose reads wait until released.
    fn held_path(f: &Fixture) -> (Arc<RedirectPath>, Arc<HeldReads>, Arc<InvalidationTrust>) {
        held_path_over(f, Arc::new(rebound_store::MemoryRecordCache::default()))
    }

    /// [`held_path`] over `l2`.
    fn held_path_over(
        f: &Fixture,
        l2: Arc<rebound_store::MemoryRecordCache>,
    ) -> (Arc<RedirectPath>, Arc<HeldReads>, Arc<InvalidationTrust>) {
        let held = Arc::new(HeldReads {
            inner: f.store.clone(),
            started: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        });
        let trust = Arc::new(InvalidationTrust::new(
            Duration::from_millis(2000),
            Duration::from_millis(1000),
        ));
        let path = Arc::new(
            RedirectPath::new(
                Arc::new(L1::new(1000)),
                Arc::new(IssuedCodeGate::new(1000)),
                held.clone(),
                Arc::new(f.clock.clone()),
                ProxyMetrics::register(&prometheus::Registry::new()).unwrap(),
                Duration::from_secs(1),
            )
            .with_l2(l2, Duration::from_millis(150), trust.clone()),
        );
        (path, held, trust)
    }

    #[tokio::test]
    async fn a_read_older_than_the_delete_bound_is_made_again_unless_the_channel_stayed_trusted() {
        let f = fixture();
        let (path, held, trust) = held_path(&f);
        add(&f.store, "slow", None).await;
        // Untrusted (nothing heard): a read that took longer than timeout + l1_ttl may
        // predate a delete that returned meanwhile without this proxy's acknowledgement.
        let p = path.clone();
        let mut read = tokio::spawn(async move { p.resolve("slow").await });
        held.started.notified().await;
        f.clock.advance(3_001);
        held.release.notify_one();
        // Read again (from the store, or from L2 where the first read's record went: a
        // tombstone there would have refused it, being newer).
        let answer = loop {
            tokio::select! {
                answer = &mut read => break answer.unwrap(),
                _ = held.started.notified() => held.release.notify_one(),
            }
        };
        assert!(matches!(answer, Resolution::Redirect(_)), "{answer:?}");
        assert_eq!(path.metrics.reads_outdated.get(), 1, "read again");
        // Trusted throughout, with no lapse: the invalidation would have reached L1 first.
        add(&f.store, "slow2", None).await;
        trust.heard(f.clock.now_millis(), &path.l1);
        let p = path.clone();
        let read = tokio::spawn(async move { p.resolve("slow2").await });
        held.started.notified().await;
        f.clock.advance(1_500);
        trust.heard(f.clock.now_millis(), &path.l1);
        f.clock.advance(1_600);
        trust.heard(f.clock.now_millis(), &path.l1);
        held.release.notify_one();
        assert!(matches!(read.await.unwrap(), Resolution::Redirect(_)));
        assert_eq!(path.metrics.reads_outdated.get(), 1, "not read again");
    }

    #[tokio::test]
    async fn a_read_in_flight_across_a_lapse_answers_its_request_but_does_not_fill_l1() {
        let f = fixture();
        let (path, held, trust) = held_path(&f);
        add(&f.store, "race", None).await;
        trust.heard(f.clock.now_millis(), &path.l1);
        let p = path.clone();
        let read = tokio::spawn(async move { p.resolve("race").await });
        held.started.notified().await;
        // The subscription is cut and remade while the read is in flight: an invalidation
        // of the code may have been lost in between, and the read may predate it.
        trust.lapse();
        trust.heard(f.clock.now_millis(), &path.l1);
        held.release.notify_one();
        assert!(
            matches!(read.await.unwrap(), Resolution::Redirect(_)),
            "its request is answered"
        );
        assert!(
            path.l1.get("race").is_none(),
            "but L1 keeps nothing read before the lapse"
        );
        assert_eq!(path.metrics.fills_dropped.get(), 1);
        held.release.notify_one();
        assert!(matches!(path.resolve("race").await, Resolution::Redirect(_)));
        assert!(
            path.l1.get("race").is_some(),
            "a read after the lapse fills L1 as usual"
        );
    }

    #[tokio::test]
    async fn a_stale_record_read_across_a_lapse_answers_a_failing_store_but_does_not_fill_l1() {
        let f = fixture();
        let l2 = Arc::new(rebound_store::MemoryRecordCache::default());
        let (path, held, trust) = held_path_over(&f, l2.clone());
        let link = add(&f.store, "old", None).await;
        let policy = CachePolicy::default();
        let now = f.clock.now_millis();
        l2.put_record("old", &CacheRecord::active(&link, now, &policy), now)
            .await
            .unwrap();
        // Past its freshness, inside its grace window: L2's record is stale, the store is asked.
        f.clock.advance(policy.fresh_millis + 1);
        trust.heard(f.clock.now_millis(), &path.l1);
        let p = path.clone();
        let read = tokio::spawn(async move { p.resolve("old").await });
        held.started.notified().await;
        // A lapse while the store read is in flight, and the store fails.
        trust.lapse();
        trust.heard(f.clock.now_millis(), &path.l1);
        f.store.set_unavailable(true);
        held.release.notify_one();
        assert!(
            matches!(read.await.unwrap(), Resolution::Redirect(_)),
            "the stale record answers its request (docs/spec.md §3 step 6)"
        );
        assert_eq!(path.metrics.stale_served.get(), 1);
        assert!(
            path.l1.get("old").is_none(),
            "but L1 keeps nothing read before the lapse"
        );
        assert_eq!(path.metrics.fills_dropped.get(), 1);
    }

    #[tokio::test]
    async fn l2_answers_before_the_store() {
        let (path, l2, trust, f) = with_l2(fixture());
        trust.heard(f.clock.now_millis(), &path.l1);
        let live = add(&f.store, "live", None).await;
        let now = f.clock.now_millis();
        l2.put_record("live", &CacheRecord::active(&live, now, &CachePolicy::default()), now)
            .await
            .unwrap();
        l2.put_record("gone", &CacheRecord::tombstone(2, now, &CachePolicy::default()), now)
            .await
            .unwrap();
        assert!(matches!(path.resolve("live").await, Resolution::Redirect(_)));
        assert!(matches!(path.resolve("gone").await, Resolution::NotFound));
        assert_eq!(
            f.store.link_reads(),
            0,
            "a fresh L2 record or tombstone needs no store read"
        );
        // A store read populates L2 off the request path.
        add(&f.store, "cold", None).await;
        assert!(matches!(path.resolve("cold").await, Resolution::Redirect(_)));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(l2.peek("cold").is_some());
    }

    #[tokio::test]
    async fn a_code_this_region_has_not_seen_is_read_from_the_home_region_before_404() {
        use rebound_core::generated::ALIAS_INDEX_SETTING;
        use rebound_store::CounterStore;
        let f = fixture();
        // This region's replica has no links yet; the home region's has two, one deleted.
        let home = Arc::new(MemoryStore::new());
        add(&home, "made-elsewhere", None).await;
        let gone = add(&home, "gone-elsewhere", None).await;
        let deletion = rebound_core::link::Deletion {
            at: 1,
            by: "op".into(),
            reason: None,
        };
        home.deactivate_link("gone-elsewhere", gone.version, &deletion)
            .await
            .unwrap();
        for (setting, value) in [
            (rebound_core::generated::CODE_KEY_SETTING, "05".repeat(16)),
            (ALIAS_INDEX_SETTING, "complete".to_owned()),
        ] {
            f.store.get_or_init_setting(setting, &value).await.unwrap();
        }
        let (mut path, _, _) = l2_path(&f);
        path.home = Some(home.clone());
        // The filter is bypassed (not loaded): the local replica misses, the home region has it.
        assert!(matches!(path.resolve("made-elsewhere").await, Resolution::Redirect(_)));
        assert_eq!((f.store.link_reads(), path.metrics.home_found.get()), (1, 1));
        // The home region's tombstone is a 404 like the local one.
        assert!(matches!(path.resolve("gone-elsewhere").await, Resolution::NotFound));
        // With the filter current, a code it has not heard of goes to the home region only.
        path.issued.load_from(f.store.as_ref(), Some([5; 16])).await.unwrap();
        path.issued.set_current(true);
        add(&home, "alias-made-elsewhere", None).await;
        assert!(matches!(
            path.resolve("alias-made-elsewhere").await,
            Resolution::Redirect(_)
        ));
        assert_eq!(
            f.store.link_reads(),
            2,
            "no local read for what the filter has not heard of"
        );
        // Unknown everywhere: 404, nothing cached, the home region asked each time.
        let absent = path.metrics.home_absent.get();
        for _ in 0..2 {
            assert!(matches!(path.resolve("nowhere").await, Resolution::NotFound));
        }
        assert_eq!(path.metrics.home_absent.get(), absent + 2);
        // The home region out of reach: the local answer stands (404, not 503).
        home.set_unavailable(true);
        assert!(matches!(path.resolve("also-nowhere").await, Resolution::NotFound));
        assert_eq!(path.metrics.home_errors.get(), 1);
        // Once a code is in L1 the home region is not asked again.
        home.set_unavailable(false);
        let found = path.metrics.home_found.get();
        assert!(matches!(path.resolve("made-elsewhere").await, Resolution::Redirect(_)));
        assert_eq!(path.metrics.home_found.get(), found);
    }

    #[tokio::test]
    async fn a_failing_l2_is_a_miss_and_the_store_decides() {
        let (path, l2, _trust, f) = with_l2(fixture());
        add(&f.store, "live", None).await;
        l2.set_failing(true);
        assert!(matches!(path.resolve("live").await, Resolution::Redirect(_)));
        assert_eq!(f.store.link_reads(), 1);
        assert_eq!(path.metrics.l2_errors.get(), 1);
    }

    #[tokio::test]
    async fn a_store_replica_behind_a_tombstone_already_seen_does_not_revive_the_link() {
        let (path, l2, _trust, f) = with_l2(fixture());
        // The store's replica still has version 1 active; this proxy saw the delete's
        // tombstone (version 2) and holds it in L1.
        add(&f.store, "gone", None).await;
        let now = f.clock.now_millis();
        path.l1
            .fill("gone", CacheRecord::tombstone(2, now, &CachePolicy::default()), now);
        assert!(matches!(path.resolve("gone").await, Resolution::NotFound));
        // The channel never came up and Redis is unreachable: past l1_ttl the tombstone is
        // no longer used as an answer, and the store (the lagging replica) is read.
        f.clock.advance(1_001);
        l2.set_failing(true);
        assert!(matches!(path.resolve("gone").await, Resolution::NotFound));
        assert_eq!(f.store.link_reads(), 1, "the replica was read");
        assert_eq!(path.metrics.reads_superseded.get(), 1);
        assert!(
            path.l1.get("gone").is_some_and(|e| e.is_tombstone()),
            "nothing from the replica went into L1"
        );
        // With no tombstone seen, the same read would redirect.
        add(&f.store, "other", None).await;
        assert!(matches!(path.resolve("other").await, Resolution::Redirect(_)));
    }

    #[tokio::test]
    async fn a_live_l2_record_from_before_redis_changed_identity_is_confirmed_by_the_store() {
        let (path, l2, trust, f) = with_l2(fixture());
        trust.heard(f.clock.now_millis(), &path.l1);
        let now = f.clock.now_millis();
        let policy = CachePolicy::default();
        // Redis had both links live; then it lost the delete of one (a failover to a replica
        // that missed the tombstone, a restart from an older snapshot).
        let kept = add(&f.store, "kept", None).await;
        let lost = add(&f.store, "lost", None).await;
        for link in [&kept, &lost] {
            l2.put_record(&link.code, &CacheRecord::active(link, now, &policy), now)
                .await
                .unwrap();
        }
        let deletion = rebound_core::link::Deletion {
            at: 1,
            by: "op".into(),
            reason: None,
        };
        f.store.deactivate_link("lost", 1, &deletion).await.unwrap();
        l2.change_identity();
        assert!(matches!(path.resolve("lost").await, Resolution::NotFound));
        assert!(matches!(path.resolve("kept").await, Resolution::Redirect(_)));
        assert_eq!(f.store.link_reads(), 2, "both confirmed by the store");
        assert_eq!(path.metrics.l2_unconfirmed.get(), 2);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            l2.peek("lost").unwrap().is_tombstone(),
            "the store's answer went back to L2"
        );
        // Confirmed, the records are used again without the store.
        path.l1.clear();
        assert!(matches!(path.resolve("kept").await, Resolution::Redirect(_)));
        assert_eq!(f.store.link_reads(), 2);
    }

    #[tokio::test]
    async fn an_untrusted_l1_entry_lives_at_most_l1_ttl() {
        let (path, l2, trust, f) = with_l2(fixture());
        let link = add(&f.store, "cut", None).await;
        trust.heard(f.clock.now_millis(), &path.l1);
        assert!(matches!(path.resolve("cut").await, Resolution::Redirect(_)));
        // The link is deleted; this proxy's channel broke silently, so no invalidation came.
        let down = f
            .store
            .deactivate_link(
                "cut",
                1,
                &rebound_core::link::Deletion {
                    at: 1,
                    by: "op".into(),
                    reason: None,
                },
            )
            .await
            .unwrap();
        let now = f.clock.now_millis();
        l2.put_record(
            "cut",
            &CacheRecord::tombstone(down.version, now, &CachePolicy::default()),
            now,
        )
        .await
        .unwrap();
        // Still within the keepalive timeout: L1 is trusted.
        f.clock.advance(1_500);
        assert!(matches!(path.resolve("cut").await, Resolution::Redirect(_)));
        // Past timeout + l1_ttl from the fill: the entry is no longer used.
        f.clock.advance(1_600);
        assert!(!trust.is_trusted(f.clock.now_millis()));
        assert!(matches!(path.resolve("cut").await, Resolution::NotFound));
        let _ = link;
    }

    #[tokio::test]
    async fn store_failure_uses_a_stale_l2_record_but_never_over_a_tombstone() {
        let (path, l2, trust, f) = with_l2(fixture());
        let policy = CachePolicy::default();
        let link = add(&f.store, "warm", None).await;
        let then = f.clock.now_millis();
        l2.put_record("warm", &CacheRecord::active(&link, then, &policy), then)
            .await
            .unwrap();
        f.clock.advance(policy.fresh_millis + 1);
        trust.heard(f.clock.now_millis(), &path.l1);
        f.store.set_unavailable(true);
        assert!(
            matches!(path.resolve("warm").await, Resolution::Redirect(_)),
            "stale, inside the grace window"
        );
        let now = f.clock.now_millis();
        l2.put_record("warm", &CacheRecord::tombstone(2, now, &policy), now)
            .await
            .unwrap();
        path.l1.remove("warm");
        assert!(matches!(path.resolve("warm").await, Resolution::NotFound));
    }
}
