//! Rules on a link (docs/spec.md §14), black-box against the all-in-one: each kind of rule
//! answers as stated (country from a real database by the PROXY header's client, iOS,
//! Android and desktop agents, `Accept-Language`), a split lands within its weights over
//! 10,000 visitors and is sticky per visitor, an answer chosen by rules is never kept by a
//! shared cache, an edit of the rules answers at once with the new ones and is audited,
//! clicks show per rule and variant (`by=rule`), and bad rule sets are refused and change
//! nothing.

use rebound_test_support as common;

use common::rebound::Rebound;
use common::visitors::{exchange_from, v1, AGENTS};
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const DESKTOP: &str = AGENTS[0].0;
const IPHONE: &str = AGENTS[1].0;
const ANDROID: &str = AGENTS[3].0;

/// The `Location` and `Cache-Control` of a raw answer.
fn location_and_cache(answer: &str) -> (String, String) {
    let header = |name: &str| {
        answer
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    (header("location"), header("cache-control"))
}

/// Every kind of rule, first match deciding: the countries a real database places the
/// PROXY header's client in, iOS and Android agents (an app's own scheme for Android, which
/// the operator allowed), the preferred language, and the link's own target when none
/// matches. A link without rules answers as before: public caching, its target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_COUNTRY_DB (a real country database: scripts/fetch-country-db; scripts/test sets it)"]
async fn each_kind_of_rule_answers_as_stated() {
    let db = std::env::var("REBOUND_TEST_COUNTRY_DB").expect("REBOUND_TEST_COUNTRY_DB");
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_PROXY_PROTOCOL", "redirect"),
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
            ("REBOUND_GEOIP_DATABASE", &db),
            ("REBOUND_APP_SCHEMES", "intent"),
        ],
    );
    let intent = "intent://open/x#Intent;scheme=myapp;package=com.example.app;end";
    rb.create(json!({
        "long_url": "https://example.com/web",
        "custom_alias": "routed",
        "forward_query": true,
        "rules": [
            {"countries": ["de", "NL"], "target": "https://example.com/eu"},
            {"os": ["ios"], "target": "https://apps.apple.com/app/id123"},
            {"os": ["android"], "devices": ["mobile"], "target": intent},
            {"languages": ["fr", "pt-BR"], "target": "https://example.com/fr"},
        ],
    }))
    .await;
    rb.create(json!({"long_url": "https://example.com/plain", "custom_alias": "plain"}))
        .await;
    let ask = |client: &str, path: &str, agent: &str, language: Option<&str>| {
        let language = language.map_or(String::new(), |l| format!("Accept-Language: {l}\r\n"));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {agent}\r\n{language}Connection: close\r\n\r\n"
        );
        let (answer, _) = exchange_from(
            [127, 0, 0, 1],
            &rb.redirect(),
            &[&[v1(client), request.into_bytes()].concat()],
        );
        assert!(answer.starts_with("HTTP/1.1 302"), "{answer}");
        location_and_cache(&answer)
    };
    let cases: &[(&str, &str, Option<&str>, &str)] = &[
        // Germany and the Netherlands by the database, whatever the device.
        ("85.214.132.117", IPHONE, None, "https://example.com/eu?q=1"),
        ("193.0.6.139", DESKTOP, Some("fr"), "https://example.com/eu?q=1"),
        // Elsewhere: iOS to the App Store, Android to the app (no query: not a web target).
        ("8.8.8.8", IPHONE, Some("fr"), "https://apps.apple.com/app/id123?q=1"),
        ("8.8.8.8", ANDROID, None, intent),
        // A desktop by its preferred language, `fr-CA` matching `fr`, `pt-BR` exactly.
        (
            "202.12.27.33",
            DESKTOP,
            Some("en;q=0.5, fr-CA"),
            "https://example.com/fr?q=1",
        ),
        (
            "200.160.2.3",
            DESKTOP,
            Some("pt-BR,pt;q=0.9"),
            "https://example.com/fr?q=1",
        ),
        ("200.160.2.3", DESKTOP, Some("pt-PT"), "https://example.com/web?q=1"),
        // No rule matches: the link's own target.
        ("8.8.8.8", DESKTOP, Some("en-US"), "https://example.com/web?q=1"),
        ("10.0.0.7", DESKTOP, None, "https://example.com/web?q=1"),
    ];
    for &(client, agent, language, want) in cases {
        let (location, cache) = ask(client, "/routed?q=1", agent, language);
        assert_eq!(location, want, "{client} {agent} {language:?}");
        assert!(
            cache.starts_with("private, max-age="),
            "never a shared cache's: {cache}"
        );
    }
    let (location, cache) = ask("85.214.132.117", "/plain", IPHONE, Some("fr"));
    assert_eq!(location, "https://example.com/plain");
    assert!(cache.starts_with("public, max-age="), "{cache}");
}

/// A client for requests that each name their visitor (a trusted proxy's
/// `X-Forwarded-For`) and agent.
async fn visit(rb: &Rebound, path: &str, client: &str, agent: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut req = rb
        .http
        .get(rb.redirect_url(path))
        .header("X-Forwarded-For", client)
        .header("User-Agent", agent);
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap()
}

fn location(res: &reqwest::Response) -> String {
    res.headers()["location"].to_str().unwrap().to_owned()
}

/// A split over 10,000 visitors (each its own address) lands within ±3 points of its
/// weights, each visitor sees one variant every time, and the clicks show per variant in
/// `by=rule` as they were answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_lands_within_its_weights_is_sticky_and_shows_per_variant() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
            ("REBOUND_COUNTRY_HEADER", "cloudflare"),
            ("REBOUND_CLICK_MAX_HOLD_MS", "200"),
        ],
    );
    rb.create(json!({
        "long_url": "https://example.com/web",
        "custom_alias": "split",
        "rules": [
            {"countries": ["JP"], "target": "https://example.com/jp"},
            {"split": [
                {"target": "https://example.com/a", "weight": 50},
                {"target": "https://example.com/b", "weight": 30},
                {"target": "https://example.com/c", "weight": 20},
            ]},
        ],
    }))
    .await;
    let visitors = 10_000u32;
    let address = |i: u32| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let mut first = Vec::new();
    for i in 0..visitors {
        let res = visit(&rb, "/split", &address(i), DESKTOP, &[]).await;
        assert_eq!(res.status(), StatusCode::FOUND);
        assert!(res.headers()["cache-control"].to_str().unwrap().starts_with("private"));
        let target = location(&res);
        *seen.entry(target.clone()).or_default() += 1;
        first.push(target);
    }
    for (target, weight) in [("a", 50.0), ("b", 30.0), ("c", 20.0)] {
        let n = seen[&format!("https://example.com/{target}")];
        let share = 100.0 * f64::from(n) / f64::from(visitors);
        assert!((share - weight).abs() <= 3.0, "{target}: {share}% of {seen:?}");
    }
    // Sticky: the same visitor (address and agent) sees the same variant again.
    for i in (0..visitors).step_by(20) {
        let res = visit(&rb, "/split", &address(i), DESKTOP, &[]).await;
        assert_eq!(location(&res), first[i as usize], "visitor {i}");
    }
    // The country rule comes first: JP never reaches the split.
    for i in 0..20 {
        let res = visit(&rb, "/split", &address(i), DESKTOP, &[("CF-IPCountry", "JP")]).await;
        assert_eq!(location(&res), "https://example.com/jp");
    }
    // The clicks by rule and variant: 500 visitors asked twice, 20 from Japan.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (i, target) in first.iter().enumerate() {
        let variant = match target.as_str() {
            "https://example.com/a" => "2/1",
            "https://example.com/b" => "2/2",
            _ => "2/3",
        };
        *want.entry(variant.to_owned()).or_default() += if i % 20 == 0 { 2 } else { 1 };
    }
    want.insert("1".to_owned(), 20);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, body) = rb.api(Method::GET, "/api/v1/links/split/stats?by=rule", None).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let got: BTreeMap<String, u64> = body["breakdown"]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["value"].as_str().unwrap().to_owned(), v["clicks"].as_u64().unwrap()))
            .collect();
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "by=rule {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The rules are part of the record: a PATCH with If-Match replaces them, the next answer
/// uses the new ones, the audit event holds the old and the new rules; `[]` removes them and
/// the link answers as one without rules again (public caching).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_the_rules_answers_at_once_and_is_audited() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    let created = rb
        .create(json!({
            "long_url": "https://example.com/web",
            "custom_alias": "edited",
            "rules": [{"os": ["ios"], "target": "https://example.com/ios-1"}],
        }))
        .await;
    assert_eq!(created["version"], json!(1));
    let ios = |rb: &Rebound| {
        let (http, url) = (rb.http.clone(), rb.redirect_url("/edited"));
        async move { http.get(url).header("User-Agent", IPHONE).send().await.unwrap() }
    };
    assert_eq!(location(&ios(&rb).await), "https://example.com/ios-1");
    let patch = |version: u64, body: Value| fleet::edit_link(&rb.run, "edited", version, body);
    let new_rules = json!([
        {"os": ["android"], "target": "https://example.com/android"},
        {"os": ["ios"], "target": "https://example.com/ios-2"},
    ]);
    let (s, body) = patch(1, json!({"rules": new_rules})).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(
        (body["version"].clone(), body["rules"].clone()),
        (json!(2), new_rules.clone())
    );
    // At once: the first answer after the PATCH returned uses the new rules.
    assert_eq!(location(&ios(&rb).await), "https://example.com/ios-2");
    let (s, stale) = patch(1, json!({"rules": []})).await;
    assert_eq!(s, StatusCode::PRECONDITION_FAILED, "{stale}");
    let (s, audit) = rb.api(Method::GET, "/api/v1/links/edited/audit", None).await;
    assert_eq!(s, StatusCode::OK, "{audit}");
    let edit = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "edit")
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(
        (edit["old"].clone(), edit["new"].clone()),
        (
            json!({"rules": [{"os": ["ios"], "target": "https://example.com/ios-1"}]}),
            json!({"rules": new_rules})
        ),
        "{audit}"
    );
    let (s, body) = patch(2, json!({"rules": []})).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body.get("rules").is_none(), "{body}");
    let res = ios(&rb).await;
    assert_eq!(location(&res), "https://example.com/web");
    assert!(res.headers()["cache-control"].to_str().unwrap().starts_with("public"));
}

/// Bad rule sets get a clear 400 naming the rule and the field, and create nothing; the
/// largest accepted set (20 rules of 250 countries, a split of 10) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rule_sets_are_refused_and_change_nothing() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[("REBOUND_APP_SCHEMES", "myapp")]);
    let web = |t: &str| json!({"os": ["ios"], "target": t});
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!(vec![web("https://example.com/x"); 21]),
            "invalid_rules",
            "at most 20 rules",
        ),
        (
            json!([{"countries": ["Germany"], "target": "https://example.com/x"}]),
            "invalid_rules",
            "rules[1].countries",
        ),
        (json!([{"os": ["ios"]}]), "invalid_rules", "rules[1].target"),
        (
            json!([{"split": [{"target": "https://example.com/a", "weight": 1}]}]),
            "invalid_rules",
            "2 to 10 variants",
        ),
        (
            json!([{"target": "https://example.com/a"}, web("https://example.com/b")]),
            "invalid_rules",
            "can never match",
        ),
        (json!([web("javascript:alert(1)")]), "invalid_url", "rules[1].target"),
        (json!([web("ftp://example.com/")]), "invalid_url", "rules[1].target"),
        (
            json!([{"devices": ["mobile"], "target": "myapp://open"}]),
            "invalid_url",
            "only in a rule whose os is ios or android alone",
        ),
        (
            json!([web("https://example.com/a"), {"os": ["android"], "split": [
                {"target": "https://example.com/a", "weight": 1},
                {"target": "http://127.0.0.1:8080/loop", "weight": 1},
            ]}]),
            "invalid_url",
            "rules[2].split[2].target",
        ),
    ];
    for (rules, code, words) in cases {
        let (s, body) = rb
            .api(
                Method::POST,
                "/api/v1/links",
                Some(json!({"long_url": "https://example.com/web", "rules": rules})),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{rules}: {body}");
        assert_eq!(body["error"]["code"], json!(code), "{rules}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{rules}: {message}");
    }
    // Within the body limit, but past the rules' 32 KiB as JSON.
    let countries: Vec<String> = (0..250)
        .map(|i| format!("{}{}", (b'A' + (i / 26) as u8) as char, (b'A' + (i % 26) as u8) as char))
        .collect();
    let big: Vec<Value> = (0..20)
        .map(|i| json!({"countries": countries, "target": format!("https://example.com/{i}/{}", "x".repeat(900))}))
        .collect();
    let (s, body) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://example.com/web", "rules": big})),
        )
        .await;
    assert_eq!(
        (s, body["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_rules")),
        "{body}"
    );
    let (_, list) = rb.api(Method::GET, "/api/v1/links", None).await;
    assert_eq!(list["links"], json!([]), "nothing created");
    // The largest set accepted: 20 rules, 19 of 250 countries, then a split of 10.
    let mut rules: Vec<Value> = (0..19)
        .map(|i| json!({"countries": countries, "target": format!("https://example.com/{i}")}))
        .collect();
    rules.push(json!({"split": (0..10).map(|i| json!({"target": format!("https://example.com/s{i}"), "weight": 10_000})).collect::<Vec<_>>()}));
    let (s, body) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://example.com/web", "rules": rules, "custom_alias": "largest"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let res = visit(&rb, "/largest", "127.0.0.1", DESKTOP, &[]).await;
    assert!(
        location(&res).starts_with("https://example.com/s"),
        "{:?}",
        res.headers()
    );
}
