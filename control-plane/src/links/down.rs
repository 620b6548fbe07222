//! Delete and takedown: the versioned write with the propagation pending, then the
//! tombstone and the invalidation, then the audit event (`settle`, which edits share).

use super::LinkService;
use crate::auth::Principal;
use crate::error::ApiError;
use rebound_core::link::Deletion;
use rebound_core::Link;
use rebound_store::{AuditEvent, EventError, StoreError};

impl LinkService {
    /// Delete and takedown (docs/spec.md §5): conditional update (recording the propagation
    /// pending, leased to this control plane), then the tombstone and the invalidation,
    /// and only then success. Done, the pending record is cleared; failed, its lease is
    /// given back and a reconciler finishes it (`reconcile`). A link already down keeps
    /// its deletion record and gets its tombstone written again.
    pub(crate) async fn take_down(
        &self,
        principal: &Principal,
        code: &str,
        reason: Option<String>,
        action: &'static str,
    ) -> Result<Link, ApiError> {
        let mut link = self.visible_link(principal, code).await?;
        let mut outcome = "already_down";
        for _ in 0..8 {
            if !link.is_active {
                break;
            }
            let deletion = Deletion {
                at: self.clock.now_millis(),
                by: principal.id.clone(),
                reason: reason.clone(),
            };
            let lease = self.propagations.lease_from(deletion.at);
            match self
                .store
                .deactivate_link_pending(code, link.version, &deletion, &lease)
                .await
            {
                Ok(down) => {
                    link = down;
                    outcome = "ok";
                }
                // Someone changed it meanwhile: read again and decide again.
                Err(StoreError::ConditionFailed) => {
                    link = self
                        .store
                        .get_link(code)
                        .await?
                        .ok_or(ApiError::NotFound("no such link"))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if link.is_active {
            return Err(ApiError::Unavailable("the link kept changing; retry".into()));
        }
        let delivered = self.events.deactivated(&link).await;
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: action.to_owned(),
            code: Some(code.to_owned()),
            reason,
            outcome: outcome.to_owned(),
            detail: None,
        };
        if self.settle(&link, delivered, event).await? {
            Ok(link)
        } else {
            Err(ApiError::InvalidationFailed)
        }
    }

    /// After a versioned write that left its propagation pending, and the propagation
    /// (`delivered`): the audit event (its outcome `invalidate_failed` when not delivered),
    /// and the pending record cleared (delivered) or its lease given back (not) for a
    /// reconciler to finish. Whether it was delivered; an error when the audit event could
    /// not be recorded.
    pub(crate) async fn settle(
        &self,
        link: &Link,
        delivered: Result<(), EventError>,
        mut event: AuditEvent,
    ) -> Result<bool, ApiError> {
        let (code, action) = (link.code.as_str(), event.action.clone());
        if delivered.is_err() {
            event.outcome = "invalidate_failed".to_owned();
        }
        // Propagated: the pending record is cleared beside the audit write, off the answer's
        // path (one store write less to wait for, on every delete). Should this process die
        // before it lands, the lease expires and a reconciler runs the propagation again,
        // which changes nothing and audits `propagated`.
        if delivered.is_ok() {
            let (propagations, code, version) = (self.propagations.clone(), code.to_owned(), link.version);
            tokio::spawn(async move { propagations.finished_by_the_api(&code, version).await });
        }
        let audited = self.store.append_audit(&event).await;
        // Not propagated: given back after the audit event, so a reconciler's `propagated`
        // follows `invalidate_failed`.
        if delivered.is_err() {
            self.propagations.give_back(code, link.version).await;
        }
        if let Err(e) = audited {
            tracing::error!(code, action, error = %rebound_core::Causes(&e), "audit event not recorded");
            return Err(e.into());
        }
        if let Err(e) = delivered {
            tracing::warn!(code, action, error = %rebound_core::Causes(&e), "caches not told; a reconciler finishes it");
            return Ok(false);
        }
        Ok(true)
    }
}

/// A takedown's reason, trimmed: 1-1000 characters without control characters.
pub(crate) fn takedown_reason(raw: &str) -> Result<String, ApiError> {
    let reason = raw.trim().to_owned();
    if reason.is_empty() || raw.chars().count() > 1000 || raw.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_reason",
            "reason must be 1-1000 characters without control characters",
        ));
    }
    Ok(reason)
}
