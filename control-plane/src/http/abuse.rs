//! The abuse resource's handlers: threat lists, reinstatements and abuse reports
//! ([`crate::threats::AbuseService`]).

use super::extract::{on_domain, ApiJson, OnDomain};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::links::LinkService;
use crate::names::DomainNames;
use crate::threats::AbuseService;
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rebound_api_types::{LinkView, ReportList, ReportRequest, ThreatListsView};
use std::sync::Arc;

type Abuse = State<Arc<AbuseService>>;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/links/{code}/reinstate", post(restore_link))
        .route("/api/v1/abuse-reports", post(report).get(reports))
        .route("/api/v1/threat-lists", get(threat_lists))
}

#[utoipa::path(get, path = "/api/v1/threat-lists", tag = "abuse",
    responses(
        (status = 200, description = "Every configured threat list with its entries in force and its last load, and the last rescan", body = ThreatListsView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn threat_lists(State(abuse): Abuse, caller: Caller) -> Result<Json<ThreatListsView>, ApiError> {
    caller.principal()?.require_operator()?;
    Ok(Json(abuse.lists_view()))
}

#[utoipa::path(post, path = "/api/v1/links/{code}/reinstate", tag = "abuse",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "Active again at its next version; the threat lists never take it down again", body = LinkView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 400, description = "Its target is on a domain the fleet has served since (a loop)", body = ErrorBody),
        (status = 409, description = "Not a link a threat list took down (deletes and other takedowns are final)", body = ErrorBody),
        (status = 503, description = "Restored, but the caches could not be told; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn restore_link(
    State(abuse): Abuse,
    State(names): State<Arc<DomainNames>>,
    State(links): State<Arc<LinkService>>,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<Json<LinkView>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let key = names.key_of(&principal, &code, on_domain(query)?.as_deref()).await?;
    let link = abuse.restore(&principal, &key).await?;
    Ok(Json(links.view(&link)))
}

#[utoipa::path(post, path = "/api/v1/abuse-reports", tag = "abuse", request_body = ReportRequest,
    responses(
        (status = 202, description = "Recorded for the operators"),
        (status = 400, description = "Not a short link of this service, or a bad reason", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "Too many reports from this network or key; see Retry-After", body = ErrorBody),
    ))]
pub(super) async fn report(
    State(abuse): Abuse,
    caller: Caller,
    body: Result<ApiJson<ReportRequest>, ApiError>,
) -> Result<StatusCode, ApiError> {
    abuse.report(&caller, body?.value).await?;
    Ok(StatusCode::ACCEPTED)
}

#[utoipa::path(get, path = "/api/v1/abuse-reports", tag = "abuse",
    responses(
        (status = 200, description = "The newest 500 reports, newest first", body = ReportList),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn reports(State(abuse): Abuse, caller: Caller) -> Result<Json<ReportList>, ApiError> {
    caller.principal()?.require_operator()?;
    Ok(Json(ReportList {
        reports: abuse.reports().await?,
    }))
}
