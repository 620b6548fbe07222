//! The operators' summary (docs/analytics.md, "The summary"), black-box on the all-in-one:
//! people's clicks on links of two domains, with their countries (a CDN's header) and
//! referrers, and a bot's, reach each domain's summary through the click pipeline; the API
//! sums them per domain or over both, and `rebound stats` prints them.

use rebound_test_support as common;

use common::rebound::{exchange, Rebound};
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const BROWSER: &str =
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
const DOMAIN: &str = "go.summary.test";

/// A click on `host`'s `/code`: the status it got.
fn click(rb: &Rebound, host: &str, code: &str, agent: &str, country: &str, referer: Option<&str>) -> String {
    let referer = referer.map_or(String::new(), |r| format!("Referer: {r}\r\n"));
    let request = format!(
        "GET /{code} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {agent}\r\nCF-IPCountry: {country}\r\n{referer}Connection: close\r\n\r\n"
    );
    let (answer, _) = exchange(&rb.redirect(), request.as_bytes(), Duration::from_secs(5));
    answer.split(' ').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clicks_on_two_domains_sum_into_the_summary_the_api_and_the_cli_show() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
            ("REBOUND_COUNTRY_HEADER", "cloudflare"),
            ("REBOUND_CLICK_MAX_HOLD_MS", "200"),
        ],
    );
    let (status, body) = rb
        .api(
            Method::POST,
            "/api/v1/domains",
            Some(json!({"name": DOMAIN, "certificate": "files"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    rb.create(json!({"long_url": "https://example.com/promo", "custom_alias": "promo"}))
        .await;
    rb.create(json!({"long_url": "https://example.com/other", "custom_alias": "other"}))
        .await;
    rb.create(json!({"long_url": "https://example.com/go", "custom_alias": "promo", "domain": DOMAIN}))
        .await;
    // The data plane reads a new domain within its poll.
    let deadline = Instant::now() + Duration::from_secs(20);
    while click(&rb, DOMAIN, "promo", "curl/8.5.0", "XX", None) != "302" {
        assert!(Instant::now() < deadline, "{DOMAIN} not routed in 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let home = "127.0.0.1";
    for (host, code, country, referer) in [
        (home, "promo", "JP", Some("https://news.example/a?b=c")),
        (home, "promo", "JP", Some("https://news.example/")),
        (home, "promo", "DE", None),
        (home, "other", "FR", None),
        (DOMAIN, "promo", "JP", None),
        (DOMAIN, "promo", "JP", Some("https://news.example/x")),
    ] {
        assert_eq!(click(&rb, host, code, BROWSER, country, referer), "302");
    }
    // A bot's: in the daily totals, in no top list.
    assert_eq!(click(&rb, home, "other", "curl/8.5.0", "FR", None), "302");

    let summary = |query: &'static str| {
        let rb = &rb;
        async move {
            let (status, body) = rb.api(Method::GET, &format!("/api/v1/stats{query}"), None).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body
        }
    };
    // Written with the clicks' rows: within the hold, give or take a drain (each take's
    // totals, then its links, countries and referrers).
    let want = json!({
        "domains": [home, DOMAIN],
        "total": 6,
        "top_links": [
            {"code": "promo", "domain": home, "clicks": 3},
            {"code": "promo", "domain": DOMAIN, "clicks": 2},
            {"code": "other", "domain": home, "clicks": 1},
        ],
        "top_countries": [{"value": "JP", "clicks": 4}, {"value": "DE", "clicks": 1}, {"value": "FR", "clicks": 1}],
        "top_referrers": [{"value": "direct", "clicks": 3}, {"value": "news.example", "clicks": 3}],
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let both = loop {
        let body = summary("").await;
        let got: serde_json::Map<String, Value> = want
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (k.clone(), body[k].clone()))
            .collect();
        if Value::Object(got) == want {
            break body;
        }
        assert!(Instant::now() < deadline, "{body}\nnot\n{want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Bots' clicks in the totals only: the curl click that found the domain routed at least
    // (taken before the people's; the last one may be in a later take).
    assert!(both["bot_total"].as_u64().unwrap() >= 1, "{both}");
    let one = summary("?domain=go.summary.test&top=1").await;
    assert_eq!(
        (&one["total"], &one["top_links"], &one["top_countries"]),
        (
            &json!(2),
            &json!([{"code": "promo", "domain": DOMAIN, "clicks": 2}]),
            &json!([{"value": "JP", "clicks": 2}])
        )
    );

    // The CLI prints the same.
    let api = rb.run.addr("API");
    let (ok, out, err) = cli(&api, Some(OPERATOR_KEY), &["stats"]);
    assert!(ok, "{err}");
    for line in [
        "domains: 127.0.0.1, go.summary.test",
        "promo  127.0.0.1        3",
        "promo  go.summary.test  2",
        "JP       4",
        "direct        3",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    let (ok, out, err) = cli(&api, Some(OPERATOR_KEY), &["stats", "--domain", DOMAIN, "--json"]);
    assert!(ok, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["total"], 2);
    let (ok, _, err) = cli(&api, Some(OPERATOR_KEY), &["stats", "--domain", "nope.summary.test"]);
    assert!(!ok && err.contains("404"), "{err}");
    let (ok, _, err) = cli(&api, Some(OPERATOR_KEY), &["stats", "--from", "2026-02-30"]);
    assert!(!ok && err.contains("400 invalid_date"), "{err}");
}
