//! The client's address (docs/spec.md §13): behind a layer-4 balancer that writes PROXY
//! headers (versions 1 and 2, IPv4 and IPv6, in pieces, before a TLS ClientHello), and
//! behind a layer-7 proxy that writes forwarding headers, each believed from the trusted
//! networks only. What shows that the address is the one used: the password attempts of a
//! protected link are limited per client (five, then 429), and the anonymous creates too.

use rebound_test_support as common;

use common::rebound::{exchange, End, Rebound};
use common::visitors::{self, exchange_from, status, v1};
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// A version 2 PROXY header (TCP) for `source`, to `destination`.
fn v2(source: &str, destination: &str) -> Vec<u8> {
    let (source, destination): (SocketAddr, SocketAddr) = (source.parse().unwrap(), destination.parse().unwrap());
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21);
    let addresses: Vec<u8> = match (source, destination) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            h.push(0x11);
            [
                &s.ip().octets()[..],
                &d.ip().octets(),
                &s.port().to_be_bytes(),
                &d.port().to_be_bytes(),
            ]
            .concat()
        }
        (SocketAddr::V6(s), SocketAddr::V6(d)) => {
            h.push(0x21);
            [
                &s.ip().octets()[..],
                &d.ip().octets(),
                &s.port().to_be_bytes(),
                &d.port().to_be_bytes(),
            ]
            .concat()
        }
        _ => panic!("one address family"),
    };
    h.extend((addresses.len() as u16).to_be_bytes());
    h.extend(addresses);
    h
}

fn get(path: &str) -> Vec<u8> {
    get_on("127.0.0.1", path)
}

fn get_on(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// A wrong password posted to `/locked`, with `extra` headers.
fn wrong_password(extra: &str) -> Vec<u8> {
    let body = "password=wrong";
    format!(
        "POST /locked HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn protected_and_open_links(rb: &Rebound) {
    rb.create(json!({"long_url": "https://example.com/secret", "custom_alias": "locked", "password": "open sesame"}))
        .await;
    rb.create(json!({"long_url": "https://example.com/open", "custom_alias": "open"}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_proxy_protocol_balancer_the_client_is_the_one_its_header_names() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_PROXY_PROTOCOL", "redirect"),
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
        ],
    );
    protected_and_open_links(&rb).await;
    let addr = rb.redirect();
    let lb = [127, 0, 0, 1];

    // Each version, IPv4 and IPv6, whole or in pieces: the request after the header is served.
    let whole_v1 = [v1("203.0.113.5"), get("/open")].concat();
    let v2_v6 = [v2("[2001:db8::5]:40000", "[2001:db8::1]:80"), get("/open")].concat();
    let v2_v4 = v2("203.0.113.5:40000", "10.0.0.1:80");
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![
        ("v1", vec![&whole_v1]),
        ("v2 over IPv6", vec![&v2_v6]),
        ("v2 in three packets", vec![&v2_v4[..7], &v2_v4[7..20], &v2_v4[20..]]),
        ("v1 in two packets", vec![&whole_v1[..9], &whole_v1[9..]]),
    ];
    for (what, mut pieces) in cases {
        let request = get("/open");
        if what == "v2 in three packets" {
            pieces.push(&request);
        }
        let (answer, _) = exchange_from(lb, &addr, &pieces);
        assert_eq!(status(&answer), 302, "{what}: {answer}");
        assert!(
            answer.contains("location: https://example.com/open"),
            "{what}: {answer}"
        );
    }
    // A balancer's own health check (v2 LOCAL) is the balancer's connection.
    let mut local = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    local.extend([0x20, 0x00, 0x00, 0x00]);
    let (answer, _) = exchange_from(lb, &addr, &[&[&local[..], &get("/open")].concat()]);
    assert_eq!(status(&answer), 302, "{answer}");

    // The password attempts are limited per client the header names: five from one, then
    // 429; another client behind the same balancer is not held up.
    for n in 0..5 {
        let (answer, _) = exchange_from(lb, &addr, &[&[v1("203.0.113.5"), wrong_password("")].concat()]);
        assert_eq!(status(&answer), 401, "attempt {n}: {answer}");
    }
    let (answer, _) = exchange_from(lb, &addr, &[&[v1("203.0.113.5"), wrong_password("")].concat()]);
    assert_eq!(status(&answer), 429, "{answer}");
    let (answer, _) = exchange_from(
        lb,
        &addr,
        &[&[v2("198.51.100.7:40000", "10.0.0.1:80"), wrong_password("")].concat()],
    );
    assert_eq!(status(&answer), 401, "another client: {answer}");
    // Behind a layer-4 balancer the forwarding headers are the client's own: not believed.
    let (answer, _) = exchange_from(
        lb,
        &addr,
        &[&[v1("203.0.113.5"), wrong_password("X-Forwarded-For: 192.0.2.99\r\n")].concat()],
    );
    assert_eq!(status(&answer), 429, "{answer}");

    // No header, garbage, a header too long: closed without an answer, counted.
    for bad in [
        get("/open"),
        b"PROXY TCP4 not-an-address 10.0.0.1 1 2\r\n".to_vec(),
        [
            b"PROXY TCP4 203.0.113.5 10.0.0.1 40000 80".as_slice(),
            &[b' '; 200],
            b"\r\n",
        ]
        .concat(),
    ] {
        let (answer, end) = exchange_from(lb, &addr, &[&bad]);
        let what = String::from_utf8_lossy(&bad);
        assert!(
            answer.is_empty() && matches!(end, End::Closed | End::Reset),
            "{what}: {answer} {end:?}"
        );
    }
    assert_eq!(rb.refusals("redirect", "proxy_malformed").await, 3.0);
    // A peer outside the trusted networks: closed before a byte is read, its header unread.
    // (A reset when the request was already on its way: closed unread.)
    let (answer, end) = exchange_from([127, 0, 0, 2], &addr, &[&whole_v1]);
    assert!(
        answer.is_empty() && matches!(end, End::Closed | End::Reset),
        "{answer} {end:?}"
    );
    assert_eq!(rb.refusals("redirect", "proxy_untrusted").await, 1.0);
    // The API port, not configured for it, is untouched.
    let (s, _) = rb.api(Method::GET, "/api/v1/links/open", None).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_works_behind_the_proxy_protocol() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = temp_dir();
    let (cert, key) = self_signed(dir.path(), "edge", "ec");
    let mut env = tls_env(&cert, &key).to_vec();
    env.extend([
        ("REBOUND_PROXY_PROTOCOL", "redirect_tls"),
        ("REBOUND_TRUSTED_NETWORKS", "127.0.0.0/8"),
    ]);
    let rb = Rebound::from(start(
        &[],
        &dir.path().join("data"),
        &env,
        &["redirect", "redirect TLS", "API", "metrics"],
    ));
    rb.create(json!({"long_url": "https://example.com/open", "custom_alias": "open"}))
        .await;
    let tls_addr = rb.run.addrs["redirect TLS"].clone();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(trusting(&cert)));
    for header in [v1("203.0.113.5"), v2("[2001:db8::5]:40000", "[2001:db8::1]:443")] {
        let mut tcp = tokio::net::TcpStream::connect(&tls_addr).await.unwrap();
        // The header, then the ClientHello (it may come in the header's packet).
        tcp.write_all(&header).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(&get_on("localhost", "/open")).await.unwrap();
        let mut answer = String::new();
        let _ = tls.read_to_string(&mut answer).await;
        assert_eq!(status(&answer), 302, "{answer}");
    }
    // The cleartext port does not read headers: a plain request is served there.
    let (answer, _) = exchange(&rb.redirect(), &get("/open"), WAIT);
    assert_eq!(status(&answer), 302, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_forwarding_headers_name_the_client() {
    let dir = temp_dir();
    let config = dir.path().join("rebound.toml");
    std::fs::write(
        &config,
        "[api]\nanonymous_create = true\nanonymous_burst = 2\nanonymous_rate_per_sec = 0.01\n",
    )
    .unwrap();
    let rb = Rebound::start(
        &dir.path().join("data"),
        &[
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1/32"),
            ("REBOUND_CONFIG", config.to_str().unwrap()),
        ],
    );
    protected_and_open_links(&rb).await;
    let addr = rb.redirect();
    let proxy = [127, 0, 0, 1];
    let attempt = |local: [u8; 4], headers: &str| status(&exchange_from(local, &addr, &[&wrong_password(headers)]).0);

    // From the trusted proxy: X-Forwarded-For names the client (a value the client wrote
    // itself, further left, is not reached), then Forwarded wins over it.
    for _ in 0..5 {
        assert_eq!(attempt(proxy, "X-Forwarded-For: 192.0.2.1, 203.0.113.5\r\n"), 401);
    }
    assert_eq!(attempt(proxy, "X-Forwarded-For: 203.0.113.5\r\n"), 429);
    assert_eq!(
        attempt(proxy, "X-Forwarded-For: 198.51.100.7\r\n"),
        401,
        "another client"
    );
    assert_eq!(
        attempt(proxy, "Forwarded: for=203.0.113.5\r\nX-Forwarded-For: 198.51.100.8\r\n"),
        429,
        "Forwarded is read first"
    );
    // From an untrusted peer the headers are ignored: a new value each time does not get
    // around the limit of its own address.
    let other = [127, 0, 0, 3];
    for n in 0..5 {
        assert_eq!(attempt(other, &format!("X-Forwarded-For: 192.0.2.{n}\r\n")), 401);
    }
    assert_eq!(attempt(other, "X-Forwarded-For: 192.0.2.77\r\n"), 429);

    // The unlock cookie is Secure when the trusted proxy says the visitor came over TLS.
    let unlock = |local: [u8; 4], extra: &str| {
        let body = "password=open+sesame";
        let request = format!(
            "POST /locked HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nX-Forwarded-For: 198.51.100.20\r\n{extra}Connection: close\r\n\r\n{body}",
            body.len()
        );
        exchange_from(local, &addr, &[request.as_bytes()]).0
    };
    let answer = unlock(proxy, "X-Forwarded-Proto: https\r\n");
    assert_eq!(status(&answer), 303, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("; secure"), "{answer}");
    let answer = unlock(proxy, "");
    assert!(!answer.to_ascii_lowercase().contains("; secure"), "{answer}");
    let answer = unlock([127, 0, 0, 4], "X-Forwarded-Proto: https\r\n");
    assert_eq!(status(&answer), 303, "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("; secure"),
        "an untrusted peer's word: {answer}"
    );

    // The API port: anonymous creates are limited per client the proxy names.
    let api = rb.run.api();
    let create = |xff: &'static str| {
        let url = format!("{api}/api/v1/links");
        async move {
            http()
                .post(url)
                .header("X-Forwarded-For", xff)
                .json(&json!({"long_url": "https://example.com/anon"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(create("203.0.113.5").await, StatusCode::CREATED);
    assert_eq!(create("203.0.113.5").await, StatusCode::CREATED);
    assert_eq!(create("203.0.113.5").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(create("198.51.100.7").await, StatusCode::CREATED, "another client");
}

#[test]
fn a_proxy_protocol_port_needs_trusted_networks() {
    let dir = temp_dir();
    let err = refused_start(&[], dir.path(), &[("REBOUND_PROXY_PROTOCOL", "redirect")]);
    assert!(
        err.contains("edge.proxy_protocol (REBOUND_PROXY_PROTOCOL)") && err.contains("REBOUND_TRUSTED_NETWORKS"),
        "{err}"
    );
    let err = refused_start(
        &[],
        dir.path(),
        &[
            ("REBOUND_PROXY_PROTOCOL", "redirect,ssh"),
            ("REBOUND_TRUSTED_NETWORKS", "10.0.0.0/8"),
        ],
    );
    assert!(err.contains("\"ssh\" is not redirect or redirect_tls or api"), "{err}");
    let err = refused_start(&[], dir.path(), &[("REBOUND_TRUSTED_NETWORKS", "10.0.0.0/33")]);
    assert!(
        err.contains("edge.trusted_networks (REBOUND_TRUSTED_NETWORKS)") && err.contains("10.0.0.0/33"),
        "{err}"
    );
    let err = refused_start(
        &[],
        dir.path(),
        &[
            ("REBOUND_PROXY_PROTOCOL", "redirect_tls"),
            ("REBOUND_TRUSTED_NETWORKS", "10.0.0.0/8"),
        ],
    );
    assert!(err.contains("redirect_tls"), "{err}");
}

/// People's clicks from clients a real country database places in five countries (and one it
/// does not), behind a balancer that sends PROXY headers, with three referrers (and none),
/// four agents and two campaigns: each dimension's breakdown is what was sent, bots are
/// counted apart and not broken down, and a dimension switched off is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_COUNTRY_DB (a real country database: scripts/fetch-country-db; scripts/test sets it)"]
async fn clicks_are_broken_down_by_country_referrer_agent_and_campaign() {
    let db = std::env::var("REBOUND_TEST_COUNTRY_DB").expect("REBOUND_TEST_COUNTRY_DB");
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_PROXY_PROTOCOL", "redirect"),
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
            ("REBOUND_GEOIP_DATABASE", &db),
            // Everything but the medium.
            (
                "REBOUND_BREAKDOWNS",
                "country,referrer,device,browser,os,utm_source,utm_campaign",
            ),
            ("REBOUND_CLICK_MAX_HOLD_MS", "200"),
        ],
    );
    rb.create(json!({"long_url": "https://example.com/open", "custom_alias": "open"}))
        .await;
    let counted = [
        "country",
        "referrer",
        "device",
        "browser",
        "os",
        "utm_source",
        "utm_campaign",
    ];
    let clicks = 48;
    let want = visitors::send_people_clicks(&rb.redirect(), "/open", clicks, &counted);
    visitors::send_bot_clicks(&rb.redirect(), "/open");
    let stats = |by: &'static str| {
        let rb = &rb;
        async move {
            let (s, body) = rb
                .api(Method::GET, &format!("/api/v1/links/open/stats?by={by}"), None)
                .await;
            assert_eq!(s, StatusCode::OK, "{body}");
            body
        }
    };
    // Written with the clicks' rows: within the hold, give or take a drain.
    visitors::assert_breakdowns(stats, clicks, &want, &counted, Duration::from_secs(20)).await;
    // The medium was switched off: nothing counted under it.
    assert_eq!(stats("utm_medium").await["breakdown"]["counted"], json!(0));
    // The operators' summary of the (one) domain: the same clicks, countries and referrers.
    let summary = || async {
        let (s, body) = rb.api(Method::GET, "/api/v1/stats?top=100", None).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        body
    };
    visitors::assert_summary(summary, stats, clicks, "open", "127.0.0.1", Duration::from_secs(20)).await;
}

/// A CDN's country header is believed from the trusted networks only: from a trusted peer
/// it names the country; from any other peer it is ignored (no database here: `unknown`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cdn_country_header_is_believed_from_the_trusted_networks_only() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_TRUSTED_NETWORKS", "127.0.0.1"),
            ("REBOUND_COUNTRY_HEADER", "cloudflare"),
            ("REBOUND_CLICK_MAX_HOLD_MS", "200"),
        ],
    );
    rb.create(json!({"long_url": "https://example.com/open", "custom_alias": "open"}))
        .await;
    let addr = rb.redirect();
    let request = |country: &str| {
        format!(
            "GET /open HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: {}\r\nCF-IPCountry: {country}\r\nConnection: close\r\n\r\n",
            visitors::AGENTS[0].0
        )
        .into_bytes()
    };
    for (peer, country) in [
        ([127, 0, 0, 1], "JP"),
        ([127, 0, 0, 1], "jp"),
        ([127, 0, 0, 1], "T1"),
        ([127, 0, 0, 2], "FR"),
    ] {
        let (answer, _) = exchange_from(peer, &addr, &[&request(country)]);
        assert_eq!(status(&answer), 302, "{answer}");
    }
    let want = json!([{"value": "JP", "clicks": 2}, {"value": "tor", "clicks": 1}, {"value": "unknown", "clicks": 1}]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (s, body) = rb.api(Method::GET, "/api/v1/links/open/stats?by=country", None).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        if body["breakdown"]["values"] == want {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
