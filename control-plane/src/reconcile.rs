//! Propagations finished by the system (docs/spec.md §4 I1, §8): a delete or takedown durable in
//! the store leaves "propagate version V of code C" pending in the same write, leased to
//! the control plane that made it. That one clears it when its own propagation succeeded;
//! otherwise every control plane's reconciler looks for pending ones whose lease expired
//! (one bounded page a second), leases each, runs the same propagation (tombstone,
//! invalidation, acknowledgements), clears it and audits `propagated`. So a delete whose
//! tombstone failed, or whose control plane died, ends with no client retry.

use crate::metrics::PropagationMetrics;
use rebound_core::{Clock, Link, UnixMillis};
use rebound_store::{AuditEvent, EventError, LinkEvents, Propagation, PropagationLease, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often each control plane looks for pending propagations.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);
/// Most pending propagations taken in one look.
pub const PAGE: usize = 16;
/// How long a lease on a propagation lasts: longer than one attempt (the tombstone's and
/// the registry's 1 s budgets and the wait for acknowledgements, `invalidation_timeout +
/// l1_ttl`, 3 s by default), so two control planes seldom run the same one; a control plane
/// that dies holding one delays it by at most this.
pub const LEASE: Duration = Duration::from_secs(8);
/// After a failed attempt, how long before any control plane tries again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// One control plane's side of the pending propagations: what the API path calls after its
/// own attempt, and the reconciler.
#[derive(Clone)]
pub struct Propagations {
    store: Arc<dyn Store>,
    events: Arc<dyn LinkEvents>,
    clock: Arc<dyn Clock>,
    /// This control plane, as lease owner and audit actor.
    owner: String,
    metrics: PropagationMetrics,
}

impl Propagations {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        events: Arc<dyn LinkEvents>,
        clock: Arc<dyn Clock>,
        metrics: PropagationMetrics,
    ) -> Propagations {
        let owner = format!("control-plane-{}-{:08x}", std::process::id(), rand::random::<u32>());
        Propagations {
            store,
            events,
            clock,
            owner,
            metrics,
        }
    }

    pub(crate) fn metrics(&self) -> &PropagationMetrics {
        &self.metrics
    }

    /// This control plane's name in leases and in the audit log.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// A lease for this control plane from `now`.
    pub(crate) fn lease_from(&self, now: UnixMillis) -> PropagationLease {
        PropagationLease {
            owner: self.owner.clone(),
            until: now + LEASE.as_millis() as i64,
        }
    }

    /// The API path's propagation succeeded: nothing is left for a reconciler. A link
    /// already down may have nothing pending (or another finished it): that is fine.
    pub(crate) async fn finished_by_the_api(&self, code: &str, version: u64) {
        match self.store.finish_propagation(code, version).await {
            Ok(()) | Err(StoreError::ConditionFailed) => {}
            Err(e) => {
                tracing::warn!(code, version, error = %rebound_core::Causes(&e), "pending propagation not cleared; a reconciler will run it again")
            }
        }
    }

    /// The API path's propagation failed: any control plane's reconciler takes it from now.
    pub(crate) async fn give_back(&self, code: &str, version: u64) {
        self.release(code, version, self.clock.now_millis()).await;
    }

    /// Sets the lease this control plane holds (or that expired) to end at `at`.
    async fn release(&self, code: &str, version: u64, at: UnixMillis) {
        let lease = PropagationLease {
            owner: self.owner.clone(),
            until: at,
        };
        match self.store.lease_propagation(code, version, &lease, at).await {
            Ok(_) | Err(StoreError::ConditionFailed) => {}
            Err(e) => {
                tracing::warn!(code, version, error = %rebound_core::Causes(&e), "lease on a pending propagation not given back; it expires")
            }
        }
    }

    /// Runs every pending propagation of one page whose lease expired; returns how many it
    /// finished.
    pub async fn reconcile_once(&self) -> usize {
        let now = self.clock.now_millis();
        let page = match self.store.pending_propagations(now, PAGE).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %rebound_core::Causes(&e), "pending propagations not readable");
                return 0;
            }
        };
        self.metrics.pending.set(page.len() as i64);
        let mut finished = 0;
        for pending in page {
            if self.finish(pending).await {
                finished += 1;
            }
        }
        finished
    }

    /// Leases `pending`, propagates it, clears it and audits it; whether it finished it.
    async fn finish(&self, pending: Propagation) -> bool {
        let Propagation { code, version, .. } = pending;
        let now = self.clock.now_millis();
        let link = match self
            .store
            .lease_propagation(&code, version, &self.lease_from(now), now)
            .await
        {
            Ok(link) => link,
            // Another control plane took it or finished it, or a newer version replaced it.
            Err(StoreError::ConditionFailed) => return false,
            Err(e) => {
                tracing::warn!(code, version, error = %rebound_core::Causes(&e), "pending propagation not leased");
                return false;
            }
        };
        if let Err(e) = self.propagate(&link).await {
            self.metrics.failed.inc();
            tracing::warn!(code, version, error = %rebound_core::Causes(&e), "pending propagation failed; retried");
            self.release(&code, version, self.clock.now_millis() + RETRY_AFTER.as_millis() as i64)
                .await;
            return false;
        }
        match self.store.finish_propagation(&code, version).await {
            Ok(()) => {}
            // Someone else (a client's retry) finished it meanwhile, and said so.
            Err(StoreError::ConditionFailed) => return false,
            Err(e) => {
                tracing::warn!(code, version, error = %rebound_core::Causes(&e), "propagated but not cleared; it runs again");
                return false;
            }
        }
        self.metrics.finished.inc();
        tracing::info!(code, version, "pending propagation finished");
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: self.owner.clone(),
            action: "propagated".to_owned(),
            code: Some(code.clone()),
            reason: None,
            outcome: "ok".to_owned(),
            detail: None,
        };
        if let Err(e) = self.store.append_audit(&event).await {
            tracing::error!(code, error = %rebound_core::Causes(&e), "audit event of a finished propagation not recorded");
        }
        true
    }

    /// The propagation of `link` as stored, bounded by the lease.
    async fn propagate(&self, link: &Link) -> Result<(), EventError> {
        // A delete or takedown leaves an inactive link, an edit an active one.
        let propagation = match link.is_active {
            true => self.events.changed(link),
            false => self.events.deactivated(link),
        };
        match tokio::time::timeout(LEASE, propagation).await {
            Ok(delivered) => delivered,
            Err(_) => Err(EventError("no answer within the lease".into())),
        }
    }

    /// Looks for pending propagations every [`RECONCILE_EVERY`] until `stop` turns true; a
    /// pass under way is dropped then (its lease expires and another control plane
    /// finishes it).
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(RECONCILE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *stop.borrow() {
                return;
            }
            tokio::select! {
                _ = every.tick() => {}
                _ = stop.changed() => return,
            }
            tokio::select! {
                _ = self.reconcile_once() => {}
                _ = stop.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Principal;
    use crate::config::ControlPlaneConfig;
    use crate::error::ApiError;
    use crate::ControlPlane;
    use rebound_core::time::ManualClock;
    use rebound_core::RedirectKind;
    use rebound_store::events::RecordedLinkEvents;
    use rebound_store::{AuditLog, LinkReads, LinkStore, MemoryStore};
    use std::sync::atomic::Ordering;

    const T0: i64 = 1_700_000_000_000;

    struct Rig {
        store: Arc<MemoryStore>,
        events: Arc<RecordedLinkEvents>,
        clock: ManualClock,
        cp: ControlPlane,
    }

    async fn rig() -> Rig {
        let store = Arc::new(MemoryStore::new());
        let events = Arc::new(RecordedLinkEvents::default());
        let clock = ManualClock::at(T0);
        let cp = ControlPlane::new(
            ControlPlaneConfig::default(),
            store.clone(),
            events.clone(),
            Arc::new(clock.clone()),
        )
        .await
        .unwrap();
        Rig {
            store,
            events,
            clock,
            cp,
        }
    }

    impl Rig {
        async fn link(&self, code: &str) {
            let link = Link::new_active(
                code.into(),
                "https://example.com/".into(),
                RedirectKind::Found,
                false,
                T0,
                "owner".into(),
                None,
            );
            self.store.insert_link(&link, None).await.unwrap();
        }

        async fn delete(&self, code: &str) -> Result<Link, ApiError> {
            let operator = Principal {
                id: "op".into(),
                role: rebound_store::Role::Operator,
                domains: None,
            };
            self.cp.links.take_down(&operator, code, None, "delete").await
        }

        fn fail_tombstones(&self, fail: bool) {
            self.events.fail_deactivations.store(fail, Ordering::SeqCst);
        }

        fn tombstones(&self) -> Vec<(String, u64)> {
            let written = self.events.deactivated.lock().unwrap();
            written.iter().map(|l| (l.code.clone(), l.version)).collect()
        }

        async fn audit(&self, code: &str) -> Vec<(String, String, String)> {
            let events = self.store.audit_for(code).await.unwrap();
            events.into_iter().map(|e| (e.action, e.outcome, e.actor)).collect()
        }

        async fn pending(&self) -> Vec<Propagation> {
            self.store.pending_propagations(i64::MAX, 1_000).await.unwrap()
        }

        /// What is pending once the API path's own clearing, which runs off the answer's
        /// path, has had its turn (bounded).
        async fn pending_after_the_api(&self) -> Vec<Propagation> {
            for _ in 0..1_000 {
                let pending = self.pending().await;
                if pending.is_empty() {
                    return pending;
                }
                tokio::task::yield_now().await;
            }
            self.pending().await
        }
    }

    #[tokio::test]
    async fn a_delete_whose_tombstone_failed_is_finished_by_the_reconciler() {
        let r = rig().await;
        r.link("gone1").await;
        r.fail_tombstones(true);
        assert!(matches!(r.delete("gone1").await, Err(ApiError::InvalidationFailed)));
        assert!(!r.store.get_link("gone1").await.unwrap().unwrap().is_active);
        let pending = r.pending().await;
        assert_eq!(pending.len(), 1);
        assert_eq!(
            (pending[0].version, pending[0].lease_until),
            (2, T0),
            "given back at once"
        );

        // Redis still down: the attempt fails, and waits a second before the next.
        let reconciler = r.cp.propagations.clone();
        assert_eq!(reconciler.reconcile_once().await, 0);
        assert_eq!(reconciler.metrics.failed.get(), 1);
        assert_eq!(reconciler.metrics.pending.get(), 1);
        r.fail_tombstones(false);
        assert_eq!(reconciler.reconcile_once().await, 0, "not before the retry time");
        r.clock.advance(RETRY_AFTER.as_millis() as i64);
        assert_eq!(reconciler.reconcile_once().await, 1);
        assert_eq!(r.tombstones(), [("gone1".to_owned(), 2)]);
        assert_eq!(r.pending().await, vec![]);
        assert_eq!(reconciler.metrics.finished.get(), 1);
        assert_eq!(
            r.audit("gone1").await,
            [
                ("delete".into(), "invalidate_failed".into(), "op".into()),
                ("propagated".into(), "ok".into(), reconciler.owner().to_owned()),
            ]
        );
        assert_eq!(reconciler.reconcile_once().await, 0, "finished once");
    }

    #[tokio::test]
    async fn an_edit_the_caches_did_not_hear_is_announced_by_the_reconciler() {
        let r = rig().await;
        r.link("moved").await;
        r.fail_tombstones(true);
        let caller = crate::auth::Caller::Key(Principal {
            id: "op".into(),
            role: rebound_store::Role::Operator,
            domains: None,
        });
        let request = rebound_api_types::EditLinkRequest {
            long_url: Some("https://example.org/new".into()),
            ..Default::default()
        };
        assert!(matches!(
            r.cp.links.edit_link(&caller, "moved", 1, request).await,
            Err(ApiError::EditNotPropagated)
        ));
        assert_eq!(r.pending().await.iter().map(|p| p.version).collect::<Vec<_>>(), [2]);
        r.fail_tombstones(false);
        let reconciler = r.cp.propagations.clone();
        assert_eq!(reconciler.reconcile_once().await, 1);
        // The edited record was announced, not a tombstone.
        let announced: Vec<(String, u64, bool)> = r
            .events
            .changed
            .lock()
            .unwrap()
            .iter()
            .map(|l| (l.long_url.clone(), l.version, l.is_active))
            .collect();
        assert_eq!(announced, [("https://example.org/new".to_owned(), 2, true)]);
        assert_eq!(r.tombstones(), []);
        assert_eq!(r.pending().await, vec![]);
        assert_eq!(
            r.audit("moved").await,
            [
                ("edit".into(), "invalidate_failed".into(), "op".into()),
                ("propagated".into(), "ok".into(), reconciler.owner().to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn the_api_path_clears_what_it_propagated() {
        let r = rig().await;
        r.link("gone2").await;
        r.delete("gone2").await.unwrap();
        assert_eq!(r.pending_after_the_api().await, vec![]);
        r.clock.advance(LEASE.as_millis() as i64);
        assert_eq!(r.cp.propagations.reconcile_once().await, 0);
        assert_eq!(r.tombstones(), [("gone2".to_owned(), 2)], "written once, by the API");
        assert_eq!(r.audit("gone2").await, [("delete".into(), "ok".into(), "op".into())]);
    }

    #[tokio::test]
    async fn a_client_retry_finishes_it_too_and_it_is_audited_once() {
        let r = rig().await;
        r.link("gone3").await;
        r.fail_tombstones(true);
        assert!(r.delete("gone3").await.is_err());
        r.fail_tombstones(false);
        let down = r.delete("gone3").await.unwrap();
        assert_eq!(down.version, 2);
        assert_eq!(r.pending_after_the_api().await, vec![]);
        assert_eq!(r.cp.propagations.reconcile_once().await, 0);
        let actions: Vec<String> = r
            .audit("gone3")
            .await
            .into_iter()
            .map(|(a, o, _)| format!("{a} {o}"))
            .collect();
        assert_eq!(actions, ["delete invalidate_failed", "delete already_down"]);
    }

    #[tokio::test]
    async fn a_lease_held_by_a_control_plane_that_died_is_taken_over_when_it_expires() {
        let r = rig().await;
        r.link("gone4").await;
        // Killed between the durable delete and the tombstone: its lease stays.
        let deletion = rebound_core::link::Deletion {
            at: T0,
            by: "op".into(),
            reason: None,
        };
        let dead = PropagationLease {
            owner: "control-plane-dead".into(),
            until: T0 + LEASE.as_millis() as i64,
        };
        r.store
            .deactivate_link_pending("gone4", 1, &deletion, &dead)
            .await
            .unwrap();
        let reconciler = r.cp.propagations.clone();
        assert_eq!(reconciler.reconcile_once().await, 0);
        assert_eq!(r.tombstones(), vec![], "not while another holds it");
        r.clock.advance(LEASE.as_millis() as i64);
        assert_eq!(reconciler.reconcile_once().await, 1);
        assert_eq!(r.tombstones(), [("gone4".to_owned(), 2)]);
        assert_eq!(r.audit("gone4").await.len(), 1);
    }

    #[tokio::test]
    async fn each_look_takes_one_bounded_page() {
        let r = rig().await;
        let deletion = rebound_core::link::Deletion {
            at: T0,
            by: "op".into(),
            reason: None,
        };
        for i in 0..(PAGE + 4) {
            let code = format!("many{i}");
            r.link(&code).await;
            r.store.deactivate_link(&code, 1, &deletion).await.unwrap();
        }
        let reconciler = r.cp.propagations.clone();
        assert_eq!(reconciler.reconcile_once().await, PAGE);
        assert_eq!(reconciler.reconcile_once().await, 4);
        assert_eq!(r.pending().await, vec![]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_reconciler_runs_every_second_and_stops_when_told() {
        let r = rig().await;
        r.link("gone5").await;
        r.fail_tombstones(true);
        assert!(r.delete("gone5").await.is_err());
        r.fail_tombstones(false);
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(r.cp.propagations.clone().run(stop));
        tokio::time::sleep(RECONCILE_EVERY * 2).await;
        assert_eq!(r.tombstones(), [("gone5".to_owned(), 2)]);
        stop_tx.send(true).unwrap();
        task.await.unwrap();
    }
}
