//! The handlers of docs/spec.md §6 and the OpenAPI document generated from them and from their
//! request and response types (`rebound_api_types`, shared with the CLI). A handler
//! extracts the request, calls the links service (`links`) and answers; the rules live
//! there.

use crate::auth::{generate_key, generate_key_id, hash_key, Caller};
use crate::body::{one_header, ApiJson, ImportJson};
use crate::error::{ApiError, ErrorBody};
use crate::links::{takedown_reason, Creation};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderValue;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use rebound_api_types::*;
use rebound_core::code::RESERVED_WORDS;
use rebound_core::domain::{normalize_domain, split_key};
use rebound_core::time::to_rfc3339;
use rebound_core::Link;
use rebound_store::{ApiKeyRecord, IdempotencyRecord, Role, StoreError};
use serde::Deserialize;
use std::sync::Arc;
use utoipa::OpenApi;

type Cp = State<Arc<ControlPlane>>;

const MAX_LIST_LIMIT: usize = 1000;
const DEFAULT_LIST_LIMIT: usize = 100;

pub(crate) fn routes() -> Router<Arc<ControlPlane>> {
    Router::new()
        .route("/api/v1/links", post(create_link).get(list_links))
        .route("/api/v1/links/import", post(import_links))
        .route(
            "/api/v1/links/{code}",
            get(get_link).delete(delete_link).patch(edit_link),
        )
        .route("/api/v1/links/{code}/takedown", post(take_down_link))
        .route("/api/v1/links/{code}/reinstate", post(crate::threats::restore_link))
        .route(
            "/api/v1/abuse-reports",
            post(crate::threats::report).get(crate::threats::reports),
        )
        .route("/api/v1/threat-lists", get(crate::threats::threat_lists))
        .route("/api/v1/links/{code}/stats", get(link_stats))
        .route("/api/v1/links/{code}/qr.svg", get(crate::qr::link_qr))
        .route("/api/v1/links/{code}/audit", get(crate::audit::link_audit))
        .route("/api/v1/me", get(crate::me::whoami))
        .route(
            "/api/v1/domains",
            post(crate::domains::create_domain).get(crate::domains::list_domains),
        )
        .route(
            "/api/v1/domains/{name}",
            get(crate::domains::get_domain).delete(crate::domains::delete_domain),
        )
        .route("/api/v1/keys", post(create_key))
        .route("/api/v1/keys/{id}", delete(revoke_key))
        .route("/api/v1/openapi.json", get(openapi))
        .fallback(|| async { ApiError::NotFound("no such endpoint") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed("method not allowed on this endpoint") })
}

impl ControlPlane {
    /// The short URL of `link`: on its domain, with the public base URL's scheme.
    pub(crate) fn short_url(&self, link: &Link) -> String {
        let (code, id) = split_key(&link.code);
        match id {
            None => self.config.short_url(code),
            Some(_) => {
                let scheme = self
                    .config
                    .public_base_url
                    .split_once("://")
                    .map_or("https", |(s, _)| s);
                format!("{scheme}://{}/{code}", self.domains.of_link(link))
            }
        }
    }

    pub(crate) fn view(&self, link: &Link) -> LinkView {
        LinkView {
            code: split_key(&link.code).0.to_owned(),
            domain: self.domains.of_link(link),
            short_url: self.short_url(link),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
            password_protected: link.password_hash.is_some(),
            expires_at: link.expires_at.map(to_rfc3339),
            created_at: to_rfc3339(link.created_at),
            created_by: link.created_by.clone(),
            is_active: link.is_active,
            version: link.version,
            deleted_at: link.deleted_at.map(to_rfc3339),
            deleted_by: link.deleted_by.clone(),
            delete_reason: link.delete_reason.clone(),
        }
    }

    pub(crate) fn created_view(&self, link: &Link) -> LinkCreated {
        LinkCreated {
            code: split_key(&link.code).0.to_owned(),
            domain: self.domains.of_link(link),
            short_url: self.short_url(link),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
            expires_at: link.expires_at.map(to_rfc3339),
            created_at: to_rfc3339(link.created_at),
            version: link.version,
            password_protected: link.password_hash.is_some(),
        }
    }
}

/// The `Idempotency-Key` of a create or an import: at most one, 1-255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let name = axum::http::HeaderName::from_static("idempotency-key");
    let Some(value) = one_header(headers, &name, "invalid_idempotency_key")? else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(k.to_owned())),
        _ => Err(ApiError::bad_request(
            "invalid_idempotency_key",
            "Idempotency-Key must be 1-255 visible ASCII characters",
        )),
    }
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
async fn create_link(
    State(cp): Cp,
    caller: Caller,
    headers: HeaderMap,
    body: Result<ApiJson<CreateLinkRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let creator = cp.creator(&caller)?;
    let body = body?;
    let idem_key = idempotency_key(&headers)?;
    match cp
        .create_link(&caller, creator, idem_key, &body.raw, body.value)
        .await?
    {
        Creation::Created(link) => Ok((StatusCode::CREATED, Json(cp.created_view(&link))).into_response()),
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
async fn import_links(
    State(cp): Cp,
    caller: Caller,
    headers: HeaderMap,
    body: Result<ImportJson<ImportRequest>, ApiError>,
) -> Result<Json<ImportResults>, ApiError> {
    let creator = cp.creator(&caller)?;
    let links = body?.0.links;
    let idem_key = idempotency_key(&headers)?;
    Ok(Json(cp.import_links(&caller, creator, idem_key, links).await?))
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
async fn get_link(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = caller.principal()?;
    let key = cp.key_of(&principal, &code, on_domain(query)?.as_deref()).await?;
    let link = cp.visible_link(&principal, &key).await?;
    Ok(with_etag(&link, Json(cp.view(&link))))
}

/// `response` with the link's version as its strong entity tag: what an edit's `If-Match`
/// names.
fn with_etag(link: &Link, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{}\"", link.version)) {
        response.headers_mut().insert(axum::http::header::ETAG, tag);
    }
    response
}

/// The version an edit's `If-Match` names: one strong entity tag `"<version>"`; 428 when
/// there is none, 400 when it is not one (a list, a weak tag, `*`).
fn if_match(headers: &HeaderMap) -> Result<u64, ApiError> {
    let Some(value) = one_header(headers, &axum::http::header::IF_MATCH, "invalid_if_match")? else {
        return Err(ApiError::PreconditionRequired);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().strip_prefix('"')?.strip_suffix('"'))
        .filter(|v| !v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_if_match",
                "If-Match must be one entity tag \"<version>\", as the link's ETag gives it",
            )
        })
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
async fn edit_link(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
    headers: HeaderMap,
    body: Result<ApiJson<EditLinkRequest>, ApiError>,
) -> Result<Response, ApiError> {
    let principal = caller.clone().principal()?;
    let key = cp.key_of(&principal, &code, on_domain(query)?.as_deref()).await?;
    let version = if_match(&headers)?;
    let link = cp.edit_link(&caller, &key, version, body?.value).await?;
    Ok(with_etag(&link, Json(cp.view(&link))))
}

/// The query of a call on one link: the domain it is on (the default one when not given).
#[derive(Debug, Deserialize)]
pub(crate) struct OnDomain {
    domain: Option<String>,
}

/// The domain of a call on one link, as [`OnDomain`] reads it.
pub(crate) fn on_domain(query: Result<Query<OnDomain>, QueryRejection>) -> Result<Option<String>, ApiError> {
    Ok(query.map_err(bad_query)?.0.domain)
}

/// Query parameters as pairs, last value wins.
/// The query of `GET /api/v1/links`.
#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
}

/// The query of `GET /api/v1/links/{code}/stats`.
#[derive(Debug, Deserialize)]
struct StatsQuery {
    from: Option<String>,
    to: Option<String>,
    domain: Option<String>,
}

/// A query string axum could not read into the handler's query type (a key given twice,
/// say): a 400 that says why.
fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", e.body_text())
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
async fn list_links(
    State(cp): Cp,
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
    let page = cp.store.list_links(owner, limit, cursor.map(String::as_str)).await?;
    cp.domains.learn(cp.store.as_ref(), &page.links).await?;
    Ok(Json(LinkList {
        links: page.links.iter().map(|l| cp.view(l)).collect(),
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
async fn delete_link(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let principal = caller.principal()?;
    let key = cp.key_of(&principal, &code, on_domain(query)?.as_deref()).await?;
    cp.take_down(&principal, &key, None, "delete").await?;
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
async fn take_down_link(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<OnDomain>, QueryRejection>,
    body: Result<ApiJson<TakedownRequest>, ApiError>,
) -> Result<Json<LinkView>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let key = cp.key_of(&principal, &code, on_domain(query)?.as_deref()).await?;
    let reason = takedown_reason(&body?.value.reason)?;
    let link = cp.take_down(&principal, &key, Some(reason), "takedown").await?;
    Ok(Json(cp.view(&link)))
}

#[utoipa::path(get, path = "/api/v1/links/{code}/stats", tag = "links",
    params(
        ("code" = String, Path, description = "The short code"),
        ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given"),
        ("from" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default 29 days before `to`. Not after `to`, and at most 366 days before it. Given empty, it is not a date: 400"),
        ("to" = Option<String>, Query, format = Date, pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", description = "YYYY-MM-DD (UTC), 0000-01-01 to 9999-12-31; default today. Given empty, it is not a date: 400"),
    ),
    responses(
        (status = 200, description = "Daily clicks, every day of the range", body = LinkStats),
        (status = 400, description = "Bad dates, dates (given or defaulted) outside 0000-01-01 to 9999-12-31, or a range over 366 days", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn link_stats(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Json<LinkStats>, ApiError> {
    let principal = caller.principal()?;
    let Query(params) = query.map_err(bad_query)?;
    let key = cp.key_of(&principal, &code, params.domain.as_deref()).await?;
    Ok(Json(cp.daily_clicks(&principal, &key, params.from, params.to).await?))
}

#[utoipa::path(post, path = "/api/v1/keys", tag = "keys", request_body = CreateKeyRequest,
    responses(
        (status = 201, description = "The key, shown this once", body = KeyCreated),
        (status = 400, description = "Bad name or role, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn create_key(
    State(cp): Cp,
    caller: Caller,
    body: Result<ApiJson<CreateKeyRequest>, ApiError>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let req = body?.value;
    let name = req.name.trim().to_owned();
    if name.is_empty() || req.name.chars().count() > 100 || req.name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_name",
            "name must be 1-100 characters without control characters",
        ));
    }
    let role = Role::parse(&req.role)
        .ok_or_else(|| ApiError::bad_request("invalid_role", "role must be creator or operator"))?;
    let domains = match req.domains {
        None => None,
        Some(_) if role == Role::Operator => {
            return Err(ApiError::bad_request(
                "invalid_domains",
                "an operator key is never scoped to domains",
            ))
        }
        Some(names) if names.is_empty() || names.len() > 100 => {
            return Err(ApiError::bad_request(
                "invalid_domains",
                "domains must list 1 to 100 domains",
            ))
        }
        Some(names) => {
            let mut scope: Vec<String> = Vec::with_capacity(names.len());
            for name in &names {
                let d = cp.domains.resolve(cp.store.as_ref(), name).await.map_err(|e| match e {
                    ApiError::BadRequest { .. } => ApiError::bad_request(
                        "invalid_domains",
                        format!(
                            "{:?} is not a domain of this service",
                            normalize_domain(name).unwrap_or(name.clone())
                        ),
                    ),
                    other => other,
                })?;
                if !scope.contains(&d.name) {
                    scope.push(d.name);
                }
            }
            Some(scope)
        }
    };
    let key = generate_key();
    let record = ApiKeyRecord {
        id: generate_key_id(),
        name,
        role,
        key_hash: hash_key(&key),
        created_at: cp.clock.now_millis(),
        revoked_at: None,
        domains,
    };
    cp.store.insert_key(&record).await?;
    tracing::info!(id = %record.id, role = role.as_str(), by = %principal.id, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(KeyCreated {
            id: record.id,
            name: record.name,
            role: role.as_str().to_owned(),
            domains: record.domains,
            key,
        }),
    ))
}

#[utoipa::path(delete, path = "/api/v1/keys/{id}", tag = "keys",
    params(("id" = String, Path, description = "The key id")),
    responses(
        (status = 204, description = "Revoked; it stops working at once"),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn revoke_key(State(cp): Cp, caller: Caller, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    match cp.store.revoke_key(&id, cp.clock.now_millis()).await {
        Ok(_) => {
            tracing::info!(%id, by = %principal.id, "API key revoked");
            Ok(StatusCode::NO_CONTENT)
        }
        Err(StoreError::NotFound) => Err(ApiError::NotFound("no such key")),
        Err(e) => Err(e.into()),
    }
}

#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document")))]
async fn openapi() -> Response {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

struct BearerAuth;

/// What every call with a key can also answer: a second `Authorization` header (400), a
/// store outage (503, retry) and a bug (500).
struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, ResponseBuilder};
        let common = [
            (
                "400",
                "More than one Authorization, Idempotency-Key, Content-Type or Content-Length header",
            ),
            ("500", "Internal error (logged)"),
            ("503", "The store is unavailable; retry"),
        ];
        for item in doc.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post, &mut item.patch, &mut item.delete]
                .into_iter()
                .flatten()
            {
                if op.security.is_none() {
                    continue;
                }
                for (status, description) in common {
                    op.responses.responses.entry(status.to_owned()).or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(description)
                            .content(
                                "application/json",
                                utoipa::openapi::Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                            )
                            .build()
                            .into()
                    });
                }
            }
        }
    }
}

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Rebound control plane", description = "Create, inspect, delete and take down short links on the service's domains; manage domains and API keys; read click statistics."),
    paths(create_link, import_links, get_link, edit_link, list_links, delete_link, take_down_link, link_stats, create_key, revoke_key, openapi,
        crate::qr::link_qr, crate::audit::link_audit, crate::me::whoami,
        crate::domains::create_domain, crate::domains::list_domains, crate::domains::get_domain, crate::domains::delete_domain,
        crate::threats::restore_link, crate::threats::report, crate::threats::reports, crate::threats::threat_lists),
    components(schemas(CreateLinkRequest, EditLinkRequest, ImportRequest, ImportResults, ImportOutcome, LinkCreated, LinkView, LinkList, TakedownRequest, LinkStats, DayClicks, CreateKeyRequest, KeyCreated, ErrorBody,
        LinkAudit, AuditEntry, Me, CreateDomainRequest, DomainView, DomainList, DomainRemoved,
        ReportRequest, ReportView, ReportList, ThreatListView, ThreatListsView)),
    modifiers(&BearerAuth, &CommonResponses)
)]
struct ApiDoc;

/// The OpenAPI 3 document of the API, as JSON: utoipa's, with the rules its attributes
/// cannot write added where they belong: those that tie two fields of a body together
/// ([`cross_field_rules`]) and a custom alias's reserved words ([`not_reserved`]).
pub fn openapi_json() -> String {
    let Ok(mut doc) = serde_json::to_value(ApiDoc::openapi()) else {
        return "{}".to_owned();
    };
    let rules = cross_field_rules()
        .into_iter()
        .map(|(name, rule)| (format!("/components/schemas/{name}"), rule))
        .chain([(
            "/components/schemas/CreateLinkRequest/properties/custom_alias".to_owned(),
            not_reserved(),
        )]);
    for (at, rule) in rules {
        let schema = doc.pointer_mut(&at).and_then(serde_json::Value::as_object_mut);
        if let (Some(schema), serde_json::Value::Object(keywords)) = (schema, rule) {
            schema.extend(keywords);
        }
    }
    doc.to_string()
}

/// A custom alias is none of [`RESERVED_WORDS`], in any case: `{"not": {"type": "string",
/// "pattern": "^([Aa][Pp][Ii]|…)$"}}` (a null alias is no word).
fn not_reserved() -> serde_json::Value {
    let any_case = |word: &str| -> String {
        word.chars()
            .map(|c| match c.is_ascii_alphabetic() {
                true => format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase()),
                false => c.to_string(),
            })
            .collect()
    };
    let words: Vec<String> = RESERVED_WORDS.iter().map(|w| any_case(w)).collect();
    serde_json::json!({ "not": { "type": "string", "pattern": format!("^({})$", words.join("|")) } })
}
