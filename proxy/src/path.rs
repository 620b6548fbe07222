//! The redirect path of SPEC §3 after the request checks: L1 → Bloom filter →
//! single-flight store read, decided by the core's pure function, with the stale-on-failure
//! rule. Transport-free, so it is tested against the in-memory store.

use crate::bloom::BloomGate;
use crate::flight::SingleFlight;
use crate::l1::{L1Entry, L1};
use crate::metrics::ProxyMetrics;
use rebound_core::cache::CachePolicy;
use rebound_core::{decide_redirect, CacheRecord, CachedVerdict, Clock, Link, StoreVerdict};
use rebound_store::Store;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the path decided for a code.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// Redirect with this entry (active).
    Redirect(Arc<L1Entry>),
    /// 404: unknown, deleted or taken down.
    NotFound,
    /// 410: expired.
    Gone,
    /// 503: the store failed and nothing may be served instead.
    Unavailable,
}

type StoreRead = Result<Option<Link>, Arc<str>>;

/// The lookup tiers and what they share.
pub struct RedirectPath {
    pub l1: Arc<L1>,
    pub bloom: Arc<BloomGate>,
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub metrics: ProxyMetrics,
    pub policy: CachePolicy,
    pub store_budget: Duration,
    flights: SingleFlight<StoreRead>,
    last_stale_warning: AtomicI64,
}

impl RedirectPath {
    pub fn new(
        l1: Arc<L1>,
        bloom: Arc<BloomGate>,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        metrics: ProxyMetrics,
        store_budget: Duration,
    ) -> RedirectPath {
        RedirectPath {
            l1,
            bloom,
            store,
            clock,
            metrics,
            policy: CachePolicy::default(),
            store_budget,
            flights: SingleFlight::default(),
            last_stale_warning: AtomicI64::new(0),
        }
    }

    /// Resolves a code that passed the code rule.
    pub async fn resolve(&self, code: &str) -> Resolution {
        let now = self.clock.now_millis();
        let cached = self.l1.get(code);
        if let Some(entry) = &cached {
            match entry.verdict(now) {
                CachedVerdict::Redirect => {
                    self.metrics.l1_hits.inc();
                    return Resolution::Redirect(entry.clone());
                }
                CachedVerdict::Tombstone => {
                    self.metrics.l1_tombstones.inc();
                    return Resolution::NotFound;
                }
                CachedVerdict::Expired => return Resolution::Gone,
                CachedVerdict::Stale | CachedVerdict::Dead => {}
            }
        }
        self.metrics.l1_misses.inc();
        match self.bloom.may_contain(code) {
            Some(false) => {
                self.metrics.bloom_rejects.inc();
                return Resolution::NotFound;
            }
            Some(true) => {}
            None => self.metrics.bloom_bypassed.inc(),
        }
        let (read, waited) = self
            .flights
            .run(code, || async {
                self.metrics.store_reads.inc();
                match tokio::time::timeout(self.store_budget, self.store.get_link(code)).await {
                    Ok(Ok(item)) => Ok(item),
                    Ok(Err(e)) => Err(Arc::from(e.to_string())),
                    Err(_) => Err(Arc::from("store read timed out")),
                }
            })
            .await;
        if waited {
            self.metrics.singleflight_waits.inc();
        }
        let now = self.clock.now_millis();
        match read {
            Ok(item) => match decide_redirect(item.as_ref(), now) {
                StoreVerdict::Redirect => {
                    let link = item.as_ref().expect("a redirect has a link");
                    let held = self.l1.fill(code, CacheRecord::active(link, now, &self.policy));
                    // A newer tombstone may have landed while the read was in flight.
                    match held.verdict(now) {
                        CachedVerdict::Redirect => Resolution::Redirect(held),
                        CachedVerdict::Expired => Resolution::Gone,
                        _ => Resolution::NotFound,
                    }
                }
                StoreVerdict::NotFound => Resolution::NotFound,
                StoreVerdict::Gone => Resolution::Gone,
                StoreVerdict::Tombstone => {
                    let version = item.as_ref().map_or(0, |l| l.version);
                    self.l1.fill(code, CacheRecord::tombstone(version, now, &self.policy));
                    Resolution::NotFound
                }
            },
            Err(cause) => {
                self.metrics.store_errors.inc();
                self.stale_or_unavailable(cached, now, &cause)
            }
        }
    }

    /// Store failure: a stale active record inside its grace window and before expiry may be
    /// served; a tombstone always wins; otherwise 503.
    fn stale_or_unavailable(&self, cached: Option<Arc<L1Entry>>, now: i64, cause: &str) -> Resolution {
        // Look again: a tombstone may have arrived while the store was failing.
        let entry = self.l1.get(cached.as_ref().map_or("", |e| &e.code)).or(cached);
        match entry {
            Some(e) if e.record.is_tombstone() && e.verdict(now) == CachedVerdict::Tombstone => Resolution::NotFound,
            Some(e)
                if matches!(e.verdict(now), CachedVerdict::Stale | CachedVerdict::Redirect)
                    && !e.record.is_tombstone() =>
            {
                self.metrics.stale_served.inc();
                let last = self.last_stale_warning.load(Ordering::Relaxed);
                if now - last > 1000
                    && self
                        .last_stale_warning
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    tracing::warn!(%cause, "store failing: serving stale records inside their grace window");
                }
                Resolution::Redirect(e)
            }
            _ => Resolution::Unavailable,
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
            Arc::new(BloomGate::new(1000)),
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
        assert_eq!(f.path.l1.get("down").unwrap().record.version, down.version + 1);
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
    async fn the_bloom_filter_rejects_only_once_current() {
        let f = fixture();
        f.path.resolve("nothere").await;
        assert_eq!(f.store.link_reads(), 1, "bypassed while not loaded");
        f.path.bloom.load_from(f.store.as_ref()).await.unwrap();
        for _ in 0..10 {
            assert!(matches!(f.path.resolve("nothere").await, Resolution::NotFound));
        }
        assert_eq!(f.store.link_reads(), 1, "no store reads for unknown codes");
        assert_eq!(f.path.metrics.bloom_rejects.get(), 10);
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
        f.path
            .l1
            .fill("gone", CacheRecord::tombstone(2, f.clock.now_millis(), &policy));
        f.store.set_unavailable(true);
        f.clock.advance(20_000);
        assert!(matches!(f.path.resolve("gone").await, Resolution::NotFound));
    }
}
