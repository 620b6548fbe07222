//! The stats resource's handler: `GET /api/v1/links/{code}/stats`
//! ([`crate::stats::StatsService`]).

use super::extract::bad_query;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::names::DomainNames;
use crate::stats::StatsService;
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use rebound_api_types::LinkStats;
use rebound_store::Dimension;
use serde::Deserialize;
use std::sync::Arc;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new().route("/api/v1/links/{code}/stats", get(link_stats))
}

/// The query of `GET /api/v1/links/{code}/stats`.
#[derive(Debug, Deserialize)]
pub(super) struct StatsQuery {
    from: Option<String>,
    to: Option<String>,
    domain: Option<String>,
    by: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/links/{code}/stats", tag = "links",
    params(
        ("code" = String, Path, description = "The short code"),
        ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given"),
        ("from" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default 29 days before `to`. Not after `to`, and at most 366 days before it. Given empty, it is not a date: 400"),
        ("to" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default today. Given empty, it is not a date: 400"),
        ("by" = Option<String>, Query, pattern = r"^(country|referrer|device|browser|os|utm_source|utm_medium|utm_campaign)$", description = "Also people's clicks over the range by value of this dimension (`breakdown`)"),
    ),
    responses(
        (status = 200, description = "Daily clicks, every day of the range", body = LinkStats),
        (status = 400, description = "Bad dates, dates (given or defaulted) outside 0000-01-01 to 9999-12-31, a range over 366 days, or an unknown `by`", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 409, description = "`by` on a deployment whose store keeps no breakdowns (`breakdowns_unavailable`)", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn link_stats(
    State(stats): State<Arc<StatsService>>,
    State(names): State<Arc<DomainNames>>,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Json<LinkStats>, ApiError> {
    let principal = caller.principal()?;
    let Query(params) = query.map_err(bad_query)?;
    let by = match params.by.as_deref() {
        None => None,
        Some(name) => Some(Dimension::of_click(name).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_by",
                "by must be one of country, referrer, device, browser, os, utm_source, utm_medium, utm_campaign",
            )
        })?),
    };
    let key = names.key_of(&principal, &code, params.domain.as_deref()).await?;
    Ok(Json(
        stats.daily_clicks(&principal, &key, params.from, params.to, by).await?,
    ))
}
