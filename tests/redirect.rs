//! Black-box tests of the all-in-one `rebound` on port 0: every outcome of docs/spec.md §3 with
//! its status and headers, the invariants I1–I3 in one process, single-flight and the
//! issued-code filter seen through the metrics, and clicks reaching the stats.

use rebound_test_support as common;

use common::rebound::{exchange, End, Rebound, ALL_PORTS};
use common::*;
use reqwest::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant};

fn header<'a>(res: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    res.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The page of a 404 or 410 (the same bytes whatever was asked: nothing is echoed), or no
/// body for any other status.
async fn assert_no_store(res: reqwest::Response, status: StatusCode) {
    assert_eq!(res.status(), status);
    assert_eq!(header(&res, "cache-control"), Some("no-store"));
    assert!(header(&res, "location").is_none());
    let page = match status {
        StatusCode::NOT_FOUND => NOT_FOUND_PAGE,
        StatusCode::GONE => GONE_PAGE,
        _ => "",
    };
    if !page.is_empty() {
        assert_eq!(header(&res, "content-type"), Some("text/html; charset=utf-8"));
    }
    assert_eq!(res.text().await.unwrap(), page, "a static page, or never a body");
}

const NOT_FOUND_PAGE: &str = include_str!("../proxy/pages/not-found.html");
const GONE_PAGE: &str = include_str!("../proxy/pages/gone.html");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_with_its_status_and_headers() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/a?x=1", "custom_alias": "fwd", "forward_query": true}))
        .await;
    rb.create(json!({"long_url": "https://example.com/b", "custom_alias": "nofwd"}))
        .await;
    for status in [301, 302, 307, 308] {
        rb.create(
            json!({"long_url": "https://example.com/k", "custom_alias": format!("kind{status}"), "redirect": status}),
        )
        .await;
    }

    let res = rb.get("/fwd?utm=1&b=2").await;
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(header(&res, "location"), Some("https://example.com/a?x=1&utm=1&b=2"));
    assert_eq!(header(&res, "cache-control"), Some("public, max-age=5"));
    assert_eq!(header(&res, "content-length"), Some("0"));
    assert_eq!(res.text().await.unwrap(), "");
    let res = rb.get("/nofwd?utm=1").await;
    assert_eq!(
        header(&res, "location"),
        Some("https://example.com/b"),
        "no forwarding unless asked"
    );
    let res = rb.get("/fwd").await;
    assert_eq!(header(&res, "location"), Some("https://example.com/a?x=1"));
    for status in [301, 302, 307, 308] {
        let res = rb.get(&format!("/kind{status}")).await;
        assert_eq!(res.status().as_u16(), status);
    }

    // HEAD: the same answer, no body.
    let res = rb.http.head(rb.redirect_url("/nofwd")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(header(&res, "location"), Some("https://example.com/b"));

    // Other methods: 405 with Allow.
    for method in [
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::OPTIONS,
    ] {
        let res = rb.http.request(method, rb.redirect_url("/nofwd")).send().await.unwrap();
        assert_eq!(header(&res, "allow"), Some("GET, HEAD"));
        assert_no_store(res, StatusCode::METHOD_NOT_ALLOWED).await;
    }

    // Malformed paths: 404 before any lookup.
    let reads = rb.metric(STORE_READS).await;
    for path in [
        "/",
        "/ab",
        "/nofwd/",
        "/a/b/c",
        "/%6Eofwd",
        "/nofwd.html",
        &format!("/{}", "a".repeat(33)),
        "//nofwd",
    ] {
        assert_no_store(rb.get(path).await, StatusCode::NOT_FOUND).await;
    }
    assert_eq!(rb.metric(STORE_READS).await, reads, "no lookup for a malformed path");
    assert!(
        rb.metric(r#"rebound_redirect_requests_total{outcome="bad_path"}"#)
            .await
            >= 8.0
    );

    // Unknown code: 404, never a 200.
    assert_no_store(rb.get("/unknown1").await, StatusCode::NOT_FOUND).await;

    // Health.
    let res = rb
        .http
        .get(format!("{}/healthz", rb.run.addr("metrics")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    rb.wait_ready().await;
}

/// `curl` on the redirect port: status, `location`, `content-type` and body length, for
/// HEAD and GET over HTTP/1.1 and h2c.
fn curl_answer(args: &[&str], url: &str) -> String {
    curl(
        "%{http_version} %{http_code} %{redirect_url} %{content_type} %{size_download}",
        &[args, &[url]].concat(),
    )
}

/// The header names of each response in `text` (heads, each after the body before it),
/// sorted, lower-case.
fn response_header_names(text: &str) -> Vec<Vec<String>> {
    text.split("\r\n\r\n")
        .filter_map(|chunk| chunk.find("HTTP/").map(|at| &chunk[at..]))
        .map(|head| {
            let mut names: Vec<String> = head
                .lines()
                .skip(1)
                .filter_map(|line| line.split_once(':'))
                .map(|(name, _)| name.trim().to_ascii_lowercase())
                .collect();
            names.sort();
            names
        })
        .collect()
}

/// A redirect carries its own headers and never one that a request on its connection sent
/// (a reflected `Cookie` or `Authorization` would leak it to the destination's logs and
/// caches), over HTTP/1.1 (pipelined on one connection, a request of many headers among
/// them) and over h2c. A guard for any reuse of the request's header map for the response,
/// which hyper's HTTP/1 connection invites by keeping each response's map for the next
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_carries_none_of_the_headers_of_the_requests_on_its_connection() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/b", "custom_alias": "plain"}))
        .await;
    let many: String = (0..40).map(|i| format!("X-Pad-{i}: {i}\r\n")).collect();
    let pipelined = format!(
        "GET /plain HTTP/1.1\r\nHost: x\r\nCookie: secret=1\r\nAuthorization: Bearer t\r\nX-Echo: no\r\n\r\n\
         GET /plain HTTP/1.1\r\nHost: x\r\n{many}\r\n\
         GET /nothere HTTP/1.1\r\nHost: x\r\nX-Echo: no\r\n\r\n\
         GET /plain HTTP/1.1\r\nHost: x\r\nX-Last: 1\r\nConnection: close\r\n\r\n"
    );
    let (text, end) = exchange(&rb.redirect(), pipelined.as_bytes(), Duration::from_secs(5));
    assert_eq!(end, End::Closed, "the last request asked to close: {text}");
    assert_eq!(text.matches("HTTP/1.1 302 Found").count(), 3, "{text}");
    assert_eq!(text.matches("location: https://example.com/b\r\n").count(), 3, "{text}");
    let redirect = ["cache-control", "content-length", "date", "location"];
    let not_found = [
        "cache-control",
        "content-length",
        "content-security-policy",
        "content-type",
        "date",
    ];
    let closing = ["cache-control", "connection", "content-length", "date", "location"];
    assert_eq!(
        response_header_names(&text),
        [&redirect[..], &redirect[..], &not_found[..], &closing[..]],
        "{text}"
    );

    let out = std::process::Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null"])
        .args(["-H", "Cookie: secret=1", "-H", "X-Echo: no"])
        .arg(rb.redirect_url("/plain"))
        .output()
        .expect("curl (scripts/test installs it)");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("HTTP/2 302"), "{text}");
    assert_eq!(
        response_header_names(&text),
        [["cache-control", "date", "location"]],
        "{text}"
    );
}

/// Creates a link that expires 1.5 s later and waits until it has; returns its code.
async fn expired_link(rb: &Rebound) -> String {
    let expires_at = rebound_core::time::to_rfc3339(now_millis() + 1500);
    let code = rb
        .create_code(json!({"long_url": "https://example.com/soon", "expires_at": expires_at}))
        .await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_links_get_a_page_over_http1_and_h2_and_head_gets_no_body() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    let code = expired_link(&rb).await;
    let html = "text/html; charset=utf-8";
    let (nf, gone) = (NOT_FOUND_PAGE.len(), GONE_PAGE.len());
    let url = |path: &str| rb.redirect_url(path);
    for (proto, version) in [("--http1.1", "1.1"), ("--http2-prior-knowledge", "2")] {
        for (path, page) in [
            ("/unknown1", nf),
            ("/", nf),
            ("/a/b", nf),
            (&format!("/{code}") as &str, gone),
        ] {
            let status = if page == gone { 410 } else { 404 };
            assert_eq!(
                curl_answer(&[proto], &url(path)),
                format!("{version} {status}  {html} {page}"),
                "GET {path} over {proto}"
            );
            assert_eq!(
                curl_answer(&[proto, "-I"], &url(path)),
                format!("{version} {status}  {html} 0"),
                "HEAD {path} over {proto}"
            );
        }
    }
    let res = rb.http.head(url("/unknown1")).send().await.unwrap();
    assert_eq!(
        header(&res, "content-length"),
        Some(nf.to_string().as_str()),
        "HEAD states the GET's length"
    );
    let res = rb.get("/unknown1").await;
    assert_eq!(
        header(&res, "content-security-policy").map(|p| p.starts_with("default-src 'none'")),
        Some(true)
    );
    assert_no_store(res, StatusCode::NOT_FOUND).await;
    assert_no_store(rb.get(&format!("/{code}")).await, StatusCode::GONE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_urls_replace_the_pages_with_redirects() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_NOT_FOUND_URL", "https://example.com/missing"),
            ("REBOUND_EXPIRED_URL", "https://example.com/expired"),
            ("REBOUND_ROOT_URL", "https://example.com/home"),
        ],
    );
    let code = expired_link(&rb).await;
    for (path, location) in [
        ("/unknown1", "https://example.com/missing"),
        ("/a/b", "https://example.com/missing"),
        ("/", "https://example.com/home"),
        (&format!("/{code}") as &str, "https://example.com/expired"),
    ] {
        for res in [
            rb.get(path).await,
            rb.http.head(rb.redirect_url(path)).send().await.unwrap(),
        ] {
            assert_eq!(res.status(), StatusCode::FOUND, "{path}");
            assert_eq!(header(&res, "location"), Some(location), "{path}");
            assert_eq!(header(&res, "cache-control"), Some("no-store"));
            assert_eq!(res.text().await.unwrap(), "");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_takedown_are_404_on_the_next_request() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    for code in ["del-me", "take-me"] {
        rb.create(json!({"long_url": "https://example.com/x", "custom_alias": code}))
            .await;
        // Warm L1.
        for _ in 0..3 {
            assert_eq!(rb.get(&format!("/{code}")).await.status(), StatusCode::FOUND);
        }
    }
    let (s, _) = rb.api(reqwest::Method::DELETE, "/api/v1/links/del-me", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_no_store(rb.get("/del-me").await, StatusCode::NOT_FOUND).await;
    let (s, _) = rb
        .api(
            reqwest::Method::POST,
            "/api/v1/links/take-me/takedown",
            Some(json!({"reason": "malware"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_no_store(rb.get("/take-me").await, StatusCode::NOT_FOUND).await;
    // And it stays deleted after a restart (L1 empty: the store's tombstone decides).
    let dir_path = dir.path().to_path_buf();
    drop(rb);
    let rb = Rebound::start(&dir_path, &[]);
    assert_no_store(rb.get("/del-me").await, StatusCode::NOT_FOUND).await;
    assert_no_store(rb.get("/take-me").await, StatusCode::NOT_FOUND).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_served_on_the_next_request_over_http1_and_h2_while_clicks_race_it() {
    // The all-in-one: an edit puts its new version into L1 before the API answers, and a
    // read of the old version still in flight cannot bring it back. Clients click the link
    // all along; every click that began after an edit returned goes to a newer target, and
    // the next request after each edit goes there over HTTP/1.1 and h2c.
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/v1", "custom_alias": "moving"}))
        .await;
    let over_h2 = |target: &str| {
        let got = curl_answer(
            &["-s", "--http2-prior-knowledge", "-o", "/dev/null"],
            &rb.redirect_url("/moving"),
        );
        assert_eq!(
            got.split(' ').take(3).collect::<Vec<_>>(),
            ["2", "302", target],
            "{got}"
        );
    };
    over_h2("https://example.com/v1");
    let history = std::sync::Arc::new(common::history::History::default());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clickers: Vec<_> = [rb.http.clone(), http(), http(), http()]
        .into_iter()
        .enumerate()
        .map(|(n, client)| {
            let (history, stop, url) = (history.clone(), stop.clone(), rb.run.addr("redirect"));
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    common::history::probe_with(&history, &client, &url, &format!("c{n}"), "moving").await;
                }
            })
        })
        .collect();
    for version in 1..=20u64 {
        let (from, to) = (
            format!("https://example.com/v{version}"),
            format!("https://example.com/v{}", version + 1),
        );
        let start = std::time::Instant::now();
        let res = rb
            .http
            .patch(format!("{}/api/v1/links/moving", rb.run.api()))
            .bearer_auth(OPERATOR_KEY)
            .header("if-match", format!("\"{version}\""))
            .json(&json!({"long_url": to}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(header(&res, "etag"), Some(format!("\"{}\"", version + 1).as_str()));
        history.record(
            common::history::Op::Edit {
                code: "moving".into(),
                from,
                agent: None,
                ok: true,
            },
            start,
            std::time::Instant::now(),
        );
        let res = rb.get("/moving").await;
        assert_eq!(header(&res, "location"), Some(to.as_str()), "version {}", version + 1);
        over_h2(&to);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clickers {
        c.await.unwrap();
    }
    let probes = history.assert_clean("edits under clicks");
    assert!(probes > 40, "{probes} probes");
    // A stale If-Match changes nothing.
    let (s, v) = common::fleet::edit_link(&rb.run, "moving", 3, json!({"long_url": "https://example.com/late"})).await;
    assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{v}");
    let res = rb.get("/moving").await;
    assert_eq!(header(&res, "location"), Some("https://example.com/v21"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_create_then_click_rounds_without_a_404() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.wait_ready().await;
    let mut not_found = 0;
    for i in 0..1000 {
        let link = rb.create(json!({"long_url": format!("https://example.com/{i}")})).await;
        let res = rb.get(&format!("/{}", link["code"].as_str().unwrap())).await;
        if res.status() != StatusCode::FOUND {
            not_found += 1;
        }
    }
    assert_eq!(not_found, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_probed_then_created_is_served_at_once() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.wait_ready().await;
    for i in 0..20 {
        let alias = format!("probe-{i}");
        assert_no_store(rb.get(&format!("/{alias}")).await, StatusCode::NOT_FOUND).await;
        rb.create(json!({"long_url": "https://example.com/p", "custom_alias": alias}))
            .await;
        assert_eq!(
            rb.get(&format!("/{alias}")).await.status(),
            StatusCode::FOUND,
            "a 404 was not cached"
        );
    }
}

/// Creates a link to `long_url` in a first process on `dir`, then starts a fresh one there
/// (its L1 cold) and waits until it is ready; returns it and the code.
async fn a_link_then_a_fresh_process(dir: &std::path::Path, long_url: &str) -> (Rebound, String) {
    let code = Rebound::start(dir, &[])
        .create_code(json!({"long_url": long_url}))
        .await;
    let rb = Rebound::start(dir, &[]);
    rb.wait_ready().await;
    (rb, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_answers_that_looked_past_memory_are_timed_and_every_answer_is_counted() {
    let dir = temp_dir();
    // A fresh process: the first request reads the store, the next ones are L1 hits.
    let (rb, code) = a_link_then_a_fresh_process(dir.path(), "https://example.com/timed").await;
    const TIMED: &str = "rebound_redirect_lookup_duration_seconds_count";
    const REDIRECTS: &str = r#"rebound_redirect_requests_total{outcome="redirect"}"#;
    const BAD_PATHS: &str = r#"rebound_redirect_requests_total{outcome="bad_path"}"#;
    let (timed, redirects, bad_paths) = (
        rb.metric(TIMED).await,
        rb.metric(REDIRECTS).await,
        rb.metric(BAD_PATHS).await,
    );
    for _ in 0..4 {
        assert_eq!(rb.get(&format!("/{code}")).await.status(), StatusCode::FOUND);
    }
    assert_eq!(rb.get("/no!such!code").await.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        rb.metric(TIMED).await - timed,
        1.0,
        "the store read is timed, the L1 hits and the refusal are not"
    );
    assert_eq!(rb.metric(REDIRECTS).await - redirects, 4.0, "every redirect is counted");
    assert_eq!(rb.metric(BAD_PATHS).await - bad_paths, 1.0, "the refusal is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_for_one_cold_code_make_one_store_read() {
    let dir = temp_dir();
    // A fresh process: L1 is cold.
    let (rb, code) = a_link_then_a_fresh_process(dir.path(), "https://example.com/cold").await;
    let before = rb.metric(STORE_READS).await;
    let url = rb.redirect_url(&format!("/{code}"));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (client, url) = (http(), url.clone());
            tokio::spawn(async move { client.get(url).send().await.unwrap().status() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::FOUND);
    }
    assert_eq!(
        rb.metric(STORE_READS).await - before,
        1.0,
        "one store read for 64 concurrent requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_codes_after_the_filter_loaded_make_no_store_reads() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    for i in 0..50 {
        rb.create(json!({"long_url": "https://example.com/", "custom_alias": format!("known-{i}")}))
            .await;
    }
    rb.wait_ready().await;
    let reads = rb.metric(STORE_READS).await;
    let rejects = rb.metric("rebound_bloom_rejects_total").await;
    for i in 0..300 {
        assert_eq!(rb.get(&format!("/unknown-{i}")).await.status(), StatusCode::NOT_FOUND);
    }
    let new_reads = rb.metric(STORE_READS).await - reads;
    let new_rejects = rb.metric("rebound_bloom_rejects_total").await - rejects;
    assert_eq!(new_reads + new_rejects, 300.0);
    // The filter is sized for a 0.1 % false-positive rate.
    assert!(new_reads <= 3.0, "{new_reads} store reads for unknown codes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_code_is_served_and_never_issued_ones_cost_no_store_read() {
    let dir = temp_dir();
    let mut codes = Vec::new();
    {
        let rb = Rebound::start(dir.path(), &[]);
        for i in 0..30 {
            let created = rb
                .create(json!({"long_url": format!("https://example.com/g/{i}")}))
                .await;
            codes.push(created["code"].as_str().unwrap().to_owned());
        }
        rb.create(json!({"long_url": "https://example.com/a", "custom_alias": "kept-alias"}))
            .await;
        codes.push("kept-alias".to_owned());
    }
    // A fresh process: its filter comes from the counter and the alias index, L1 is cold.
    let rb = Rebound::start(dir.path(), &[]);
    rb.wait_ready().await;
    assert!(rb.metric("rebound_issued_high_water").await >= 30.0);
    let reads = rb.metric(STORE_READS).await;
    for code in random_codes(1_000, 0x5EED) {
        assert_eq!(
            rb.get(&format!("/{code}")).await.status(),
            StatusCode::NOT_FOUND,
            "{code}"
        );
    }
    let probe_reads = rb.metric(STORE_READS).await - reads;
    assert!(probe_reads <= 1.0, "{probe_reads} store reads for 1,000 probes");
    for code in &codes {
        assert_eq!(rb.get(&format!("/{code}")).await.status(), StatusCode::FOUND, "{code}");
    }
    // Created after the start: its lease and its alias reach the filter in process.
    let fresh = rb.create(json!({"long_url": "https://example.com/fresh"})).await;
    rb.create(json!({"long_url": "https://example.com/b", "custom_alias": "fresh-alias"}))
        .await;
    for code in [fresh["code"].as_str().unwrap(), "fresh-alias"] {
        assert_eq!(rb.get(&format!("/{code}")).await.status(), StatusCode::FOUND, "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_show_up_in_stats_with_bots_and_head_counted_apart() {
    let dir = temp_dir();
    // Nothing written before the stop: the stats' first reads add what is pending.
    let env = [
        ("REBOUND_CLICK_FLUSH_MS", "600000"),
        ("REBOUND_CLICK_MAX_HOLD_MS", "600000"),
    ];
    let rb = Rebound::start(dir.path(), &env);
    rb.create(json!({"long_url": "https://example.com/", "custom_alias": "counted"}))
        .await;
    // People: no User-Agent, and a browser's.
    for _ in 0..3 {
        assert_eq!(rb.get("/counted").await.status(), StatusCode::FOUND);
    }
    let firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";
    // Bots: link unfurlers and a crawler, and a HEAD; each redirected like anyone.
    let bots = [
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
        "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
        "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    ];
    for agent in std::iter::once(firefox).chain(bots) {
        let res = rb
            .http
            .get(rb.redirect_url("/counted"))
            .header("User-Agent", agent)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::FOUND, "{agent}");
        assert_eq!(res.headers()["location"], "https://example.com/", "{agent}");
    }
    let head = rb.http.head(rb.redirect_url("/counted")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::FOUND);
    // The stats add the clicks not yet written, so they are exact at once.
    let (status, stats) = rb.api(reqwest::Method::GET, "/api/v1/links/counted/stats", None).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(
        (stats["total"].as_u64(), stats["bot_total"].as_u64()),
        (Some(4), Some(5)),
        "4 people, 4 bots and a HEAD: {stats}"
    );
    let today = stats["days"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (today["clicks"].as_u64(), today["bot_clicks"].as_u64()),
        (Some(4), Some(5))
    );
    assert_eq!(
        rb.metric("rebound_clicks_flushed_total").await,
        0.0,
        "all still pending"
    );
    // Through the rollups too: a graceful stop writes what was pending, a restart reads it.
    let mut rb = rb;
    assert!(rb.run.terminate().success());
    let restarted = Rebound::start(dir.path(), &[]);
    let (_, stats) = restarted
        .api(reqwest::Method::GET, "/api/v1/links/counted/stats", None)
        .await;
    assert_eq!(
        (stats["total"].as_u64(), stats["bot_total"].as_u64()),
        (Some(4), Some(5)),
        "written to the rollups apart: {stats}"
    );
    assert_eq!(restarted.metric("rebound_bot_clicks_queued_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_click_queue_drops_and_counts_without_failing_redirects() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[("REBOUND_CLICK_QUEUE_CAPACITY", "4")]);
    let codes: Vec<String> = (0..200).map(|i| format!("busy{i:03}")).collect();
    for code in &codes {
        rb.create(json!({"long_url": "https://example.com/", "custom_alias": code}))
            .await;
    }
    // Each round pipelines one GET for each of 200 codes on one connection: far more
    // codes clicked between two drains of the queue than its 4 slots.
    let round: String = codes
        .iter()
        .map(|c| format!("GET /{c} HTTP/1.1\r\nHost: x\r\n\r\n"))
        .collect();
    let addr = rb.run.addrs["redirect"].clone();
    for _ in 0..3 {
        let (text, _) = exchange(&addr, round.as_bytes(), Duration::from_millis(700));
        assert_eq!(
            text.matches("HTTP/1.1 302 Found").count(),
            200,
            "every redirect answered"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (queued, dropped) = loop {
        let queued = rb.metric("rebound_clicks_queued_total").await;
        let dropped = rb.metric("rebound_clicks_dropped_total").await;
        if queued + dropped == 600.0 {
            break (queued, dropped);
        }
        assert!(
            Instant::now() < deadline,
            "600 clicks, {queued} queued + {dropped} dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(dropped > 0.0, "a 4-slot queue drops some of 200 codes clicked at once");
    // A bound, not a timing: the all-in-one writes clicks at SCHED_IDLE, which a machine the
    // other tests keep busy can starve for a long time.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rb.metric("rebound_clicks_flushed_total").await < queued {
        assert!(Instant::now() < deadline, "the queued clicks were not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A SIGTERM the moment a process has announced its ports (an orchestrator stopping what
/// it just started) drains it like any other: the handlers are installed before the ports
/// are announced, not when the redirect server first waits for them (before, such a
/// SIGTERM took its default action and killed the process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_right_after_start_drains_and_exits_cleanly() {
    for round in 0..5 {
        let dir = temp_dir();
        let mut run = start(&[], dir.path(), &[("REBOUND_LOG", "info")], ALL_PORTS);
        let status = run.terminate();
        let log = run.log();
        assert!(status.success(), "round {round}: {status:?}\n{log:#?}");
        assert!(log.iter().any(|l| l.contains("SIGTERM: draining")), "{log:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_ships_the_clicks_made_just_before_it() {
    // No write is due for ten minutes: only the drain can ship these clicks.
    let dir = temp_dir();
    let env = [
        ("REBOUND_CLICK_FLUSH_MS", "600000"),
        ("REBOUND_CLICK_MAX_HOLD_MS", "600000"),
        ("REBOUND_LOG", "info"),
    ];
    let mut rb = Rebound::start(dir.path(), &env);
    rb.create(json!({"long_url": "https://example.com/", "custom_alias": "last-clicks"}))
        .await;
    for _ in 0..5 {
        assert_eq!(rb.get("/last-clicks").await.status(), StatusCode::FOUND);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while rb.metric("rebound_click_pending_codes").await < 1.0 {
        assert!(Instant::now() < deadline, "the clicks never reached the shipper");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        rb.metric("rebound_clicks_flushed_total").await,
        0.0,
        "nothing written before SIGTERM"
    );
    let status = rb.run.terminate();
    assert!(status.success(), "{status:?}");
    let log = rb.run.log();
    assert!(log.iter().any(|l| l.contains("SIGTERM: draining")), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("drain took too long")), "{log:#?}");
    let rb = Rebound::start(dir.path(), &[]);
    assert_eq!(
        rb.clicks("last-clicks").await,
        5,
        "the drain shipped the clicks before exit"
    );
}

/// Creates `codes` links and requests each `times` times, on one keep-alive client.
async fn click_codes(rb: &Rebound, codes: &[String], times: usize) {
    for code in codes {
        rb.create(json!({"long_url": "https://example.com/", "custom_alias": code}))
            .await;
    }
    for _ in 0..times {
        for code in codes {
            assert_eq!(rb.get(&format!("/{code}")).await.status(), StatusCode::FOUND);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_the_clicks_still_waiting_for_the_row_budget_and_sigterm_writes_them() {
    // One rollup row a second and no hold limit to speak of: 30 codes' rows wait in
    // memory, and the stats still show every click at once.
    let dir = temp_dir();
    let env = [
        ("REBOUND_CLICK_ROWS_PER_SEC", "1"),
        ("REBOUND_CLICK_MAX_HOLD_MS", "600000"),
    ];
    let mut rb = Rebound::start(dir.path(), &env);
    let codes: Vec<String> = (0..30).map(|i| format!("wait{i:02}")).collect();
    click_codes(&rb, &codes, 3).await;
    // The gauge is as of the shipper's last drain (at most 100 ms ago while counts wait).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut pending = rb.metric("rebound_click_pending_codes").await;
    while pending < 20.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        pending = rb.metric("rebound_click_pending_codes").await;
    }
    assert!(
        pending >= 20.0,
        "the rows wait for the budget ({pending} codes pending)"
    );
    for code in &codes {
        assert_eq!(rb.clicks(code).await, 3, "{code}: the stats add what is pending");
    }
    assert!(rb.metric("rebound_click_persist_lag_seconds").await > 0.0);
    let status = rb.run.terminate();
    assert!(status.success(), "{status:?}");
    let rb = Rebound::start(dir.path(), &env);
    for code in &codes {
        assert_eq!(rb.clicks(code).await, 3, "{code}: SIGTERM wrote what was pending, once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_click_waits_longer_than_the_hold_so_a_sigkill_after_it_loses_none() {
    // 60 rows at one a second would wait a minute for the budget; a 1 s hold writes them
    // long before the 30 s this test waits, and a SIGKILL after that loses no click.
    let dir = temp_dir();
    let env = [
        ("REBOUND_CLICK_ROWS_PER_SEC", "1"),
        ("REBOUND_CLICK_MAX_HOLD_MS", "1000"),
    ];
    let mut rb = Rebound::start(dir.path(), &env);
    let codes: Vec<String> = (0..60).map(|i| format!("hold{i:02}")).collect();
    click_codes(&rb, &codes, 2).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while rb.metric("rebound_clicks_flushed_total").await < 120.0
        || rb.metric("rebound_click_pending_codes").await > 0.0
    {
        assert!(Instant::now() < deadline, "the hold limit did not write the rows");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rb.run.kill();
    let rb = Rebound::start(dir.path(), &env);
    for code in &codes {
        assert_eq!(rb.clicks(code).await, 2, "{code}: written before the SIGKILL");
    }
}

#[test]
fn proxy_alone_refuses_the_embedded_store() {
    let dir = temp_dir();
    let err = refused_start(&["proxy"], dir.path(), &[]);
    assert!(
        err.contains("REBOUND_STORE=dynamodb") && err.contains("all-in-one"),
        "{err}"
    );
}
