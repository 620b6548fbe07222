//! The scale of the control plane's sweeps (issue 42, item 14), on the embedded store: a
//! threat-list change reads only the links on the hosts of its new entries, a domain's
//! addition only the links on its host and its removal only its own links, whatever the
//! number of links; no sweep lists every link. `REBOUND_SWEEP_LINKS` links (20,000 by
//! default, as the test command runs it); the figures in the note were taken with a
//! million:
//!
//! `REBOUND_SWEEP_LINKS=1000000 cargo test --release --test sweeps -- --nocapture`

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use rebound_control_plane::config::ControlPlaneConfig;
use rebound_control_plane::{router, ControlPlane};
use rebound_core::threat::{parse_feed, FeedFormat, ThreatIndex};
use rebound_core::{Clock, Link, RedirectKind, SystemClock};
use rebound_metering::{AdapterMetrics, MeteredStore};
use rebound_sqlite::SqliteStore;
use rebound_store::domains::DomainStore;
use rebound_store::events::RecordedLinkEvents;
use rebound_store::{LinkReads, LinkStore, Store};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;
use tower::ServiceExt;

const OPERATOR: &str = "sweeps-operator-key-000000001";
/// Links per target host: a host entry matches this many links.
const LINKS_PER_HOST: usize = 10;
/// Entries the list change adds, and how many of them are hosts that have links.
const NEW_ENTRIES: usize = 1_000;
const MATCHING_ENTRIES: usize = 100;
/// Links on the domain that is removed.
const DOMAIN_LINKS: usize = 1_000;

fn links_wanted() -> usize {
    std::env::var("REBOUND_SWEEP_LINKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

/// Calls of each store operation so far, by name.
fn calls(registry: &prometheus::Registry, operation: &str) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|f| f.name() == "rebound_adapter_calls_total")
        .flat_map(|f| f.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "operation" && l.value() == operation)
        })
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

async fn call(app: &axum::Router, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn link(code: String, url: String, created_at: usize) -> Link {
    let at = 1_700_000_000_000 + created_at as i64;
    Link::new_active(code, url, RedirectKind::Found, false, at, "sweeps".into(), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeps_read_the_links_they_concern_not_every_link() {
    let n = links_wanted();
    let hosts = (n / LINKS_PER_HOST).max(MATCHING_ENTRIES);
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(dir.path().join("rebound.db")).unwrap());
    let registry = prometheus::Registry::new();
    let metrics = AdapterMetrics::register(&registry).unwrap();
    let store: Arc<dyn Store> = Arc::new(MeteredStore::new(sqlite.clone(), &metrics, "sqlite"));
    let config = ControlPlaneConfig {
        bootstrap_key: Some(OPERATOR.into()),
        public_base_url: "https://sho.rt".into(),
        ..ControlPlaneConfig::default()
    };
    let cp = ControlPlane::new(
        config,
        store.clone(),
        Arc::new(RecordedLinkEvents::default()),
        Arc::new(SystemClock) as Arc<dyn Clock>,
    )
    .await
    .unwrap();
    let app = router(cp.clone());

    // The links: `n` of them, `LINKS_PER_HOST` on each of `hosts` hosts.
    let started = Instant::now();
    let mut batch = Vec::with_capacity(1_000);
    for i in 0..n {
        batch.push(link(
            format!("s{i:07}"),
            format!("https://site{}.example/p{i}", i % hosts),
            i,
        ));
        if batch.len() == 1_000 || i + 1 == n {
            assert!(sqlite.insert_links(&batch).await.unwrap().iter().all(Result::is_ok));
            batch.clear();
        }
    }
    println!("{n} links written in {:.1} s", started.elapsed().as_secs_f64());

    // A list, then a change adding 1,000 entries of which 100 are hosts with links.
    let install = |hosts_text: String| {
        use rebound_control_plane::threats::ListState;
        let feed = parse_feed(FeedFormat::Domains, hosts_text.as_bytes()).unwrap();
        let state = ListState {
            name: "local".into(),
            format: "domains".into(),
            source: "test".into(),
            entries: feed.len(),
            skipped: 0,
            loaded_at: None,
            error: None,
        };
        cp.abuse()
            .install_threat_lists(ThreatIndex::build([("local".to_owned(), feed)]), vec![state]);
    };
    let mut text = String::from("unrelated.example\n");
    install(text.clone());
    let first = cp.abuse().rescan_threats().await.unwrap();
    assert_eq!((first.looked_up, first.scanned), (1, 0));
    for j in 0..MATCHING_ENTRIES {
        text.push_str(&format!("site{j}.example\n"));
    }
    for j in 0..NEW_ENTRIES - MATCHING_ENTRIES {
        text.push_str(&format!("absent{j}.example\n"));
    }
    install(text);
    let (before_lookups, listed_before) = (calls(&registry, "links_by_target_host"), calls(&registry, "list_links"));
    let started = Instant::now();
    let change = cp.abuse().rescan_threats().await.unwrap();
    let took = started.elapsed();
    let matching = (0..n).filter(|i| i % hosts < MATCHING_ENTRIES).count() as u64;
    assert_eq!(change.looked_up, NEW_ENTRIES as u64);
    assert_eq!(
        (change.scanned, change.matched, change.taken_down, change.failed),
        (matching, matching, matching, 0),
        "exactly the links on the new entries' hosts read"
    );
    assert_eq!(
        calls(&registry, "list_links"),
        listed_before,
        "no listing of every link"
    );
    println!(
        "list change: {} entries added, {} looked up ({} index reads), {} links read of {n}, {} taken down, {:.2} s",
        NEW_ENTRIES,
        change.looked_up,
        calls(&registry, "links_by_target_host") - before_lookups,
        change.scanned,
        change.taken_down,
        took.as_secs_f64()
    );

    // A domain added (what targets its name is looked for), given links, removed with them.
    let started = Instant::now();
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/domains",
        Some(json!({"name": "go.sweep.test", "certificate": "files"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    println!("domain added in {:.3} s", started.elapsed().as_secs_f64());
    let id = sqlite.get_domain("go.sweep.test").await.unwrap().unwrap().id;
    let on_domain: Vec<Link> = (0..DOMAIN_LINKS)
        .map(|i| link(format!("d{i:05}.{id}"), format!("https://elsewhere.example/{i}"), n + i))
        .collect();
    for chunk in on_domain.chunks(1_000) {
        assert!(sqlite.insert_links(chunk).await.unwrap().iter().all(Result::is_ok));
    }
    let (on_domain_before, gets_before) = (calls(&registry, "links_on_domain"), calls(&registry, "get_link"));
    let started = Instant::now();
    let (status, body) = call(
        &app,
        Method::DELETE,
        "/api/v1/domains/go.sweep.test?take_down=true",
        None,
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["taken_down"], DOMAIN_LINKS as u64);
    assert_eq!(
        calls(&registry, "list_links"),
        listed_before,
        "no listing of every link"
    );
    println!(
        "domain removed with its {DOMAIN_LINKS} links in {:.2} s: {} index reads, {} link reads (each takedown reads its link)",
        took.as_secs_f64(),
        calls(&registry, "links_on_domain") - on_domain_before,
        calls(&registry, "get_link") - gets_before,
    );
    assert!(sqlite
        .get_link(&format!("d00000.{id}"))
        .await
        .unwrap()
        .is_some_and(|l| !l.is_active));

    // For scale: what one read of every link costs on the same store.
    let started = Instant::now();
    let (mut cursor, mut read) = (None::<String>, 0usize);
    loop {
        let page = sqlite.list_links(None, 1_000, cursor.as_deref()).await.unwrap();
        read += page.links.len();
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    println!(
        "for comparison, one read of every link: {read} links in {:.2} s",
        started.elapsed().as_secs_f64()
    );
}
