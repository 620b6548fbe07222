//! The click stream (docs/analytics.md, "The click stream"), end to end: `rebound provision`
//! creates the Kinesis stream (moto's), the all-in-one clicked by people and bots with
//! several agents, referrers, countries (a trusted CDN's header) and campaigns, on the
//! default domain and on an added one, sends each click as one event, and the stream read
//! back from the start of each shard holds exactly those events, their fields what was
//! sent, and nothing that identifies a person: no address, no User-Agent, no referrer path.

use rebound_test_support as common;

use common::fleet::provision;
use common::rebound::Rebound;
use common::stream::{kinesis, read_stream};
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// What the client says it is (whole, as sent), and what the event says of it.
const AGENTS: [(&str, &str, &str, &str, bool); 4] = [
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "desktop",
        "Chrome",
        "Windows",
        false,
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        "mobile",
        "Safari",
        "iOS",
        false,
    ),
    (
        "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
        "desktop",
        "Firefox",
        "Linux",
        false,
    ),
    (
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "other",
        "Googlebot",
        "Other",
        true,
    ),
];

/// `Referer` sent (none: direct), and the referrer of the event.
const REFERRERS: [(Option<&str>, &str); 3] = [
    (None, "direct"),
    (
        Some("https://news.ycombinator.com/item?id=4242"),
        "news.ycombinator.com",
    ),
    (Some("https://www.google.com/search?q=secret+words"), "www.google.com"),
];

/// The query of a click, and its `utm_source`, `utm_medium` and `utm_campaign`.
const CAMPAIGNS: [(&str, [Option<&str>; 3]); 3] = [
    ("", [None, None, None]),
    (
        "?utm_source=newsletter&utm_medium=email&utm_campaign=spring%20sale",
        [Some("newsletter"), Some("email"), Some("spring sale")],
    ),
    (
        "?utm_source=mastodon&utm_campaign=launch",
        [Some("mastodon"), None, Some("launch")],
    ),
];

/// The CDN's country header, and the country of the event.
const COUNTRIES: [(&str, &str); 3] = [("FR", "FR"), ("jp", "JP"), ("XX", "unknown")];

/// The address the trusted proxy forwards for: it must appear in no record.
const CLIENT_ADDRESS: &str = "203.0.113.77";

/// One click: the domain's host, the code, and the request's parts.
struct Sent {
    host: &'static str,
    code: String,
    version: u64,
    agent: usize,
    referrer: usize,
    campaign: usize,
    country: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_KINESIS_URL (the test services): scripts/test starts them and runs it"]
async fn each_click_is_one_event_in_the_stream_with_its_dimensions_and_no_address() {
    let url = env_or_panic("REBOUND_TEST_KINESIS_URL");
    let stream = format!("clicks-{}", unique_id());
    let aws = [
        ("AWS_ENDPOINT_URL", url.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("REBOUND_KINESIS_STREAM", stream.as_str()),
    ];
    let dir = temp_dir();
    let data = dir.path().join("data");
    let mut env: Vec<(String, String)> = aws.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    env.push(("REBOUND_DATA_DIR".into(), data.display().to_string()));
    let said = provision(&env);
    assert!(said.contains(&format!("created Kinesis stream {stream}")), "{said}");
    assert!(provision(&env).contains("already exists"), "idempotent");

    let mut settings = aws.to_vec();
    settings.extend([
        ("REBOUND_PUBLIC_BASE_URL", "https://s.example"),
        ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
        ("REBOUND_COUNTRY_HEADER", "cloudflare"),
        ("REBOUND_KINESIS_LINGER_MS", "200"),
    ]);
    let rb = Rebound::start(&data, &settings);
    let (status, _) = rb
        .api(Method::POST, "/api/v1/domains", Some(json!({"name": "go.acme.test"})))
        .await;
    assert!(status.is_success(), "{status}");
    let open = rb
        .create(json!({"long_url": "https://example.com/open", "custom_alias": "open"}))
        .await;
    let promo = rb
        .create(json!({"long_url": "https://acme.example/promo", "custom_alias": "promo", "domain": "go.acme.test"}))
        .await;
    let links = [("s.example", &open), ("go.acme.test", &promo)];
    // The added domain is routed within moments of its creation.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let res = rb
            .http
            .get(rb.redirect_url("/promo?utm_source=warm-up"))
            .header("Host", "go.acme.test")
            .header("User-Agent", AGENTS[0].0)
            .send()
            .await
            .unwrap();
        if res.status() == 302 {
            break;
        }
        assert!(Instant::now() < deadline, "go.acme.test not routed: {}", res.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let warm_up = 1;

    let mut sent = Vec::new();
    for i in 0..36 {
        let (host, link) = links[i % 2];
        let s = Sent {
            host,
            code: link["code"].as_str().unwrap().to_owned(),
            version: link["version"].as_u64().unwrap(),
            // Each link gets every agent (a bot among them), referrer, campaign and country.
            agent: (i / 2) % AGENTS.len(),
            referrer: (i / 3) % REFERRERS.len(),
            campaign: i % CAMPAIGNS.len(),
            country: (i / 5) % COUNTRIES.len(),
        };
        let mut req = rb
            .http
            .get(rb.redirect_url(&format!("/{}{}", s.code, CAMPAIGNS[s.campaign].0)))
            .header("Host", host)
            .header("User-Agent", AGENTS[s.agent].0)
            .header("X-Forwarded-For", CLIENT_ADDRESS)
            .header("CF-IPCountry", COUNTRIES[s.country].0);
        if let Some(referer) = REFERRERS[s.referrer].0 {
            req = req.header("Referer", referer);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 302, "{}", s.code);
        sent.push(s);
    }

    // Every click arrives once: the warm-up's and the 36 above.
    let client = kinesis().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let records = loop {
        let records = read_stream(&client, &stream).await;
        if records.len() >= sent.len() + warm_up || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(records.len(), sent.len() + warm_up, "{records:#?}");
    for (_, data) in &records {
        for secret in [
            CLIENT_ADDRESS,
            "127.0.0.1",
            "Mozilla",
            "Gecko",
            "item?id",
            "4242",
            "secret",
            "search",
        ] {
            assert!(!data.contains(secret), "{secret} in the record {data}");
        }
    }
    let events: Vec<(String, Value)> = records
        .into_iter()
        .map(|(key, data)| (key, serde_json::from_str(&data).unwrap()))
        .collect();
    let fields = [
        "ts",
        "code",
        "domain",
        "version",
        "bot",
        "country",
        "referrer",
        "device",
        "browser",
        "os",
        "utm_source",
        "utm_medium",
        "utm_campaign",
        "rule",
    ];
    // The events as they should be, without their time: compared as sorted lists, for the
    // stream is read back shard by shard, not in the order of the clicks.
    let mut want: Vec<String> = sent
        .iter()
        .map(|s| {
            let (_, device, browser, os, bot) = AGENTS[s.agent];
            let [utm_source, utm_medium, utm_campaign] = CAMPAIGNS[s.campaign].1;
            json!({
                "code": s.code,
                "domain": s.host,
                "version": s.version,
                "bot": bot,
                "country": COUNTRIES[s.country].1,
                "referrer": REFERRERS[s.referrer].1,
                "device": device,
                "browser": browser,
                "os": os,
                "utm_source": utm_source,
                "utm_medium": utm_medium,
                "utm_campaign": utm_campaign,
                // Links without rules.
                "rule": null,
            })
            .to_string()
        })
        .collect();
    let mut got = Vec::new();
    let mut warm_ups = 0;
    for (key, e) in &events {
        let mut names: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        names.sort();
        let mut want_names = fields.to_vec();
        want_names.sort();
        assert_eq!(names, want_names, "every field, and no other: {e}");
        assert_eq!(Some(key.as_str()), e["code"].as_str(), "the partition key is the code");
        let ts = e["ts"].as_i64().unwrap();
        assert!((now_millis() - ts).abs() < 120_000, "ts {ts} is now, in milliseconds");
        let mut e = e.clone();
        e.as_object_mut().unwrap().remove("ts");
        if e["utm_source"] == "warm-up" {
            warm_ups += 1;
            continue;
        }
        got.push(e.to_string());
    }
    assert_eq!(warm_ups, warm_up, "{events:#?}");
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let bots = sent.iter().filter(|s| AGENTS[s.agent].4).count();
    assert_eq!(bots, 8, "a quarter of the clicks are a bot's");

    // Counted: every event sent, none lost or dropped; the totals count people and bots
    // apart as before, and the breakdowns count people only.
    let sent_total = rb.metric("rebound_click_events_sent_total").await;
    assert_eq!(sent_total, (sent.len() + warm_up) as f64);
    assert_eq!(rb.metric("rebound_click_events_lost_total").await, 0.0);
    assert_eq!(rb.metric("rebound_click_events_dropped_total").await, 0.0);
    // The all-in-one's embedded store keeps the breakdowns: people's clicks only.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, stats) = rb.api(Method::GET, "/api/v1/links/open/stats?by=browser", None).await;
        if stats["breakdown"]["counted"] == json!(14) || Instant::now() > deadline {
            assert_eq!(
                (stats["total"].as_u64(), stats["bot_total"].as_u64()),
                (Some(14), Some(4)),
                "{stats}"
            );
            let browsers: Vec<&str> = stats["breakdown"]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["value"].as_str().unwrap())
                .collect();
            assert!(!browsers.contains(&"Googlebot"), "{stats}");
            assert_eq!(stats["breakdown"]["counted"], json!(14), "{stats}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `rebound proxy` on DynamoDB and SQS sends its clicks to the stream too: a person's click
/// and a bot's, each an event with its fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_KINESIS_URL (the test services): scripts/test starts them and runs it"]
async fn a_proxy_on_sqs_sends_its_clicks_to_the_stream_with_their_dimensions() {
    let kinesis_url = env_or_panic("REBOUND_TEST_KINESIS_URL");
    let stream = format!("proxy-clicks-{}", unique_id());
    let d = common::fleet::Deployment::new(&shared_aws_url(), None);
    let settings = [
        ("AWS_ENDPOINT_URL_KINESIS", kinesis_url.as_str()),
        ("REBOUND_KINESIS_STREAM", stream.as_str()),
        ("REBOUND_PUBLIC_BASE_URL", "https://s.example"),
    ];
    assert!(provision(&d.with(&settings)).contains(&format!("created Kinesis stream {stream}")));
    let dir = temp_dir();
    let cp = d.control_plane(&dir.path().join("cp"), &settings);
    let code = common::fleet::create(
        &cp,
        json!({"long_url": "https://example.com/p", "custom_alias": "viaproxy"}),
    )
    .await;
    let mut proxy_settings = settings.to_vec();
    proxy_settings.extend([
        ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
        ("REBOUND_COUNTRY_HEADER", "cloudfront"),
        ("REBOUND_KINESIS_LINGER_MS", "200"),
        (
            "REBOUND_BREAKDOWNS",
            "country,referrer,device,browser,os,utm_source,utm_medium,utm_campaign",
        ),
    ]);
    let proxy = d.proxy(&dir.path().join("proxy"), &proxy_settings).await;
    let click = |agent: usize| {
        http()
            .get(format!("{}/{code}?utm_campaign=launch", proxy.addr("redirect")))
            .header("User-Agent", AGENTS[agent].0)
            .header("Referer", REFERRERS[1].0.unwrap())
            .header("X-Forwarded-For", CLIENT_ADDRESS)
            .header("CloudFront-Viewer-Country", "BR")
            .send()
    };
    assert_eq!(click(1).await.unwrap().status(), 302);
    assert_eq!(click(3).await.unwrap().status(), 302);

    let client = kinesis().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let records = loop {
        let records = read_stream(&client, &stream).await;
        if records.len() >= 2 || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut got: Vec<Value> = records
        .iter()
        .map(|(_, data)| {
            assert!(!data.contains(CLIENT_ADDRESS) && !data.contains("Mozilla"), "{data}");
            let mut e: Value = serde_json::from_str(data).unwrap();
            e.as_object_mut().unwrap().remove("ts");
            e
        })
        .collect();
    got.sort_by_key(|e| e["bot"].as_bool());
    let event = |agent: usize| {
        let (_, device, browser, os, bot) = AGENTS[agent];
        json!({
            "code": code, "domain": "s.example", "version": 1, "bot": bot,
            "country": "BR", "referrer": REFERRERS[1].1,
            "device": device, "browser": browser, "os": os,
            "utm_source": null, "utm_medium": null, "utm_campaign": "launch", "rule": null,
        })
    };
    assert_eq!(got, vec![event(1), event(3)]);
}
