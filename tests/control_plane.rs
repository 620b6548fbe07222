//! Black-box tests of `rebound control-plane` on port 0 against a temporary SQLite file:
//! the success and error rows of SPEC §6, concurrency, restarts and the CLI.

mod common;

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
    let (ok, out, _) = cli(&api, Some(&creator), &["links", "delete", &code]);
    assert!(ok && out.contains("deleted"), "{out}");

    let id = key["id"].as_str().unwrap();
    let (ok, _, err) = cli(&api, op, &["keys", "revoke", id]);
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&api, Some(&creator), &["links", "list"]);
    assert!(!ok && err.contains("401"), "{err}");
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
