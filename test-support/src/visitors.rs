//! Visitors of many kinds behind a balancer that sends PROXY headers: clients a real country
//! database places in five countries (and one it does not), four agents, three referrers
//! (and none), two campaigns (and none); the breakdowns their clicks should make, and the
//! check that the stats show them (docs/spec.md §13). Shared by the all-in-one's test and the
//! distributed one's, so that both send the same clicks.

use crate::rebound::{read_answer, End};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A version 1 PROXY header for `client` (IPv4).
pub fn v1(client: &str) -> Vec<u8> {
    format!("PROXY TCP4 {client} 10.0.0.1 40000 80\r\n").into_bytes()
}

/// The status of an answer read off a raw exchange (0: no answer).
pub fn status(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// `bytes` sent from `local` (an address of 127.0.0.0/8) to `addr`, in `pieces` (each
/// after a pause, as packets apart); the answer and how the connection ended.
pub fn exchange_from(local: [u8; 4], addr: &str, pieces: &[&[u8]]) -> (String, End) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((local, 0)).into()).unwrap();
    socket.connect(&addr.parse::<SocketAddr>().unwrap().into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for piece in pieces {
        if s.write_all(piece).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    read_answer(&mut s)
}

/// Agents, with the device class, browser and OS they count as.
pub const AGENTS: [(&str, &str, &str, &str); 4] = [
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "desktop",
        "Chrome",
        "Windows",
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        "mobile",
        "Safari",
        "iOS",
    ),
    (
        "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1",
        "tablet",
        "Safari",
        "iOS",
    ),
    (
        "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Mobile Safari/537.36",
        "mobile",
        "Chrome",
        "Android",
    ),
];

/// Clients behind the balancer, with the country the real database places them in.
pub const CLIENTS: [(&str, &str); 6] = [
    ("8.8.8.8", "US"),
    ("193.0.6.139", "NL"),
    ("202.12.27.33", "JP"),
    ("200.160.2.3", "BR"),
    ("85.214.132.117", "DE"),
    ("10.0.0.7", "unknown"),
];

/// `Referer` sent (none: direct), and the referrer counted.
pub const REFERRERS: [(Option<&str>, &str); 4] = [
    (None, "direct"),
    (Some("https://news.ycombinator.com/item?id=42"), "news.ycombinator.com"),
    (Some("https://www.google.com/"), "www.google.com"),
    (Some("android-app://com.slack/"), "unknown"),
];

/// A campaign's source, medium and campaign.
pub type Utm = (&'static str, &'static str, &'static str);

/// The query of a click, and its campaign.
pub const CAMPAIGNS: [(&str, Option<Utm>); 3] = [
    ("", None),
    (
        "?utm_source=newsletter&utm_medium=email&utm_campaign=spring%20sale",
        Some(("newsletter", "email", "spring sale")),
    ),
    (
        "?utm_source=mastodon&utm_campaign=launch",
        Some(("mastodon", "", "launch")),
    ),
];

/// Every dimension a click is broken down by, as `by=` and `REBOUND_BREAKDOWNS` name them.
pub const DIMENSIONS: [&str; 8] = [
    "country",
    "referrer",
    "device",
    "browser",
    "os",
    "utm_source",
    "utm_medium",
    "utm_campaign",
];

/// What a set of clicks should show, by dimension and value.
pub type Expected = BTreeMap<(&'static str, String), u64>;

/// Sends `clicks` people's clicks of `path` to `addr` (a redirect port reading PROXY headers
/// from 127.0.0.1), cycling through the clients, agents, referrers and campaigns above; each
/// answered 302. Returns what the breakdowns of the dimensions in `counted` should show.
pub fn send_people_clicks(addr: &str, path: &str, clicks: usize, counted: &[&str]) -> Expected {
    let mut want = Expected::new();
    for i in 0..clicks {
        let (client, country) = CLIENTS[i % CLIENTS.len()];
        let (agent, device, browser, os) = AGENTS[i % AGENTS.len()];
        let (referer, referrer) = REFERRERS[i % REFERRERS.len()];
        let (query, campaign) = CAMPAIGNS[i % CAMPAIGNS.len()];
        let referer = referer.map_or(String::new(), |r| format!("Referer: {r}\r\n"));
        let request = format!(
            "GET {path}{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {agent}\r\n{referer}Connection: close\r\n\r\n"
        );
        let (answer, _) = exchange_from([127, 0, 0, 1], addr, &[&[v1(client), request.into_bytes()].concat()]);
        assert_eq!(status(&answer), 302, "{answer}");
        let mut values = vec![
            ("country", country),
            ("referrer", referrer),
            ("device", device),
            ("browser", browser),
            ("os", os),
        ];
        if let Some((source, medium, name)) = campaign {
            values.extend([("utm_source", source), ("utm_campaign", name)]);
            if !medium.is_empty() {
                values.push(("utm_medium", medium));
            }
        }
        for (by, value) in values {
            if counted.contains(&by) {
                *want.entry((by, value.to_owned())).or_default() += 1;
            }
        }
    }
    want
}

/// Two bots' clicks of `path` (a link unfurler and curl), from a client in the US: counted
/// apart, never broken down.
pub fn send_bot_clicks(addr: &str, path: &str) {
    for agent in [
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
        "curl/8.5.0",
    ] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {agent}\r\nConnection: close\r\n\r\n");
        let (answer, _) = exchange_from([127, 0, 0, 1], addr, &[&[v1("8.8.8.8"), request.into_bytes()].concat()]);
        assert_eq!(status(&answer), 302, "{answer}");
    }
}

/// Waits up to `within` until the stats (`stats(by)`: the body of `…/stats?by=<by>`) have
/// counted the `clicks` people's clicks sent and the two bots, then checks that each dimension of `counted`
/// shows exactly `want`, with the people's total and the two bots apart, and that the
/// countries named are at least five.
pub async fn assert_breakdowns<F, Fut>(stats: F, clicks: usize, want: &Expected, counted: &[&str], within: Duration)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Value>,
{
    let deadline = Instant::now() + within;
    loop {
        let body = stats("country").await;
        let (people, bots) = (Value::from(clicks), Value::from(2));
        if body["breakdown"]["counted"] == people && body["total"] == people && body["bot_total"] == bots {
            break;
        }
        assert!(Instant::now() < deadline, "not every click counted in time: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for by in DIMENSIONS {
        if !counted.contains(&by) {
            continue;
        }
        let body = stats(by).await;
        assert_eq!(body["total"], Value::from(clicks), "people's total: {body}");
        assert_eq!(body["bot_total"], Value::from(2), "{body}");
        let got: BTreeMap<String, u64> = body["breakdown"]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("no breakdown by {by}: {body}"))
            .iter()
            .map(|v| (v["value"].as_str().unwrap().to_owned(), v["clicks"].as_u64().unwrap()))
            .collect();
        let expected: BTreeMap<String, u64> = want
            .iter()
            .filter(|((d, _), _)| *d == by)
            .map(|((_, v), n)| (v.clone(), *n))
            .collect();
        assert_eq!(got, expected, "by {by}");
    }
    if counted.contains(&"country") {
        let countries = stats("country").await;
        let named: Vec<&str> = countries["breakdown"]["values"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["value"].as_str().filter(|c| c.len() == 2))
            .collect();
        assert!(named.len() >= 5, "five countries: {named:?}");
    }
}

/// Waits up to `within` until the operators' summary (`summary()`: the body of
/// `/api/v1/stats?top=100`) shows the clicks of the one link `code` on `domain` (its
/// `clicks` people's and the two bots), with the countries and referrers its own stats
/// (`stats(by)`) show: the summary of one link is that link's breakdowns.
pub async fn assert_summary<S, SFut, F, Fut>(
    summary: S,
    stats: F,
    clicks: usize,
    code: &str,
    domain: &str,
    within: Duration,
) where
    S: Fn() -> SFut,
    SFut: Future<Output = Value>,
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Value>,
{
    let (countries, referrers) = (stats("country").await, stats("referrer").await);
    let summed = serde_json::json!({
        "total": clicks,
        "bot_total": 2,
        "top_links": [{"code": code, "domain": domain, "clicks": clicks}],
        "top_countries": countries["breakdown"]["values"],
        "top_referrers": referrers["breakdown"]["values"],
    });
    let deadline = Instant::now() + within;
    loop {
        let body = summary().await;
        let got: serde_json::Map<String, Value> = summed
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (k.clone(), body[k].clone()))
            .collect();
        if Value::Object(got) == summed {
            return;
        }
        assert!(Instant::now() < deadline, "{body}\nnot\n{summed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
