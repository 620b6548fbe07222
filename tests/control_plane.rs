//! Black-box tests of `rebound control-plane` on port 0 against a temporary SQLite file:
//! the success and error rows of docs/spec.md §6, concurrency, restarts and the CLI.

use rebound_test_support as common;

use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::HashSet;

async fn call(
    method: reqwest::Method,
    url: String,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut req = http().request(method, url);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_string());
    }
    let res = req.send().await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let text = res.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    (status, headers, value)
}

/// A new creator key, made with the operator key through the API at `api`.
async fn new_creator_key(api: &str) -> String {
    let (s, _, v) = call(
        reqwest::Method::POST,
        format!("{api}/api/v1/keys"),
        Some(OPERATOR_KEY),
        Some(json!({"name": "c", "role": "creator"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v["key"].as_str().unwrap().to_owned()
}

/// Starts a control plane on `dir` with `toml` as its configuration file.
fn control_plane_with_config(dir: &std::path::Path, toml: &str) -> Running {
    let config = dir.join("rebound.toml");
    std::fs::write(&config, toml).unwrap();
    start(
        &["control-plane", "--config", config.to_str().unwrap()],
        dir,
        &[],
        &["API"],
    )
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error body: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_contract_over_http() {
    use reqwest::Method;
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let op = Some(OPERATOR_KEY);

    // Keys.
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/keys"),
        op,
        Some(json!({"name": "alice", "role": "creator"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let alice = v["key"].as_str().unwrap().to_owned();
    let alice_id = v["id"].as_str().unwrap().to_owned();
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/keys"),
        Some(&alice),
        Some(json!({"name": "x", "role": "operator"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::FORBIDDEN, "forbidden"));
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/keys"),
        op,
        Some(json!({"name": "x", "role": "root"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_role"));
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/keys"),
        None,
        Some(json!({"name": "x", "role": "creator"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));

    // Create: 201, 400, 401, 409, 413, 415.
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/links"),
        Some(&alice),
        Some(json!({"long_url": "https://example.com/x", "custom_alias": "bb-alias"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["short_url"], "http://127.0.0.1:8080/bb-alias");
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/links"),
        Some(&alice),
        Some(json!({"long_url": "https://example.com/y", "custom_alias": "bb-alias"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::CONFLICT, "alias_taken"));
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/links"),
        Some(&alice),
        Some(json!({"long_url": "http://127.0.0.1:8080/loop"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_url"));
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/links"),
        None,
        Some(json!({"long_url": "https://example.com/"})),
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::UNAUTHORIZED, "unauthorized"));
    let res = http()
        .post(format!("{api}/api/v1/links"))
        .bearer_auth(&alice)
        .body("long_url=x")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = json!({"long_url": "https://example.com/", "custom_alias": "a".repeat(70_000)});
    let (s, _, v) = call(Method::POST, format!("{api}/api/v1/links"), Some(&alice), Some(big)).await;
    assert_eq!(
        (s, error_code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );

    // Get: 200, 401, 403, 404.
    let (s, _, v) = call(Method::GET, format!("{api}/api/v1/links/bb-alias"), Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (v["is_active"].clone(), v["version"].clone(), v["created_by"].clone()),
        (json!(true), json!(1), json!(alice_id))
    );
    let (s, _, _) = call(Method::GET, format!("{api}/api/v1/links/bb-alias"), None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/keys"),
        op,
        Some(json!({"name": "bob", "role": "creator"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let bob = v["key"].as_str().unwrap().to_owned();
    let (s, _, _) = call(Method::GET, format!("{api}/api/v1/links/bb-alias"), Some(&bob), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = call(Method::GET, format!("{api}/api/v1/links/nope123"), Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // List: 200, 400, 401.
    let (s, _, v) = call(Method::GET, format!("{api}/api/v1/links?limit=10"), Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["links"].as_array().unwrap().len(), 1);
    let (s, _, v) = call(
        Method::GET,
        format!("{api}/api/v1/links?limit=5000"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_limit"));
    let (s, _, v) = call(
        Method::GET,
        format!("{api}/api/v1/links?cursor=garbage"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_cursor"));
    let (s, _, _) = call(Method::GET, format!("{api}/api/v1/links"), None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Stats: 200, 400, 401, 403, 404.
    let (s, _, v) = call(
        Method::GET,
        format!("{api}/api/v1/links/bb-alias/stats"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (v["total"].clone(), v["days"].as_array().unwrap().len()),
        (json!(0), 30)
    );
    let (s, _, v) = call(
        Method::GET,
        format!("{api}/api/v1/links/bb-alias/stats?from=2026-02-31"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_date"));
    assert_eq!(
        call(Method::GET, format!("{api}/api/v1/links/bb-alias/stats"), None, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(
            Method::GET,
            format!("{api}/api/v1/links/bb-alias/stats"),
            Some(&bob),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            Method::GET,
            format!("{api}/api/v1/links/nope123/stats"),
            Some(&alice),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );

    // Takedown: 400, 401, 403, 404, 200.
    let url = format!("{api}/api/v1/links/bb-alias/takedown");
    let (s, _, v) = call(Method::POST, url.clone(), op, Some(json!({}))).await;
    assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_json"));
    assert_eq!(
        call(Method::POST, url.clone(), None, Some(json!({"reason": "x"})))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(Method::POST, url.clone(), Some(&alice), Some(json!({"reason": "x"})))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            Method::POST,
            format!("{api}/api/v1/links/nope123/takedown"),
            op,
            Some(json!({"reason": "x"}))
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    let (s, _, v) = call(Method::POST, url.clone(), op, Some(json!({"reason": "phishing"}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (
            v["is_active"].clone(),
            v["deleted_by"].clone(),
            v["delete_reason"].clone()
        ),
        (json!(false), json!("bootstrap"), json!("phishing"))
    );
    // Repeated: the same record.
    let (s, _, again) = call(Method::POST, url, op, Some(json!({"reason": "phishing"}))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(again["deleted_at"], v["deleted_at"]);

    // Delete: 204, 401, 403, 404.
    let (_, _, v) = call(
        Method::POST,
        format!("{api}/api/v1/links"),
        Some(&alice),
        Some(json!({"long_url": "https://example.com/d"})),
    )
    .await;
    let code = v["code"].as_str().unwrap().to_owned();
    assert_eq!(
        call(Method::DELETE, format!("{api}/api/v1/links/{code}"), None, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(Method::DELETE, format!("{api}/api/v1/links/{code}"), Some(&bob), None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(Method::DELETE, format!("{api}/api/v1/links/{code}"), Some(&alice), None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(
            Method::DELETE,
            format!("{api}/api/v1/links/nope123"),
            Some(&alice),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );

    // Revoke: 204, then the key fails at once; 404 for an unknown id.
    assert_eq!(
        call(Method::DELETE, format!("{api}/api/v1/keys/{alice_id}"), op, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(Method::GET, format!("{api}/api/v1/links"), Some(&alice), None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(Method::DELETE, format!("{api}/api/v1/keys/unknown"), op, None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    // OpenAPI without a key.
    let (s, _, v) = call(Method::GET, format!("{api}/api/v1/openapi.json"), None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["openapi"].as_str().unwrap().starts_with("3."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429_with_retry_after() {
    let dir = temp_dir();
    let rb = control_plane_with_config(dir.path(), "[api]\ncreator_burst = 2\ncreator_rate_per_sec = 0.5\n");
    let api = rb.api();
    let key = new_creator_key(&api).await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..4 {
        let (s, h, _) = call(
            reqwest::Method::POST,
            format!("{api}/api/v1/links"),
            Some(&key),
            Some(json!({"long_url": "https://e.com/"})),
        )
        .await;
        statuses.push(s);
        if s == StatusCode::TOO_MANY_REQUESTS {
            retry_after = h.get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        }
    }
    assert_eq!(statuses[..2], [StatusCode::CREATED, StatusCode::CREATED]);
    assert!(statuses[2..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS));
    assert_eq!(retry_after.as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_four_concurrent_creates_of_one_alias_give_one_201() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let url = format!("{api}/api/v1/links");
            tokio::spawn(async move {
                call(
                    reqwest::Method::POST,
                    url,
                    Some(OPERATOR_KEY),
                    Some(json!({"long_url": format!("https://e.com/{i}"), "custom_alias": "contested"})),
                )
                .await
                .0
            })
        })
        .collect();
    let mut created = 0;
    let mut conflicts = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => conflicts += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((created, conflicts), (1, 23));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_links_keys_and_the_counter() {
    let dir = temp_dir();
    let mut codes = HashSet::new();
    let creator_key;
    {
        let mut rb = start(&["control-plane"], dir.path(), &[], &["API"]);
        let api = rb.api();
        creator_key = new_creator_key(&api).await;
        for i in 0..20 {
            let (s, _, v) = call(
                reqwest::Method::POST,
                format!("{api}/api/v1/links"),
                Some(&creator_key),
                Some(json!({"long_url": format!("https://e.com/{i}")})),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED);
            assert!(codes.insert(v["code"].as_str().unwrap().to_owned()));
        }
        assert!(rb.terminate().success(), "SIGTERM exits cleanly");
    }
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    // The key still works and the links are there.
    let (s, _, v) = call(
        reqwest::Method::GET,
        format!("{api}/api/v1/links?limit=1000"),
        Some(&creator_key),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let listed: HashSet<String> = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, codes);
    // New codes never repeat an old one.
    for i in 0..20 {
        let (s, _, v) = call(
            reqwest::Method::POST,
            format!("{api}/api/v1/links"),
            Some(&creator_key),
            Some(json!({"long_url": format!("https://e.com/n{i}")})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
        assert!(
            codes.insert(v["code"].as_str().unwrap().to_owned()),
            "a code was reissued"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bootstrap_key_one_is_generated_and_printed_once() {
    let dir = temp_dir();
    let mut rb = start(
        &["control-plane"],
        dir.path(),
        &[("REBOUND_BOOTSTRAP_KEY", "")],
        &["API"],
    );
    let key_line = rb
        .stdout_lines
        .iter()
        .find(|l| l.contains("initial operator API key"))
        .cloned()
        .expect("the key is printed");
    let key = key_line.rsplit(' ').next().unwrap().to_owned();
    let (s, _, _) = call(
        reqwest::Method::POST,
        format!("{}/api/v1/keys", rb.api()),
        Some(&key),
        Some(json!({"name": "x", "role": "creator"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "the printed key is an operator key");
    rb.terminate();
    let rb = start(
        &["control-plane"],
        dir.path(),
        &[("REBOUND_BOOTSTRAP_KEY", "")],
        &["API"],
    );
    assert!(
        !rb.stdout_lines.iter().any(|l| l.contains("initial operator API key")),
        "printed only once"
    );
    let (s, _, _) = call(
        reqwest::Method::GET,
        format!("{}/api/v1/links", rb.api()),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "and it still works");
}

#[test]
fn a_bad_setting_is_named_and_refused() {
    let out = std::process::Command::new(bin())
        .arg("control-plane")
        .env("REBOUND_API_ADDR", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("REBOUND_API_ADDR"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_links_and_keys() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let op = Some(OPERATOR_KEY);

    let (ok, out, err) = cli(
        &api,
        op,
        &["keys", "create", "--name", "ci", "--role", "creator", "--json"],
    );
    assert!(ok, "{err}");
    let key: Value = serde_json::from_str(&out).unwrap();
    let creator = key["key"].as_str().unwrap().to_owned();

    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &[
            "links",
            "create",
            "https://example.com/cli",
            "--alias",
            "cli-link",
            "--ttl",
            "3600",
            "--redirect",
            "301",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("cli-link") && out.contains("http://127.0.0.1:8080/cli-link") && out.contains("301"),
        "{out}"
    );

    let (ok, out, _) = cli(&api, Some(&creator), &["links", "list"]);
    assert!(ok);
    assert!(
        out.starts_with("CODE") && out.contains("cli-link") && out.contains("active"),
        "{out}"
    );

    let (ok, out, _) = cli(&api, Some(&creator), &["links", "get", "cli-link", "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["redirect"], 301);

    let (ok, out, _) = cli(&api, Some(&creator), &["links", "stats", "cli-link"]);
    assert!(ok);
    assert!(out.contains("total") && out.contains('0'), "{out}");

    // Errors are one clear line and a failure exit.
    let (ok, _, err) = cli(&api, Some(&creator), &["links", "create", "ftp://nope"]);
    assert!(!ok);
    assert!(err.contains("400 invalid_url"), "{err}");
    let (ok, _, err) = cli(&api, None, &["links", "list"]);
    assert!(!ok);
    assert!(err.contains("401") && err.contains("REBOUND_API_KEY"), "{err}");
    let (ok, _, err) = cli(&api, Some(&creator), &["takedown", "cli-link", "--reason", "spam"]);
    assert!(!ok && err.contains("403"), "{err}");
    let (ok, _, err) = cli("http://127.0.0.1:9", Some(&creator), &["links", "list"]);
    assert!(!ok && err.contains("cannot reach"), "{err}");

    let (ok, out, err) = cli(&api, op, &["takedown", "cli-link", "--reason", "spam"]);
    assert!(ok, "{err}");
    assert!(out.contains("spam") && out.contains("false"), "{out}");
    let (ok, out, _) = cli(&api, Some(&creator), &["links", "list"]);
    assert!(ok && out.contains("deleted"), "{out}");

    let (ok, out, _) = cli(
        &api,
        Some(&creator),
        &["links", "create", "https://example.com/2", "--json"],
    );
    assert!(ok);
    let code = serde_json::from_str::<Value>(&out).unwrap()["code"]
        .as_str()
        .unwrap()
        .to_owned();
    // An edit: at the version read just before, or the one given; a stale one is refused.
    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &[
            "links",
            "edit",
            &code,
            "--url",
            "https://example.com/3",
            "--redirect",
            "301",
            "--no-expiry",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let edited = serde_json::from_str::<Value>(&out).unwrap();
    assert_eq!(
        (&edited["long_url"], &edited["redirect"], &edited["version"]),
        (&json!("https://example.com/3"), &json!(301), &json!(2))
    );
    let (ok, _, err) = cli(
        &api,
        Some(&creator),
        &["links", "edit", &code, "--forward-query", "--if-match", "1"],
    );
    assert!(!ok && err.contains("412 version_mismatch"), "{err}");
    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &[
            "links",
            "edit",
            &code,
            "--forward-query",
            "--ttl",
            "600",
            "--if-match",
            "2",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("https://example.com/3") && out.contains("true"), "{out}");
    let (ok, _, err) = cli(&api, Some(&creator), &["links", "edit", &code]);
    assert!(!ok && err.contains("400 empty_edit"), "{err}");
    // A password set, then removed; never printed.
    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &["links", "edit", &code, "--password", "cli secret", "--json"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("\"password_protected\": true") && !out.contains("cli secret"),
        "{out}"
    );
    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &["links", "edit", &code, "--no-password", "--json"],
    );
    assert!(ok && out.contains("\"password_protected\": false"), "{out}{err}");
    let (ok, out, err) = cli(
        &api,
        Some(&creator),
        &[
            "links",
            "create",
            "https://example.com/locked",
            "--password",
            "shh shh",
            "--json",
        ],
    );
    assert!(ok && out.contains("\"password_protected\": true"), "{out}{err}");
    let (ok, out, _) = cli(&api, Some(&creator), &["links", "delete", &code]);
    assert!(ok && out.contains("deleted"), "{out}");

    let id = key["id"].as_str().unwrap();
    let (ok, _, err) = cli(&api, op, &["keys", "revoke", id]);
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&api, Some(&creator), &["links", "list"]);
    assert!(!ok && err.contains("401"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_domains_their_links_and_keys_scoped_to_them() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let op = Some(OPERATOR_KEY);
    let json_of = |out: &str| serde_json::from_str::<Value>(out).unwrap_or_else(|e| panic!("{e}: {out}"));

    // Added, canonical, pending: no certificate yet.
    let (ok, out, err) = cli(
        &api,
        op,
        &[
            "domains",
            "add",
            "Go.Cli.Test.",
            "--not-found-url",
            "https://cli.example/missing",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("name:") && out.contains("go.cli.test") && out.contains("pending"),
        "{out}"
    );
    let (ok, out, err) = cli(
        &api,
        op,
        &["domains", "add", "files.cli.test", "--certificate", "files", "--json"],
    );
    assert!(ok, "{err}");
    let files = json_of(&out);
    assert_eq!(
        (files["state"].as_str(), files["default"].as_bool()),
        (Some("files"), Some(false))
    );

    // Listed, the default domain (the public base URL's host) first.
    let (ok, out, err) = cli(&api, op, &["domains", "list"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("NAME") && lines[0].contains("STATE"), "{out}");
    assert!(lines[1].starts_with("127.0.0.1") && lines[1].contains("yes"), "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("go.cli.test") && l.contains("acme") && l.contains("pending")),
        "{out}"
    );
    let (ok, out, _) = cli(&api, op, &["domains", "list", "--json"]);
    assert!(ok);
    let names: Vec<String> = json_of(&out)["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["127.0.0.1", "files.cli.test", "go.cli.test"]);
    let (ok, out, err) = cli(&api, op, &["domains", "show", "go.cli.test", "--json"]);
    assert!(ok, "{err}");
    assert_eq!(json_of(&out)["not_found_url"], "https://cli.example/missing");
    let (ok, out, _) = cli(&api, op, &["domains", "show", "files.cli.test"]);
    assert!(ok && out.contains("certificate:") && out.contains("files"), "{out}");

    // The same alias on a domain and on the default one; each addressed with --domain.
    let (ok, out, err) = cli(
        &api,
        op,
        &[
            "links",
            "create",
            "https://example.com/on-go",
            "--alias",
            "promo",
            "--domain",
            "go.cli.test",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("domain:") && out.contains("http://go.cli.test/promo"),
        "the short URL is on the domain: {out}"
    );
    let (ok, out, err) = cli(
        &api,
        op,
        &["links", "create", "https://example.com/default", "--alias", "promo"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("http://127.0.0.1:8080/promo"), "{out}");
    let (ok, out, err) = cli(
        &api,
        op,
        &["links", "get", "promo", "--domain", "go.cli.test", "--json"],
    );
    assert!(ok, "{err}");
    let on_go = json_of(&out);
    assert_eq!(
        (on_go["domain"].as_str(), on_go["long_url"].as_str()),
        (Some("go.cli.test"), Some("https://example.com/on-go"))
    );
    let (ok, out, _) = cli(&api, op, &["links", "get", "promo"]);
    assert!(
        ok && out.contains("https://example.com/default") && out.contains("127.0.0.1"),
        "{out}"
    );
    let (ok, out, _) = cli(&api, op, &["links", "list"]);
    assert!(ok && out.contains("DOMAIN") && out.contains("go.cli.test"), "{out}");
    let (ok, out, err) = cli(&api, op, &["links", "stats", "promo", "--domain", "go.cli.test"]);
    assert!(ok && out.contains("total"), "{out}{err}");
    let (ok, svg, err) = cli(&api, op, &["links", "qr", "promo", "--domain", "go.cli.test"]);
    assert!(ok, "{err}");
    let served = http()
        .get(format!("{api}/api/v1/links/promo/qr.svg?domain=go.cli.test"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(svg, served, "the QR code of the link on the domain");
    // A link call on a domain nobody added finds no link there.
    let (ok, _, err) = cli(&api, op, &["links", "get", "promo", "--domain", "nope.cli.test"]);
    assert!(!ok && err.contains("404 not_found"), "{err}");

    // A creator key scoped to the two domains: its links go on the first unless told.
    let (ok, out, err) = cli(
        &api,
        op,
        &[
            "keys",
            "create",
            "--name",
            "brand",
            "--role",
            "creator",
            "--domain",
            "go.cli.test",
            "--domain",
            "FILES.cli.test",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("domains:") && out.contains("go.cli.test, files.cli.test"),
        "{out}"
    );
    let brand = out
        .lines()
        .find_map(|l| l.strip_prefix("key:"))
        .unwrap()
        .trim()
        .to_owned();
    let (ok, out, err) = cli(
        &api,
        Some(&brand),
        &["links", "create", "https://example.com/brand", "--json"],
    );
    assert!(ok, "{err}");
    let made = json_of(&out);
    assert_eq!(made["domain"], "go.cli.test");
    let code = made["code"].as_str().unwrap().to_owned();
    let (ok, _, err) = cli(
        &api,
        Some(&brand),
        &["links", "create", "https://example.com/b", "--domain", "127.0.0.1"],
    );
    assert!(!ok && err.contains("403 forbidden"), "{err}");
    let (ok, out, _) = cli(&api, Some(&brand), &["domains", "list"]);
    assert!(
        ok && !out.contains("127.0.0.1") && out.contains("files.cli.test"),
        "{out}"
    );
    let (ok, out, err) = cli(
        &api,
        Some(&brand),
        &["links", "delete", &code, "--domain", "go.cli.test"],
    );
    assert!(ok && out.contains("deleted"), "{out}{err}");
    let (ok, _, err) = cli(&api, Some(&brand), &["domains", "add", "brand.cli.test"]);
    assert!(!ok && err.contains("403"), "{err}");
    let (ok, _, err) = cli(
        &api,
        op,
        &[
            "keys",
            "create",
            "--name",
            "o",
            "--role",
            "operator",
            "--domain",
            "go.cli.test",
        ],
    );
    assert!(
        !ok && err.contains("400 invalid_domains: an operator key is never scoped to domains"),
        "{err}"
    );
    let (ok, _, err) = cli(
        &api,
        op,
        &[
            "keys",
            "create",
            "--name",
            "c",
            "--role",
            "creator",
            "--domain",
            "nope.cli.test",
        ],
    );
    assert!(!ok && err.contains("400 invalid_domains"), "{err}");

    // Refusals: the API's code and message, and a failure exit.
    let (ok, _, err) = cli(&api, op, &["domains", "add", "not_a.domain"]);
    assert!(
        !ok && err.contains("400 invalid_domain: name is not a DNS name"),
        "{err}"
    );
    let (ok, _, err) = cli(&api, op, &["domains", "add", "127.0.0.2"]);
    assert!(
        !ok && err.contains("400 invalid_domain: name is an IP address"),
        "{err}"
    );
    let (ok, _, err) = cli(&api, op, &["domains", "add", "x.cli.test", "--certificate", "manual"]);
    assert!(!ok && err.contains("400 invalid_certificate"), "{err}");
    let (ok, _, err) = cli(&api, op, &["domains", "add", "go.cli.test"]);
    assert!(!ok && err.contains("409 domain_exists"), "{err}");
    let (ok, _, err) = cli(&api, op, &["domains", "show", "nope.cli.test"]);
    assert!(!ok && err.contains("404 not_found"), "{err}");
    let (ok, _, err) = cli(&api, op, &["domains", "remove", "127.0.0.1"]);
    assert!(!ok && err.contains("409 default_domain"), "{err}");
    let (ok, _, err) = cli(&api, op, &["links", "get", ".."]);
    assert!(!ok && err.contains("cannot be a code"), "{err}");

    // A link taken down on its domain.
    let (ok, _, err) = cli(
        &api,
        op,
        &[
            "links",
            "create",
            "https://example.com/spam",
            "--alias",
            "spam",
            "--domain",
            "files.cli.test",
        ],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = cli(
        &api,
        op,
        &["takedown", "spam", "--domain", "files.cli.test", "--reason", "spam"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("files.cli.test") && out.contains("false"), "{out}");

    // An import puts each line on the domain its `domain` column names.
    let csv = dir.path().join("on-domains.csv");
    std::fs::write(
        &csv,
        "long_url,alias,domain\nhttps://example.com/imported,imported,go.cli.test\n",
    )
    .unwrap();
    let (ok, out, err) = cli(&api, op, &["links", "import", csv.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.starts_with("imported,http://go.cli.test/imported,"), "{out}");

    // Removed only with its links taken down; the link of the same alias elsewhere stays.
    let (ok, _, err) = cli(&api, op, &["domains", "remove", "go.cli.test"]);
    assert!(
        !ok && err.contains("409 domain_has_links") && err.contains("--take-down"),
        "{err}"
    );
    let (ok, out, err) = cli(&api, op, &["domains", "remove", "go.cli.test", "--take-down"]);
    assert!(ok, "{err}");
    assert_eq!(out, "removed go.cli.test and took its 2 links down\n");
    let (ok, _, err) = cli(&api, op, &["links", "get", "promo", "--domain", "go.cli.test"]);
    assert!(!ok && err.contains("404 not_found"), "{err}");
    let (ok, out, _) = cli(&api, op, &["links", "get", "promo", "--json"]);
    assert!(ok && json_of(&out)["is_active"] == true, "{out}");
    let (ok, out, err) = cli(&api, op, &["domains", "remove", "files.cli.test", "--json"]);
    assert!(ok, "{err}");
    assert_eq!(json_of(&out), json!({"name": "files.cli.test", "taken_down": 0}));
    let (ok, out, _) = cli(&api, op, &["domains", "list"]);
    assert!(ok && out.lines().count() == 2, "the default domain alone again: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_imports_csv_and_json_lines() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let csv = dir.path().join("links.csv");
    std::fs::write(&csv, "long_url,alias\nhttps://example.com/a,import-a\n\"https://example.com/b?x=1,2\"\nnot a url\nhttps://example.com/c\n").unwrap();
    let (ok, out, err) = cli(&api, Some(OPERATOR_KEY), &["links", "import", csv.to_str().unwrap()]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("import-a,http://127.0.0.1:8080/import-a,https://example.com/a"));
    assert!(
        lines[1].ends_with(",https://example.com/b?x=1,2"),
        "a quoted comma stays in the URL: {}",
        lines[1]
    );
    assert!(
        err.contains("line 4: invalid_url") && err.contains("imported 3, failed 1"),
        "{err}"
    );

    let jsonl = dir.path().join("links.jsonl");
    std::fs::write(
        &jsonl,
        "{\"long_url\": \"https://example.com/j\", \"redirect\": 301, \"ttl_seconds\": 60}\n",
    )
    .unwrap();
    let (ok, out, err) = cli(
        &api,
        Some(OPERATOR_KEY),
        &["links", "import", jsonl.to_str().unwrap(), "--json"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["created"], 1);
    assert_eq!(v["results"][0]["redirect"], 301);

    let (ok, _, err) = cli(&api, Some(OPERATOR_KEY), &["links", "import", "/nonexistent.csv"]);
    assert!(!ok && err.contains("reading /nonexistent.csv"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_import_keeps_what_earlier_chunks_created_and_names_the_failed_lines() {
    let dir = temp_dir();
    let rb = control_plane_with_config(dir.path(), "[api]\nmax_import_body_bytes = 1024\n");
    let api = rb.api();
    let jsonl = dir.path().join("chunks.jsonl");
    // The second chunk is refused as a whole (its body is over the import limit).
    let long = format!("https://example.com/2?{}", "x".repeat(1100));
    std::fs::write(
        &jsonl,
        format!("{{\"long_url\": \"https://example.com/1\"}}\n{{\"long_url\": \"{long}\"}}\n{{\"long_url\": \"https://example.com/3\"}}\n"),
    )
    .unwrap();
    let (ok, out, err) = cli(
        &api,
        Some(OPERATOR_KEY),
        &["links", "import", jsonl.to_str().unwrap(), "--batch", "1"],
    );
    assert!(!ok, "a failed chunk is a failure exit: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "every created link is printed: {out}");
    assert!(lines[0].ends_with(",https://example.com/1") && lines[1].ends_with(",https://example.com/3"));
    assert!(err.contains("lines 2-2 not imported: 413 payload_too_large"), "{err}");
    assert!(err.contains("imported 2, failed 1"), "{err}");

    let (ok, out, err) = cli(
        &api,
        Some(OPERATOR_KEY),
        &["links", "import", jsonl.to_str().unwrap(), "--batch", "2", "--json"],
    );
    assert!(!ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["created"].clone(), v["failed"].clone()), (json!(1), json!(2)));
    assert_eq!(v["failed_chunks"][0]["lines"], "1-2", "{v}");
    assert_eq!(v["results"][0]["long_url"], "https://example.com/3");
    assert!(err.contains("lines 1-2 not imported"), "{err}");

    let (ok, out, _) = cli(&api, Some(OPERATOR_KEY), &["links", "list", "--json"]);
    assert!(ok);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed["links"].as_array().unwrap().len(),
        2,
        "nothing is lost, nothing doubled: line 3 of the same file, alone in its chunk both \
         times, carried the same Idempotency-Key and was answered, not created again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_imports_more_lines_than_a_creators_burst() {
    let dir = temp_dir();
    let rb = control_plane_with_config(dir.path(), "[api]\ncreator_burst = 2\ncreator_rate_per_sec = 50\n");
    let api = rb.api();
    let key = new_creator_key(&api).await;
    let csv = dir.path().join("many.csv");
    let text: String = (0..5).map(|i| format!("https://example.com/{i}\n")).collect();
    std::fs::write(&csv, text).unwrap();
    let (ok, out, err) = cli(&api, Some(&key), &["links", "import", csv.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 5, "{out}\n{err}");
    assert!(err.contains("imported 5, failed 0"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_dates_the_calendar_cannot_hold_are_400_over_http() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let (s, _, _) = call(
        reqwest::Method::POST,
        format!("{api}/api/v1/links"),
        Some(OPERATOR_KEY),
        Some(json!({"long_url": "https://example.com/", "custom_alias": "cal"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    for to in ["-9999-01-01", "-9999-01-29", "0000-01-05"] {
        let (s, _, v) = call(
            reqwest::Method::GET,
            format!("{api}/api/v1/links/cal/stats?to={to}"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
        assert_eq!((s, error_code(&v)), (StatusCode::BAD_REQUEST, "invalid_date"), "{to}");
    }
    // The server is still there.
    let (s, _, _) = call(
        reqwest::Method::GET,
        format!("{api}/api/v1/links/cal/stats"),
        Some(OPERATOR_KEY),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_writes_a_links_qr_code_as_the_apis_svg() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let op = Some(OPERATOR_KEY);
    let (ok, _, err) = cli(
        &api,
        op,
        &["links", "create", "https://example.com/qr", "--alias", "qr-cli"],
    );
    assert!(ok, "{err}");
    let (ok, svg, err) = cli(&api, op, &["links", "qr", "qr-cli"]);
    assert!(ok, "{err}");
    let served = http()
        .get(format!("{api}/api/v1/links/qr-cli/qr.svg"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg"), "{svg}");
    assert_eq!(svg, served, "the CLI writes the API's SVG as it came");
    let (ok, _, err) = cli(&api, op, &["links", "qr", "no-such-code"]);
    assert!(!ok && err.contains("404 not_found: no such link"), "{err}");
}
