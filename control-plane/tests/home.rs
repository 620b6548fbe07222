//! Outside the home region (docs/regions.md): which requests the control plane forwards to
//! the home region, what it sends there and what it answers, against a fake home region.

use async_trait::async_trait;
use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use rebound_control_plane::config::ControlPlaneConfig;
use rebound_control_plane::home::{HomeRegion, HomeUnavailable};
use rebound_control_plane::{router_forwarding, ControlPlane};
use rebound_core::{Clock, ManualClock};
use rebound_store::events::RecordedLinkEvents;
use rebound_store::{LinkReads, MemoryStore, Store};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

const OPERATOR: &str = "operator-key-for-tests-0001";

/// What the home region was sent: the method, the path and query, the headers, the body.
type Sent = (Method, String, Vec<(String, String)>, Bytes);

/// A home region that answers 201 with a fixed body, or does not answer; it keeps what it
/// was sent.
#[derive(Default)]
struct FakeHome {
    down: bool,
    sent: Mutex<Vec<Sent>>,
}

#[async_trait]
impl HomeRegion for FakeHome {
    async fn forward(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HomeUnavailable> {
        let (parts, body) = request.into_parts();
        let headers = parts
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        self.sent
            .lock()
            .unwrap()
            .push((parts.method, parts.uri.to_string(), headers, body));
        if self.down {
            return Err(HomeUnavailable("connection refused".into()));
        }
        Ok(Response::builder()
            .status(201)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Bytes::from_static(br#"{"answered":"at home"}"#))
            .unwrap())
    }
}

async fn region(home: Arc<FakeHome>) -> (axum::Router, Arc<MemoryStore>) {
    let config = ControlPlaneConfig {
        bootstrap_key: Some(OPERATOR.into()),
        public_base_url: "https://sho.rt".into(),
        ..ControlPlaneConfig::default()
    };
    let store = Arc::new(MemoryStore::new());
    let cp = ControlPlane::new(
        config,
        store.clone() as Arc<dyn Store>,
        Arc::new(RecordedLinkEvents::default()),
        Arc::new(ManualClock::at(1_790_000_000_000)) as Arc<dyn Clock>,
    )
    .await
    .unwrap();
    (router_forwarding(cp, Some(home)), store)
}

async fn call(
    app: &axum::Router,
    method: Method,
    uri: &str,
    body: Option<String>,
    extra: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    let res = app
        .clone()
        .oneshot(req.body(body.map_or_else(Body::empty, Body::from)).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn unique_writes_are_answered_by_the_home_region_and_the_rest_here() {
    let home = Arc::new(FakeHome::default());
    let (app, store) = region(home.clone()).await;
    // A generated code is made here.
    let (status, here) = call(
        &app,
        Method::POST,
        "/api/v1/links",
        Some(json!({"long_url": "https://e.com/a"}).to_string()),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{here}");
    let code = here["code"].as_str().unwrap().to_owned();
    assert!(home.sent.lock().unwrap().is_empty());
    // An alias and an idempotency key go home, with what the home region needs to decide.
    let alias = json!({"long_url": "https://e.com/b", "custom_alias": "mine"}).to_string();
    let (status, answer) = call(
        &app,
        Method::POST,
        "/api/v1/links?x=1",
        Some(alias.clone()),
        &[("idempotency-key", "k1"), ("x-other", "no")],
    )
    .await;
    assert_eq!((status, answer), (StatusCode::CREATED, json!({"answered": "at home"})));
    {
        let sent = home.sent.lock().unwrap();
        let (method, uri, headers, body) = &sent[0];
        assert_eq!(
            (method, uri.as_str(), body.as_ref()),
            (&Method::POST, "/api/v1/links?x=1", alias.as_bytes())
        );
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["authorization", "content-type", "idempotency-key"]);
    }
    call(
        &app,
        Method::POST,
        "/api/v1/keys",
        Some(json!({"name": "k", "role": "creator"}).to_string()),
        &[],
    )
    .await;
    assert_eq!(home.sent.lock().unwrap().len(), 2);
    assert!(store.get_link("mine").await.unwrap().is_none(), "nothing written here");
    // Every change of a link is decided at home (issue 42, items 10 and 11): a delete of a
    // link this replica has, and of one it has not yet.
    let (status, _) = call(&app, Method::DELETE, &format!("/api/v1/links/{code}"), None, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "the home region's answer");
    assert_eq!(home.sent.lock().unwrap()[2].1, format!("/api/v1/links/{code}"));
    assert!(
        store.get_link(&code).await.unwrap().unwrap().is_active,
        "nothing changed here"
    );
    let (status, _) = call(&app, Method::DELETE, "/api/v1/links/not-here-yet", None, &[]).await;
    assert_eq!(status, StatusCode::CREATED, "the home region's answer");
    assert_eq!(home.sent.lock().unwrap()[3].1, "/api/v1/links/not-here-yet");
}

#[tokio::test]
async fn a_home_region_out_of_reach_is_503_and_a_body_over_the_limit_413_with_nothing_sent() {
    let home = Arc::new(FakeHome {
        down: true,
        ..FakeHome::default()
    });
    let (app, store) = region(home.clone()).await;
    let alias = json!({"long_url": "https://e.com/b", "custom_alias": "mine"}).to_string();
    let (status, answer) = call(&app, Method::POST, "/api/v1/links", Some(alias), &[]).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("home_unavailable"))
    );
    // A delete while home is out of reach is made here too, so this region stops serving
    // the link at once, and answered 503: only the home region can confirm it.
    let (status, here) = call(
        &app,
        Method::POST,
        "/api/v1/links",
        Some(json!({"long_url": "https://e.com/a"}).to_string()),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{here}");
    let code = here["code"].as_str().unwrap();
    let (status, answer) = call(&app, Method::DELETE, &format!("/api/v1/links/{code}"), None, &[]).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("home_unavailable"))
    );
    assert!(!store.get_link(code).await.unwrap().unwrap().is_active, "made here");
    let before = home.sent.lock().unwrap().len();
    let huge = format!(
        r#"{{"long_url":"https://e.com/{}","custom_alias":"big"}}"#,
        "a".repeat(1 << 20)
    );
    let (status, answer) = call(&app, Method::POST, "/api/v1/links", Some(huge), &[]).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    assert_eq!(home.sent.lock().unwrap().len(), before);
}
