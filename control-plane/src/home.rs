//! Outside the home region (docs/regions.md): the writes that need uniqueness are forwarded
//! to the home region's control plane, which makes them strongly consistent there, and its
//! answer is returned as it came. An alias, an API key, a domain (and its id) or an
//! idempotency key checked against this region's replica alone could be taken twice (the
//! replicas converge by last writer wins, so the later write would silently replace the
//! earlier one). Generated codes are not forwarded: each region leases from its own slot of
//! the code space.
//!
//! Every change of an existing link (edit, delete, takedown, reinstate) is decided at home
//! too: the replicas converge by last writer wins, so two changes of one version made in two
//! regions would both succeed and the later copy would silently replace the earlier one (an
//! edit reviving a deleted link, two edits each told "200"). At home the store's
//! conditional write orders them. A link made here moments ago that the home replica does
//! not have yet is asked for again there until it is replicated ([`REPLICATION_WAIT`]).
//! When the home region cannot be reached, a delete or takedown is still made here (its
//! region's proxies answer 404 at once) and answers 503: only the home region confirms it.

use crate::error::ApiError;
use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, Method, Response, StatusCode};
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
    /// A change of an existing link: at home, asked again while the home replica lacks a
    /// link that this one has; with `down`, a delete or takedown made here (answered 503)
    /// when the home region cannot be reached.
    Change {
        down: bool,
    },
}

/// Longest a change of a link made here waits for the home replica to receive the link
/// (a global table replicates in about a second), asking every [`REPLICATION_POLL`].
pub const REPLICATION_WAIT: Duration = Duration::from_secs(10);
/// How often a change waiting for the home replica asks again.
pub const REPLICATION_POLL: Duration = Duration::from_millis(250);

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
        | ("DELETE", "/api/v1/domains/{name}")
        // Written at home like the domain itself, so a change never races its removal (or
        // another change) through two regions' replicas.
        | ("PUT", "/api/v1/domains/{name}/app-links") => Where::Home,
        ("DELETE", "/api/v1/links/{code}") | ("POST", "/api/v1/links/{code}/takedown") => Where::Change { down: true },
        ("PATCH", "/api/v1/links/{code}") | ("POST", "/api/v1/links/{code}/reinstate") => {
            Where::Change { down: false }
        }
        _ => Where::Here,
    }
}

/// The forwarder's parts: the home region, this region's own API (to tell whether this
/// replica shows the caller a link), and the body limits of this API (a body is read whole
/// before it is known where it goes).
#[derive(Clone)]
pub struct Forwarding {
    pub home: Arc<dyn HomeRegion>,
    pub here: axum::Router,
    pub(crate) limits: crate::http::extract::BodyLimits,
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
        "/api/v1/links/import" => f.limits.max_import_body_bytes,
        "/api/v1/domains/{name}/app-links" => f.limits.app_links(),
        _ => f.limits.max_body_bytes,
    };
    let (parts, body) = request.into_parts();
    let body = tokio::time::timeout(f.limits.body_timeout, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| ApiError::BodyTimeout(f.limits.body_timeout))?
        .map_err(|e| match crate::http::extract::is_length_limit(&e) {
            true => ApiError::PayloadTooLarge(limit),
            false => ApiError::bad_request("invalid_body", "the request body could not be read"),
        })?;
    let idempotency_key = parts.headers.contains_key("idempotency-key");
    let down = match answered(&parts.method, &route, idempotency_key, &body) {
        Where::Here => return Ok(next.run(Request::from_parts(parts, Body::from(body))).await),
        Where::Home => return forward(&f, &parts, body).await,
        Where::Change { down } => down,
    };
    let asked_at_home = match forward(&f, &parts, body.clone()).await {
        Ok(answer) if answer.status() != StatusCode::NOT_FOUND => return Ok(answer),
        Ok(not_found) => not_found,
        Err(unavailable) if down => {
            // Made here, so this region's proxies answer 404 at once; only the home region
            // confirms it, so the answer is a retry whatever happened here.
            // A link this replica does not have may be at home: not known here either way.
            let here = next.run(Request::from_parts(parts, Body::from(body))).await;
            return match here.status().is_success() || here.status() == StatusCode::NOT_FOUND {
                true => Err(unavailable),
                false => Ok(here),
            };
        }
        Err(unavailable) => return Err(unavailable),
    };
    if !shown_here(&f, &parts).await {
        return Ok(asked_at_home);
    }
    // Made here moments ago: asked at home again once the home replica has it.
    let deadline = tokio::time::Instant::now() + REPLICATION_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(REPLICATION_POLL).await;
        let answer = forward(&f, &parts, body.clone()).await?;
        if answer.status() != StatusCode::NOT_FOUND {
            return Ok(answer);
        }
    }
    Err(ApiError::NotReplicated)
}

/// `parts` with `body`, as the home region answered it.
async fn forward(
    f: &Forwarding,
    parts: &axum::http::request::Parts,
    body: Bytes,
) -> Result<axum::response::Response, ApiError> {
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

/// Whether this region's replica shows the caller the link that `parts` changes: its
/// `GET /api/v1/links/{code}` (same key, same domain) answered here.
async fn shown_here(f: &Forwarding, parts: &axum::http::request::Parts) -> bool {
    let path = parts.uri.path();
    let link = path
        .strip_suffix("/takedown")
        .or_else(|| path.strip_suffix("/reinstate"))
        .unwrap_or(path);
    let uri = match parts.uri.query() {
        Some(query) => format!("{link}?{query}"),
        None => link.to_owned(),
    };
    let mut get = axum::http::Request::builder().method(Method::GET).uri(uri);
    if let Some(auth) = parts.headers.get(axum::http::header::AUTHORIZATION) {
        get = get.header(axum::http::header::AUTHORIZATION, auth);
    }
    let Ok(get) = get.body(Body::empty()) else {
        return false;
    };
    use tower::util::ServiceExt;
    match f.here.clone().oneshot(get).await {
        Ok(answer) => answer.status() == StatusCode::OK,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_each_request_is_answered() {
        use Where::*;
        let (post, delete, get, patch) = (Method::POST, Method::DELETE, Method::GET, Method::PATCH);
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
            (&Method::PUT, "/api/v1/domains/{name}/app-links", false, "{}", Home),
            (&get, "/api/v1/domains", false, "", Here),
            (&get, "/api/v1/domains/{name}", false, "", Here),
            // Every change of an existing link is decided at home.
            (&delete, "/api/v1/links/{code}", false, "", Change { down: true }),
            (&post, "/api/v1/links/{code}/takedown", false, "", Change { down: true }),
            (&patch, "/api/v1/links/{code}", false, "{}", Change { down: false }),
            (
                &post,
                "/api/v1/links/{code}/reinstate",
                false,
                "",
                Change { down: false },
            ),
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
