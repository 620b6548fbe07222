//! Outside the home region (docs/regions.md): the writes that need uniqueness are forwarded
//! to the home region's control plane, which makes them strongly consistent there, and its
//! answer is returned as it came. An alias, an API key, a domain (and its id) or an
//! idempotency key checked against this region's replica alone could be taken twice (the
//! replicas converge by last writer wins, so the later write would silently replace the
//! earlier one). Generated codes are not forwarded: each region leases from its own slot of
//! the code space.
//!
//! A delete or takedown is made here when this region's replica has the link: a link only
//! ever goes from active to down, so two regions taking one link down at once converge on a
//! link that is down whichever write wins, and the tombstone is fanned out from here to
//! every region. When this replica does not have the link (yet: an alias made at home, not
//! replicated here), the home region's answer decides.

use crate::error::ApiError;
use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, Method, Response};
use axum::middleware::Next;
use std::sync::Arc;
use std::time::Duration;

/// The home region's control plane, as the forwarder reaches it.
#[async_trait]
pub trait HomeRegion: Send + Sync {
    /// `request` (its body whole, its path and query as received) as the home region's
    /// control plane answered it.
    async fn forward(&self, request: axum::http::Request<Bytes>) -> Result<Response<Bytes>, HomeUnavailable>;
}

/// The home region's control plane gave no answer (unreachable, refused, timed out).
#[derive(Debug, thiserror::Error)]
#[error("the home region's control plane did not answer: {0}")]
pub struct HomeUnavailable(pub String);

/// The request headers the home region needs to decide as this region would; the rest
/// (hop-by-hop headers, `Host`, `Content-Length`) belong to this hop.
pub const FORWARDED_HEADERS: [HeaderName; 5] = [
    axum::http::header::AUTHORIZATION,
    axum::http::header::CONTENT_TYPE,
    axum::http::header::ACCEPT,
    axum::http::header::IF_MATCH,
    HeaderName::from_static("idempotency-key"),
];

/// Where a request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Here,
    Home,
    /// Here, unless this region's replica does not have the link (404): then at home.
    HereElseHome,
}

/// Where a request is answered, from the route it matched, the method, whether an
/// `Idempotency-Key` came and the body (a create with an alias). A body that is not a JSON
/// object stays here, to be refused by the usual rules.
pub fn answered(method: &Method, route: &str, idempotency_key: bool, body: &[u8]) -> Where {
    match (method.as_str(), route) {
        ("POST", "/api/v1/links") => {
            let alias = || {
                serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.get("custom_alias").map(|a| !a.is_null()))
                    .unwrap_or(false)
            };
            match idempotency_key || alias() {
                true => Where::Home,
                false => Where::Here,
            }
        }
        ("POST", "/api/v1/links/import")
        | ("POST", "/api/v1/keys")
        | ("DELETE", "/api/v1/keys/{id}")
        // A domain's name is unique, and its id comes from a counter that must be one.
        | ("POST", "/api/v1/domains")
        | ("DELETE", "/api/v1/domains/{name}") => Where::Home,
        ("DELETE", "/api/v1/links/{code}") | ("POST", "/api/v1/links/{code}/takedown") => Where::HereElseHome,
        _ => Where::Here,
    }
}

/// The forwarder's parts: the home region, and the body limits of this API (a body is read
/// whole before it is known where it goes).
#[derive(Clone)]
pub struct Forwarding {
    pub home: Arc<dyn HomeRegion>,
    pub max_body_bytes: usize,
    pub max_import_body_bytes: usize,
    pub body_timeout: Duration,
}

/// The middleware: a write that needs uniqueness is answered by the home region (503
/// `home_unavailable` when it does not answer); everything else goes on here, its body
/// untouched.
pub(crate) async fn forward_unique_writes(
    State(f): State<Forwarding>,
    request: Request,
    next: Next,
) -> Result<axum::response::Response, ApiError> {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let route = match route {
        // With a key, a create goes home whatever its body: the body need not be read to know
        // that the rest stays here.
        Some(r) if answered(request.method(), &r, true, b"") != Where::Here => r,
        _ => return Ok(next.run(request).await),
    };
    let limit = match route.as_str() {
        "/api/v1/links/import" => f.max_import_body_bytes,
        _ => f.max_body_bytes,
    };
    let (parts, body) = request.into_parts();
    let body = tokio::time::timeout(f.body_timeout, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout(f.body_timeout))?
        .map_err(|e| match crate::body::is_length_limit(&e) {
            true => ApiError::PayloadTooLarge(limit),
            false => ApiError::bad_request("invalid_body", "the request body could not be read"),
        })?;
    let idempotency_key = parts.headers.contains_key("idempotency-key");
    match answered(&parts.method, &route, idempotency_key, &body) {
        Where::Here => return Ok(next.run(Request::from_parts(parts, Body::from(body))).await),
        Where::HereElseHome => {
            let answer = next
                .run(Request::from_parts(parts.clone(), Body::from(body.clone())))
                .await;
            if answer.status() != axum::http::StatusCode::NOT_FOUND {
                return Ok(answer);
            }
        }
        Where::Home => {}
    }
    let mut forwarded = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    for name in &FORWARDED_HEADERS {
        for value in parts.headers.get_all(name) {
            forwarded = forwarded.header(name, value);
        }
    }
    let forwarded = forwarded
        .body(body)
        .map_err(|e| ApiError::Internal(format!("forwarding to the home region: {e}")))?;
    match f.home.forward(forwarded).await {
        Ok(answer) => Ok(answer.map(Body::from)),
        Err(e) => Err(ApiError::HomeUnavailable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_each_request_is_answered() {
        use Where::*;
        let (post, delete, get) = (Method::POST, Method::DELETE, Method::GET);
        let cases: &[(&Method, &str, bool, &str, Where)] = &[
            // A generated code is made here, from this region's slot.
            (&post, "/api/v1/links", false, r#"{"long_url":"https://e.com"}"#, Here),
            (
                &post,
                "/api/v1/links",
                false,
                r#"{"long_url":"https://e.com","custom_alias":null}"#,
                Here,
            ),
            // An alias or an idempotency key must be unique across regions.
            (
                &post,
                "/api/v1/links",
                false,
                r#"{"long_url":"https://e.com","custom_alias":"x"}"#,
                Home,
            ),
            (&post, "/api/v1/links", true, r#"{"long_url":"https://e.com"}"#, Home),
            // Not JSON: refused here by the usual rules.
            (&post, "/api/v1/links", false, "alias", Here),
            (&post, "/api/v1/links/import", false, "", Home),
            (&post, "/api/v1/keys", false, "", Home),
            (&delete, "/api/v1/keys/{id}", false, "", Home),
            (&post, "/api/v1/domains", false, r#"{"name":"go.acme.com"}"#, Home),
            (&delete, "/api/v1/domains/{name}", false, "", Home),
            (&get, "/api/v1/domains", false, "", Here),
            (&get, "/api/v1/domains/{name}", false, "", Here),
            // A link this replica has is taken down here.
            (&delete, "/api/v1/links/{code}", false, "", HereElseHome),
            (&post, "/api/v1/links/{code}/takedown", false, "", HereElseHome),
            // Reads are answered from this region's replica.
            (&get, "/api/v1/links/{code}", false, "", Here),
            (&get, "/api/v1/links", false, "", Here),
            (&get, "/api/v1/links/{code}/stats", false, "", Here),
        ];
        for (method, route, key, body, answered_at) in cases {
            assert_eq!(
                answered(method, route, *key, body.as_bytes()),
                *answered_at,
                "{method} {route} key={key} {body}"
            );
        }
    }
}
