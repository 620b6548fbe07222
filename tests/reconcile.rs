//! A delete finished by the system (docs/spec.md §4 I1, §8): real control planes and proxies on a
//! real Redis and moto; the control plane's path to Redis is cut through a relay, so its
//! tombstone fails while the proxies still read the active record from Redis, then it is
//! killed, and a new control plane must finish the delete with no client retry; or Redis
//! stays away from a control plane that stays up, and its reconciler finishes the delete
//! once Redis is back.

use rebound_test_support as common;

use common::fleet::*;
use common::services::*;
use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant};

/// The goal of issue 29: 404 on every proxy within 10 s of Redis being reachable again.
const FINISHED_WITHIN: Duration = Duration::from_secs(10);

/// The actions and outcomes of `code`'s audit log, oldest first.
async fn audit(cp: &Running, code: &str) -> Vec<(String, String)> {
    let (s, v) = api(cp, reqwest::Method::GET, &format!("/api/v1/links/{code}/audit"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn a_delete_is_finished_after_its_control_plane_lost_redis_and_died(takedown: bool) {
    let redis = OwnServer::redis();
    let d = Deployment::new(&shared_aws_url(), Some(&redis.url()));
    let dir = temp_dir();
    // Only the control plane reaches Redis through the relay; the proxies keep their Redis.
    let relay = Relay::to(redis.port);
    let mut cp = d.control_plane(
        dir.path(),
        &[("REBOUND_REDIS_URL", &through_relay(&redis.url(), relay.port))],
    );
    let proxies = [d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let code = create(&cp, json!({"long_url": "https://example.com/reconcile"})).await;
    for p in &proxies {
        for _ in 0..2 {
            assert_eq!(status(p, &code).await, 302, "warmed into L1");
        }
    }
    relay.freeze();
    let (s, body) = take_down(&cp, &code, takedown).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "invalidation_failed", "{body}");
    cp.kill();
    // Its connections go with the relay: no byte it wrote reaches Redis later.
    drop(relay);
    // Nothing told the proxies: their Redis still holds the active record.
    for p in &proxies {
        assert_eq!(status(p, &code).await, 302, "the delete is not propagated yet");
    }
    let started = Instant::now();
    let next = d.control_plane(dir.path(), &[]);
    for (n, p) in proxies.iter().enumerate() {
        let left = FINISHED_WITHIN.saturating_sub(started.elapsed());
        assert!(
            eventually(p, &code, 404, left).await,
            "proxy {n} still redirects {:?} after the new control plane started, with no client retry",
            started.elapsed()
        );
    }
    eprintln!(
        "404 on both proxies {:?} after the new control plane started",
        started.elapsed()
    );
    let action = if takedown { "takedown" } else { "delete" };
    // The proxies may answer 404 before the propagation is audited: it is recorded once
    // every proxy acknowledged it.
    let mut log = audit(&next, &code).await;
    let audited = Instant::now();
    while log.len() < 2 && audited.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = audit(&next, &code).await;
    }
    assert_eq!(
        log,
        [
            (action.to_owned(), "invalidate_failed".to_owned()),
            ("propagated".to_owned(), "ok".to_owned())
        ],
        "the failed attempt, then the finished propagation"
    );
    // The client's retry is still answered as the first success would have been.
    let (s, body) = take_down(&next, &code, takedown).await;
    assert!(s.is_success(), "{s} {body}");
    for p in &proxies {
        assert_eq!(status(p, &code).await, 404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_delete_whose_control_plane_lost_redis_and_died_is_finished_by_the_next_one() {
    a_delete_is_finished_after_its_control_plane_lost_redis_and_died(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_takedown_whose_control_plane_lost_redis_and_died_is_finished_by_the_next_one() {
    a_delete_is_finished_after_its_control_plane_lost_redis_and_died(true).await;
}

/// The control plane stays up but loses Redis for a while: its delete answers 503, its
/// reconciler's attempts fail while Redis is away, and once Redis is back the next attempt
/// finishes the delete on every proxy, with no client retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_delete_made_while_redis_was_away_is_finished_once_it_is_back() {
    let redis = OwnServer::redis();
    let d = Deployment::new(&shared_aws_url(), Some(&redis.url()));
    let dir = temp_dir();
    let relay = Relay::to(redis.port);
    let cp = d.control_plane(
        dir.path(),
        &[("REBOUND_REDIS_URL", &through_relay(&redis.url(), relay.port))],
    );
    let proxies = [d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let code = create(&cp, json!({"long_url": "https://example.com/away"})).await;
    for p in &proxies {
        assert_eq!(status(p, &code).await, 302, "warmed into L1");
    }
    relay.freeze();
    let (s, body) = take_down(&cp, &code, false).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // Redis stays away for a few of the reconciler's attempts; what they and the delete
    // sent is dropped with their connections, so only an attempt made after Redis is back
    // can finish the delete.
    tokio::time::sleep(Duration::from_secs(3)).await;
    relay.fail_over_to(redis.port);
    for p in &proxies {
        assert_eq!(status(p, &code).await, 302, "nothing propagated while Redis is away");
    }
    relay.thaw();
    let back = Instant::now();
    for (n, p) in proxies.iter().enumerate() {
        let left = FINISHED_WITHIN.saturating_sub(back.elapsed());
        assert!(
            eventually(p, &code, 404, left).await,
            "proxy {n} still redirects {:?} after Redis came back, with no client retry",
            back.elapsed()
        );
    }
    eprintln!("404 on both proxies {:?} after Redis came back", back.elapsed());
    let mut log = audit(&cp, &code).await;
    while log.len() < 2 && back.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        log = audit(&cp, &code).await;
    }
    assert_eq!(
        log,
        [
            ("delete".to_owned(), "invalidate_failed".to_owned()),
            ("propagated".to_owned(), "ok".to_owned())
        ]
    );
}
