//! The API without a socket: every row of docs/spec.md §6 the control plane answers alone,
//! driven through the router with `oneshot`.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use rebound_control_plane::config::ControlPlaneConfig;
use rebound_control_plane::{router, ControlPlane};
use rebound_core::{Clock, ManualClock};
use rebound_store::events::RecordedLinkEvents;
use rebound_store::{AuditLog, LinkReads, LinkStore, MemoryStore, RollupStore, Store};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tower::ServiceExt;

const OPERATOR: &str = "operator-key-for-tests-0001";
const NOW: i64 = 1_790_000_000_000; // 2026-09-21

struct Harness {
    app: axum::Router,
    cp: ControlPlane,
    store: Arc<MemoryStore>,
    events: Arc<RecordedLinkEvents>,
    clock: ManualClock,
}

async fn harness_with(change: impl FnOnce(&mut ControlPlaneConfig)) -> Harness {
    harness_on(MemoryStore::new(), change).await
}

async fn harness_on(store: MemoryStore, change: impl FnOnce(&mut ControlPlaneConfig)) -> Harness {
    let mut config = ControlPlaneConfig {
        bootstrap_key: Some(OPERATOR.into()),
        public_base_url: "https://sho.rt".into(),
        ..ControlPlaneConfig::default()
    };
    change(&mut config);
    let store = Arc::new(store);
    let events = Arc::new(RecordedLinkEvents::default());
    let clock = ManualClock::at(NOW);
    let cp = ControlPlane::new(
        config,
        store.clone() as Arc<dyn Store>,
        events.clone(),
        Arc::new(clock.clone()) as Arc<dyn Clock>,
    )
    .await
    .unwrap();
    Harness {
        app: router(cp.clone()),
        cp,
        store,
        events,
        clock,
    }
}

async fn harness() -> Harness {
    harness_with(|_| {}).await
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

impl Harness {
    async fn call(&self, method: Method, uri: &str, key: Option<&str>, body: Option<Value>) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(k) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        };
        self.send(req.unwrap()).await
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let res = self.app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        Reply { status, headers, body }
    }

    async fn create(&self, key: &str, body: Value) -> Reply {
        self.call(Method::POST, "/api/v1/links", Some(key), Some(body)).await
    }

    async fn new_key(&self, role: &str) -> String {
        let r = self
            .call(
                Method::POST,
                "/api/v1/keys",
                Some(OPERATOR),
                Some(json!({"name": "t", "role": role})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["key"].as_str().unwrap().to_owned()
    }

    async fn link_count(&self) -> usize {
        self.store.list_links(None, 1000, None).await.unwrap().links.len()
    }
}

fn assert_error(r: &Reply, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], code, "{:?}", r.body);
    assert!(r.body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn create_generated_and_read_back() {
    let h = harness().await;
    let r = h.create(OPERATOR, json!({"long_url": "https://example.com/a"})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let code = r.body["code"].as_str().unwrap().to_owned();
    assert_eq!(code.len(), 7);
    assert_eq!(r.body["short_url"], format!("https://sho.rt/{code}"));
    assert_eq!(r.body["long_url"], "https://example.com/a");
    assert_eq!(r.body["redirect"], 302);
    assert_eq!(r.body["forward_query"], false);
    assert_eq!(r.body["expires_at"], Value::Null);
    assert_eq!(r.body["version"], 1);
    assert_eq!(r.body["created_at"], "2026-09-21T14:13:20.000Z");
    assert_eq!(h.events.created.lock().unwrap().len(), 1, "the creation is announced");

    let g = h
        .call(Method::GET, &format!("/api/v1/links/{code}"), Some(OPERATOR), None)
        .await;
    assert_eq!(g.status, StatusCode::OK);
    assert_eq!(g.body["is_active"], true);
    assert_eq!(g.body["version"], 1);
    assert_eq!(g.body["deleted_at"], Value::Null);
    assert_eq!(g.body["created_by"], "bootstrap");
}

#[tokio::test]
async fn create_with_every_option() {
    let h = harness().await;
    let r = h
        .create(OPERATOR, json!({"long_url": "https://münchen.example/ä?x=1", "custom_alias": "my-link_1", "ttl_seconds": 60, "redirect": 308, "forward_query": true}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["code"], "my-link_1");
    assert_eq!(r.body["long_url"], "https://xn--mnchen-3ya.example/%C3%A4?x=1");
    assert_eq!(r.body["redirect"], 308);
    assert_eq!(r.body["forward_query"], true);
    assert_eq!(r.body["expires_at"], "2026-09-21T14:14:20.000Z");
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://e.com/", "expires_at": "2027-01-01T00:00:00+01:00"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["expires_at"], "2026-12-31T23:00:00.000Z");
}

#[tokio::test]
async fn bad_input_gets_400_and_writes_nothing() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "taken"}))
        .await;
    let before = h.link_count().await;
    let long = format!("https://e.com/{}", "a".repeat(2048));
    let cases = vec![
        (json!({}), "invalid_json"),
        (json!({"long_url": 5}), "invalid_json"),
        (json!({"long_url": "https://e.com/", "extra": 1}), "invalid_json"),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": "10"}),
            "invalid_json",
        ),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": 1e30}),
            "invalid_json",
        ),
        (json!({"long_url": "https://e.com/", "redirect": 70000}), "invalid_json"),
        (
            json!({"long_url": "https://e.com/", "forward_query": "yes"}),
            "invalid_json",
        ),
        (json!({"long_url": ""}), "invalid_url"),
        (json!({"long_url": "ftp://e.com/"}), "invalid_url"),
        (json!({"long_url": "javascript:alert(1)"}), "invalid_url"),
        (json!({"long_url": "e.com"}), "invalid_url"),
        (json!({"long_url": "https://user:pw@e.com/"}), "invalid_url"),
        (json!({"long_url": "https://e.com/a b"}), "invalid_url"),
        (json!({"long_url": "https://e.com/\r\nX: y"}), "invalid_url"),
        (json!({"long_url": long}), "invalid_url"),
        (json!({"long_url": "https://sho.rt/abc"}), "invalid_url"),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "ab"}),
            "invalid_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "a/b/c"}),
            "invalid_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "héllo"}),
            "invalid_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "x".repeat(33)}),
            "invalid_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "API"}),
            "reserved_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "custom_alias": "healthz"}),
            "reserved_alias",
        ),
        (
            json!({"long_url": "https://e.com/", "expires_at": "2020-01-01T00:00:00Z"}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "expires_at": "tomorrow"}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "expires_at": "2099-01-01T00:00:00Z"}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": 0}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": -5}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": 315_360_001}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "ttl_seconds": 5, "expires_at": "2027-01-01T00:00:00Z"}),
            "invalid_expiry",
        ),
        (
            json!({"long_url": "https://e.com/", "redirect": 303}),
            "invalid_redirect",
        ),
        (
            json!({"long_url": "https://e.com/", "redirect": 200}),
            "invalid_redirect",
        ),
    ];
    for (body, code) in cases {
        let r = h.create(OPERATOR, body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, code);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains("\r") && !message.contains("javascript"),
            "no echo of the input: {message}"
        );
    }
    assert_eq!(h.link_count().await, before, "nothing was written");
    assert_eq!(h.events.created.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn body_format_errors() {
    let h = harness_with(|s| s.api.max_body_bytes = 2048).await;
    let send = |content_type: Option<&'static str>, body: String| {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/links")
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"));
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        req.body(Body::from(body)).unwrap()
    };
    let ok = r#"{"long_url":"https://e.com/"}"#.to_owned();
    assert_error(
        &h.send(send(None, ok.clone())).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_error(
        &h.send(send(Some("text/plain"), ok.clone())).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_error(
        &h.send(send(Some("application/json"), "{not json".into())).await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    assert_error(
        &h.send(send(Some("application/json"), String::new())).await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    assert_error(
        &h.send(send(Some("application/json"), "[1,2]".into())).await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    let big = format!(
        r#"{{"long_url":"https://e.com/","custom_alias":"{}"}}"#,
        "a".repeat(3000)
    );
    assert_error(
        &h.send(send(Some("application/json"), big.clone())).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    // Without a Content-Length header (streamed), the limit still holds.
    let stream = Body::new(Streamed(Some(big.into())));
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/links")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(stream)
        .unwrap();
    assert_error(&h.send(req).await, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_eq!(
        h.send(send(Some("application/json; charset=utf-8"), ok)).await.status,
        StatusCode::CREATED
    );
    assert_eq!(h.link_count().await, 1);
}

/// A one-chunk body without a Content-Length, as a streamed upload arrives.
struct Streamed(Option<axum::body::Bytes>);

impl http_body::Body for Streamed {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.take().map(|b| Ok(http_body::Frame::data(b))))
    }
}

#[tokio::test]
async fn authentication_and_roles() {
    let h = harness().await;
    let body = json!({"long_url": "https://e.com/"});
    assert_error(
        &h.call(Method::POST, "/api/v1/links", None, Some(body.clone())).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_error(
        &h.create("not-a-key-at-all-xxxx", body.clone()).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let req = Request::builder()
        .uri("/api/v1/links")
        .header(header::AUTHORIZATION, "Basic abc")
        .body(Body::empty())
        .unwrap();
    let r = h.send(req).await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");

    let creator = h.new_key("creator").await;
    let other = h.new_key("creator").await;
    let r = h
        .create(&creator, json!({"long_url": "https://e.com/", "custom_alias": "mine"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // Another creator can neither read, delete, take down nor see the stats of it.
    assert_error(
        &h.call(Method::GET, "/api/v1/links/mine", Some(&other), None).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        &h.call(Method::DELETE, "/api/v1/links/mine", Some(&other), None).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        &h.call(Method::GET, "/api/v1/links/mine/stats", Some(&other), None)
            .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        &h.call(
            Method::POST,
            "/api/v1/links/mine/takedown",
            Some(&creator),
            Some(json!({"reason": "x"})),
        )
        .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        &h.call(
            Method::POST,
            "/api/v1/keys",
            Some(&creator),
            Some(json!({"name": "x", "role": "operator"})),
        )
        .await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_error(
        &h.call(Method::DELETE, "/api/v1/keys/abc", Some(&creator), None).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    // Listing shows a creator only its own links; an operator all.
    let mine = h.call(Method::GET, "/api/v1/links", Some(&other), None).await;
    assert_eq!(mine.body["links"].as_array().unwrap().len(), 0);
    let all = h.call(Method::GET, "/api/v1/links", Some(OPERATOR), None).await;
    assert_eq!(all.body["links"].as_array().unwrap().len(), 1);
    // Anonymous creation is off by default.
    assert_error(
        &h.call(Method::POST, "/api/v1/links", None, Some(body)).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
}

#[tokio::test]
async fn a_revoked_key_stops_working_at_once() {
    let h = harness().await;
    let r = h
        .call(
            Method::POST,
            "/api/v1/keys",
            Some(OPERATOR),
            Some(json!({"name": "ci", "role": "creator"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["role"], "creator");
    assert_eq!(r.body["name"], "ci");
    let (id, key) = (
        r.body["id"].as_str().unwrap().to_owned(),
        r.body["key"].as_str().unwrap().to_owned(),
    );
    assert_eq!(
        h.create(&key, json!({"long_url": "https://e.com/"})).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        h.call(Method::DELETE, &format!("/api/v1/keys/{id}"), Some(OPERATOR), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &h.create(&key, json!({"long_url": "https://e.com/"})).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_error(
        &h.call(Method::DELETE, "/api/v1/keys/nosuchkey", Some(OPERATOR), None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for bad in [
        json!({"name": "", "role": "creator"}),
        json!({"name": "x", "role": "admin"}),
        json!({"name": "x"}),
        json!({"name": "x", "role": "creator", "extra": true}),
    ] {
        let r = h.call(Method::POST, "/api/v1/keys", Some(OPERATOR), Some(bad)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    }
}

#[tokio::test]
async fn alias_taken_is_409() {
    let h = harness().await;
    assert_eq!(
        h.create(OPERATOR, json!({"long_url": "https://a.com/", "custom_alias": "dup"}))
            .await
            .status,
        StatusCode::CREATED
    );
    let r = h
        .create(OPERATOR, json!({"long_url": "https://b.com/", "custom_alias": "dup"}))
        .await;
    assert_error(&r, StatusCode::CONFLICT, "alias_taken");
    let g = h.call(Method::GET, "/api/v1/links/dup", Some(OPERATOR), None).await;
    assert_eq!(g.body["long_url"], "https://a.com/", "the first link stands");
}

#[tokio::test]
async fn concurrent_creates_of_one_alias_give_one_201() {
    let h = Arc::new(harness().await);
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let h = h.clone();
            tokio::spawn(async move {
                h.create(
                    OPERATOR,
                    json!({"long_url": format!("https://e.com/{i}"), "custom_alias": "race"}),
                )
                .await
                .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::CREATED).count(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::CONFLICT).count(), 23);
}

#[tokio::test]
async fn idempotency_keys_replay_the_first_answer() {
    let h = harness().await;
    let send = |key: &'static str, body: Value| {
        Request::builder()
            .method(Method::POST)
            .uri("/api/v1/links")
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", key)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let first = h.send(send("k-1", json!({"long_url": "https://e.com/x"}))).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let again = h.send(send("k-1", json!({"long_url": "https://e.com/x"}))).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.body, first.body, "same status and body");
    assert_eq!(h.link_count().await, 1, "no second link");
    let other = h.send(send("k-1", json!({"long_url": "https://e.com/y"}))).await;
    assert_error(&other, StatusCode::CONFLICT, "idempotency_key_reused");
    assert_eq!(h.link_count().await, 1);
    // A new key creates a new link; a bad key is refused.
    assert_eq!(
        h.send(send("k-2", json!({"long_url": "https://e.com/x"}))).await.status,
        StatusCode::CREATED
    );
    assert_error(
        &h.send(send("bad key", json!({"long_url": "https://e.com/x"}))).await,
        StatusCode::BAD_REQUEST,
        "invalid_idempotency_key",
    );
    // After the retention the key may be used again.
    h.clock.advance(25 * 3_600_000);
    let later = h.send(send("k-1", json!({"long_url": "https://e.com/z"}))).await;
    assert_eq!(later.status, StatusCode::CREATED);
    assert_ne!(later.body["code"], first.body["code"]);
}

#[tokio::test]
async fn creator_keys_are_rate_limited_and_operators_are_not() {
    let h = harness_with(|s| {
        s.api.creator_burst = 3;
        s.api.creator_rate_per_sec = 1.0;
    })
    .await;
    let creator = h.new_key("creator").await;
    for _ in 0..3 {
        assert_eq!(
            h.create(&creator, json!({"long_url": "https://e.com/"})).await.status,
            StatusCode::CREATED
        );
    }
    let r = h.create(&creator, json!({"long_url": "https://e.com/"})).await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    for _ in 0..10 {
        assert_eq!(
            h.create(OPERATOR, json!({"long_url": "https://e.com/"})).await.status,
            StatusCode::CREATED
        );
    }
    h.clock.advance(1000);
    assert_eq!(
        h.create(&creator, json!({"long_url": "https://e.com/"})).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn anonymous_creation_when_switched_on_is_limited_per_ip() {
    let h = harness_with(|s| {
        s.api.anonymous_create = true;
        s.api.anonymous_burst = 2;
    })
    .await;
    for _ in 0..2 {
        let r = h
            .call(
                Method::POST,
                "/api/v1/links",
                None,
                Some(json!({"long_url": "https://e.com/"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = h
        .call(
            Method::POST,
            "/api/v1/links",
            None,
            Some(json!({"long_url": "https://e.com/"})),
        )
        .await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    // Anonymous callers can read nothing.
    assert_error(
        &h.call(Method::GET, "/api/v1/links", None, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
}

#[tokio::test]
async fn delete_then_repeat() {
    let h = harness().await;
    let creator = h.new_key("creator").await;
    h.create(&creator, json!({"long_url": "https://e.com/", "custom_alias": "gone"}))
        .await;
    assert_eq!(
        h.call(Method::DELETE, "/api/v1/links/gone", Some(&creator), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let down = h.events.deactivated.lock().unwrap().clone();
    assert_eq!(down.len(), 1);
    assert_eq!(
        (down[0].is_active, down[0].version),
        (false, 2),
        "the tombstone carries the new version"
    );
    let g = h.call(Method::GET, "/api/v1/links/gone", Some(&creator), None).await;
    assert_eq!(g.body["is_active"], false);
    assert_eq!(g.body["version"], 2);
    assert!(g.body["deleted_at"].is_string());
    // Again: the same success, the tombstone written again at the same version.
    assert_eq!(
        h.call(Method::DELETE, "/api/v1/links/gone", Some(&creator), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let down = h.events.deactivated.lock().unwrap().clone();
    assert_eq!(down.len(), 2);
    assert_eq!(down[1].version, 2);
    assert_error(
        &h.call(Method::DELETE, "/api/v1/links/nosuch", Some(&creator), None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &h.call(Method::DELETE, "/api/v1/links/bad.code", Some(&creator), None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn takedown_is_audited_and_retried_after_a_failed_tombstone() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "phish"}))
        .await;
    for bad in [
        json!({}),
        json!({"reason": ""}),
        json!({"reason": "   "}),
        json!({"reason": 5}),
        json!({"reason": "x", "actor": "someone"}),
    ] {
        let r = h
            .call(Method::POST, "/api/v1/links/phish/takedown", Some(OPERATOR), Some(bad))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    }
    assert_eq!(
        h.store.get_link("phish").await.unwrap().unwrap().version,
        1,
        "bad requests changed nothing"
    );

    h.events.fail_deactivations.store(true, Ordering::SeqCst);
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/phish/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "phishing"})),
        )
        .await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "invalidation_failed");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    h.events.fail_deactivations.store(false, Ordering::SeqCst);
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/phish/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "phishing"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["is_active"], false);
    assert_eq!(r.body["version"], 2, "the retry skipped the state change");
    assert_eq!(r.body["deleted_by"], "bootstrap", "the actor comes from the key");
    assert_eq!(r.body["delete_reason"], "phishing");
    let audit = h.store.audit_for("phish").await.unwrap();
    let outcomes: Vec<&str> = audit.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(outcomes, ["invalidate_failed", "already_down"]);
    assert!(audit
        .iter()
        .all(|e| e.actor == "bootstrap" && e.action == "takedown" && e.reason.as_deref() == Some("phishing")));
    assert_error(
        &h.call(
            Method::POST,
            "/api/v1/links/nosuch/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "x"})),
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn listing_pages_and_bad_parameters() {
    let h = harness().await;
    for i in 0..5 {
        h.create(OPERATOR, json!({"long_url": format!("https://e.com/{i}")}))
            .await;
        h.clock.advance(1);
    }
    h.call(Method::DELETE, &format!("/api/v1/links/{}", "x"), Some(OPERATOR), None)
        .await;
    let mut seen = Vec::new();
    let mut uri = "/api/v1/links?limit=2".to_owned();
    loop {
        let r = h.call(Method::GET, &uri, Some(OPERATOR), None).await;
        assert_eq!(r.status, StatusCode::OK);
        for l in r.body["links"].as_array().unwrap() {
            seen.push(l["long_url"].as_str().unwrap().to_owned());
        }
        match r.body["next_cursor"].as_str() {
            Some(c) => uri = format!("/api/v1/links?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(
        seen,
        (0..5).rev().map(|i| format!("https://e.com/{i}")).collect::<Vec<_>>(),
        "newest first"
    );
    for bad in ["limit=0", "limit=1001", "limit=abc", "limit=-1"] {
        assert_error(
            &h.call(Method::GET, &format!("/api/v1/links?{bad}"), Some(OPERATOR), None)
                .await,
            StatusCode::BAD_REQUEST,
            "invalid_limit",
        );
    }
    for bad in ["cursor=zzz", "cursor=1.a", "cursor=..", "cursor=%00"] {
        assert_error(
            &h.call(Method::GET, &format!("/api/v1/links?{bad}"), Some(OPERATOR), None)
                .await,
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        );
    }
    // A parameter given twice is ambiguous: refused, not silently "the last one wins".
    for uri in [
        "/api/v1/links?limit=2&limit=3",
        "/api/v1/links/x/stats?from=2026-01-01&from=2026-01-02",
    ] {
        assert_error(
            &h.call(Method::GET, uri, Some(OPERATOR), None).await,
            StatusCode::BAD_REQUEST,
            "invalid_query",
        );
    }
    // Percent-encoding and `+` are decoded as a form query: limit=%32 is 2.
    let r = h
        .call(Method::GET, "/api/v1/links?limit=%32&unknown=x+y", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["links"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn deleted_links_are_listed_and_flagged() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "del"}))
        .await;
    h.call(Method::DELETE, "/api/v1/links/del", Some(OPERATOR), None).await;
    let r = h.call(Method::GET, "/api/v1/links", Some(OPERATOR), None).await;
    assert_eq!(r.body["links"][0]["code"], "del");
    assert_eq!(r.body["links"][0]["is_active"], false);
}

#[tokio::test]
async fn a_breakdown_reads_the_clicks_by_value_of_its_dimension() {
    use rebound_store::{BreakdownStore, Dimension, DimensionAdd, DimensionBatch};
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "bdown"}))
        .await;
    let today = rebound_core::Day::of_millis(NOW);
    let add = |day: rebound_core::Day, dimension, value: &str, clicks| DimensionAdd {
        code: "bdown".into(),
        day,
        dimension,
        value: value.into(),
        clicks,
    };
    h.store
        .apply_dimensions(&DimensionBatch {
            id: "d1".into(),
            adds: vec![
                add(today, Dimension::Country, "DE", 3),
                add(today.plus(-1), Dimension::Country, "DE", 2),
                add(today, Dimension::Country, "JP", 4),
                add(today.plus(-40), Dimension::Country, "FR", 9),
                add(today, Dimension::Referrer, "direct", 1),
            ],
        })
        .await
        .unwrap();
    let h = &h;
    let get = |uri: String| async move {
        let r = h.call(Method::GET, &uri, Some(OPERATOR), None).await;
        (r.status, r.body)
    };
    let (status, body) = get("/api/v1/links/bdown/stats?by=country".to_owned()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["breakdown"],
        json!({"by": "country", "values": [{"value": "DE", "clicks": 5}, {"value": "JP", "clicks": 4}], "counted": 9}),
        "the default 30 days, summed, most clicked first"
    );
    let from = today.plus(-40).to_iso();
    let (_, body) = get(format!("/api/v1/links/bdown/stats?by=country&from={from}&to={from}")).await;
    assert_eq!(body["breakdown"]["values"], json!([{"value": "FR", "clicks": 9}]));
    let (_, body) = get("/api/v1/links/bdown/stats?by=device".to_owned()).await;
    assert_eq!(body["breakdown"], json!({"by": "device", "values": [], "counted": 0}));
    let (_, body) = get("/api/v1/links/bdown/stats".to_owned()).await;
    assert!(
        body.get("breakdown".to_owned()).is_none(),
        "no by, no breakdown: {body}"
    );
    for bad in ["by=Country", "by=", "by=city", "by=country&by=os"] {
        let (status, body) = get(format!("/api/v1/links/bdown/stats?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}

#[tokio::test]
async fn stats_ranges_and_bad_dates() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "stat"}))
        .await;
    let today = rebound_core::Day::of_millis(NOW);
    h.store
        .apply_clicks(&rebound_store::ClickBatch {
            id: "b1".into(),
            adds: vec![
                rebound_store::ClickAdd {
                    code: "stat".into(),
                    day: today,
                    clicks: 5,
                    bot_clicks: 0,
                },
                rebound_store::ClickAdd {
                    code: "stat".into(),
                    day: today.plus(-40),
                    clicks: 7,
                    bot_clicks: 0,
                },
            ],
        })
        .await
        .unwrap();
    let r = h
        .call(Method::GET, "/api/v1/links/stat/stats", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["code"], "stat");
    assert_eq!(r.body["total"], 5, "the default range is the last 30 days");
    let days = r.body["days"].as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert_eq!(days[29]["day"], today.to_iso());
    assert_eq!(days[29]["clicks"], 5);
    let from = today.plus(-40).to_iso();
    let r = h
        .call(
            Method::GET,
            &format!("/api/v1/links/stat/stats?from={from}"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(r.body["total"], 12);
    assert_eq!(r.body["days"].as_array().unwrap().len(), 41);
    let r = h
        .call(
            Method::GET,
            &format!("/api/v1/links/stat/stats?from={from}&to={from}"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(r.body["total"], 7);
    for bad in [
        "from=2026-13-01",
        "to=yesterday",
        "from=2026-09-21&to=2026-09-20",
        "from=2025-01-01&to=2026-09-21",
        "from=",
    ] {
        assert_error(
            &h.call(
                Method::GET,
                &format!("/api/v1/links/stat/stats?{bad}"),
                Some(OPERATOR),
                None,
            )
            .await,
            StatusCode::BAD_REQUEST,
            "invalid_date",
        );
    }
    assert_error(
        &h.call(Method::GET, "/api/v1/links/nosuch/stats", Some(OPERATOR), None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn store_outage_is_503_not_500() {
    let h = harness().await;
    h.store.set_unavailable(true);
    let r = h
        .create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "down"}))
        .await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
}

#[tokio::test]
async fn openapi_and_unknown_routes() {
    let h = harness().await;
    let r = h.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/api/v1/links",
        "/api/v1/links/{code}",
        "/api/v1/links/{code}/takedown",
        "/api/v1/links/{code}/stats",
        "/api/v1/keys",
        "/api/v1/keys/{id}",
    ] {
        assert!(r.body["paths"][path].is_object(), "{path} documented");
    }
    assert!(r.body["components"]["securitySchemes"]["api_key"].is_object());
    assert_error(
        &h.call(Method::GET, "/api/v1/nothing", Some(OPERATOR), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &h.call(Method::PUT, "/api/v1/links", Some(OPERATOR), None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
}

#[tokio::test]
async fn bulk_import_reports_each_link_and_writes_only_the_valid_ones() {
    let h = harness_with(|s| {
        s.api.creator_burst = 5;
        s.api.creator_rate_per_sec = 1.0;
    })
    .await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "taken"}))
        .await;
    let body = json!({"links": [
        {"long_url": "https://e.com/1"},
        {"long_url": "ftp://nope"},
        {"long_url": "https://e.com/2", "custom_alias": "taken"},
        {"long_url": "https://e.com/3", "custom_alias": "fresh-one", "redirect": 301},
        {"long_url": "https://e.com/4", "custom_alias": "api"},
    ]});
    let r = h
        .call(Method::POST, "/api/v1/links/import", Some(OPERATOR), Some(body))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["created"].clone(), r.body["failed"].clone()),
        (json!(2), json!(3))
    );
    let results = r.body["results"].as_array().unwrap();
    assert_eq!(results[0]["code"].as_str().unwrap().len(), 7);
    assert_eq!(results[1]["error"]["code"], "invalid_url");
    assert_eq!(results[2]["error"]["code"], "alias_taken");
    assert_eq!(results[3]["code"], "fresh-one");
    assert_eq!(results[3]["redirect"], 301);
    assert_eq!(results[4]["error"]["code"], "reserved_alias");
    assert_eq!(h.link_count().await, 3);
    assert_eq!(
        h.events.created.lock().unwrap().len(),
        3,
        "every imported link is announced"
    );

    for bad in [
        json!({"links": []}),
        json!({"links": (0..1001).map(|i| json!({"long_url": format!("https://e.com/{i}")})).collect::<Vec<_>>()}),
    ] {
        assert_error(
            &h.call(Method::POST, "/api/v1/links/import", Some(OPERATOR), Some(bad))
                .await,
            StatusCode::BAD_REQUEST,
            "invalid_import",
        );
    }
    assert_error(
        &h.call(
            Method::POST,
            "/api/v1/links/import",
            Some(OPERATOR),
            Some(json!({"links": [], "x": 1})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    assert_error(
        &h.call(
            Method::POST,
            "/api/v1/links/import",
            None,
            Some(json!({"links": [{"long_url": "https://e.com/"}]})),
        )
        .await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_eq!(h.link_count().await, 3, "refused imports wrote nothing");

    // Each imported link counts against a creator's rate limit; over it, the links the
    // bucket covers are written and the rest fail one by one.
    let creator = h.new_key("creator").await;
    let six = json!({"links": (0..6).map(|i| json!({"long_url": format!("https://e.com/c{i}")})).collect::<Vec<_>>()});
    let r = h
        .call(Method::POST, "/api/v1/links/import", Some(&creator), Some(six))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["created"].clone(), r.body["failed"].clone()),
        (json!(5), json!(1))
    );
    assert_eq!(r.body["results"][5]["error"]["code"], "rate_limited");
    assert_eq!(r.body["retry_after_secs"], 1);
    assert_eq!(h.link_count().await, 8);
    let one = json!({"links": [{"long_url": "https://e.com/c5"}]});
    let r = h
        .call(Method::POST, "/api/v1/links/import", Some(&creator), Some(one))
        .await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(h.link_count().await, 8);
}

#[tokio::test]
async fn a_delete_whose_tombstone_fails_is_503_and_the_retry_succeeds() {
    let h = harness().await;
    let creator = h.new_key("creator").await;
    h.create(
        &creator,
        json!({"long_url": "https://e.com/", "custom_alias": "del-503"}),
    )
    .await;
    h.events.fail_deactivations.store(true, Ordering::SeqCst);
    let r = h
        .call(Method::DELETE, "/api/v1/links/del-503", Some(&creator), None)
        .await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "invalidation_failed");
    assert_eq!(
        h.store.get_link("del-503").await.unwrap().unwrap().version,
        2,
        "the state change is durable"
    );
    h.events.fail_deactivations.store(false, Ordering::SeqCst);
    assert_eq!(
        h.call(Method::DELETE, "/api/v1/links/del-503", Some(&creator), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let down = h.events.deactivated.lock().unwrap().clone();
    assert_eq!(
        (down.len(), down[0].version),
        (1, 2),
        "the retry wrote the same tombstone"
    );
    let outcomes: Vec<String> = h
        .store
        .audit_for("del-503")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.outcome)
        .collect();
    assert_eq!(outcomes, ["invalidate_failed", "already_down"]);
}

// Probing the API as an attacker would (issue 14): each of these once misbehaved.

fn with_peer(mut req: Request<Body>, ip: &str) -> Request<Body> {
    let addr: std::net::SocketAddr = format!("{ip}:40000")
        .parse()
        .or_else(|_| format!("[{ip}]:40000").parse())
        .unwrap();
    req.extensions_mut().insert(axum::extract::ConnectInfo(addr));
    req
}

fn anonymous_create(ip: &str) -> Request<Body> {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/links")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({"long_url": "https://e.com/"}).to_string()))
        .unwrap();
    with_peer(req, ip)
}

#[tokio::test]
async fn stats_dates_outside_the_supported_range_are_400_not_a_panic() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "far"}))
        .await;
    for query in [
        "to=-9999-01-01",
        "to=-9999-01-29",
        "to=-0001-12-31",
        "to=0000-01-10",
        "from=-9999-01-01&to=-9999-01-05",
        "from=+2026-01-01&to=2026-01-02",
        "from=9999-12-30&to=9999-12-31x",
    ] {
        let r = h
            .call(
                Method::GET,
                &format!("/api/v1/links/far/stats?{query}"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_date");
    }
    // The edges of the range are served.
    let r = h
        .call(
            Method::GET,
            "/api/v1/links/far/stats?from=9999-12-30&to=9999-12-31",
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["days"][1]["day"], "9999-12-31");
    let r = h
        .call(
            Method::GET,
            "/api/v1/links/far/stats?from=0000-01-01&to=0000-01-02",
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["days"][0]["day"], "0000-01-01");
}

fn import_of(n: usize, prefix: &str) -> Value {
    json!({"links": (0..n).map(|i| json!({"long_url": format!("https://e.com/{prefix}{i}")})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn an_import_larger_than_the_burst_creates_what_the_bucket_covers() {
    let h = harness_with(|s| {
        s.api.creator_burst = 5;
        s.api.creator_rate_per_sec = 1.0;
    })
    .await;
    let creator = h.new_key("creator").await;
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(&creator),
            Some(import_of(12, "a")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["created"].clone(), r.body["failed"].clone()),
        (json!(5), json!(7))
    );
    let results = r.body["results"].as_array().unwrap();
    assert!(
        results[..5].iter().all(|o| o["code"].is_string()),
        "the first links are created"
    );
    assert!(results[5..].iter().all(|o| o["error"]["code"] == "rate_limited"));
    // Five tokens (the burst) are back after five seconds: a promise that can come true.
    assert_eq!(r.body["retry_after_secs"], 5);
    assert_eq!(h.link_count().await, 5);

    // An empty bucket answers 429 with a Retry-After that is true for one link.
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(&creator),
            Some(import_of(3, "b")),
        )
        .await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    h.clock.advance(1000);
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(&creator),
            Some(import_of(3, "b")),
        )
        .await;
    assert_eq!(
        (r.body["created"].clone(), r.body["failed"].clone()),
        (json!(1), json!(2))
    );

    // Links refused for their content cost nothing.
    h.clock.advance(5000);
    let mixed = json!({"links": [
        {"long_url": "ftp://nope"}, {"long_url": "https://e.com/ok"}, {"long_url": "nope"},
        {"long_url": "https://e.com/x", "custom_alias": "api"},
    ]});
    let r = h
        .call(Method::POST, "/api/v1/links/import", Some(&creator), Some(mixed))
        .await;
    assert_eq!(r.body["created"], 1, "{:?}", r.body);
    assert_eq!(r.body["retry_after_secs"], Value::Null);
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(&creator),
            Some(import_of(4, "c")),
        )
        .await;
    assert_eq!(r.body["created"], 4, "{:?}", r.body);

    // An anonymous import over its burst of 10 works the same way.
    let h = harness_with(|s| s.api.anonymous_create = true).await;
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/links/import")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(import_of(25, "d").to_string()))
        .unwrap();
    let r = h.send(with_peer(req, "192.0.2.7")).await;
    assert_eq!(
        (r.body["created"].clone(), r.body["failed"].clone()),
        (json!(10), json!(15))
    );
}

#[tokio::test]
async fn every_word_a_route_uses_is_reserved_as_an_alias() {
    let h = harness().await;
    let doc: Value = serde_json::from_str(&rebound_control_plane::openapi_json()).unwrap();
    let mut words = Vec::new();
    for path in doc["paths"].as_object().unwrap().keys() {
        for segment in path.split('/').filter(|s| !s.is_empty() && !s.starts_with('{')) {
            if rebound_core::code::check_code(segment).is_ok() {
                words.push(segment.to_owned());
            }
        }
    }
    assert!(words.iter().any(|w| w == "import"), "{words:?}");
    for w in &words {
        assert!(rebound_core::code::is_reserved(w), "route word {w:?} is not reserved");
    }
    for alias in [
        "import", "IMPORT", "Import", "takedown", "Stats", "keys", "links", "console",
    ] {
        let r = h
            .create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": alias}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "reserved_alias");
    }
    assert_eq!(h.link_count().await, 0);
}

#[tokio::test]
async fn a_takedown_reason_is_counted_in_characters() {
    let h = harness().await;
    h.create(
        OPERATOR,
        json!({"long_url": "https://e.com/", "custom_alias": "accent"}),
    )
    .await;
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/accent/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "é".repeat(1001)})),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_reason");
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/accent/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "é".repeat(501)})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["delete_reason"], "é".repeat(501));
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/accent/takedown",
            Some(OPERATOR),
            Some(json!({"reason": "é".repeat(1000)})),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "a repeat keeps the first record: {:?}",
        r.body
    );
}

#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let h = harness().await;
    let creator = h.new_key("creator").await;
    for (first, second) in [
        (format!("Bearer {OPERATOR}"), format!("Bearer {creator}")),
        (format!("Bearer {creator}"), format!("Bearer {OPERATOR}")),
        (format!("Bearer {OPERATOR}"), format!("Bearer {OPERATOR}")),
    ] {
        let req = Request::builder()
            .method(Method::GET)
            .uri("/api/v1/links")
            .header(header::AUTHORIZATION, first)
            .header(header::AUTHORIZATION, second)
            .body(Body::empty())
            .unwrap();
        let r = h.send(req).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_authorization");
    }
}

#[tokio::test]
async fn an_idempotent_replay_is_not_charged_to_the_rate_limit() {
    let h = harness_with(|s| {
        s.api.creator_burst = 1;
        s.api.creator_rate_per_sec = 0.001;
    })
    .await;
    let creator = h.new_key("creator").await;
    let send = |key: &'static str| {
        Request::builder()
            .method(Method::POST)
            .uri("/api/v1/links")
            .header(header::AUTHORIZATION, format!("Bearer {creator}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", key)
            .body(Body::from(json!({"long_url": "https://e.com/r"}).to_string()))
            .unwrap()
    };
    let first = h.send(send("retry-1")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    for _ in 0..3 {
        let again = h.send(send("retry-1")).await;
        assert_eq!(again.status, StatusCode::CREATED, "{:?}", again.body);
        assert_eq!(again.body, first.body);
    }
    // A new key is a new link, and that one is charged.
    assert_error(
        &h.send(send("retry-2")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    );
    assert_eq!(h.link_count().await, 1);
}

#[tokio::test]
async fn anonymous_ipv6_callers_share_a_bucket_per_64() {
    let h = harness_with(|s| {
        s.api.anonymous_create = true;
        s.api.anonymous_burst = 2;
        s.api.anonymous_rate_per_sec = 0.001;
    })
    .await;
    assert_eq!(
        h.send(anonymous_create("2001:db8:1:2::1")).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        h.send(anonymous_create("2001:db8:1:2:ffff::2")).await.status,
        StatusCode::CREATED
    );
    let r = h.send(anonymous_create("2001:db8:1:2:abcd:1234:5678:9")).await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(
        h.send(anonymous_create("2001:db8:1:3::1")).await.status,
        StatusCode::CREATED,
        "another /64 is another caller"
    );
    // An IPv4 client is the same caller over IPv4 and as an IPv4-mapped IPv6 address.
    assert_eq!(h.send(anonymous_create("192.0.2.1")).await.status, StatusCode::CREATED);
    assert_eq!(
        h.send(anonymous_create("::ffff:192.0.2.1")).await.status,
        StatusCode::CREATED
    );
    let r = h.send(anonymous_create("192.0.2.1")).await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(h.send(anonymous_create("192.0.2.2")).await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn every_spelling_of_the_own_host_is_refused_as_a_loop() {
    let h = harness_with(|s| s.public_base_url = "http://127.0.0.1:48080".into()).await;
    for target in [
        "http://[::ffff:127.0.0.1]:48080/x",
        "http://localhost:48080/x",
        "http://localhost.:48080/x",
        "http://0.0.0.0:48080/x",
        "http://[::1]:48080/x",
    ] {
        assert_error(
            &h.create(OPERATOR, json!({"long_url": target})).await,
            StatusCode::BAD_REQUEST,
            "invalid_url",
        );
    }
    assert_eq!(h.link_count().await, 0);
    let r = h
        .create(OPERATOR, json!({"long_url": "http://localhost:48081/x"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "another port is another service");
}

#[tokio::test]
async fn mixed_script_hosts_are_refused_for_anonymous_callers_and_when_configured() {
    let homograph = json!({"long_url": "https://раураl.com/login"});
    let h = harness_with(|s| s.api.anonymous_create = true).await;
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/links")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(homograph.to_string()))
        .unwrap();
    assert_error(
        &h.send(with_peer(req, "192.0.2.9")).await,
        StatusCode::BAD_REQUEST,
        "invalid_url",
    );
    assert_eq!(
        h.create(OPERATOR, homograph.clone()).await.status,
        StatusCode::CREATED,
        "keyed callers are trusted by default"
    );
    let h = harness_with(|s| s.api.refuse_mixed_script_for_keys = true).await;
    assert_error(
        &h.create(OPERATOR, homograph).await,
        StatusCode::BAD_REQUEST,
        "invalid_url",
    );
    assert_eq!(
        h.create(OPERATOR, json!({"long_url": "https://раура.com/"}))
            .await
            .status,
        StatusCode::CREATED,
        "one script per label is fine"
    );
    let long_label = format!("https://{}.com/", "a".repeat(64));
    assert_error(
        &h.create(OPERATOR, json!({"long_url": long_label})).await,
        StatusCode::BAD_REQUEST,
        "invalid_url",
    );
}

#[tokio::test]
async fn the_document_states_the_constraints_and_statuses_the_server_enforces() {
    let h = harness().await;
    let doc = h.call(Method::GET, "/api/v1/openapi.json", None, None).await.body;
    let schemas = &doc["components"]["schemas"];
    let create = &schemas["CreateLinkRequest"]["properties"];
    assert_eq!(create["long_url"]["maxLength"], 2048);
    assert_eq!(create["custom_alias"]["pattern"], "^[A-Za-z0-9_-]{3,32}$");
    assert_eq!(create["expires_at"]["format"], "date-time");
    assert_eq!(
        (&create["ttl_seconds"]["minimum"], &create["ttl_seconds"]["maximum"]),
        (&json!(1), &json!(315_360_000))
    );
    assert_eq!(create["redirect"]["enum"], json!([301, 302, 307, 308, null]));
    assert_eq!(
        schemas["CreateKeyRequest"]["properties"]["role"]["enum"],
        json!(["creator", "operator"])
    );
    assert_eq!(schemas["CreateKeyRequest"]["properties"]["name"]["maxLength"], 100);
    assert_eq!(schemas["TakedownRequest"]["properties"]["reason"]["maxLength"], 1000);
    let param = |path: &str, name: &str| {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["schema"]
            .clone()
    };
    let limit = param("/api/v1/links", "limit");
    assert_eq!((&limit["minimum"], &limit["maximum"]), (&json!(1), &json!(1000)));
    assert_eq!(param("/api/v1/links/{code}/stats", "to")["format"], "date");
    for (path, method) in [("/api/v1/keys", "post"), ("/api/v1/links/{code}/takedown", "post")] {
        let responses = &doc["paths"][path][method]["responses"];
        for status in ["400", "401", "403", "408", "413", "415", "500", "503"] {
            assert!(
                responses[status]["content"]["application/json"]["schema"]["$ref"]
                    .as_str()
                    .is_some_and(|r| r.ends_with("/ErrorBody")),
                "{method} {path} documents {status} with the error body"
            );
        }
    }
}

#[tokio::test]
async fn the_server_accepts_what_the_document_allows_and_refuses_the_rest() {
    let h = harness().await;
    // JSON Schema's `integer` includes 60.0.
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://example.com/", "ttl_seconds": 60.0, "redirect": 301.0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["redirect"], 301);
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://example.com/", "ttl_seconds": 60.5}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json");
    let code = r_code(&h.create(OPERATOR, json!({"long_url": "https://example.com/"})).await);
    // An empty date is not a date (format: date): 400, the same for `from` and `to`.
    for query in ["to=", "from=", "from=&to="] {
        let r = h
            .call(
                Method::GET,
                &format!("/api/v1/links/{code}/stats?{query}"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_date");
    }
    let r = h.call(Method::GET, "/api/v1/links?limit=0", Some(OPERATOR), None).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_limit");
    // Lengths count the text as sent: 101 characters with spaces around are too long.
    let name = format!(" {} ", "n".repeat(99));
    let r = h
        .call(
            Method::POST,
            "/api/v1/keys",
            Some(OPERATOR),
            Some(json!({"name": name, "role": "creator"})),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_name");
    let r = h
        .call(
            Method::POST,
            "/api/v1/keys",
            Some(OPERATOR),
            Some(json!({"name": "ci", "role": "Creator"})),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_role");
}

fn r_code(r: &Reply) -> String {
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["code"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_console_is_served_at_the_root_with_a_strict_policy_and_nothing_inline() {
    let h = harness().await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/style.css", "text/css"),
        ("/console/icon.svg", "image/svg+xml"),
    ] {
        let res = h
            .app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let headers = res.headers().clone();
        assert!(
            headers[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(
            policy.contains("default-src 'none'") && policy.contains("script-src 'self';"),
            "{policy}"
        );
        assert!(
            !policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"),
            "{policy}"
        );
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        if path == "/" {
            assert!(text.contains(r#"<script type="module" src="/console/app.js"></script>"#));
            assert_eq!(text.matches("<script").count(), 1, "no inline script");
            assert!(!text.contains("style="), "no inline style");
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "nothing from elsewhere"
            );
        }
    }
}

/// A control plane of region `region` on `store`, or why it refused to start.
async fn region_on(store: &Arc<MemoryStore>, region: &str, slot: u8) -> Result<ControlPlane, String> {
    let mut config = ControlPlaneConfig {
        bootstrap_key: Some(OPERATOR.into()),
        public_base_url: "https://sho.rt".into(),
        ..ControlPlaneConfig::default()
    };
    config.api.region = region.into();
    config.api.region_slot = slot;
    ControlPlane::new(
        config,
        store.clone() as Arc<dyn Store>,
        Arc::new(RecordedLinkEvents::default()),
        Arc::new(ManualClock::at(NOW)) as Arc<dyn Clock>,
    )
    .await
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn regions_create_from_their_own_slots_and_a_slot_held_by_another_region_is_refused() {
    use rebound_core::generated::{region_counter, split_value, GeneratedCodes, CODE_KEY_SETTING};
    let store = Arc::new(MemoryStore::new());
    let home = region_on(&store, "us-east-1", 0).await.unwrap();
    let away = region_on(&store, "eu-west-1", 1).await.unwrap();
    let key = store.read_setting(CODE_KEY_SETTING).await.unwrap().unwrap();
    let codes = GeneratedCodes::new(rebound_core::generated::key_from_hex(&key).unwrap());
    let mut seen = std::collections::HashSet::new();
    for i in 0..200 {
        for (cp, slot) in [(&home, 0u8), (&away, 1u8)] {
            let h = Harness {
                app: router(cp.clone()),
                cp: cp.clone(),
                store: store.clone(),
                events: Arc::new(RecordedLinkEvents::default()),
                clock: ManualClock::at(NOW),
            };
            let r = h
                .create(OPERATOR, json!({"long_url": format!("https://example.com/{i}")}))
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
            let code = r.body["code"].as_str().unwrap().to_owned();
            let value = codes.value_of(code.as_bytes()).unwrap();
            assert_eq!(
                split_value(value).map(|(s, _)| s),
                Some(slot),
                "{code} from region slot {slot}"
            );
            assert!(seen.insert(code), "a code given twice");
        }
    }
    assert!(store.high_water(&region_counter(1)).await.unwrap() >= 200);
    // A second region on a held slot is refused, naming both; the holder starts again.
    let refused = match region_on(&store, "ap-south-1", 1).await {
        Err(refused) => refused,
        Ok(_) => panic!("a second region on a held slot started"),
    };
    assert!(
        refused.contains("region slot 1") && refused.contains("eu-west-1") && refused.contains("ap-south-1"),
        "{refused}"
    );
    assert!(region_on(&store, "eu-west-1", 1).await.is_ok());
}

#[tokio::test]
async fn a_links_qr_code_its_audit_log_and_who_the_key_is() {
    let h = harness().await;
    let creator = h.new_key("creator").await;
    let code = r_code(&h.create(&creator, json!({"long_url": "https://example.com/qr"})).await);
    let res = h
        .app
        .clone()
        .oneshot(
            Request::get(format!("/api/v1/links/{code}/qr.svg"))
                .header(header::AUTHORIZATION, format!("Bearer {creator}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()[header::CONTENT_TYPE], "image/svg+xml");
    let svg = res.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&svg).contains("<svg"));
    assert_error(
        &h.call(Method::GET, "/api/v1/links/nosuch/qr.svg", Some(&creator), None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &h.call(Method::GET, &format!("/api/v1/links/{code}/qr.svg"), None, None)
            .await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );

    let me = h.call(Method::GET, "/api/v1/me", Some(&creator), None).await;
    assert_eq!(me.body["role"], "creator");
    assert_eq!(
        h.call(Method::GET, "/api/v1/me", Some(OPERATOR), None).await.body["role"],
        "operator"
    );

    let audit = format!("/api/v1/links/{code}/audit");
    assert_error(
        &h.call(Method::GET, &audit, Some(&creator), None).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let r = h
        .call(
            Method::POST,
            &format!("/api/v1/links/{code}/takedown"),
            Some(OPERATOR),
            Some(json!({"reason": "phishing"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let log = h.call(Method::GET, &audit, Some(OPERATOR), None).await;
    assert_eq!(log.status, StatusCode::OK, "{:?}", log.body);
    let events = log.body["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            &events[0]["action"],
            &events[0]["reason"],
            &events[0]["outcome"],
            &events[0]["actor"]
        ),
        (
            &json!("takedown"),
            &json!("phishing"),
            &json!("ok"),
            &json!("bootstrap")
        )
    );
}

#[tokio::test]
async fn a_limit_is_digits_only() {
    let h = harness().await;
    // A query is read as a form: `+` there is a space, %2B the sign that `usize` accepted.
    for bad in [
        "limit=%2B5",
        "limit=+5",
        "limit=%205",
        "limit=5%20",
        "limit=0x5",
        "limit=",
    ] {
        let r = h
            .call(Method::GET, &format!("/api/v1/links?{bad}"), Some(OPERATOR), None)
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_limit");
    }
    let r = h
        .call(Method::GET, "/api/v1/links?limit=005", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

/// Idempotent imports, shape errors judged per link, single-valued headers, and requests
/// compared as the server understood them (issue 28, items 3, 7, 8 and 9).
mod imports_and_idempotency {
    use super::*;

    fn keyed(method: Method, uri: &str, keys: &[&str], body: &str) -> Request<Body> {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
            .header(header::CONTENT_TYPE, "application/json");
        for k in keys {
            req = req.header("Idempotency-Key", *k);
        }
        req.body(Body::from(body.to_owned())).unwrap()
    }

    fn import(key: &str, body: &Value) -> Request<Body> {
        keyed(Method::POST, "/api/v1/links/import", &[key], &body.to_string())
    }

    #[tokio::test]
    async fn a_retried_import_with_the_same_key_is_replayed_not_redone() {
        let h = harness().await;
        let body = json!({"links": [
            {"long_url": "https://e.com/1"},
            {"long_url": "https://e.com/2", "custom_alias": "imp-two"},
            {"long_url": "ftp://nope"},
        ]});
        let first = h.send(import("imp-1", &body)).await;
        assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
        assert_eq!(first.body["created"], 2);
        let again = h.send(import("imp-1", &body)).await;
        assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
        assert_eq!(again.body, first.body, "the first answer, again");
        assert_eq!(h.link_count().await, 2, "no link was created twice");
        assert_eq!(h.events.created.lock().unwrap().len(), 2);

        let other = json!({"links": [{"long_url": "https://e.com/other"}]});
        assert_error(
            &h.send(import("imp-1", &other)).await,
            StatusCode::CONFLICT,
            "idempotency_key_reused",
        );
        assert_eq!(h.link_count().await, 2);
        // Another key is another import.
        let r = h.send(import("imp-2", &other)).await;
        assert_eq!(r.body["created"], 1, "{:?}", r.body);
        assert_eq!(h.link_count().await, 3);
    }

    #[tokio::test]
    async fn an_import_replayed_after_it_stopped_midway_creates_only_the_rest() {
        // A creator's bucket of 2 stops the first attempt after two links, as a crash
        // after two committed links would: each committed link has its record.
        let h = harness_with(|s| {
            s.api.creator_burst = 2;
            s.api.creator_rate_per_sec = 1.0;
        })
        .await;
        let creator = h.new_key("creator").await;
        let body =
            json!({"links": (0..5).map(|i| json!({"long_url": format!("https://e.com/{i}")})).collect::<Vec<_>>()});
        let send = |body: &Value| {
            Request::builder()
                .method(Method::POST)
                .uri("/api/v1/links/import")
                .header(header::AUTHORIZATION, format!("Bearer {creator}"))
                .header(header::CONTENT_TYPE, "application/json")
                .header("Idempotency-Key", "chunk-1")
                .body(Body::from(body.to_string()))
                .unwrap()
        };
        let first = h.send(send(&body)).await;
        assert_eq!(first.body["created"], 2, "{:?}", first.body);
        assert_eq!(h.link_count().await, 2);
        h.clock.advance(3_000);
        let again = h.send(send(&body)).await;
        assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
        assert_eq!(again.body["created"], 4, "{:?}", again.body);
        for i in 0..2 {
            assert_eq!(
                again.body["results"][i], first.body["results"][i],
                "a committed link is answered as it was"
            );
        }
        assert_eq!(h.link_count().await, 4, "the committed links were not made again");
        h.clock.advance(3_000);
        let last = h.send(send(&body)).await;
        assert_eq!(last.body["created"], 5, "{:?}", last.body);
        assert_eq!(h.link_count().await, 5);
    }

    #[tokio::test]
    async fn an_import_judges_each_links_shape_on_its_own() {
        let h = harness().await;
        let body = json!({"links": [
            {"long_url": "https://e.com/1"},
            {"long_url": "https://e.com/2", "bogus": 1},
            {"long_url": 7},
            "https://e.com/4",
            {"long_url": "https://e.com/5", "ttl_seconds": "soon"},
            {"long_url": "https://e.com/6"},
            ["https://e.com/7"],
        ]});
        let r = h
            .call(Method::POST, "/api/v1/links/import", Some(OPERATOR), Some(body))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        assert_eq!(
            (r.body["created"].clone(), r.body["failed"].clone()),
            (json!(2), json!(5))
        );
        let results = r.body["results"].as_array().unwrap();
        assert_eq!(results[0]["long_url"], "https://e.com/1");
        for i in [1, 2, 3, 4, 6] {
            assert_eq!(results[i]["error"]["code"], "invalid_json", "{:?}", results[i]);
        }
        assert!(
            results[1]["error"]["message"].as_str().unwrap().contains("bogus"),
            "{:?}",
            results[1]
        );
        assert_eq!(results[5]["long_url"], "https://e.com/6");
        assert_eq!(h.link_count().await, 2);
        // The request itself must still be an object with `links`, an array; a create's
        // body an object (serde would read a struct from an array of its fields).
        let r = h
            .call(
                Method::POST,
                "/api/v1/links",
                Some(OPERATOR),
                Some(json!(["https://e.com/8"])),
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json");
        for bad in [json!({"links": {"long_url": "https://e.com/"}}), json!([1])] {
            assert_error(
                &h.call(Method::POST, "/api/v1/links/import", Some(OPERATOR), Some(bad))
                    .await,
                StatusCode::BAD_REQUEST,
                "invalid_json",
            );
        }
    }

    #[tokio::test]
    async fn a_single_valued_header_given_twice_is_refused() {
        let h = harness().await;
        let body = json!({"long_url": "https://e.com/x"}).to_string();
        for uri in ["/api/v1/links", "/api/v1/links/import"] {
            let body = if uri.ends_with("import") {
                format!("{{\"links\": [{body}]}}")
            } else {
                body.clone()
            };
            for keys in [&["k-a", "k-b"][..], &["k-a", "k-a"][..]] {
                let r = h.send(keyed(Method::POST, uri, keys, &body)).await;
                assert_error(&r, StatusCode::BAD_REQUEST, "invalid_idempotency_key");
            }
            for (name, values) in [
                ("content-type", ["application/json", "text/plain"]),
                ("content-length", ["30", "31"]),
            ] {
                let mut req = keyed(Method::POST, uri, &[], &body);
                for v in values {
                    req.headers_mut().append(name, v.parse().unwrap());
                }
                let r = h.send(req).await;
                assert_eq!(r.status, StatusCode::BAD_REQUEST, "{name}: {:?}", r.body);
            }
        }
        assert_eq!(h.link_count().await, 0, "nothing was created");
    }

    #[tokio::test]
    async fn a_replay_compares_the_request_as_understood_not_its_bytes() {
        let h = harness().await;
        let first = h
            .send(keyed(
                Method::POST,
                "/api/v1/links",
                &["same-number"],
                r#"{"long_url": "https://e.com/t", "ttl_seconds": 60}"#,
            ))
            .await;
        assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
        for same in [
            r#"{"long_url": "https://e.com/t", "ttl_seconds": 60.0}"#,
            r#"{"ttl_seconds": 6e1, "long_url": "https://e.com/t", "redirect": null}"#,
        ] {
            let r = h
                .send(keyed(Method::POST, "/api/v1/links", &["same-number"], same))
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{same}: {:?}", r.body);
            assert_eq!(r.body, first.body, "{same}");
        }
        let r = h
            .send(keyed(
                Method::POST,
                "/api/v1/links",
                &["same-number"],
                r#"{"long_url": "https://e.com/t", "ttl_seconds": 61}"#,
            ))
            .await;
        assert_error(&r, StatusCode::CONFLICT, "idempotency_key_reused");
        // An import is compared the same way.
        let a = h
            .send(keyed(
                Method::POST,
                "/api/v1/links/import",
                &["same-import"],
                r#"{"links": [{"long_url": "https://e.com/i", "redirect": 301}]}"#,
            ))
            .await;
        let b = h
            .send(keyed(
                Method::POST,
                "/api/v1/links/import",
                &["same-import"],
                r#"{"links": [{"redirect": 301.0, "long_url": "https://e.com/i"}]}"#,
            ))
            .await;
        assert_eq!((a.status, &a.body), (StatusCode::OK, &b.body));
        assert_eq!(h.link_count().await, 2);
    }

    #[tokio::test]
    async fn a_replay_with_another_password_is_another_request() {
        let h = harness().await;
        let create = |password: &str| {
            let body = json!({"long_url": "https://e.com/pw", "password": password});
            keyed(Method::POST, "/api/v1/links", &["pw-create"], &body.to_string())
        };
        let first = h.send(create("first secret")).await;
        assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
        let again = h.send(create("first secret")).await;
        assert_eq!((again.status, &again.body), (StatusCode::CREATED, &first.body));
        assert_error(
            &h.send(create("other secret")).await,
            StatusCode::CONFLICT,
            "idempotency_key_reused",
        );
        assert_eq!(h.link_count().await, 1);

        // An import, its links read as creates or not ("redirect" cannot be read); a link
        // created beside them records the import's hash.
        for (key, link) in [
            ("pw-import", json!({"long_url": "https://e.com/i"})),
            (
                "pw-import-unread",
                json!({"long_url": "https://e.com/i", "redirect": "x"}),
            ),
        ] {
            let import_with = |password: &str| {
                let mut link = link.clone();
                link["password"] = json!(password);
                import(key, &json!({"links": [{"long_url": "https://e.com/beside"}, link]}))
            };
            let first = h.send(import_with("first secret")).await;
            assert_eq!(first.status, StatusCode::OK, "{key}: {:?}", first.body);
            let again = h.send(import_with("first secret")).await;
            assert_eq!((again.status, &again.body), (StatusCode::OK, &first.body), "{key}");
            assert_error(
                &h.send(import_with("other secret")).await,
                StatusCode::CONFLICT,
                "idempotency_key_reused",
            );
        }
    }

    #[tokio::test]
    async fn idempotency_records_hold_a_password_only_as_a_keyed_mac() {
        use rebound_core::password::{IDEMPOTENCY_KEY_SETTING, UNLOCK_KEY_SETTING};
        use sha2::Digest;
        // Two fleets (two stores, so two secrets) record the same requests.
        let (a, b) = (harness().await, harness().await);
        let password = "correct horse battery";
        let with_password = json!({"long_url": "https://e.com/k", "password": password});
        let without = json!({"long_url": "https://e.com/n"});
        let mut hashes = Vec::new();
        for h in [&a, &b] {
            let secret = h.store.read_setting(IDEMPOTENCY_KEY_SETTING).await.unwrap();
            let secret = secret.expect("the secret is made at start");
            assert_eq!(hex::decode(&secret).unwrap().len(), 32);
            let unlock = h.store.read_setting(UNLOCK_KEY_SETTING).await.unwrap();
            assert_ne!(Some(secret), unlock, "a key of its own, never the proxies'");
            let mut records = Vec::new();
            for (key, req) in [
                (
                    "c-pw",
                    keyed(Method::POST, "/api/v1/links", &["c-pw"], &with_password.to_string()),
                ),
                ("i-pw#0", import("i-pw", &json!({"links": [with_password.clone()]}))),
                (
                    "u-pw#0",
                    import(
                        "u-pw",
                        &json!({"links": [without.clone(), {"long_url": "https://e.com/u", "password": password, "redirect": "x"}]}),
                    ),
                ),
                (
                    "c-none",
                    keyed(Method::POST, "/api/v1/links", &["c-none"], &without.to_string()),
                ),
            ] {
                let r = h.send(req).await;
                assert!(r.status.is_success(), "{key}: {:?}", r.body);
                let record = h.store.get_idempotency("bootstrap", key, NOW).await.unwrap();
                let record = record.unwrap_or_else(|| panic!("{key}: recorded"));
                let stored = serde_json::to_string(&record.request_hash).unwrap() + &record.body;
                assert!(!stored.contains(password), "{key}: {stored}");
                assert!(!stored.contains(&hex::encode(sha2::Sha256::digest(password))), "{key}");
                records.push(record.request_hash);
            }
            hashes.push(records);
        }
        for (i, key) in ["c-pw", "i-pw", "u-pw"].iter().enumerate() {
            assert_ne!(
                hashes[0][i], hashes[1][i],
                "{key}: the password is in it under each fleet's secret"
            );
        }
        // A request without a password is fingerprinted as before: records made before
        // the upgrade still replay.
        assert_eq!(hashes[0][3], hashes[1][3]);
    }

    #[tokio::test]
    async fn a_record_of_a_create_with_its_password_left_out_is_not_replayed() {
        use sha2::Digest;
        let h = harness().await;
        // What the previous version stored for a create with a password: the request with
        // `"(given)"` for the password, so any password matched.
        let request: rebound_api_types::CreateLinkRequest =
            serde_json::from_value(json!({"long_url": "https://e.com/old", "password": "(given)"})).unwrap();
        let digest = sha2::Sha256::new()
            .chain_update(b"create\0")
            .chain_update(serde_json::to_string(&request).unwrap().as_bytes())
            .finalize();
        let link = rebound_core::Link::new_active(
            "oldpw".into(),
            "https://e.com/old".into(),
            rebound_core::RedirectKind::default(),
            false,
            NOW,
            "bootstrap".into(),
            None,
        );
        let record = rebound_store::IdempotencyRecord {
            scope: "bootstrap".into(),
            key: "old-pw".into(),
            request_hash: format!("v2:{}", hex::encode(digest)),
            status: 201,
            body: r#"{"code":"oldpw"}"#.into(),
            created_at: NOW,
            expires_at: NOW + 86_400_000,
        };
        h.store.insert_link(&link, Some(&record)).await.unwrap();
        let body = json!({"long_url": "https://e.com/old", "password": "whatever guess"});
        let r = h
            .send(keyed(Method::POST, "/api/v1/links", &["old-pw"], &body.to_string()))
            .await;
        assert_error(&r, StatusCode::CONFLICT, "idempotency_key_reused");
    }

    #[tokio::test]
    async fn an_idempotency_record_of_the_previous_hash_still_replays() {
        use sha2::Digest;
        let h = harness().await;
        // What the previous version stored: the hash of the body's JSON, keys sorted.
        let raw = r#"{"long_url": "https://e.com/old", "ttl_seconds": 60}"#;
        let canonical = serde_json::from_str::<Value>(raw).unwrap().to_string();
        let link = rebound_core::Link::new_active(
            "oldcode".into(),
            "https://e.com/old".into(),
            rebound_core::RedirectKind::default(),
            false,
            NOW,
            "bootstrap".into(),
            Some(NOW + 60_000),
        );
        let record = rebound_store::IdempotencyRecord {
            scope: "bootstrap".into(),
            key: "old-key".into(),
            request_hash: hex::encode(sha2::Sha256::digest(canonical.as_bytes())),
            status: 201,
            body: r#"{"code":"oldcode"}"#.into(),
            created_at: NOW,
            expires_at: NOW + 86_400_000,
        };
        h.store.insert_link(&link, Some(&record)).await.unwrap();
        let r = h.send(keyed(Method::POST, "/api/v1/links", &["old-key"], raw)).await;
        assert_eq!((r.status, &r.body), (StatusCode::CREATED, &json!({"code": "oldcode"})));
        let r = h
            .send(keyed(
                Method::POST,
                "/api/v1/links",
                &["old-key"],
                r#"{"long_url": "https://e.com/else"}"#,
            ))
            .await;
        assert_error(&r, StatusCode::CONFLICT, "idempotency_key_reused");
    }
}

#[test]
fn the_schema_states_the_domain_rule_the_api_applies() {
    let doc: Value = serde_json::from_str(&rebound_control_plane::openapi_json()).unwrap();
    let name = &doc["components"]["schemas"]["CreateDomainRequest"]["properties"]["name"];
    assert_eq!(name["pattern"], rebound_core::domain::DOMAIN_PATTERN);
    assert_eq!(name["maxLength"], 253);
}

/// The server side of the rules `openapi_json` adds to the schemas (scripts/api-schema-rules.py
/// checks each both ways, with a JSON Schema validator, against the real binary): each is
/// in the document, and the server refuses what it refuses.
#[tokio::test]
async fn the_schema_states_the_rules_that_tie_fields_together_and_the_reserved_aliases() {
    let doc: Value = serde_json::from_str(&rebound_control_plane::openapi_json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let h = harness().await;

    let create = &schemas["CreateLinkRequest"];
    assert_eq!(create["not"]["required"], json!(["expires_at", "ttl_seconds"]));
    let both = json!({"long_url": "https://e.com/", "expires_at": "2027-01-01T00:00:00Z", "ttl_seconds": 60});
    assert_error(
        &h.create(OPERATOR, both).await,
        StatusCode::BAD_REQUEST,
        "invalid_expiry",
    );
    let not_both = json!({"long_url": "https://e.com/", "expires_at": "2027-01-01T00:00:00Z", "ttl_seconds": null});
    assert_eq!(h.create(OPERATOR, not_both).await.status, StatusCode::CREATED);

    let reserved = &create["properties"]["custom_alias"]["not"];
    assert_eq!(reserved["type"], "string", "a null alias is no word");
    let words = reserved["pattern"].as_str().unwrap();
    let words: Vec<&str> = words
        .strip_prefix("^(")
        .unwrap()
        .strip_suffix(")$")
        .unwrap()
        .split('|')
        .collect();
    assert_eq!(words.len(), rebound_core::RESERVED_WORDS.len());
    for word in rebound_core::RESERVED_WORDS {
        let shouted = word.to_ascii_uppercase();
        let any_case: String = shouted
            .chars()
            .map(|c| match c.is_ascii_alphabetic() {
                true => format!("[{c}{}]", c.to_ascii_lowercase()),
                false => c.to_string(),
            })
            .collect();
        assert!(words.contains(&any_case.as_str()), "{word} in {words:?}");
        let r = h
            .create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": shouted}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "reserved_alias");
    }

    let edit = &schemas["EditLinkRequest"];
    assert_eq!(edit["not"]["required"], json!(["expires_at", "ttl_seconds"]));
    assert_eq!(edit["anyOf"].as_array().map(Vec::len), Some(7), "one per field: {edit}");
    for field in [
        "long_url",
        "redirect",
        "forward_query",
        "expires_at",
        "ttl_seconds",
        "password",
        "rules",
    ] {
        assert!(
            edit["anyOf"]
                .as_array()
                .unwrap()
                .iter()
                .any(|given| given["required"] == json!([field])),
            "{field}"
        );
    }

    // A rule: a target or a split, one of the two; its lists' items have their shapes.
    let rule = &schemas["LinkRule"];
    assert_eq!(rule["oneOf"].as_array().map(Vec::len), Some(2), "{rule}");
    assert_eq!(rule["properties"]["countries"]["items"]["pattern"], "^[A-Za-z]{2}$");
    assert_eq!(rule["properties"]["languages"]["items"]["maxLength"], 35);
    for rules in [
        json!([{"os": ["ios"]}]),
        json!([{"os": ["ios"], "target": "https://e.com/a", "split": [
            {"target": "https://e.com/b", "weight": 1}, {"target": "https://e.com/c", "weight": 1}]}]),
    ] {
        let r = h
            .create(OPERATOR, json!({"long_url": "https://e.com/", "rules": rules}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_rules");
    }

    let key = &schemas["CreateKeyRequest"];
    assert_eq!(key["if"]["properties"]["role"]["const"], "operator");
    assert_eq!(key["then"]["properties"]["domains"]["type"], "null");
    let scoped_operator = json!({"name": "k", "role": "operator", "domains": ["sho.rt"]});
    let r = h
        .call(Method::POST, "/api/v1/keys", Some(OPERATOR), Some(scoped_operator))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_domains");

    let long_url = &create["properties"]["long_url"];
    for page in ["not_found_url", "expired_url", "root_url"] {
        let schema = &schemas["CreateDomainRequest"]["properties"][page];
        assert_eq!(
            (&schema["pattern"], &schema["minLength"]),
            (&long_url["pattern"], &json!(1)),
            "{page}"
        );
        let body = json!({"name": "go.example.com", page: ""});
        let r = h
            .call(Method::POST, "/api/v1/domains", Some(OPERATOR), Some(body))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_url");
    }
}

/// `PATCH /api/v1/links/{code}` with `If-Match: "<version>"` and `body`.
async fn edit(h: &Harness, code: &str, key: &str, version: Option<&str>, body: Value) -> Reply {
    let mut req = Request::builder()
        .method(Method::PATCH)
        .uri(format!("/api/v1/links/{code}"))
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(v) = version {
        req = req.header(header::IF_MATCH, v);
    }
    h.send(req.body(Body::from(body.to_string())).unwrap()).await
}

#[tokio::test]
async fn an_edit_changes_the_link_at_its_version_tells_the_caches_and_is_audited() {
    let h = harness().await;
    let creator = h.new_key("creator").await;
    let r = h
        .create(
            &creator,
            json!({"long_url": "https://old.example/a", "custom_alias": "moving", "ttl_seconds": 600}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let g = h.call(Method::GET, "/api/v1/links/moving", Some(&creator), None).await;
    assert_eq!(g.headers[header::ETAG], "\"1\"", "the version is the link's entity tag");

    let r = edit(
        &h,
        "moving",
        &creator,
        Some("\"1\""),
        json!({"long_url": "https://new.example/b", "redirect": 301, "expires_at": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.headers[header::ETAG], "\"2\"");
    assert_eq!(
        (
            &r.body["long_url"],
            &r.body["redirect"],
            &r.body["expires_at"],
            &r.body["version"]
        ),
        (&json!("https://new.example/b"), &json!(301), &Value::Null, &json!(2))
    );
    assert_eq!(r.body["forward_query"], false, "a field not given is kept");
    let stored = h.store.get_link("moving").await.unwrap().unwrap();
    assert_eq!((stored.long_url.as_str(), stored.version), ("https://new.example/b", 2));
    let told: Vec<(String, u64)> = h
        .events
        .changed
        .lock()
        .unwrap()
        .iter()
        .map(|l| (l.long_url.clone(), l.version))
        .collect();
    assert_eq!(told, [("https://new.example/b".to_owned(), 2)], "the caches were told");

    let audit = h
        .call(Method::GET, "/api/v1/links/moving/audit", Some(OPERATOR), None)
        .await;
    let entry = &audit.body["events"][0];
    assert_eq!((&entry["action"], &entry["outcome"]), (&json!("edit"), &json!("ok")));
    assert_eq!(
        (&entry["old"], &entry["new"]),
        (
            &json!({"long_url": "https://old.example/a", "redirect": 302, "expires_at": "2026-09-21T14:23:20.000Z"}),
            &json!({"long_url": "https://new.example/b", "redirect": 301, "expires_at": null})
        )
    );

    // An operator edits any link; a stale version is 412 and changes nothing.
    let r = edit(
        &h,
        "moving",
        OPERATOR,
        Some("\"2\""),
        json!({"forward_query": true, "ttl_seconds": 60}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (&r.body["version"], &r.body["expires_at"]),
        (&json!(3), &json!("2026-09-21T14:14:20.000Z"))
    );
    let r = edit(
        &h,
        "moving",
        &creator,
        Some("\"2\""),
        json!({"long_url": "https://late.example/"}),
    )
    .await;
    assert_error(&r, StatusCode::PRECONDITION_FAILED, "version_mismatch");
    assert_eq!(h.store.get_link("moving").await.unwrap().unwrap().version, 3);
    // An edit that changes nothing writes nothing.
    let r = edit(&h, "moving", &creator, Some("\"3\""), json!({"forward_query": true})).await;
    assert_eq!((r.status, &r.body["version"]), (StatusCode::OK, &json!(3)));
    assert_eq!(h.events.changed.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_bad_edit_gets_its_error_and_changes_nothing() {
    let h = harness_with(|c| c.api.blocked_domains = vec!["evil.example".into()]).await;
    let creator = h.new_key("creator").await;
    let other = h.new_key("creator").await;
    h.create(&creator, json!({"long_url": "https://e.com/", "custom_alias": "mine"}))
        .await;
    h.create(&creator, json!({"long_url": "https://e.com/", "custom_alias": "gone"}))
        .await;
    let r = h.call(Method::DELETE, "/api/v1/links/gone", Some(&creator), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let url = |u: &str| json!({"long_url": u});
    /// (code, key, If-Match, body, status, error code)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Value, StatusCode, &'a str);
    let cases: Vec<Case> = vec![
        (
            "mine",
            &creator,
            None,
            url("https://f.com/"),
            StatusCode::PRECONDITION_REQUIRED,
            "if_match_required",
        ),
        (
            "mine",
            &creator,
            Some("1"),
            url("https://f.com/"),
            StatusCode::BAD_REQUEST,
            "invalid_if_match",
        ),
        (
            "mine",
            &creator,
            Some("W/\"1\""),
            url("https://f.com/"),
            StatusCode::BAD_REQUEST,
            "invalid_if_match",
        ),
        (
            "mine",
            &creator,
            Some("*"),
            url("https://f.com/"),
            StatusCode::BAD_REQUEST,
            "invalid_if_match",
        ),
        (
            "mine",
            &creator,
            Some("\"1\", \"2\""),
            url("https://f.com/"),
            StatusCode::BAD_REQUEST,
            "invalid_if_match",
        ),
        (
            "mine",
            &creator,
            Some("\"9\""),
            url("https://f.com/"),
            StatusCode::PRECONDITION_FAILED,
            "version_mismatch",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            json!({}),
            StatusCode::BAD_REQUEST,
            "empty_edit",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            json!({"custom_alias": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            url("ftp://f.com/"),
            StatusCode::BAD_REQUEST,
            "invalid_url",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            url("https://sho.rt/abc"),
            StatusCode::BAD_REQUEST,
            "invalid_url",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            url("https://a.evil.example/"),
            StatusCode::BAD_REQUEST,
            "invalid_url",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            json!({"redirect": 303}),
            StatusCode::BAD_REQUEST,
            "invalid_redirect",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            json!({"expires_at": "2020-01-01T00:00:00Z"}),
            StatusCode::BAD_REQUEST,
            "invalid_expiry",
        ),
        (
            "mine",
            &creator,
            Some("\"1\""),
            json!({"expires_at": null, "ttl_seconds": 5}),
            StatusCode::BAD_REQUEST,
            "invalid_expiry",
        ),
        (
            "mine",
            &other,
            Some("\"1\""),
            url("https://f.com/"),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        (
            "nope",
            &creator,
            Some("\"1\""),
            url("https://f.com/"),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "gone",
            &creator,
            Some("\"2\""),
            url("https://f.com/"),
            StatusCode::CONFLICT,
            "link_inactive",
        ),
    ];
    for (code, key, version, body, status, error) in cases {
        let r = edit(&h, code, key, version, body).await;
        assert_error(&r, status, error);
    }
    let mine = h.store.get_link("mine").await.unwrap().unwrap();
    assert_eq!(
        (mine.version, mine.long_url.as_str()),
        (1, "https://e.com/"),
        "nothing changed"
    );
    assert!(h.events.changed.lock().unwrap().is_empty());
    assert!(h.store.audit_for("mine").await.unwrap().is_empty());
    // Expired: final, as it is for the redirect.
    h.create(
        &creator,
        json!({"long_url": "https://e.com/", "custom_alias": "brief", "ttl_seconds": 1}),
    )
    .await;
    h.clock.advance(1_000);
    let r = edit(&h, "brief", &creator, Some("\"1\""), json!({"expires_at": null})).await;
    assert_error(&r, StatusCode::CONFLICT, "link_expired");
}

#[tokio::test]
async fn an_edit_the_caches_did_not_hear_answers_503_and_its_retry_tells_them() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "retry"}))
        .await;
    h.events.fail_deactivations.store(true, Ordering::SeqCst);
    let body = json!({"long_url": "https://f.com/"});
    let r = edit(&h, "retry", OPERATOR, Some("\"1\""), body.clone()).await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "invalidation_failed");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    assert_eq!(h.store.get_link("retry").await.unwrap().unwrap().version, 2, "stored");
    h.events.fail_deactivations.store(false, Ordering::SeqCst);
    // The same edit with the same If-Match: the caches are told, nothing is written again.
    let r = edit(&h, "retry", OPERATOR, Some("\"1\""), body).await;
    assert_eq!(
        (r.status, &r.body["version"]),
        (StatusCode::OK, &json!(2)),
        "{:?}",
        r.body
    );
    assert_eq!(h.events.changed.lock().unwrap().len(), 1);
    // Another edit of the old version is stale.
    let r = edit(
        &h,
        "retry",
        OPERATOR,
        Some("\"1\""),
        json!({"long_url": "https://g.com/"}),
    )
    .await;
    assert_error(&r, StatusCode::PRECONDITION_FAILED, "version_mismatch");
    let audit = h.store.audit_for("retry").await.unwrap();
    assert_eq!(
        audit.iter().map(|e| e.outcome.as_str()).collect::<Vec<_>>(),
        ["invalidate_failed"]
    );
}

#[tokio::test]
async fn an_edit_whose_store_write_was_retried_after_it_landed_answers_200_not_412() {
    let h = harness().await;
    h.create(
        OPERATOR,
        json!({"long_url": "https://e.com/", "custom_alias": "landed"}),
    )
    .await;
    // The write lands, and the store client's retry of it finds version 2 and answers that
    // its condition failed.
    h.store.set_writes_retried(true);
    let r = edit(
        &h,
        "landed",
        OPERATOR,
        Some("\"1\""),
        json!({"long_url": "https://f.com/", "password": "open sesame"}),
    )
    .await;
    h.store.set_writes_retried(false);
    assert_eq!(
        (r.status, &r.body["version"], &r.body["long_url"]),
        (StatusCode::OK, &json!(2), &json!("https://f.com/")),
        "{:?}",
        r.body
    );
    assert_eq!(h.events.changed.lock().unwrap().len(), 1, "the caches were told");
    // A write that another edit of version 1 made (other fields) is still refused.
    h.store.set_writes_retried(true);
    let r = edit(
        &h,
        "landed",
        OPERATOR,
        Some("\"2\""),
        json!({"long_url": "https://g.com/"}),
    )
    .await;
    h.store.set_writes_retried(false);
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = edit(
        &h,
        "landed",
        OPERATOR,
        Some("\"2\""),
        json!({"long_url": "https://h.com/"}),
    )
    .await;
    assert_error(&r, StatusCode::PRECONDITION_FAILED, "version_mismatch");
    let link = h.store.get_link("landed").await.unwrap().unwrap();
    assert_eq!((link.version, link.long_url.as_str()), (3, "https://g.com/"));
}

#[tokio::test]
async fn a_reinstatement_whose_store_write_was_retried_after_it_landed_answers_200_not_409() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    h.create(
        OPERATOR,
        json!({"long_url": "https://x.listed.example/", "custom_alias": "relisted"}),
    )
    .await;
    threat_lists(&h, &[("local", FeedFormat::Domains, "listed.example\n")]);
    assert_eq!(h.cp.abuse().rescan_threats().await.unwrap().taken_down, 1);
    h.store.set_writes_retried(true);
    let r = h
        .call(Method::POST, "/api/v1/links/relisted/reinstate", Some(OPERATOR), None)
        .await;
    h.store.set_writes_retried(false);
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!((&r.body["is_active"], &r.body["version"]), (&json!(true), &json!(3)));
    assert_eq!(h.events.changed.lock().unwrap().len(), 1, "the caches were told");
}

/// Puts `lists` (name, format, feed text) in force, as the loader does.
fn threat_lists(h: &Harness, lists: &[(&str, rebound_core::threat::FeedFormat, &str)]) {
    use rebound_control_plane::threats::ListState;
    use rebound_core::threat::{parse_feed, ThreatIndex};
    let feeds: Vec<_> = lists
        .iter()
        .map(|(name, format, text)| (name.to_string(), parse_feed(*format, text.as_bytes()).unwrap()))
        .collect();
    let states = feeds
        .iter()
        .map(|(name, feed)| ListState {
            name: name.clone(),
            format: "domains".into(),
            source: "test".into(),
            entries: feed.len(),
            skipped: feed.skipped(),
            loaded_at: Some(NOW),
            error: None,
        })
        .collect();
    h.cp.abuse().install_threat_lists(ThreatIndex::build(feeds), states);
}

#[tokio::test]
async fn a_target_on_a_threat_list_is_refused_on_create_edit_and_import_naming_the_list() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    threat_lists(
        &h,
        &[
            ("local", FeedFormat::Domains, "# ours\nevil.example\n"),
            ("openphish", FeedFormat::Openphish, "https://phish.example/login?x=1\n"),
        ],
    );
    let r = h
        .create(OPERATOR, json!({"long_url": "https://a.EVIL.example./x"}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "blocked_target");
    assert!(
        r.body["error"]["message"].as_str().unwrap().contains("\"local\""),
        "{:?}",
        r.body
    );
    let r = h
        .create(OPERATOR, json!({"long_url": "https://phish.example/login?x=1#top"}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "blocked_target");
    assert!(r.body["error"]["message"].as_str().unwrap().contains("\"openphish\""));
    // Another page of that host is not on a URL list.
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://phish.example/about", "custom_alias": "fine"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = edit(
        &h,
        "fine",
        OPERATOR,
        Some("\"1\""),
        json!({"long_url": "https://evil.example/"}),
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "blocked_target");
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(OPERATOR),
            Some(json!({"links": [{"long_url": "https://ok.example/"}, {"long_url": "http://evil.example/"}]})),
        )
        .await;
    assert_eq!(
        (r.body["created"].as_u64(), r.body["failed"].as_u64()),
        (Some(1), Some(1)),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["results"][1]["error"]["code"], "blocked_target");
    assert_eq!(h.link_count().await, 2, "fine and ok.example");
    let lists = h.call(Method::GET, "/api/v1/threat-lists", Some(OPERATOR), None).await;
    assert_eq!(lists.status, StatusCode::OK);
    assert_eq!(lists.body["lists"][0]["name"], "local");
    assert_eq!(lists.body["lists"][0]["entries"], 1);
}

/// `h`'s store under a control plane started again: nothing of `h`'s memory kept, its
/// threat lists not loaded yet.
async fn restarted(h: &Harness) -> Harness {
    let config = ControlPlaneConfig {
        bootstrap_key: Some(OPERATOR.into()),
        public_base_url: "https://sho.rt".into(),
        ..ControlPlaneConfig::default()
    };
    let events = Arc::new(RecordedLinkEvents::default());
    let cp = ControlPlane::new(
        config,
        h.store.clone() as Arc<dyn Store>,
        events.clone(),
        Arc::new(h.clock.clone()) as Arc<dyn Clock>,
    )
    .await
    .unwrap();
    Harness {
        app: router(cp.clone()),
        cp,
        store: h.store.clone(),
        events,
        clock: h.clock.clone(),
    }
}

#[tokio::test]
async fn a_rescan_reads_only_the_links_on_the_hosts_of_the_entries_new_since_the_last() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    for (alias, url) in [
        ("mal1", "https://malware.example/a"),
        ("mal2", "https://cdn.malware.example/b"),
        ("phi1", "https://phish.example/login"),
        ("phi2", "https://phish.example/other"),
        ("fin1", "https://fine.example/"),
        ("fin2", "https://notmalware.example/"),
    ] {
        let r = h
            .create(OPERATOR, json!({"long_url": url, "custom_alias": alias}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    threat_lists(&h, &[("urlhaus", FeedFormat::Domains, "malware.example\n")]);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!(
        (o.looked_up, o.scanned, o.matched, o.taken_down),
        (1, 2, 2, 2),
        "the links on malware.example and its subdomains alone"
    );
    // The same lists again: nothing new, nothing read.
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.looked_up, o.scanned), (0, 0));
    // A URL entry added: its host's links read, the one URL taken down.
    let both = [
        ("urlhaus", FeedFormat::Domains, "malware.example\n"),
        ("openphish", FeedFormat::Openphish, "https://phish.example/login\n"),
    ];
    threat_lists(&h, &both);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.looked_up, o.scanned, o.matched, o.taken_down), (1, 2, 1, 1));
    for (code, up) in [
        ("mal1", false),
        ("mal2", false),
        ("phi1", false),
        ("phi2", true),
        ("fin1", true),
        ("fin2", true),
    ] {
        assert_eq!(h.store.get_link(code).await.unwrap().unwrap().is_active, up, "{code}");
    }
    // A control plane started again looks every entry up, and reads only what is still up
    // on those hosts.
    let h = restarted(&h).await;
    threat_lists(&h, &both);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.looked_up, o.scanned, o.matched, o.taken_down), (2, 1, 0, 0));
    let lists = h.call(Method::GET, "/api/v1/threat-lists", Some(OPERATOR), None).await;
    assert_eq!(lists.body["last_rescan_scanned"], 1, "{:?}", lists.body);
}

#[tokio::test]
async fn lists_back_to_entries_they_held_before_take_down_the_links_made_in_between() {
    use rebound_core::threat::FeedFormat;
    // Issue 42, item 12: content A (holds w.example), then B (without it), a link to
    // w.example made under B, then A again.
    let a = [("local", FeedFormat::Domains, "w.example\nx.example\n")];
    let b = [("local", FeedFormat::Domains, "x.example\n")];
    let h = harness().await;
    threat_lists(&h, &a);
    h.cp.abuse().rescan_threats().await.unwrap();
    threat_lists(&h, &b);
    h.cp.abuse().rescan_threats().await.unwrap();
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://w.example/p", "custom_alias": "wlink"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    threat_lists(&h, &a);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.looked_up, o.scanned, o.matched, o.taken_down), (1, 1, 1, 1));
    let link = h.store.get_link("wlink").await.unwrap().unwrap();
    assert_eq!(
        (link.is_active, link.delete_reason.as_deref()),
        (false, Some("threat-list:local"))
    );
    // The same across a restart, and for a link made by a control plane whose lists had
    // not loaded yet: the first rescan after a start looks every entry up.
    threat_lists(&h, &b);
    h.cp.abuse().rescan_threats().await.unwrap();
    let h = restarted(&h).await;
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://w.example/q", "custom_alias": "wlink2"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    threat_lists(&h, &a);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.looked_up, o.matched, o.taken_down), (2, 1, 1));
    assert!(!h.store.get_link("wlink2").await.unwrap().unwrap().is_active);
}

#[tokio::test]
async fn a_reinstatement_holds_for_the_target_it_was_made_for_and_an_edit_of_the_target_ends_it() {
    use rebound_core::threat::FeedFormat;
    // Issue 42, item 13.
    let h = harness().await;
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://fp.example/a", "custom_alias": "fpl"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    threat_lists(&h, &[("local", FeedFormat::Domains, "fp.example\n")]);
    assert_eq!(h.cp.abuse().rescan_threats().await.unwrap().taken_down, 1);
    let r = h
        .call(Method::POST, "/api/v1/links/fpl/reinstate", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // Still on fp.example: a later rescan of it leaves it up.
    let h = restarted(&h).await;
    threat_lists(&h, &[("local", FeedFormat::Domains, "fp.example\n")]);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.matched, o.taken_down, o.allowed), (1, 0, 1));
    // Edited to another target, which a list holds afterwards: taken down.
    let r = edit(
        &h,
        "fpl",
        OPERATOR,
        Some("\"3\""),
        json!({"long_url": "https://phish.example/login"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    threat_lists(&h, &[("local", FeedFormat::Domains, "fp.example\nphish.example\n")]);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.matched, o.taken_down, o.allowed), (1, 1, 0));
    let link = h.store.get_link("fpl").await.unwrap().unwrap();
    assert_eq!(
        (link.is_active, link.delete_reason.as_deref()),
        (false, Some("threat-list:local"))
    );
}

#[tokio::test]
async fn a_reinstatement_an_earlier_version_recorded_holds_until_the_links_next_edit() {
    use rebound_core::threat::FeedFormat;
    use rebound_store::{AuditEvent, CounterStore};
    let h = harness().await;
    for alias in ["kept", "edited"] {
        let r = h
            .create(
                OPERATOR,
                json!({"long_url": format!("https://old.example/{alias}"), "custom_alias": alias}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
        // As an earlier version recorded a reinstatement: for the link, whatever its target.
        h.store
            .get_or_init_setting(&format!("threat_allowed:{alias}"), "op")
            .await
            .unwrap();
        h.store
            .append_audit(&AuditEvent {
                at: NOW,
                actor: "op".into(),
                action: "reinstate".into(),
                code: Some(alias.into()),
                reason: None,
                outcome: "ok".into(),
                detail: None,
            })
            .await
            .unwrap();
    }
    let r = edit(
        &h,
        "edited",
        OPERATOR,
        Some("\"1\""),
        json!({"long_url": "https://old.example/moved"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    threat_lists(&h, &[("local", FeedFormat::Domains, "old.example\n")]);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((o.matched, o.taken_down, o.allowed), (2, 1, 1));
    assert!(h.store.get_link("kept").await.unwrap().unwrap().is_active);
    assert!(!h.store.get_link("edited").await.unwrap().unwrap().is_active);
}

#[tokio::test]
async fn a_rescan_takes_matching_links_down_and_an_operator_reinstates_one_for_good() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    for (alias, url) in [
        ("bad1", "https://x.malware.example/a"),
        ("bad2", "http://malware.example/"),
        ("good", "https://fine.example/"),
        ("gone", "https://malware.example/gone"),
    ] {
        let r = h
            .create(OPERATOR, json!({"long_url": url, "custom_alias": alias}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    h.call(Method::DELETE, "/api/v1/links/gone", Some(OPERATOR), None).await;
    threat_lists(&h, &[("urlhaus", FeedFormat::Domains, "malware.example\n")]);
    let outcome = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!(
        (
            outcome.scanned,
            outcome.matched,
            outcome.taken_down,
            outcome.allowed,
            outcome.failed
        ),
        (2, 2, 2, 0, 0),
        "the active links on the listed host read"
    );
    for code in ["bad1", "bad2"] {
        let link = h.store.get_link(code).await.unwrap().unwrap();
        assert!(!link.is_active, "{code}");
        assert_eq!(link.delete_reason.as_deref(), Some("threat-list:urlhaus"));
        assert_eq!(link.deleted_by.as_deref(), Some("threat-lists"));
        let audit = h
            .call(
                Method::GET,
                &format!("/api/v1/links/{code}/audit"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_eq!(audit.body["events"][0]["reason"], "threat-list:urlhaus");
        assert_eq!(audit.body["events"][0]["actor"], "threat-lists");
    }
    assert!(h.store.get_link("good").await.unwrap().unwrap().is_active);
    // Reinstated by an operator: active at the next version, told to the caches, audited,
    // and no later rescan takes it down again.
    let creator = h.new_key("creator").await;
    let r = h
        .call(Method::POST, "/api/v1/links/bad1/reinstate", Some(&creator), None)
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, "forbidden");
    let r = h
        .call(Method::POST, "/api/v1/links/bad1/reinstate", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!((&r.body["is_active"], &r.body["version"]), (&json!(true), &json!(3)));
    assert_eq!(r.body["delete_reason"], Value::Null);
    let told = h
        .events
        .changed
        .lock()
        .unwrap()
        .iter()
        .map(|l| (l.code.clone(), l.is_active))
        .collect::<Vec<_>>();
    assert_eq!(told, [("bad1".to_owned(), true)]);
    // The list dropped and listed again: the host's links read again, bad1 left up.
    threat_lists(&h, &[]);
    h.cp.abuse().rescan_threats().await.unwrap();
    threat_lists(&h, &[("urlhaus", FeedFormat::Domains, "malware.example\n")]);
    let outcome = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((outcome.matched, outcome.taken_down, outcome.allowed), (1, 0, 1));
    assert!(h.store.get_link("bad1").await.unwrap().unwrap().is_active);
    let audit = h.store.audit_for("bad1").await.unwrap();
    assert_eq!(
        audit.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
        ["takedown", "reinstate"]
    );
    // Deletes and takedowns by people are final.
    for code in ["gone", "good"] {
        let r = h
            .call(
                Method::POST,
                &format!("/api/v1/links/{code}/reinstate"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_error(&r, StatusCode::CONFLICT, "not_restorable");
    }
}

#[tokio::test]
async fn anyone_reports_a_link_rate_limited_and_operators_list_the_reports() {
    let h = harness().await;
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "sus"}))
        .await;
    let report = |link: &str, reason: &str| {
        let body = json!({"link": link, "reason": reason});
        let req = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/abuse-reports")
            .header(header::CONTENT_TYPE, "application/json")
            .extension(axum::extract::ConnectInfo(std::net::SocketAddr::from((
                [192, 0, 2, 7],
                4000,
            ))))
            .body(Body::from(body.to_string()))
            .unwrap();
        h.send(req)
    };
    let r = report("https://sho.rt/sus", "phishing page asking for a bank password").await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    let r = report("sus", "still there").await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{:?}", r.body);
    for (link, reason, status, code) in [
        ("https://sho.rt/nope", "x", StatusCode::NOT_FOUND, "not_found"),
        (
            "https://other.example/sus",
            "x",
            StatusCode::BAD_REQUEST,
            "invalid_link",
        ),
        ("sus", "", StatusCode::BAD_REQUEST, "invalid_reason"),
        ("sus", &"r".repeat(1001), StatusCode::BAD_REQUEST, "invalid_reason"),
    ] {
        assert_error(&report(link, reason).await, status, code);
    }
    // Five at once, then one a minute: the reports of links that are not there counted
    // too (charged before the store is read); the bad reasons did not.
    assert_eq!(report("sus", "again").await.status, StatusCode::ACCEPTED);
    let r = report("sus", "one too many").await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert!(r.headers.contains_key(header::RETRY_AFTER));
    let listed = h.call(Method::GET, "/api/v1/abuse-reports", Some(OPERATOR), None).await;
    assert_eq!(listed.status, StatusCode::OK);
    let reports = listed.body["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 3);
    assert_eq!(
        reports[2]["reason"], "phishing page asking for a bank password",
        "newest first"
    );
    assert_eq!(reports[0]["code"], "sus");
    assert_eq!(reports[0]["short_url"], "https://sho.rt/sus");
    assert_eq!(reports[0]["reporter"], "anonymous:192.0.2.7");
    let creator = h.new_key("creator").await;
    let r = h.call(Method::GET, "/api/v1/abuse-reports", Some(&creator), None).await;
    assert_error(&r, StatusCode::FORBIDDEN, "forbidden");
    // On the link's own audit log too.
    assert_eq!(h.store.audit_for("sus").await.unwrap().len(), 3);
}

async fn add_domain(h: &Harness, body: Value) -> Reply {
    h.call(Method::POST, "/api/v1/domains", Some(OPERATOR), Some(body))
        .await
}

#[tokio::test]
async fn a_target_on_any_domain_the_fleet_serves_is_refused_as_a_loop_on_create_import_edit_and_reinstate() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    // Made before go.alpha.test is served, to be reinstated after.
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://go.alpha.test/later", "custom_alias": "later"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    threat_lists(&h, &[("urls", FeedFormat::Openphish, "https://go.alpha.test/later\n")]);
    assert_eq!(h.cp.abuse().rescan_threats().await.unwrap().taken_down, 1);
    threat_lists(&h, &[]);
    for name in ["go.alpha.test", "beta.test"] {
        let r = add_domain(&h, json!({"name": name, "certificate": "files"})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let before = h.link_count().await;
    // The issue's loop, then every spelling and port, on the domain itself, on another
    // domain and on the default one.
    let loops = [
        "http://go.alpha.test/selfa",
        "https://go.alpha.test/selfa",
        "http://go.alpha.test:80/selfa",
        "https://go.alpha.test:443/selfa",
        "http://go.alpha.test:8080/selfa",
        "HTTPS://GO.Alpha.Test./selfa",
        "https://beta.test/x",
        "http://BETA.test.:48080/x",
    ];
    for target in loops {
        for domain in [Some("go.alpha.test"), Some("beta.test"), None] {
            let mut body = json!({"long_url": target, "custom_alias": "selfa"});
            if let Some(d) = domain {
                body["domain"] = json!(d);
            }
            let r = h.create(OPERATOR, body).await;
            assert_error(&r, StatusCode::BAD_REQUEST, "invalid_url");
            assert!(
                r.body["error"]["message"].as_str().unwrap().contains("own short links"),
                "{target} on {domain:?}: {:?}",
                r.body
            );
        }
    }
    assert_eq!(h.link_count().await, before, "nothing written");
    // Names the fleet does not serve are other services.
    for (i, target) in [
        "https://x.go.alpha.test/",
        "https://alpha.test/",
        "https://go.alpha.test.example/",
    ]
    .into_iter()
    .enumerate()
    {
        let r = h
            .create(
                OPERATOR,
                json!({"long_url": target, "custom_alias": format!("fine{i}")}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{target}: {:?}", r.body);
    }
    // Import: the loop refused, the rest written.
    let r = h
        .call(
            Method::POST,
            "/api/v1/links/import",
            Some(OPERATOR),
            Some(json!({"links": [
                {"long_url": "https://ok.example/"},
                {"long_url": "http://go.alpha.test:8080/selfa", "custom_alias": "selfa", "domain": "go.alpha.test"},
                {"long_url": "https://go.alpha.test/other"},
            ]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["created"].as_u64(), r.body["failed"].as_u64()),
        (Some(1), Some(2)),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["results"][1]["error"]["code"], "invalid_url");
    assert_eq!(r.body["results"][2]["error"]["code"], "invalid_url");
    // Edit: refused, the link unchanged.
    let r = edit(
        &h,
        "fine0",
        OPERATOR,
        Some("\"1\""),
        json!({"long_url": "https://go.alpha.test:8443/selfa"}),
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_url");
    let link = h.store.get_link("fine0").await.unwrap().unwrap();
    assert_eq!((link.version, link.long_url.as_str()), (1, "https://x.go.alpha.test/"));
    // Reinstate: a target on a domain served since the takedown would loop.
    let r = h
        .call(Method::POST, "/api/v1/links/later/reinstate", Some(OPERATOR), None)
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_url");
    assert!(!h.store.get_link("later").await.unwrap().unwrap().is_active);
}

#[tokio::test]
async fn a_domains_page_urls_must_not_be_on_a_host_the_fleet_serves() {
    let h = harness().await;
    let r = add_domain(&h, json!({"name": "beta.test", "certificate": "files"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // (field, URL): on the domain being added (any port), on another domain, on the
    // default domain.
    let cases = [
        ("not_found_url", "https://go.alpha.test/missing"),
        ("not_found_url", "http://GO.ALPHA.TEST.:8080/"),
        ("expired_url", "https://go.alpha.test:443/expired"),
        ("root_url", "https://go.alpha.test/"),
        ("root_url", "https://beta.test/home"),
        ("expired_url", "http://beta.test:48080/x"),
        ("not_found_url", "https://sho.rt/missing"),
    ];
    for (field, url) in cases {
        let r = add_domain(&h, json!({"name": "go.alpha.test", field: url})).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_url");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(field) && message.contains("own short links"),
            "{message}"
        );
    }
    let r = h
        .call(Method::GET, "/api/v1/domains/go.alpha.test", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "nothing added");
    let r = add_domain(
        &h,
        json!({"name": "go.alpha.test", "not_found_url": "https://www.alpha.test/missing", "root_url": "https://x.beta.test/"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

#[tokio::test]
async fn a_domain_that_live_links_or_page_urls_already_target_is_refused_naming_them() {
    let h = harness().await;
    for i in 0..7 {
        let r = h
            .create(
                OPERATOR,
                json!({"long_url": format!("https://go.alpha.test:{}/x{i}", 8000 + i), "custom_alias": format!("to-alpha{i}")}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    h.create(
        OPERATOR,
        json!({"long_url": "https://alpha.example/", "custom_alias": "elsewhere"}),
    )
    .await;
    // Deleted and expired links redirect no more: not counted.
    h.create(
        OPERATOR,
        json!({"long_url": "https://go.alpha.test/d", "custom_alias": "deleted"}),
    )
    .await;
    h.call(Method::DELETE, "/api/v1/links/deleted", Some(OPERATOR), None)
        .await;
    h.create(
        OPERATOR,
        json!({"long_url": "https://go.alpha.test/e", "custom_alias": "expiring", "ttl_seconds": 60}),
    )
    .await;
    h.clock.advance(61_000);

    let r = add_domain(&h, json!({"name": "Go.Alpha.Test."})).await;
    assert_error(&r, StatusCode::CONFLICT, "domain_targeted");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("7 link(s)") && message.contains("and 2 more"),
        "{message}"
    );
    let named = (0..7)
        .filter(|i| message.contains(&format!("https://sho.rt/to-alpha{i}")))
        .count();
    assert_eq!(named, 5, "a bounded list: {message}");
    assert!(!message.contains("elsewhere") && !message.contains("deleted") && !message.contains("expiring"));
    let r = h
        .call(Method::GET, "/api/v1/domains/go.alpha.test", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "not added");

    // Once they point elsewhere (edited or deleted), it is added.
    for i in 0..7 {
        let r = match i % 2 {
            0 => {
                h.call(
                    Method::DELETE,
                    &format!("/api/v1/links/to-alpha{i}"),
                    Some(OPERATOR),
                    None,
                )
                .await
            }
            _ => {
                edit(
                    &h,
                    &format!("to-alpha{i}"),
                    OPERATOR,
                    Some("\"1\""),
                    json!({"long_url": "https://alpha.example/moved"}),
                )
                .await
            }
        };
        assert!(r.status.is_success(), "{:?}", r.body);
    }
    // Another domain's page URL on the name loops as well.
    let r = add_domain(
        &h,
        json!({"name": "beta.test", "not_found_url": "https://go.alpha.test/missing"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = add_domain(&h, json!({"name": "go.alpha.test"})).await;
    assert_error(&r, StatusCode::CONFLICT, "domain_targeted");
    assert!(
        r.body["error"]["message"].as_str().unwrap().contains("beta.test"),
        "{:?}",
        r.body
    );
    let r = h
        .call(Method::DELETE, "/api/v1/domains/beta.test", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = add_domain(&h, json!({"name": "go.alpha.test"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

#[tokio::test]
async fn app_links_are_set_per_domain_by_operators_checked_and_told_to_the_data_planes() {
    use rebound_core::domain::DOMAINS_CHANGED_COUNTER;
    use rebound_store::domains::DomainStore;
    use rebound_store::LinkReads;
    let h = harness().await;
    let aasa = json!({"applinks": {"details": [{"appIDs": ["ABCDE12345.com.acme"], "components": [{"/": "/*"}]}]}});
    let statements = json!([{"relation": ["delegate_permission/common.handle_all_urls"],
        "target": {"namespace": "android_app", "package_name": "com.acme", "sha256_cert_fingerprints": ["14:6D"]}}]);
    // Given when the domain is added.
    let r = add_domain(
        &h,
        json!({"name": "apps.test", "certificate": "files", "apple_app_site_association": aasa}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(
        (&r.body["apple_app_site_association"], &r.body["assetlinks"]),
        (&aasa, &Value::Null)
    );
    let put = |name: &str, key: &str, body: Value| {
        let uri = format!("/api/v1/domains/{name}/app-links");
        let key = key.to_owned();
        let h = &h;
        async move { h.call(Method::PUT, &uri, Some(&key), Some(body)).await }
    };
    let changes = || async { h.store.high_water(DOMAINS_CHANGED_COUNTER).await.unwrap() };

    // Set: both replaced, shown, stored apart from the record, the data planes told.
    let before = changes().await;
    let r = put("Apps.Test.", OPERATOR, json!({"assetlinks": statements})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["name"], "apps.test");
    assert_eq!(
        (&r.body["apple_app_site_association"], &r.body["assetlinks"]),
        (&Value::Null, &statements)
    );
    assert!(changes().await > before, "the data planes are told");
    let stored = h.store.get_domain("apps.test").await.unwrap().unwrap();
    assert_eq!(stored.app_links.apple_app_site_association, None, "absent: none");
    assert_eq!(
        stored.app_links.assetlinks,
        Some(statements.to_string()),
        "compact JSON"
    );
    let r = h
        .call(Method::GET, "/api/v1/domains/apps.test", Some(OPERATOR), None)
        .await;
    assert_eq!(r.body["assetlinks"], statements);

    // The default domain's, by its name, kept apart from every domain's.
    let r = put(
        "sho.rt",
        OPERATOR,
        json!({"apple_app_site_association": aasa, "assetlinks": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        (r.body["default"].as_bool(), &r.body["apple_app_site_association"]),
        (Some(true), &aasa)
    );
    assert_eq!(
        h.store.default_app_links().await.unwrap().apple_app_site_association,
        Some(aasa.to_string())
    );
    let r = h.call(Method::GET, "/api/v1/domains", Some(OPERATOR), None).await;
    let shown: Vec<(&str, bool, bool)> = r.body["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap(),
                !d["apple_app_site_association"].is_null(),
                !d["assetlinks"].is_null(),
            )
        })
        .collect();
    assert_eq!(shown, [("sho.rt", true, false), ("apps.test", false, true)]);

    // Refused, changing nothing: a wrong shape (400), a document too large (413), both
    // naming the field; an unknown field; no such domain; not an operator.
    let big = json!({"k": "x".repeat(rebound_core::app_links::MAX_DOCUMENT_BYTES)});
    let creator = h.new_key("creator").await;
    let refused: Vec<(&str, &str, Value, StatusCode, &str, &str)> = vec![
        (
            "apps.test",
            OPERATOR,
            json!({"apple_app_site_association": [aasa]}),
            StatusCode::BAD_REQUEST,
            "invalid_app_links",
            "apple_app_site_association",
        ),
        (
            "apps.test",
            OPERATOR,
            json!({"assetlinks": aasa}),
            StatusCode::BAD_REQUEST,
            "invalid_app_links",
            "assetlinks",
        ),
        (
            "apps.test",
            OPERATOR,
            json!({"assetlinks": [{"relation": ["x"], "target": {}}]}),
            StatusCode::BAD_REQUEST,
            "invalid_app_links",
            "assetlinks[0]",
        ),
        (
            "apps.test",
            OPERATOR,
            json!({"apple_app_site_association": big}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "document_too_large",
            "apple_app_site_association is 65544 bytes",
        ),
        (
            "apps.test",
            OPERATOR,
            json!({"apps": {}}),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "",
        ),
        ("nope.test", OPERATOR, json!({}), StatusCode::NOT_FOUND, "not_found", ""),
        (
            "not_a_name",
            OPERATOR,
            json!({}),
            StatusCode::NOT_FOUND,
            "not_found",
            "",
        ),
        (
            "apps.test",
            creator.as_str(),
            json!({}),
            StatusCode::FORBIDDEN,
            "forbidden",
            "",
        ),
    ];
    for (name, key, body, status, code, message) in refused {
        let before = changes().await;
        let r = put(name, key, body).await;
        assert_error(&r, status, code);
        let said = r.body["error"]["message"].as_str().unwrap();
        assert!(said.starts_with(message), "{said}");
        assert_eq!(changes().await, before, "{code}: nothing told");
    }
    let stored = h.store.get_domain("apps.test").await.unwrap().unwrap();
    assert_eq!(
        stored.app_links.assetlinks,
        Some(statements.to_string()),
        "nothing changed"
    );
    assert!(
        h.store.get_domain("nope.test").await.unwrap().is_none(),
        "no domain made"
    );
    // A body over 256 KiB is too large as a whole; one of two documents near their bound
    // each is not.
    let near = |n: usize| json!({"k": "x".repeat(rebound_core::app_links::MAX_DOCUMENT_BYTES - n)});
    let r = put("apps.test", OPERATOR, json!({"apple_app_site_association": near(8), "assetlinks": [{"relation": ["r"], "target": {"namespace": "web", "site": "y".repeat(60_000)}}]})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body["error"]);
    let r = put(
        "apps.test",
        OPERATOR,
        json!({"apple_app_site_association": {"k": "x".repeat(300 * 1024)}}),
    )
    .await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // Removed: both null.
    let r = put(
        "apps.test",
        OPERATOR,
        json!({"apple_app_site_association": null, "assetlinks": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(h
        .store
        .get_domain("apps.test")
        .await
        .unwrap()
        .unwrap()
        .app_links
        .is_empty());
}

#[tokio::test]
async fn the_summary_sums_each_domains_scope_and_only_operators_read_it() {
    use rebound_store::breakdowns::scope_code;
    use rebound_store::domains::DomainStore;
    use rebound_store::{BreakdownStore, ClickAdd, ClickBatch, Dimension, DimensionAdd, DimensionBatch};
    let h = harness().await;
    let r = add_domain(&h, json!({"name": "go.example.com", "certificate": "files"})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = h.store.get_domain("go.example.com").await.unwrap().unwrap().id;
    let (home, go) = (scope_code(None), scope_code(Some(&id)));
    let today = rebound_core::Day::of_millis(NOW);
    let total = |code: &str, day: rebound_core::Day, clicks, bot_clicks| ClickAdd {
        code: code.into(),
        day,
        clicks,
        bot_clicks,
    };
    h.store
        .apply_clicks(&ClickBatch {
            id: "s1".into(),
            adds: vec![
                total(&home, today, 6, 1),
                total(&home, today.plus(-1), 2, 0),
                total(&home, today.plus(-40), 50, 0),
                total(&go, today, 4, 3),
                // A link's own rollup is no domain's summary.
                total("abc", today, 99, 0),
            ],
        })
        .await
        .unwrap();
    let add = |code: &str, dimension, value: &str, clicks| DimensionAdd {
        code: code.into(),
        day: today,
        dimension,
        value: value.into(),
        clicks,
    };
    h.store
        .apply_dimensions(&DimensionBatch {
            id: "s2".into(),
            adds: vec![
                add(&home, Dimension::Link, "abc", 5),
                add(&home, Dimension::Link, "xyz", 1),
                add(&home, Dimension::Country, "DE", 4),
                add(&home, Dimension::Country, "JP", 2),
                add(&home, Dimension::Referrer, "direct", 6),
                add(&go, Dimension::Link, "abc", 4),
                add(&go, Dimension::Country, "JP", 3),
                add(&go, Dimension::Country, "FR", 1),
                add(&go, Dimension::Referrer, "news.example", 4),
            ],
        })
        .await
        .unwrap();
    let h = &h;
    let get = |uri: &str, key: Option<&str>| {
        let (uri, key) = (uri.to_owned(), key.map(str::to_owned));
        async move { h.call(Method::GET, &uri, key.as_deref(), None).await }
    };

    let r = get("/api/v1/stats", Some(OPERATOR)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let b = &r.body;
    assert_eq!(b["domains"], json!(["sho.rt", "go.example.com"]));
    assert_eq!(
        (b["from"].clone(), b["to"].clone()),
        (json!(today.plus(-29).to_iso()), json!(today.to_iso()))
    );
    assert_eq!(
        (b["total"].clone(), b["bot_total"].clone()),
        (json!(12), json!(4)),
        "the last 30 days"
    );
    let days = b["days"].as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert_eq!(days[29], json!({"day": today.to_iso(), "clicks": 10, "bot_clicks": 4}));
    assert_eq!(days[28]["clicks"], 2);
    assert_eq!(
        b["top_links"],
        json!([
            {"code": "abc", "domain": "sho.rt", "clicks": 5},
            {"code": "abc", "domain": "go.example.com", "clicks": 4},
            {"code": "xyz", "domain": "sho.rt", "clicks": 1},
        ])
    );
    assert_eq!(
        b["top_countries"],
        json!([{"value": "JP", "clicks": 5}, {"value": "DE", "clicks": 4}, {"value": "FR", "clicks": 1}])
    );
    assert_eq!(
        b["top_referrers"],
        json!([{"value": "direct", "clicks": 6}, {"value": "news.example", "clicks": 4}])
    );

    // One domain, a shorter list, another range.
    let r = get("/api/v1/stats?domain=GO.example.com&top=1", Some(OPERATOR)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["domains"], json!(["go.example.com"]));
    assert_eq!(r.body["total"], 4);
    assert_eq!(
        r.body["top_links"],
        json!([{"code": "abc", "domain": "go.example.com", "clicks": 4}])
    );
    assert_eq!(r.body["top_countries"], json!([{"value": "JP", "clicks": 3}]));
    let old = today.plus(-40).to_iso();
    let r = get(
        &format!("/api/v1/stats?domain=sho.rt&from={old}&to={old}"),
        Some(OPERATOR),
    )
    .await;
    assert_eq!(
        (r.body["total"].clone(), r.body["top_links"].clone()),
        (json!(50), json!([]))
    );

    // Refusals, as the per-link stats' and the domains' are.
    assert_error(
        &get("/api/v1/stats?domain=nosuch.example", Some(OPERATOR)).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for bad in [
        "from=2026-13-01",
        "to=",
        "from=2026-09-21&to=2026-09-20",
        "from=2025-01-01&to=2026-09-21",
    ] {
        let r = get(&format!("/api/v1/stats?{bad}"), Some(OPERATOR)).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_date");
    }
    for bad in ["top=0", "top=1001", "top=ten", "top=", "top=1&top=2"] {
        let r = get(&format!("/api/v1/stats?{bad}"), Some(OPERATOR)).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_query");
    }
    // A store that is down is no missing domain: 503, retry.
    h.store.set_unavailable(true);
    for uri in ["/api/v1/stats?domain=go.example.com", "/api/v1/stats"] {
        let r = get(uri, Some(OPERATOR)).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
    }
    h.store.set_unavailable(false);
    let creator = h.new_key("creator").await;
    assert_error(
        &get("/api/v1/stats", Some(&creator)).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    assert_eq!(get("/api/v1/stats", None).await.status, StatusCode::UNAUTHORIZED);

    // A scope code is no link: not read, not made, and no link's `by`.
    for uri in [
        format!("/api/v1/links/{}/stats", "%2A"),
        format!("/api/v1/links/%2A{id}"),
        "/api/v1/links/%2A%2A%2A".into(),
    ] {
        assert_error(&get(&uri, Some(OPERATOR)).await, StatusCode::NOT_FOUND, "not_found");
    }
    for alias in [home.clone(), go.clone(), format!("{go}ab")] {
        let r = h
            .create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": alias}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_alias");
    }
    h.create(OPERATOR, json!({"long_url": "https://e.com/", "custom_alias": "abc"}))
        .await;
    let r = get("/api/v1/links/abc/stats?by=link", Some(OPERATOR)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_by");
}

/// A store that keeps no breakdowns (a third-party adapter may not): a breakdown or the
/// summary asked of it is 409 `breakdowns_unavailable`, and the daily totals are as ever.
#[tokio::test]
async fn breakdowns_asked_of_a_store_that_keeps_none_are_409() {
    let h = harness_on(MemoryStore::keeping_no_breakdowns(), |_| {}).await;
    let created = h
        .call(
            Method::POST,
            "/api/v1/links",
            Some(OPERATOR),
            Some(json!({"long_url": "https://example.com/n", "custom_alias": "nobd"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    for uri in ["/api/v1/links/nobd/stats?by=country", "/api/v1/stats"] {
        let r = h.call(Method::GET, uri, Some(OPERATOR), None).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{uri}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "breakdowns_unavailable", "{uri}");
    }
    let r = h
        .call(Method::GET, "/api/v1/links/nobd/stats", Some(OPERATOR), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["total"], json!(0));
}

/// A rule's target obeys what `long_url` obeys (docs/spec.md §14): refused at create and
/// edit when a threat list holds it; and a rescan after a list adds it takes the link
/// down, whichever of its targets matched, reading the links with rules through their own
/// index (not every link).
#[tokio::test]
async fn rule_targets_are_checked_against_the_threat_lists_at_create_and_by_rescans() {
    use rebound_core::threat::FeedFormat;
    let h = harness().await;
    threat_lists(&h, &[("local", FeedFormat::Domains, "listed.example\n")]);
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://fine.example/", "rules": [
                {"os": ["ios"], "target": "https://fine.example/ios"},
                {"split": [{"target": "https://a.example/", "weight": 1}, {"target": "https://x.listed.example/", "weight": 1}]},
            ]}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "blocked_target");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rules[2].split[2].target"),
        "{:?}",
        r.body
    );
    h.cp.abuse().rescan_threats().await.unwrap();
    for (alias, rules) in [
        (
            "ruled",
            json!([{"os": ["android"], "target": "https://later.example/app"}]),
        ),
        (
            "split",
            json!([{"split": [{"target": "https://a.example/", "weight": 1}, {"target": "https://b.later.example/", "weight": 1}]}]),
        ),
        ("clean", json!([{"os": ["ios"], "target": "https://fine.example/ios"}])),
    ] {
        let r = h
            .create(
                OPERATOR,
                json!({"long_url": "https://fine.example/", "custom_alias": alias, "rules": rules}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let r = h
        .create(
            OPERATOR,
            json!({"long_url": "https://fine.example/", "custom_alias": "plain"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    threat_lists(&h, &[("local", FeedFormat::Domains, "listed.example\nlater.example\n")]);
    let o = h.cp.abuse().rescan_threats().await.unwrap();
    assert_eq!(
        (o.scanned, o.matched, o.taken_down),
        (3, 2, 2),
        "the three links with rules read, not the plain one; two matched by a rule's target"
    );
    for (code, up) in [("ruled", false), ("split", false), ("clean", true), ("plain", true)] {
        let link = h.store.get_link(code).await.unwrap().unwrap();
        assert_eq!(link.is_active, up, "{code}");
        if !up {
            assert_eq!(link.delete_reason.as_deref(), Some("threat-list:local"));
        }
    }
    // An edit to a listed rule target is refused too.
    let r = edit(
        &h,
        "clean",
        OPERATOR,
        Some("\"1\""),
        json!({"rules": [{"os": ["ios"], "target": "https://listed.example/x"}]}),
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "blocked_target");
    assert_eq!(
        h.store.get_link("clean").await.unwrap().unwrap().version,
        1,
        "unchanged"
    );
}
