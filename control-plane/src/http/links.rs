//! The links resource's handlers (docs/spec.md §6): create, import, read, list, edit,
//! delete, take down, a link's audit log and its QR code. Each extracts the request, calls
//! the links service ([`crate::links::LinkService`]) and answers; the rules live there.

use super::extract::{bad_query, idempotency_key, if_match, on_domain, with_etag, ApiJson, ImportJson, OnDomain};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::links::{takedown_reason, Creation, LinkService};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rebound_api_types::*;
use rebound_core::time::to_rfc3339;
use rebound_store::IdempotencyRecord;
use serde::Deserialize;
use std::sync::Arc;

type Links = State<Arc<LinkService>>;

const MAX_LIST_LIMIT: usize = 1000;
const DEFAULT_LIST_LIMIT: usize = 100;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/links", post(create_link).get(list_links))
        .route("/api/v1/links/import", post(import_links))
        .route(
            "/api/v1/links/{code}",
            get(get_link).delete(delete_link).patch(edit_link),
        )
        .route("/api/v1/links/{code}/takedown", post(take_down_link))
        .route("/api/v1/links/{code}/qr.svg", get(link_qr))
        .route("/api/v1/links/{code}/audit", get(link_audit))
}

/// The stored first answer of an idempotent create, answered again.
fn replay(record: &IdempotencyRecord) -> Result<Response, ApiError> {
    let status = StatusCode::from_u16(record.status).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut response = (status, record.body.clone()).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[utoipa::path(post, path = "/api/v1/links", tag = "links", request_body = CreateLinkRequest,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = r"^[!-~]+$", description = "1-255 visible ASCII characters; makes a retried create return the first answer")),
    responses(
        (status = 201, description = "Created", body = LinkCreated),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 409, description = "Alias taken, or idempotency key reused with another body", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "Rate limited; see Retry-After", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn create_link(
    State(links): Links,
    caller: Caller,
    headers: HeaderMap,
    body: Result<ApiJson<CreateLinkRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let creator = links.creator(&caller)?;
    let body = body?;
    let idem_key = idempotency_key(&headers)?;
    match links
        .create_link(&caller, creator, idem_key, &body.raw, body.value)
        .await?
    {
        Creation::Created(link) => Ok((StatusCode::CREATED, Json(links.created_view(&link))).into_response()),
        Creation::Replayed(record) => replay(&record),
    }
}

#[utoipa::path(post, path = "/api/v1/links/import", tag = "links", request_body = ImportRequest,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = r"^[!-~]+$", description = "1-255 visible ASCII characters; makes a retried import answer each link it created the first time as it did then, and create only the others (docs/http.md)")),
    responses(
        (status = 200, description = "One outcome per link, in order", body = ImportResults),
        (status = 400, description = "Not 1 to 1,000 links, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 409, description = "Idempotency key used with another import", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "The rate limit covers not one link now (each valid link counts); see Retry-After. When it covers some, those are created and the rest fail `rate_limited`, with `retry_after_secs`", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn import_links(
    State(links): Links,
    caller: Caller,
    headers: HeaderMap,
    body: Result<ImportJson<ImportRequest>, ApiError>,
) -> Result<Json<ImportResults>, ApiError> {
    let creator = links.creator(&caller)?;
    let requests = body?.0.links;
    let idem_key = idempotency_key(&headers)?;
    Ok(Json(links.import_links(&caller, creator, idem_key, requests).await?))
}

#[utoipa::path(get, path = "/api/v1/links/{code}", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "The link", body = LinkView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn get_link(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = caller.principal()?;
    let link = links
        .visible_at(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    Ok(with_etag(&link, Json(links.view(&link))))
}

#[utoipa::path(patch, path = "/api/v1/links/{code}", tag = "links", request_body = EditLinkRequest,
    params(
        ("code" = String, Path, description = "The short code"),
        ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given"),
        ("If-Match" = String, Header, pattern = r#"^"[0-9]{1,20}"$"#, description = "The version the edit changes, as the link's ETag gives it: `\"3\"`"),
    ),
    responses(
        (status = 200, description = "The link as edited (its ETag the new version); no proxy answers with an older version any more", body = LinkView),
        (status = 400, description = "Invalid input, no field given, or a malformed If-Match", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 409, description = "The link is deleted, taken down or expired", body = ErrorBody),
        (status = 412, description = "The link is at another version than If-Match names", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 428, description = "No If-Match", body = ErrorBody),
        (status = 429, description = "Rate limited (edits count as creates); see Retry-After", body = ErrorBody),
        (status = 503, description = "The edit is stored but the caches could not be told; retry the same edit with the same If-Match", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn edit_link(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
    headers: HeaderMap,
    body: Result<ApiJson<EditLinkRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let principal = caller.clone().principal()?;
    let key = links
        .names
        .key_of(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    let version = if_match(&headers)?;
    let link = links.edit_link(&caller, &key, version, body?.value).await?;
    Ok(with_etag(&link, Json(links.view(&link))))
}

/// The query of `GET /api/v1/links`.
#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/links", tag = "links",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "1 to 1000, default 100"),
        ("cursor" = Option<String>, Query, description = "From the previous page's next_cursor"),
    ),
    responses(
        (status = 200, description = "Newest first; deleted links included and flagged", body = LinkList),
        (status = 400, description = "Bad limit or cursor", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn list_links(
    State(links): Links,
    caller: Caller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<LinkList>, ApiError> {
    let principal = caller.principal()?;
    let Query(params) = query.map_err(bad_query)?;
    let limit = match &params.limit {
        None => DEFAULT_LIST_LIMIT,
        // 1*DIGIT: `usize::from_str` would also take a leading `+`.
        Some(l) => Some(l)
            .filter(|l| l.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
            .ok_or_else(|| ApiError::bad_request("invalid_limit", "limit must be a whole number from 1 to 1000"))?,
    };
    let cursor = params.cursor.as_ref().filter(|c| !c.is_empty());
    let owner = (!principal.is_operator()).then_some(principal.id.as_str());
    let page = links.store.list_links(owner, limit, cursor.map(String::as_str)).await?;
    links.names.learn(&page.links).await?;
    Ok(Json(LinkList {
        links: page.links.iter().map(|l| links.view(l)).collect(),
        next_cursor: page.next_cursor,
    }))
}

#[utoipa::path(delete, path = "/api/v1/links/{code}", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 204, description = "Deleted; no proxy redirects it any more"),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 503, description = "The caches could not be told; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn delete_link(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let principal = caller.principal()?;
    let key = links
        .names
        .key_of(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    links.take_down(&principal, &key, None, "delete").await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/links/{code}/takedown", tag = "links", request_body = TakedownRequest,
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "The deletion record", body = LinkView),
        (status = 400, description = "No reason given, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 503, description = "The caches could not be told; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn take_down_link(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
    body: Result<ApiJson<TakedownRequest>, ApiError>,
) -> Result<Json<LinkView>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let key = links
        .names
        .key_of(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    let reason = takedown_reason(&body?.value.reason)?;
    let link = links.take_down(&principal, &key, Some(reason), "takedown").await?;
    Ok(Json(links.view(&link)))
}

#[utoipa::path(get, path = "/api/v1/links/{code}/audit", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "Every delete, takedown and edit of the link, oldest first", body = LinkAudit),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn link_audit(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<Json<LinkAudit>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let link = links
        .visible_at(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    let events = links.store.audit_for(&link.code).await?;
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
/// Side of the drawn code, quiet zone included, at least.
const QR_MIN_PIXELS: u32 = 256;

#[utoipa::path(get, path = "/api/v1/links/{code}/qr.svg", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "The QR code of the short URL", content_type = "image/svg+xml", body = String),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn link_qr(
    State(links): Links,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = caller.principal()?;
    let link = links
        .visible_at(&principal, &code, on_domain(query)?.as_deref())
        .await?;
    let svg = qr_svg(&links.names.short_url(&link))?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        svg,
    )
        .into_response())
}

/// The QR code of `text`, black on white, as an SVG document.
pub(crate) fn qr_svg(text: &str) -> Result<String, ApiError> {
    let code = qrcode::QrCode::new(text.as_bytes()).map_err(|e| ApiError::Internal(format!("QR code: {e}")))?;
    Ok(code
        .render::<qrcode::render::svg::Color>()
        .min_dimensions(QR_MIN_PIXELS, QR_MIN_PIXELS)
        .quiet_zone(true)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_is_a_square_document_of_the_requested_size() {
        let svg = qr_svg("https://sho.rt/abc").unwrap();
        assert!(svg.starts_with("<?xml"), "{svg}");
        assert!(svg.contains("<svg"));
        let width: u32 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert!(width >= QR_MIN_PIXELS);
        assert_ne!(qr_svg("https://sho.rt/abd").unwrap(), svg, "the text is encoded");
    }
}
