//! What the handlers read from a request, apart from the path: the caller (its key, or
//! its address), a JSON body in the API's own error shape (415, 413, 400, 408, never axum's
//! plain-text rejections), the one-link query (`?domain=`), `Idempotency-Key` and
//! `If-Match`. Each extractor reads the sub-state it needs ([`BodyLimits`], the
//! [`Authenticator`]) through `FromRef`, never the whole control plane.

use crate::auth::{Authenticator, Caller};
use crate::error::ApiError;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, FromRef, FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use rebound_core::Link;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// How large a request body may be, and how long it may take to arrive once its head has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub(crate) max_body_bytes: usize,
    /// A bulk import's (up to 1,000 links).
    pub(crate) max_import_body_bytes: usize,
    pub(crate) body_timeout: std::time::Duration,
}

/// Least body limit of a domain's app links: both documents at their bound
/// (`rebound_core::app_links::MAX_DOCUMENT_BYTES` each) with room for the JSON around them
/// and some indentation, so a document over its bound is refused naming it (413
/// `document_too_large`) rather than as a body too large.
pub(crate) const MIN_APP_LINKS_BODY_BYTES: usize = 256 * 1024;

impl BodyLimits {
    /// The body limit of `PUT /api/v1/domains/{name}/app-links`.
    pub(crate) fn app_links(&self) -> usize {
        self.max_body_bytes.max(MIN_APP_LINKS_BODY_BYTES)
    }
}

/// A JSON request body of type `T`, with the raw bytes kept for idempotency hashing.
pub struct ApiJson<T> {
    pub value: T,
    pub raw: axum::body::Bytes,
}

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    BodyLimits: FromRef<S>,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let limits = BodyLimits::from_ref(state);
        read_json(req, limits.max_body_bytes, limits.body_timeout).await
    }
}

/// The body of a bulk import: JSON like [`ApiJson`], with the larger import limit.
pub struct ImportJson<T>(pub T);

impl<S, T> FromRequest<S> for ImportJson<T>
where
    S: Send + Sync,
    BodyLimits: FromRef<S>,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let limits = BodyLimits::from_ref(state);
        read_json(req, limits.max_import_body_bytes, limits.body_timeout)
            .await
            .map(|b: ApiJson<T>| ImportJson(b.value))
    }
}

/// The body of a domain's app links: JSON like [`ApiJson`], with their larger limit
/// ([`BodyLimits::app_links`]).
pub struct AppLinksJson<T>(pub T);

impl<S, T> FromRequest<S> for AppLinksJson<T>
where
    S: Send + Sync,
    BodyLimits: FromRef<S>,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let limits = BodyLimits::from_ref(state);
        read_json(req, limits.app_links(), limits.body_timeout)
            .await
            .map(|b: ApiJson<T>| AppLinksJson(b.value))
    }
}

async fn read_json<T: DeserializeOwned>(
    req: Request,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<ApiJson<T>, ApiError> {
    {
        let is_json = one_header(req.headers(), &header::CONTENT_TYPE, "invalid_content_type")?
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        let declared = one_header(req.headers(), &header::CONTENT_LENGTH, "invalid_content_length")?
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let raw = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit))
            .await
            .map_err(|_| ApiError::BodyTimeout(timeout))?
            .map_err(|e| {
                if is_length_limit(&e) {
                    ApiError::PayloadTooLarge(limit)
                } else {
                    ApiError::bad_request("invalid_body", "the request body could not be read")
                }
            })?;
        let json: serde_json::Value = serde_json::from_slice(&raw)
            .map_err(|_| ApiError::bad_request("invalid_json", "request body is not valid JSON"))?;
        // serde would also read a struct from an array of its fields in order.
        if !json.is_object() {
            return Err(ApiError::bad_request(
                "invalid_json",
                "request body must be a JSON object",
            ));
        }
        let value = serde_json::from_value(json).map_err(|e| {
            ApiError::bad_request(
                "invalid_json",
                format!("request body is invalid: {}", strip_location(&e.to_string())),
            )
        })?;
        Ok(ApiJson { value, raw })
    }
}

/// The value of a header the API reads as one value, if given; 400 `code` when it is given
/// twice (even twice the same), as for `Authorization`: with two, a proxy in front and this
/// service might each believe a different one.
pub(crate) fn one_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    code: &'static str,
) -> Result<Option<&'a HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ApiError::bad_request(code, format!("send at most one {name} header")));
    }
    Ok(first)
}

/// serde's messages end with " at line 1 column 17"; drop that.
fn strip_location(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}

pub(crate) fn is_length_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

fn bearer_token(parts: &Parts) -> Result<Option<&str>, ApiError> {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    // With two, a proxy and this service might each believe a different one.
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "invalid_authorization",
            "send exactly one Authorization header",
        ));
    }
    let malformed = || ApiError::Unauthorized("the Authorization header must be 'Bearer <key>'");
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer")
        || token.is_empty()
        || token.len() > 256
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(malformed());
    }
    Ok(Some(token))
}

/// Who calls: the holder of the key in `Authorization`, or (without one) the client's
/// address.
impl<S> FromRequestParts<S> for Caller
where
    S: Send + Sync,
    Arc<Authenticator>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Some(token) = bearer_token(parts)? else {
            let ip = parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
            return Ok(Caller::Anonymous { ip });
        };
        <Arc<Authenticator>>::from_ref(state)
            .holder_of(token)
            .await
            .map(Caller::Key)
    }
}

/// The `Idempotency-Key` of a create or an import: at most one, 1-255 visible ASCII characters.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
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

/// `response` with the link's version as its strong entity tag: what an edit's `If-Match`
/// names.
pub(super) fn with_etag(link: &Link, response: impl IntoResponse) -> Response {
    let mut response = response.into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{}\"", link.version)) {
        response.headers_mut().insert(axum::http::header::ETAG, tag);
    }
    response
}

/// The version an edit's `If-Match` names: one strong entity tag `"<version>"`; 428 when
/// there is none, 400 when it is not one (a list, a weak tag, `*`).
pub(super) fn if_match(headers: &HeaderMap) -> Result<u64, ApiError> {
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

/// The query of a call on one link: the domain it is on (the default one when not given).
#[derive(Debug, Deserialize)]
pub(super) struct OnDomain {
    domain: Option<String>,
}

/// The domain of a call on one link, as [`OnDomain`] reads it.
pub(super) fn on_domain(query: Result<Query<OnDomain>, QueryRejection>) -> Result<Option<String>, ApiError> {
    Ok(query.map_err(bad_query)?.0.domain)
}

/// A query string axum could not read into the handler's query type (a key given twice,
/// say): a 400 that says why.
pub(super) fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", e.body_text())
}
