//! The stats resource's handlers: `GET /api/v1/links/{code}/stats` and the operators'
//! summary, `GET /api/v1/stats` ([`crate::stats::StatsService`]).

use super::extract::bad_query;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::names::DomainNames;
use crate::stats::{StatsService, DEFAULT_TOP, MAX_TOP};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use rebound_api_types::{LinkStats, StatsSummary};
use rebound_store::Dimension;
use serde::Deserialize;
use std::sync::Arc;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/links/{code}/stats", get(link_stats))
        .route("/api/v1/stats", get(stats_summary))
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
        ("by" = Option<String>, Query, pattern = r"^(country|referrer|device|browser|os|utm_source|utm_medium|utm_campaign|rule)$", description = "Also people's clicks over the range by value of this dimension (`breakdown`)"),
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
                "by must be one of country, referrer, device, browser, os, utm_source, utm_medium, utm_campaign, rule",
            )
        })?),
    };
    let key = names.key_of(&principal, &code, params.domain.as_deref()).await?;
    Ok(Json(
        stats.daily_clicks(&principal, &key, params.from, params.to, by).await?,
    ))
}

/// The query of `GET /api/v1/stats`.
#[derive(Debug, Deserialize)]
pub(super) struct SummaryQuery {
    from: Option<String>,
    to: Option<String>,
    domain: Option<String>,
    top: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/stats", tag = "stats",
    params(
        ("domain" = Option<String>, Query, description = "Summarise this domain's links; without it, every domain's the key may use"),
        ("from" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default 29 days before `to`. Not after `to`, and at most 366 days before it. Given empty, it is not a date: 400"),
        ("to" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default today. Given empty, it is not a date: 400"),
        ("top" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Entries of each top list, 1 to 1000; default 10"),
    ),
    responses(
        (status = 200, description = "Daily clicks, every day of the range, and the most clicked links, countries and referrers", body = StatsSummary),
        (status = 400, description = "Bad dates, dates (given or defaulted) outside 0000-01-01 to 9999-12-31, a range over 366 days, or a `top` that is not 1 to 1000", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator, or a key not scoped to that domain", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
        (status = 409, description = "A deployment whose store keeps no breakdowns (`breakdowns_unavailable`)", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn stats_summary(
    State(stats): State<Arc<StatsService>>,
    caller: Caller,
    query: Result<Query<SummaryQuery>, QueryRejection>,
) -> Result<Json<StatsSummary>, ApiError> {
    let principal = caller.principal()?;
    let Query(params) = query.map_err(bad_query)?;
    let top = match params.top.as_deref() {
        None => DEFAULT_TOP,
        Some(top) => top
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_TOP).contains(n))
            .ok_or_else(|| ApiError::bad_request("invalid_query", "top must be a number from 1 to 1000"))?,
    };
    Ok(Json(
        stats
            .summary(&principal, params.domain.as_deref(), params.from, params.to, top)
            .await?,
    ))
}
