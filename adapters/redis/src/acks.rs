//! Strict I1 across proxies (docs/spec.md §4): a delete or takedown answers only when every live
//! proxy has acknowledged the invalidation (it has dropped the code from its L1), or when
//! the bound `invalidation_timeout + l1_ttl` has passed for those that did not: by then a
//! proxy that heard nothing has stopped trusting its L1, and what it kept has expired.
//!
//! Proxies register with each keepalive (the sorted set `proxies`, scored by Redis's time) and
//! acknowledge on the channel `acks` (`"<proxy> <version> <code>"`). The control plane
//! listens to it from start-up; each delete waits on an [`Expectation`] taken before its
//! invalidation is published.

use crate::{decode_ack, RedisCache, RegistryRead};
use futures_util::StreamExt;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Opts, Registry};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// The acknowledgement metrics of a control plane.
#[derive(Clone)]
pub struct AckMetrics {
    /// Acknowledgements that a waiting delete received.
    pub received: IntCounter,
    /// Deletes that waited the bound out for a proxy that did not acknowledge.
    pub waited_out: IntCounter,
    /// How long deletes waited for the acknowledgements.
    pub wait: Histogram,
    /// 1 while the control plane listens to the acknowledgements.
    pub listening: IntGauge,
}

impl AckMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<AckMetrics> {
        let m = AckMetrics {
            received: IntCounter::with_opts(Opts::new(
                "rebound_invalidation_acks_total",
                "Acknowledgements of invalidations received by deletes and takedowns waiting for them",
            ))?,
            waited_out: IntCounter::with_opts(Opts::new(
                "rebound_invalidation_waited_out_total",
                "Deletes and takedowns that waited invalidation_timeout + l1_ttl for a live proxy that did not acknowledge",
            ))?,
            wait: Histogram::with_opts(
                HistogramOpts::new(
                    "rebound_invalidation_ack_wait_seconds",
                    "Time a delete or takedown waited for every live proxy to acknowledge its invalidation",
                )
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]),
            )?,
            listening: IntGauge::with_opts(Opts::new(
                "rebound_invalidation_acks_listening",
                "1 while this control plane is subscribed to the proxies' acknowledgements",
            ))?,
        };
        registry.register(Box::new(m.received.clone()))?;
        registry.register(Box::new(m.waited_out.clone()))?;
        registry.register(Box::new(m.wait.clone()))?;
        registry.register(Box::new(m.listening.clone()))?;
        Ok(m)
    }
}

#[derive(Default)]
struct Waiting {
    acked: Mutex<HashSet<String>>,
    notify: Notify,
}

/// A code at a version: what an acknowledgement is about.
type Invalidated = (String, u64);

/// The deletes waiting for acknowledgements, by (code, version).
pub struct Acknowledgements {
    waiting: Mutex<HashMap<Invalidated, Vec<Arc<Waiting>>>>,
    metrics: AckMetrics,
    /// Each proxy seen in a registry read: the epoch of that read and when. A Redis that
    /// lost writes lost registrations too; the proxies seen in an earlier epoch are waited
    /// for until the registry is as old as its window again.
    seen: Mutex<HashMap<String, (i64, Instant)>>,
}

/// How often a control plane reads the registry to remember the proxies in it.
const REMEMBER_EVERY: Duration = Duration::from_secs(1);
/// How far back [`Acknowledgements::listen`] reads the registry.
const REMEMBER_WITHIN: Duration = Duration::from_secs(3600);

/// One delete's wait; taken before its invalidation is published, so no acknowledgement
/// can come before it is counted.
pub struct Expectation<'a> {
    acks: &'a Acknowledgements,
    key: Invalidated,
    waiting: Arc<Waiting>,
}

impl Drop for Expectation<'_> {
    fn drop(&mut self) {
        let mut map = self.acks.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get_mut(&self.key) {
            list.retain(|w| !Arc::ptr_eq(w, &self.waiting));
            if list.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Every proxy named acknowledged.
    Acknowledged,
    /// The bound passed; these had not acknowledged.
    WaitedOut(Vec<String>),
}

impl Expectation<'_> {
    /// Waits until every one of `proxies` has acknowledged, or its own deadline passed (by
    /// then what it cached of the code can no longer answer).
    pub async fn wait_for(&self, proxies: &[(String, Instant)]) -> WaitOutcome {
        let started = Instant::now();
        let outcome = loop {
            let notified = self.waiting.notify.notified();
            let now = Instant::now();
            let (mut unheard, mut next) = (Vec::new(), None::<Instant>);
            {
                let acked = self.waiting.acked.lock().unwrap_or_else(|e| e.into_inner());
                for (proxy, deadline) in proxies.iter().filter(|(p, _)| !acked.contains(p)) {
                    unheard.push(proxy.clone());
                    if *deadline > now {
                        next = Some(next.map_or(*deadline, |n| n.min(*deadline)));
                    }
                }
            }
            let Some(next) = next else {
                break match unheard.is_empty() {
                    true => WaitOutcome::Acknowledged,
                    false => WaitOutcome::WaitedOut(unheard),
                };
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(next) => {}
            }
        };
        let m = &self.acks.metrics;
        m.wait.observe(started.elapsed().as_secs_f64());
        if matches!(outcome, WaitOutcome::WaitedOut(_)) {
            m.waited_out.inc();
        }
        outcome
    }
}

/// How long after a registry read a proxy that has not acknowledged may still answer with
/// what the invalidation voids: while it trusts its L1 (at most `timeout` after the last
/// keepalive it sent, which registered it `age` before the read), and then from entries
/// at most `l1_ttl` old, filled before the change was written (so at most `l1_ttl` after
/// the read). A proxy silent for longer than `timeout` (dead, or cut off from Redis) is
/// waited for `l1_ttl`, not the whole bound.
pub fn may_still_serve(age: Duration, timeout: Duration, l1_ttl: Duration) -> Duration {
    timeout.saturating_sub(age).max(l1_ttl)
}

impl Acknowledgements {
    pub fn new(metrics: AckMetrics) -> Arc<Acknowledgements> {
        Arc::new(Acknowledgements {
            waiting: Mutex::new(HashMap::new()),
            metrics,
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// Notes the proxies a registry read found.
    pub fn remember(&self, registry: &RegistryRead) {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for proxy in &registry.proxies {
            seen.insert(proxy.clone(), (registry.epoch, now));
        }
    }

    /// The proxies a delete waits for, each with how long from the read it may still
    /// answer from its L1 ([`may_still_serve`]), from a registry read over `window`: those
    /// it lists and, when it is younger than the window (the Redis lost its data), those
    /// seen in an earlier epoch within the window and not re-registered since (their last
    /// keepalive unknown: the whole bound, `timeout + l1_ttl`).
    pub fn to_wait_for(
        &self,
        registry: &RegistryRead,
        window: Duration,
        timeout: Duration,
        l1_ttl: Duration,
    ) -> Vec<(String, Duration)> {
        self.remember(registry);
        let mut proxies: Vec<(String, Duration)> = registry
            .proxies
            .iter()
            .enumerate()
            .map(|(i, proxy)| {
                let age = registry.ages_ms.get(i).map_or(0, |a| (*a).max(0) as u64);
                let serves = may_still_serve(Duration::from_millis(age), timeout, l1_ttl);
                (proxy.clone(), serves)
            })
            .collect();
        if !registry.complete {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            for (proxy, (epoch, at)) in seen.iter() {
                if *epoch != registry.epoch && at.elapsed() <= window && !registry.proxies.contains(proxy) {
                    proxies.push((proxy.clone(), timeout + l1_ttl));
                }
            }
        }
        proxies
    }

    /// Starts counting the acknowledgements of `code` at `version`.
    pub fn expect(&self, code: &str, version: u64) -> Expectation<'_> {
        let key = (code.to_owned(), version);
        let waiting = Arc::new(Waiting::default());
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .push(waiting.clone());
        Expectation {
            acks: self,
            key,
            waiting,
        }
    }

    /// An acknowledgement arrived.
    pub fn heard(&self, proxy: &str, version: u64, code: &str) {
        let map = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get(&(code.to_owned(), version)) {
            for w in list {
                if w.acked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(proxy.to_owned())
                {
                    self.metrics.received.inc();
                }
                w.notify.notify_one();
            }
        }
    }

    /// Listens to the acknowledgements until `shutdown`, subscribing again when the
    /// subscription is lost (meanwhile deletes wait their bound out, which is safe), and
    /// remembers the proxies in the registry every [`REMEMBER_EVERY`].
    pub async fn listen(self: Arc<Self>, cache: Arc<RedisCache>, mut shutdown: watch::Receiver<bool>) {
        let remembering = {
            let (me, cache, mut shutdown) = (self.clone(), cache.clone(), shutdown.clone());
            async move {
                let mut tick = tokio::time::interval(REMEMBER_EVERY);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            if let Ok(Ok(registry)) = tokio::time::timeout(REMEMBER_EVERY, cache.registry(REMEMBER_WITHIN)).await {
                                me.remember(&registry);
                            }
                        }
                        _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
                    }
                }
            }
        };
        let remembering = tokio::spawn(remembering);
        self.listen_to_acks(cache, &mut shutdown).await;
        remembering.abort();
    }

    async fn listen_to_acks(&self, cache: Arc<RedisCache>, shutdown: &mut watch::Receiver<bool>) {
        loop {
            let session = async {
                let mut messages = cache.subscription(&[cache.acks_channel()]).await?;
                self.metrics.listening.set(1);
                while let Some(msg) = messages.next().await {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    match decode_ack(&payload) {
                        Some((proxy, version, code)) => self.heard(proxy, version, code),
                        None => tracing::warn!("ignoring a malformed acknowledgement"),
                    }
                }
                Ok::<(), rebound_store::StoreError>(())
            };
            tokio::select! {
                r = session => {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "acknowledgement channel lost; deletes wait invalidation_timeout + l1_ttl meanwhile");
                    }
                }
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.metrics.listening.set(0);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks() -> Arc<Acknowledgements> {
        Acknowledgements::new(AckMetrics::register(&Registry::new()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_every_proxy_named_has_acknowledged_and_only_then() {
        let a = acks();
        let e = a.expect("abc", 3);
        let deadline = Instant::now() + Duration::from_secs(3);
        let proxies = vec![("p1".to_owned(), deadline), ("p2".to_owned(), deadline)];
        a.heard("p1", 3, "abc");
        a.heard("p2", 2, "abc"); // another version
        a.heard("p2", 3, "abd"); // another code
        let waiting = tokio::spawn({
            let a = a.clone();
            let proxies = proxies.clone();
            async move { a.expect("zzz", 1).wait_for(&proxies).await }
        });
        tokio::task::yield_now().await;
        let late = tokio::spawn({
            let a = a.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                a.heard("p2", 3, "abc");
            }
        });
        assert_eq!(e.wait_for(&proxies).await, WaitOutcome::Acknowledged);
        assert!(Instant::now() < deadline, "it did not wait for the bound");
        late.await.unwrap();
        assert_eq!(
            waiting.await.unwrap(),
            WaitOutcome::WaitedOut(vec!["p1".to_owned(), "p2".to_owned()]),
            "nobody acknowledged zzz: the bound was waited out"
        );
        assert_eq!(a.metrics.waited_out.get(), 1);
        assert_eq!(a.metrics.received.get(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_proxy_holds_a_wait_only_until_its_own_deadline() {
        let a = acks();
        let e = a.expect("abc", 5);
        let start = Instant::now();
        let proxies = vec![
            ("live".to_owned(), start + Duration::from_secs(3)),
            ("dead".to_owned(), start + Duration::from_secs(1)),
        ];
        let acked = tokio::spawn({
            let a = a.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                a.heard("live", 5, "abc");
            }
        });
        assert_eq!(
            e.wait_for(&proxies).await,
            WaitOutcome::WaitedOut(vec!["dead".to_owned()])
        );
        // The live one's acknowledgement ended it, not its deadline.
        assert_eq!(start.elapsed(), Duration::from_millis(1500));
        acked.await.unwrap();
        // Nobody answers: the wait ends at the latest deadline, no later.
        let e = a.expect("abd", 1);
        let all = vec!["live".to_owned(), "dead".to_owned()];
        assert_eq!(e.wait_for(&proxies).await, WaitOutcome::WaitedOut(all));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[test]
    fn what_a_proxy_that_has_not_acknowledged_may_still_serve() {
        let (timeout, l1_ttl) = (Duration::from_secs(2), Duration::from_secs(1));
        let ms = Duration::from_millis;
        // (how long ago it last registered, how long from the read it may still serve)
        let table = [
            (ms(0), ms(2000)),
            (ms(500), ms(1500)),
            (ms(1000), ms(1000)),
            (ms(1500), ms(1000)),
            (ms(2000), ms(1000)),
            (ms(60_000), ms(1000)),
        ];
        for (age, serves) in table {
            assert_eq!(may_still_serve(age, timeout, l1_ttl), serves, "{age:?}");
        }
    }

    #[test]
    fn after_redis_lost_its_data_the_proxies_seen_before_are_waited_for_too() {
        let a = acks();
        let window = Duration::from_secs(60);
        let (timeout, l1_ttl) = (Duration::from_secs(2), Duration::from_secs(1));
        let read = |epoch: i64, complete: bool, proxies: &[&str]| RegistryRead {
            proxies: proxies.iter().map(|p| p.to_string()).collect(),
            ages_ms: proxies
                .iter()
                .map(|p| if *p == "silent" { 30_000 } else { 0 })
                .collect(),
            epoch,
            complete,
        };
        let names = |waited: Vec<(String, Duration)>| {
            let mut names: Vec<String> = waited.into_iter().map(|(p, _)| p).collect();
            names.sort();
            names
        };
        a.remember(&read(1, true, &["p1", "p2", "left"]));
        // The same epoch: a proxy missing from the registry left it (deregistered).
        assert_eq!(
            names(a.to_wait_for(&read(1, false, &["p1", "p2"]), window, timeout, l1_ttl)),
            ["p1", "p2"]
        );
        // A new epoch, younger than the window: whoever was seen before may still serve, for
        // the whole bound (when it last registered is not known).
        let waited = a.to_wait_for(&read(2, false, &["p1", "silent"]), window, timeout, l1_ttl);
        assert_eq!(names(waited.clone()), ["left", "p1", "p2", "silent"]);
        for (proxy, serves) in waited {
            let expected = match proxy.as_str() {
                "p1" => timeout,
                "silent" => l1_ttl,
                _ => timeout + l1_ttl,
            };
            assert_eq!(serves, expected, "{proxy}");
        }
        // Once the new epoch is as old as the window, the registry alone counts.
        assert_eq!(
            names(a.to_wait_for(&read(2, true, &["p1"]), window, timeout, l1_ttl)),
            ["p1"]
        );
        // Seen longer ago than the window: not waited for.
        assert_eq!(
            names(a.to_wait_for(&read(3, false, &["p1"]), Duration::ZERO, timeout, l1_ttl)),
            ["p1"]
        );
    }

    #[tokio::test]
    async fn nobody_to_wait_for_is_no_wait_and_a_finished_wait_is_forgotten() {
        let a = acks();
        {
            let e = a.expect("abc", 1);
            assert_eq!(e.wait_for(&[]).await, WaitOutcome::Acknowledged);
        }
        assert!(a.waiting.lock().unwrap().is_empty());
    }
}
