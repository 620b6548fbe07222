//! Reading the audit log: `GET /api/v1/links/{code}/audit` (operators), every delete,
//! takedown and edit of a link with actor, reason, time and outcome (an edit's with the
//! old and the new values).

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::ControlPlane;
use axum::extract::{Path, State};
use axum::Json;
use rebound_api_types::{AuditEntry, LinkAudit};
use rebound_core::time::to_rfc3339;
use std::sync::Arc;

#[utoipa::path(get, path = "/api/v1/links/{code}/audit", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "Every delete, takedown and edit of the link, oldest first", body = LinkAudit),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn link_audit(
    State(cp): State<Arc<ControlPlane>>,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<axum::extract::Query<crate::api::OnDomain>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<LinkAudit>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let key = cp
        .key_of(&principal, &code, crate::api::on_domain(query)?.as_deref())
        .await?;
    let link = cp.visible_link(&principal, &key).await?;
    let events = cp.store.audit_for(&link.code).await?;
    Ok(Json(LinkAudit {
        code: rebound_core::domain::split_key(&link.code).0.to_owned(),
        events: events
            .into_iter()
            .map(|e| AuditEntry {
                at: to_rfc3339(e.at),
                actor: e.actor,
                action: e.action,
                reason: e.reason,
                outcome: e.outcome,
                old: detail(e.detail.as_deref(), "old"),
                new: detail(e.detail.as_deref(), "new"),
            })
            .collect(),
    }))
}

/// `part` (`old` or `new`) of an audit event's detail, if it has one.
fn detail(detail: Option<&str>, part: &str) -> Option<serde_json::Value> {
    let mut value: serde_json::Value = serde_json::from_str(detail?).ok()?;
    Some(value.get_mut(part)?.take())
}
