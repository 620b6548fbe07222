//! The handlers of SPEC §6 and the OpenAPI document generated from them and from their
//! request and response types (`rebound_api_types`, shared with the CLI).

use crate::auth::{generate_key, generate_key_id, hash_key, Caller, Principal};
use crate::body::{ApiJson, ImportJson};
use crate::error::{ApiError, ErrorBody};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use rebound_api_types::*;
use rebound_core::code::{check_alias, check_code, CodeError};
use rebound_core::link::Deletion;
use rebound_core::time::{parse_rfc3339, to_rfc3339};
use rebound_core::{Day, Link, RedirectKind};
use rebound_store::{ApiKeyRecord, AuditEvent, IdempotencyRecord, Role, StoreError};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use utoipa::OpenApi;

type Cp = State<Arc<ControlPlane>>;

const MAX_TTL_SECONDS: i64 = 10 * 365 * 86_400;
const MAX_STATS_DAYS: i32 = 366;
const DEFAULT_STATS_DAYS: i32 = 30;
const MAX_LIST_LIMIT: usize = 1000;
const DEFAULT_LIST_LIMIT: usize = 100;
/// Attempts at a generated code before giving up (a taken one is skipped).
const GENERATED_CODE_ATTEMPTS: usize = 16;

pub(crate) fn routes() -> Router<Arc<ControlPlane>> {
    Router::new()
        .route("/api/v1/links", post(create_link).get(list_links))
        .route("/api/v1/links/import", post(import_links))
        .route("/api/v1/links/{code}", get(get_link).delete(delete_link))
        .route("/api/v1/links/{code}/takedown", post(take_down_link))
        .route("/api/v1/links/{code}/stats", get(link_stats))
        .route("/api/v1/links/{code}/qr.svg", get(crate::qr::link_qr))
        .route("/api/v1/links/{code}/audit", get(crate::audit::link_audit))
        .route("/api/v1/me", get(crate::me::whoami))
        .route("/api/v1/keys", post(create_key))
        .route("/api/v1/keys/{id}", delete(revoke_key))
        .route("/api/v1/openapi.json", get(openapi))
        .fallback(|| async { ApiError::NotFound("no such endpoint") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed("method not allowed on this endpoint") })
}

impl ControlPlane {
    /// Who a created link belongs to, and the scope of its idempotency keys.
    fn creator(&self, caller: &Caller) -> Result<(String, String), ApiError> {
        match caller {
            Caller::Key(p) => Ok((p.id.clone(), p.id.clone())),
            Caller::Anonymous { ip } if self.settings.api.anonymous_create => {
                Ok(("anonymous".to_owned(), format!("anonymous:{ip}")))
            }
            Caller::Anonymous { .. } => Err(caller.clone().principal().unwrap_err()),
        }
    }

    /// The caller's rate-limit bucket, its rate and its burst; `None` for operators (exempt).
    fn bucket(&self, caller: &Caller) -> Option<(String, f64, u32)> {
        let api = &self.settings.api;
        match caller {
            Caller::Key(p) if p.role == Role::Operator => None,
            Caller::Key(p) => Some((p.id.clone(), api.creator_rate_per_sec, api.creator_burst)),
            Caller::Anonymous { ip } => Some((
                crate::ratelimit::anonymous_bucket(*ip),
                api.anonymous_rate_per_sec,
                api.anonymous_burst,
            )),
        }
    }

    /// Takes one creation from the caller's rate limit.
    fn charge(&self, caller: &Caller, now: i64) -> Result<(), ApiError> {
        let Some((who, rate, burst)) = self.bucket(caller) else {
            return Ok(());
        };
        self.limiter
            .take(&who, rate, burst, now)
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })
    }

    /// Takes up to `n` creations (a bulk import): how many the rate limit covers now, and,
    /// when it covers fewer than `n`, the seconds until it covers the rest (or a full
    /// bucket, when the rest is more than the burst). 429 when it covers none.
    fn charge_up_to(&self, caller: &Caller, n: usize, now: i64) -> Result<(usize, Option<u64>), ApiError> {
        let Some((who, rate, burst)) = self.bucket(caller) else {
            return Ok((n, None));
        };
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let taken = self
            .limiter
            .take_up_to(&who, n, rate, burst, now)
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })?;
        let rest = n - taken;
        let retry = (rest > 0).then(|| self.limiter.wait_for(&who, rest, rate, burst, now));
        Ok((taken as usize, retry))
    }

    /// A generated code from the KGS.
    async fn next_code(&self) -> Result<String, ApiError> {
        self.codes.next_code().await.map_err(|e| match e {
            StoreError::Exhausted => ApiError::Internal("the code space is exhausted".into()),
            other => other.into(),
        })
    }

    fn view(&self, link: &Link) -> LinkView {
        LinkView {
            code: link.code.clone(),
            short_url: self.settings.short_url(&link.code),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
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

    fn created_view(&self, link: &Link) -> LinkCreated {
        LinkCreated {
            code: link.code.clone(),
            short_url: self.settings.short_url(&link.code),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
            expires_at: link.expires_at.map(to_rfc3339),
            created_at: to_rfc3339(link.created_at),
            version: link.version,
        }
    }

    /// Reads a link the caller may see; a malformed code is simply not found.
    pub(crate) async fn visible_link(&self, principal: &Principal, code: &str) -> Result<Link, ApiError> {
        if check_code(code).is_err() {
            return Err(ApiError::NotFound("no such link"));
        }
        let link = self
            .store
            .get_link(code)
            .await?
            .ok_or(ApiError::NotFound("no such link"))?;
        principal.require_owner(&link.created_by)?;
        Ok(link)
    }
}

fn code_error(field: &str, e: CodeError) -> ApiError {
    match e {
        CodeError::Reserved => ApiError::bad_request("reserved_alias", format!("{field} is a reserved word")),
        other => ApiError::bad_request("invalid_alias", format!("{field} {other}")),
    }
}

/// The validated parts of a create request.
struct NewLink {
    long_url: String,
    alias: Option<String>,
    expires_at: Option<i64>,
    redirect: RedirectKind,
    forward_query: bool,
}

fn validate_create(cp: &ControlPlane, caller: &Caller, req: CreateLinkRequest, now: i64) -> Result<NewLink, ApiError> {
    let targets = match caller {
        Caller::Key(_) => &cp.targets,
        Caller::Anonymous { .. } => &cp.anonymous_targets,
    };
    let long_url = targets
        .validate(&req.long_url)
        .map_err(|e| ApiError::bad_request("invalid_url", e.to_string()))?;
    if let Some(alias) = &req.custom_alias {
        check_alias(alias).map_err(|e| code_error("custom_alias", e))?;
    }
    let expires_at = match (req.expires_at, req.ttl_seconds) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_expiry",
                "give expires_at or ttl_seconds, not both",
            ));
        }
        (Some(at), None) => {
            let at = parse_rfc3339(&at)
                .ok_or_else(|| ApiError::bad_request("invalid_expiry", "expires_at must be an RFC 3339 time"))?;
            if at <= now {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "expires_at must be in the future",
                ));
            }
            if at > now + MAX_TTL_SECONDS * 1000 {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "expires_at must be at most 10 years ahead",
                ));
            }
            Some(at)
        }
        (None, Some(ttl)) => {
            if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "ttl_seconds must be between 1 and 315360000 (10 years)",
                ));
            }
            Some(now + ttl * 1000)
        }
        (None, None) => None,
    };
    let redirect = match req.redirect {
        None => RedirectKind::default(),
        Some(s) => RedirectKind::from_status(s)
            .ok_or_else(|| ApiError::bad_request("invalid_redirect", "redirect must be 301, 302, 307 or 308"))?,
    };
    Ok(NewLink {
        long_url,
        alias: req.custom_alias,
        expires_at,
        redirect,
        forward_query: req.forward_query.unwrap_or(false),
    })
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
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

/// Hash of the request body as JSON (insensitive to spacing and key order).
fn request_hash(raw: &[u8]) -> String {
    let canonical = serde_json::from_slice::<serde_json::Value>(raw)
        .map(|v| v.to_string())
        .unwrap_or_default();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn replay(record: &IdempotencyRecord, hash: &str) -> Result<Response, ApiError> {
    if record.request_hash != hash {
        return Err(ApiError::Conflict {
            code: "idempotency_key_reused",
            message: "this Idempotency-Key was used with another request body",
        });
    }
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
    let now = cp.clock.now_millis();
    let (owner, scope) = cp.creator(&caller)?;
    let body = body?;
    let idem_key = idempotency_key(&headers)?;
    let hash = request_hash(&body.raw);
    if let Some(key) = &idem_key {
        if let Some(record) = cp.store.get_idempotency(&scope, key, now).await? {
            // A replay creates nothing, so it costs nothing: a retry is never refused 429.
            return replay(&record, &hash);
        }
    }
    let new = validate_create(&cp, &caller, body.value, now)?;
    cp.charge(&caller, now)?;
    let api = &cp.settings.api;
    let mut attempts = 0;
    let link = loop {
        attempts += 1;
        let code = match &new.alias {
            // Indexed before it exists, so a proxy never takes an alias for a code never issued.
            Some(alias) => cp.store.record_alias(alias).await.map(|()| alias.clone())?,
            None => cp.next_code().await?,
        };
        let link = Link::new_active(
            code,
            new.long_url.clone(),
            new.redirect,
            new.forward_query,
            now,
            owner.clone(),
            new.expires_at,
        );
        let record = idem_key.as_ref().map(|key| IdempotencyRecord {
            scope: scope.clone(),
            key: key.clone(),
            request_hash: hash.clone(),
            status: 201,
            body: serde_json::to_string(&cp.created_view(&link)).unwrap_or_default(),
            created_at: now,
            expires_at: now + (api.idempotency_ttl_secs as i64) * 1000,
        });
        match cp.store.insert_link(&link, record.as_ref()).await {
            Ok(()) => break link,
            Err(StoreError::AlreadyExists) if new.alias.is_some() => {
                return Err(ApiError::Conflict {
                    code: "alias_taken",
                    message: "this alias is already taken",
                });
            }
            // A generated code an alias took earlier: skip it.
            Err(StoreError::AlreadyExists) if attempts < GENERATED_CODE_ATTEMPTS => continue,
            Err(StoreError::IdempotencyKeyExists) => {
                // A concurrent request with the same key won; answer as it did.
                let key = idem_key.as_deref().unwrap_or_default();
                let record = cp
                    .store
                    .get_idempotency(&scope, key, now)
                    .await?
                    .ok_or_else(|| ApiError::Internal("idempotency record vanished".into()))?;
                return replay(&record, &hash);
            }
            Err(e) => return Err(e.into()),
        }
    };
    if let Err(e) = cp.events.created(&link).await {
        // The link is stored; proxies that missed the announcement bypass their filter.
        tracing::warn!(code = %link.code, error = %e, "creation not announced");
    }
    Ok((StatusCode::CREATED, Json(cp.created_view(&link))).into_response())
}

#[utoipa::path(post, path = "/api/v1/links/import", tag = "links", request_body = ImportRequest,
    responses(
        (status = 200, description = "One outcome per link, in order", body = ImportResults),
        (status = 400, description = "Not 1 to 1,000 links, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "The rate limit covers not one link now (each valid link counts); see Retry-After. When it covers some, those are created and the rest fail `rate_limited`, with `retry_after_secs`", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn import_links(
    State(cp): Cp,
    caller: Caller,
    body: Result<ImportJson<ImportRequest>, ApiError>,
) -> Result<Json<ImportResults>, ApiError> {
    let now = cp.clock.now_millis();
    let (owner, _) = cp.creator(&caller)?;
    let requests = body?.0.links;
    if requests.is_empty() || requests.len() > MAX_IMPORT {
        return Err(ApiError::bad_request(
            "invalid_import",
            "an import holds 1 to 1000 links",
        ));
    }
    let fail = |e: ApiError| {
        let (_, code) = e.status_and_code();
        ImportOutcome::Failed {
            error: ErrorDetail {
                code: code.to_owned(),
                message: e.to_string(),
            },
        }
    };
    let mut outcomes: Vec<Option<ImportOutcome>> = Vec::with_capacity(requests.len());
    let mut valid: Vec<(usize, NewLink)> = Vec::new();
    for (i, req) in requests.into_iter().enumerate() {
        match validate_create(&cp, &caller, req, now) {
            Ok(new) => {
                valid.push((i, new));
                outcomes.push(None);
            }
            Err(e) => outcomes.push(Some(fail(e))),
        }
    }
    // Only links that would be written are charged; those the bucket cannot cover now are
    // answered one by one, so an import larger than the burst still makes progress.
    let (covered, retry_after_secs) = if valid.is_empty() {
        (0, None)
    } else {
        cp.charge_up_to(&caller, valid.len(), now)?
    };
    let mut pending: Vec<(usize, Link, bool)> = Vec::new();
    for (n, (i, new)) in valid.into_iter().enumerate() {
        if n >= covered {
            outcomes[i] = Some(ImportOutcome::Failed {
                error: ErrorDetail {
                    code: "rate_limited".to_owned(),
                    message: "the rate limit did not cover this link; import it again after retry_after_secs"
                        .to_owned(),
                },
            });
            continue;
        }
        let generated = new.alias.is_none();
        let code = match new.alias {
            Some(a) => cp.store.record_alias(&a).await.map(|()| a)?,
            None => cp.next_code().await?,
        };
        let link = Link::new_active(
            code,
            new.long_url,
            new.redirect,
            new.forward_query,
            now,
            owner.clone(),
            new.expires_at,
        );
        pending.push((i, link, generated));
    }
    let links: Vec<Link> = pending.iter().map(|(_, l, _)| l.clone()).collect();
    let stored = cp.store.insert_links(&links).await?;
    for ((i, mut link, generated), result) in pending.into_iter().zip(stored) {
        let result = match result {
            // A generated code an alias took earlier: retry with fresh codes.
            Err(StoreError::AlreadyExists) if generated => {
                let mut retried = Err(StoreError::AlreadyExists);
                for _ in 1..GENERATED_CODE_ATTEMPTS {
                    link.code = cp.next_code().await?;
                    retried = cp.store.insert_link(&link, None).await;
                    if !matches!(retried, Err(StoreError::AlreadyExists)) {
                        break;
                    }
                }
                retried
            }
            other => other,
        };
        outcomes[i] = Some(match result {
            Ok(()) => {
                if let Err(e) = cp.events.created(&link).await {
                    tracing::warn!(code = %link.code, error = %e, "creation not announced");
                }
                ImportOutcome::Created(cp.created_view(&link))
            }
            Err(StoreError::AlreadyExists) => fail(ApiError::Conflict {
                code: "alias_taken",
                message: "this alias is already taken",
            }),
            Err(e) => fail(e.into()),
        });
    }
    let results: Vec<ImportOutcome> = outcomes
        .into_iter()
        .map(|o| o.expect("every link has an outcome"))
        .collect();
    let created = results
        .iter()
        .filter(|r| matches!(r, ImportOutcome::Created(_)))
        .count();
    Ok(Json(ImportResults {
        created,
        failed: results.len() - created,
        retry_after_secs,
        results,
    }))
}

#[utoipa::path(get, path = "/api/v1/links/{code}", tag = "links",
    params(("code" = String, Path, description = "The short code")),
    responses(
        (status = 200, description = "The link", body = LinkView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn get_link(State(cp): Cp, caller: Caller, Path(code): Path<String>) -> Result<Json<LinkView>, ApiError> {
    let principal = caller.principal()?;
    let link = cp.visible_link(&principal, &code).await?;
    Ok(Json(cp.view(&link)))
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
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
            .ok_or_else(|| ApiError::bad_request("invalid_limit", "limit must be a whole number from 1 to 1000"))?,
    };
    let cursor = params.cursor.as_ref().filter(|c| !c.is_empty());
    let owner = (!principal.is_operator()).then_some(principal.id.as_str());
    let page = cp.store.list_links(owner, limit, cursor.map(String::as_str)).await?;
    Ok(Json(LinkList {
        links: page.links.iter().map(|l| cp.view(l)).collect(),
        next_cursor: page.next_cursor,
    }))
}

impl ControlPlane {
    /// Delete and takedown (SPEC §5): conditional update, then the tombstone and the
    /// invalidation, and only then success. A link already down keeps its deletion record
    /// and gets its tombstone written again.
    async fn take_down(
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
            match self.store.deactivate_link(code, link.version, &deletion).await {
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
            outcome: if delivered.is_ok() {
                outcome
            } else {
                "invalidate_failed"
            }
            .to_owned(),
        };
        if let Err(e) = self.store.append_audit(&event).await {
            tracing::error!(code, action, error = %e, "audit event not recorded");
            return Err(e.into());
        }
        if let Err(e) = delivered {
            tracing::warn!(code, action, error = %e, "tombstone not written; the caller must retry");
            return Err(ApiError::InvalidationFailed);
        }
        Ok(link)
    }
}

#[utoipa::path(delete, path = "/api/v1/links/{code}", tag = "links",
    params(("code" = String, Path, description = "The short code")),
    responses(
        (status = 204, description = "Deleted; no proxy redirects it any more"),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Another key's link", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 503, description = "The caches could not be told; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn delete_link(State(cp): Cp, caller: Caller, Path(code): Path<String>) -> Result<StatusCode, ApiError> {
    let principal = caller.principal()?;
    cp.take_down(&principal, &code, None, "delete").await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/api/v1/links/{code}/takedown", tag = "links", request_body = TakedownRequest,
    params(("code" = String, Path, description = "The short code")),
    responses(
        (status = 200, description = "The deletion record", body = LinkView),
        (status = 400, description = "No reason given, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such link", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 503, description = "The caches could not be told; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
async fn take_down_link(
    State(cp): Cp,
    caller: Caller,
    Path(code): Path<String>,
    body: Result<ApiJson<TakedownRequest>, ApiError>,
) -> Result<Json<LinkView>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let raw = body?.value.reason;
    let reason = raw.trim().to_owned();
    if reason.is_empty() || raw.chars().count() > 1000 || raw.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_reason",
            "reason must be 1-1000 characters without control characters",
        ));
    }
    let link = cp.take_down(&principal, &code, Some(reason), "takedown").await?;
    Ok(Json(cp.view(&link)))
}

#[utoipa::path(get, path = "/api/v1/links/{code}/stats", tag = "links",
    params(
        ("code" = String, Path, description = "The short code"),
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
    let parse = |name: &str, value: &Option<String>| -> Result<Option<Day>, ApiError> {
        value
            .as_ref()
            .map(|s| {
                Day::parse(s)
                    .ok_or_else(|| ApiError::bad_request("invalid_date", format!("{name} must be a date YYYY-MM-DD")))
            })
            .transpose()
    };
    let (from, to) = (parse("from", &params.from)?, parse("to", &params.to)?);
    let today = Day::of_millis(cp.clock.now_millis());
    let to = to.unwrap_or(today);
    let from = from.unwrap_or(to.plus(1 - DEFAULT_STATS_DAYS));
    // A defaulted `from` can fall before the first day `YYYY-MM-DD` can name.
    if !from.is_supported() || !to.is_supported() {
        return Err(ApiError::bad_request(
            "invalid_date",
            "dates must be from 0000-01-01 to 9999-12-31",
        ));
    }
    if from > to {
        return Err(ApiError::bad_request("invalid_date", "from must not be after to"));
    }
    if to.0 - from.0 + 1 > MAX_STATS_DAYS {
        return Err(ApiError::bad_request(
            "invalid_date",
            "the range may cover at most 366 days",
        ));
    }
    let link = cp.visible_link(&principal, &code).await?;
    let counts: std::collections::HashMap<Day, u64> = cp
        .click_counts
        .read_clicks(&link.code, from, to)
        .await?
        .into_iter()
        .collect();
    let days: Vec<DayClicks> = (from.0..=to.0)
        .map(|d| DayClicks {
            day: Day(d).to_iso(),
            clicks: counts.get(&Day(d)).copied().unwrap_or(0),
        })
        .collect();
    Ok(Json(LinkStats {
        code: link.code,
        total: days.iter().map(|d| d.clicks).sum(),
        days,
    }))
}

#[utoipa::path(post, path = "/api/v1/keys", tag = "keys", request_body = CreateKeyRequest,
    responses(
        (status = 201, description = "The key, shown this once", body = KeyCreated),
        (status = 400, description = "Bad name or role, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
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
    let key = generate_key();
    let record = ApiKeyRecord {
        id: generate_key_id(),
        name,
        role,
        key_hash: hash_key(&key),
        created_at: cp.clock.now_millis(),
        revoked_at: None,
    };
    cp.store.insert_key(&record).await?;
    tracing::info!(id = %record.id, role = role.as_str(), by = %principal.id, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(KeyCreated {
            id: record.id,
            name: record.name,
            role: role.as_str().to_owned(),
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
            ("400", "More than one Authorization header"),
            ("500", "Internal error (logged)"),
            ("503", "The store is unavailable; retry"),
        ];
        for item in doc.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
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
    info(title = "Rebound control plane", description = "Create, inspect, delete and take down short links; manage API keys; read click statistics."),
    paths(create_link, import_links, get_link, list_links, delete_link, take_down_link, link_stats, create_key, revoke_key, openapi,
        crate::qr::link_qr, crate::audit::link_audit, crate::me::whoami),
    components(schemas(CreateLinkRequest, ImportRequest, ImportResults, ImportOutcome, LinkCreated, LinkView, LinkList, TakedownRequest, LinkStats, DayClicks, CreateKeyRequest, KeyCreated, ErrorBody,
        LinkAudit, AuditEntry, Me)),
    modifiers(&BearerAuth, &CommonResponses)
)]
struct ApiDoc;

/// The OpenAPI 3 document of the API, as JSON.
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_json().unwrap_or_else(|_| "{}".to_owned())
}
