//! Domains (docs/spec.md §11, issue 32), black-box on the all-in-one: domains added, listed and
//! removed through the API; links on a domain, the same alias on two domains; the redirect
//! port routing by `Host` (HTTP/1) and `:authority` (HTTP/2) with each domain's own pages, a
//! host of no domain answered 404; keys scoped to domains; over TLS, a request for another
//! host than the SNI name answered 421, and one without a host answered as the SNI name's.

use rebound_test_support as common;

use common::rebound::Rebound;
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const DEFAULT: &str = "sho.rt.test";

/// `curl` to the redirect port of `rb` for `host` (resolved to it), over HTTP/1.1 or HTTP/2
/// with prior knowledge: "<http version> <status> <Location>".
fn get_on(rb: &Rebound, host: &str, path: &str, h2: bool) -> String {
    let port = rb.redirect().rsplit_once(':').unwrap().1.to_owned();
    let resolve = format!("{host}:{port}:127.0.0.1");
    let url = format!("http://{host}:{port}{path}");
    let version = if h2 { "--http2-prior-knowledge" } else { "--http1.1" };
    curl(
        "%{http_version} %{http_code} %{redirect_url}",
        &["--resolve", &resolve, version, &url],
    )
}

/// Waits (bounded) until `path` on `host` answers `want` over HTTP/1.1: a domain added or
/// removed is read by the data plane within its poll (2 s).
async fn routed(rb: &Rebound, host: &str, path: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = get_on(rb, host, path, false);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{host}{path} answered {got:?}, not {want:?}, for 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn add_domain(rb: &Rebound, body: Value) -> (StatusCode, Value) {
    rb.api(Method::POST, "/api/v1/domains", Some(body)).await
}

fn start_on_domains() -> (tempfile::TempDir, Rebound) {
    let dir = temp_dir();
    let rb = Rebound::start(
        &dir.path().join("data"),
        &[
            ("REBOUND_PUBLIC_BASE_URL", &format!("https://{DEFAULT}")),
            ("REBOUND_H2C", "true"),
        ],
    );
    (dir, rb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_live_on_their_domain_and_the_port_routes_by_host() {
    let (_dir, rb) = start_on_domains();
    // The default domain alone at first.
    let (status, list) = rb.api(Method::GET, "/api/v1/domains", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["domains"].as_array().unwrap().len(), 1);
    assert_eq!(list["domains"][0]["name"], DEFAULT);
    assert_eq!(list["domains"][0]["default"], true);

    let (status, acme) = add_domain(
        &rb,
        json!({"name": "Go.Acme.Test.", "not_found_url": "https://acme.example/missing", "root_url": "https://acme.example/"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{acme}");
    assert_eq!(acme["name"], "go.acme.test", "canonical: lower case, no trailing dot");
    assert_eq!(acme["state"], "pending", "no certificate yet");
    assert_eq!(acme["certificate"], "acme");
    let (status, other) = add_domain(&rb, json!({"name": "acme.link", "certificate": "files"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(other["state"], "files");

    // The same alias on two domains (and on the default one), each with its own target.
    let targets = [
        (None, "https://example.com/default-promo"),
        (Some("go.acme.test"), "https://acme.example/promo"),
        (Some("acme.link"), "https://acme.example/link-promo"),
    ];
    for (domain, target) in targets {
        let mut body = json!({"long_url": target, "custom_alias": "promo"});
        if let Some(d) = domain {
            body["domain"] = json!(d);
        }
        let created = rb.create(body.clone()).await;
        assert_eq!(created["code"], "promo");
        let on = domain.unwrap_or(DEFAULT);
        assert_eq!(created["domain"], on);
        assert_eq!(created["short_url"], format!("https://{on}/promo"));
        // Unique per domain.
        let (status, e) = rb.api(Method::POST, "/api/v1/links", Some(body)).await;
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (StatusCode::CONFLICT, Some("alias_taken"))
        );
    }
    // A generated code lives on the domain it was made on.
    let generated = rb
        .create(json!({"long_url": "https://acme.example/generated", "domain": "go.acme.test"}))
        .await;
    let code = generated["code"].as_str().unwrap().to_owned();
    assert_eq!(generated["domain"], "go.acme.test");

    routed(&rb, "go.acme.test", "/promo", "1.1 302 https://acme.example/promo").await;
    routed(&rb, "acme.link", "/promo", "1.1 302 https://acme.example/link-promo").await;
    for h2 in [false, true] {
        let v = if h2 { "2" } else { "1.1" };
        for (domain, target) in targets {
            let host = domain.unwrap_or(DEFAULT);
            assert_eq!(get_on(&rb, host, "/promo", h2), format!("{v} 302 {target}"), "{host}");
        }
        // Case and a trailing dot do not matter; the port does not either.
        assert_eq!(
            get_on(&rb, "GO.ACME.TEST.", "/promo", h2),
            format!("{v} 302 https://acme.example/promo")
        );
        assert_eq!(
            get_on(&rb, "go.acme.test", &format!("/{code}"), h2),
            format!("{v} 302 https://acme.example/generated")
        );
        // Not on the other domains.
        assert_eq!(get_on(&rb, DEFAULT, &format!("/{code}"), h2), format!("{v} 404 "));
        assert_eq!(
            get_on(&rb, "go.acme.test", "/nothing-here", h2),
            format!("{v} 302 https://acme.example/missing"),
            "the domain's own not-found URL"
        );
        assert_eq!(
            get_on(&rb, "go.acme.test", "/", h2),
            format!("{v} 302 https://acme.example/")
        );
        assert_eq!(
            get_on(&rb, "acme.link", "/nothing-here", h2),
            format!("{v} 404 "),
            "the built-in page"
        );
        // A host of no domain: 404, even for a code the default domain has.
        assert_eq!(get_on(&rb, "evil.example", "/promo", h2), format!("{v} 404 "));
        assert_eq!(get_on(&rb, "evil.example", "/", h2), format!("{v} 404 "));
    }
    assert!(
        rb.metric(r#"rebound_redirect_requests_total{outcome="unknown_host"}"#)
            .await
            >= 2.0
    );
    // By address: the default domain (a health check, curl on the box).
    let by_ip = rb.get("/promo").await;
    assert_eq!(by_ip.status(), StatusCode::FOUND);
    assert_eq!(by_ip.headers()["location"], "https://example.com/default-promo");

    // The API reads a link on its domain, by `?domain=`.
    let (status, link) = rb.api(Method::GET, "/api/v1/links/promo?domain=acme.link", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (link["long_url"].as_str(), link["domain"].as_str()),
        (Some("https://acme.example/link-promo"), Some("acme.link"))
    );
    let (status, link) = rb.api(Method::GET, "/api/v1/links/promo", None).await;
    assert_eq!((status, link["domain"].as_str()), (StatusCode::OK, Some(DEFAULT)));
    // On a domain the service does not have, there is no such link.
    let (status, e) = rb.api(Method::GET, "/api/v1/links/promo?domain=nope.test", None).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, e) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://e.com/", "domain": "nope.test"})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_domain")),
        "a create on it is refused"
    );
    let (_, list) = rb.api(Method::GET, "/api/v1/links", None).await;
    let shown: Vec<(String, String)> = list["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["domain"].as_str().unwrap().into(), l["code"].as_str().unwrap().into()))
        .collect();
    assert!(shown.contains(&("acme.link".into(), "promo".into())), "{shown:?}");
    assert!(shown.contains(&("go.acme.test".into(), code.clone())), "{shown:?}");

    // A delete on one domain leaves the others.
    let (status, _) = rb
        .api(Method::DELETE, "/api/v1/links/promo?domain=acme.link", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(get_on(&rb, "acme.link", "/promo", false), "1.1 404 ");
    assert_eq!(
        get_on(&rb, "go.acme.test", "/promo", false),
        "1.1 302 https://acme.example/promo"
    );
    assert_eq!(
        get_on(&rb, DEFAULT, "/promo", false),
        "1.1 302 https://example.com/default-promo"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_is_checked_added_once_and_removed_only_with_its_links() {
    let (_dir, rb) = start_on_domains();
    for (name, code) in [
        ("localhost", "invalid_domain"),
        ("127.0.0.1", "invalid_domain"),
        ("a..test", "invalid_domain"),
        ("a_b.test", "invalid_domain"),
        ("x.test/path", "invalid_domain"),
    ] {
        let (status, e) = add_domain(&rb, json!({"name": name})).await;
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{name}"
        );
    }
    let (status, e) = add_domain(&rb, json!({"name": "d.test", "certificate": "manual"})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_certificate"))
    );
    let (status, e) = add_domain(&rb, json!({"name": "d.test", "not_found_url": "javascript:alert(1)"})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_url"))
    );
    let (status, e) = add_domain(&rb, json!({"name": DEFAULT})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("domain_exists"))
    );
    // Nothing of the refused ones was added.
    let (_, list) = rb.api(Method::GET, "/api/v1/domains", None).await;
    assert_eq!(list["domains"].as_array().unwrap().len(), 1, "{list}");

    let (status, _) = add_domain(&rb, json!({"name": "d.test"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, e) = add_domain(&rb, json!({"name": "D.test"})).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("domain_exists"))
    );
    let (status, view) = rb.api(Method::GET, "/api/v1/domains/d.test", None).await;
    assert_eq!((status, view["name"].as_str()), (StatusCode::OK, Some("d.test")));
    let (status, _) = rb.api(Method::GET, "/api/v1/domains/nope.test", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let code = rb
        .create_code(json!({"long_url": "https://example.com/on-d", "domain": "d.test"}))
        .await;
    routed(&rb, "d.test", &format!("/{code}"), "1.1 302 https://example.com/on-d").await;

    // Active links: refused, unless asked to take them down.
    let (status, e) = rb.api(Method::DELETE, "/api/v1/domains/d.test", None).await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("domain_has_links"))
    );
    let (status, e) = rb
        .api(Method::DELETE, "/api/v1/domains/d.test?take_down=yes", None)
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_query"))
    );
    let (status, e) = rb
        .api(Method::DELETE, &format!("/api/v1/domains/{DEFAULT}"), None)
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("default_domain"))
    );
    assert_eq!(
        get_on(&rb, "d.test", &format!("/{code}"), false),
        "1.1 302 https://example.com/on-d"
    );

    let (status, removed) = rb
        .api(Method::DELETE, "/api/v1/domains/d.test?take_down=true", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{removed}");
    assert_eq!(removed["taken_down"], 1);
    // The link is down at once (the takedown's own propagation), the host soon unrouted.
    assert_eq!(get_on(&rb, "d.test", &format!("/{code}"), false), "1.1 404 ");
    // Listed still, taken down, on a domain that is no more (`#` and its id).
    let (_, list) = rb.api(Method::GET, "/api/v1/links", None).await;
    let old = list["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["code"] == code.as_str())
        .unwrap()
        .clone();
    assert_eq!(old["is_active"], false);
    assert!(old["domain"].as_str().unwrap().starts_with('#'), "{old}");
    assert_eq!(old["delete_reason"], "domain d.test removed");
    let (status, audit) = rb
        .api(Method::GET, &format!("/api/v1/links/{code}/audit?domain=d.test"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the domain is gone: {audit}");
    // Added again, it is a new domain: the old link does not come back.
    let (status, _) = add_domain(&rb, json!({"name": "d.test"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = rb
        .api(Method::GET, &format!("/api/v1/links/{code}?domain=d.test"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Only the new domain's links answer there.
    let again = rb
        .create(json!({"long_url": "https://example.com/again", "domain": "d.test", "custom_alias": "keep"}))
        .await;
    assert_eq!(again["code"], "keep");
    routed(&rb, "d.test", "/keep", "1.1 302 https://example.com/again").await;
    assert_eq!(get_on(&rb, "d.test", &format!("/{code}"), false), "1.1 404 ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_scoped_to_a_domain_creates_and_sees_only_there() {
    let (_dir, rb) = start_on_domains();
    for name in ["brand.test", "other.test"] {
        assert_eq!(add_domain(&rb, json!({"name": name})).await.0, StatusCode::CREATED);
    }
    let (status, e) = rb
        .api(
            Method::POST,
            "/api/v1/keys",
            Some(json!({"name": "op", "role": "operator", "domains": ["brand.test"]})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_domains"))
    );
    let (status, e) = rb
        .api(
            Method::POST,
            "/api/v1/keys",
            Some(json!({"name": "c", "role": "creator", "domains": ["nope.test"]})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_domains"))
    );
    let (status, key) = rb
        .api(
            Method::POST,
            "/api/v1/keys",
            Some(json!({"name": "brand", "role": "creator", "domains": ["Brand.Test"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{key}");
    assert_eq!(key["domains"], json!(["brand.test"]));
    let secret = key["key"].as_str().unwrap().to_owned();
    let as_brand = |method: Method, path: &str, body: Option<Value>| {
        let req = rb
            .http
            .request(method, format!("{}{path}", rb.run.api()))
            .bearer_auth(&secret);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        async move {
            let res = req.send().await.unwrap();
            let status = res.status();
            (status, res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // Without a domain: its first domain.
    let (status, made) = as_brand(
        Method::POST,
        "/api/v1/links",
        Some(json!({"long_url": "https://brand.example/a"})),
    )
    .await;
    assert_eq!(
        (status, made["domain"].as_str()),
        (StatusCode::CREATED, Some("brand.test")),
        "{made}"
    );
    for domain in ["other.test", DEFAULT] {
        let (status, e) = as_brand(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://brand.example/b", "domain": domain})),
        )
        .await;
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden")),
            "{domain}"
        );
    }
    let (status, me) = as_brand(Method::GET, "/api/v1/me", None).await;
    assert_eq!((status, me["domains"].clone()), (StatusCode::OK, json!(["brand.test"])));
    let (status, list) = as_brand(Method::GET, "/api/v1/domains", None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["brand.test"]);
    let (status, _) = as_brand(Method::GET, "/api/v1/domains/other.test", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Its own link, read on its domain; the same code on another domain is not its to see.
    let code = made["code"].as_str().unwrap();
    let (status, _) = as_brand(Method::GET, &format!("/api/v1/links/{code}?domain=brand.test"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = as_brand(Method::GET, &format!("/api/v1/links/{code}"), None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a scoped key's link addressed without a domain is on its domain"
    );
    let (status, _) = as_brand(Method::GET, &format!("/api/v1/links/{code}?domain={DEFAULT}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_request_for_another_host_than_the_sni_name_is_misdirected() {
    let dir = temp_dir();
    let (rb, cert) = Rebound::start_tls(dir.path(), "https://localhost");
    let code = rb.create_code(json!({"long_url": "https://example.com/tls"})).await;
    let port = rb.run.addrs["redirect TLS"].rsplit_once(':').unwrap().1.to_owned();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/{code}");
    let cacert = cert.to_str().unwrap();
    for version in ["--http1.1", "--http2"] {
        let ok = curl(
            "%{http_code}",
            &["--resolve", &resolve, "--cacert", cacert, version, &url],
        );
        assert_eq!(ok, "302", "{version}");
        let misdirected = curl(
            "%{http_code}",
            &[
                "--resolve",
                &resolve,
                "--cacert",
                cacert,
                version,
                "-H",
                "Host: acme.test",
                &url,
            ],
        );
        assert_eq!(misdirected, "421", "{version}");
    }
    assert!(rb.refusals("redirect_tls", "misdirected").await >= 2.0);
}

/// One HTTP/1.0 exchange written raw on a TLS connection to `tls` by `openssl s_client`, the
/// client sending `sni` by SNI (none when `None`): "<status> <Location>".
fn raw_tls_answer(tls: &str, sni: Option<&str>, request: &str) -> String {
    use std::io::Write;
    let mut cmd = std::process::Command::new("openssl");
    cmd.args(["s_client", "-quiet", "-connect", tls]);
    match sni {
        Some(name) => cmd.args(["-servername", name]),
        None => cmd.arg("-noservername"),
    };
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    child.stdin.take().unwrap().write_all(request.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let location = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("location:")
                .then(|| l[9..].trim().to_owned())
        })
        .unwrap_or_default();
    format!("{status} {location}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_request_without_host_is_for_the_sni_name_never_the_default_domain() {
    let dir = temp_dir();
    let (rb, _) = Rebound::start_tls(dir.path(), &format!("https://{DEFAULT}"));
    let alpha = "go.alpha.test";
    assert_eq!(
        add_domain(&rb, json!({"name": alpha, "certificate": "files"})).await.0,
        StatusCode::CREATED
    );
    rb.create(json!({"long_url": "https://example.com/default-home", "custom_alias": "home1"}))
        .await;
    rb.create(json!({"long_url": "https://alpha.example/home", "custom_alias": "home1", "domain": alpha}))
        .await;
    let tls = rb.run.addrs["redirect TLS"].clone();
    let no_host = "GET /home1 HTTP/1.0\r\n\r\n";
    // The client named go.alpha.test: the request is for it (the port serves its own
    // certificate for every name; openssl does not check it).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = tokio::task::block_in_place(|| raw_tls_answer(&tls, Some(alpha), no_host));
        if got == "302 https://alpha.example/home" {
            break;
        }
        assert_ne!(
            got, "302 https://example.com/default-home",
            "SNI {alpha}: the default domain's link"
        );
        assert!(Instant::now() < deadline, "SNI {alpha}: {got:?} for 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The same request naming its host as the SNI name: the same answer.
    let named = format!("GET /home1 HTTP/1.0\r\nHost: {alpha}\r\n\r\n");
    assert_eq!(
        tokio::task::block_in_place(|| raw_tls_answer(&tls, Some(alpha), &named)),
        "302 https://alpha.example/home"
    );
    // A name that is no domain of the fleet: that name's 404, never the default's link.
    assert_eq!(
        tokio::task::block_in_place(|| raw_tls_answer(&tls, Some("nowhere.alpha.test"), no_host)),
        "404 "
    );
    // The default domain's name, or no name at all (a client that connected to the
    // address): the default domain's link, as before.
    for sni in [Some(DEFAULT), None] {
        assert_eq!(
            tokio::task::block_in_place(|| raw_tls_answer(&tls, sni, no_host)),
            "302 https://example.com/default-home",
            "SNI {sni:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_on_a_domain_added_a_moment_ago_answers_its_first_click() {
    let (_dir, rb) = start_on_domains();
    // No waiting anywhere: the first request for each new host finds it routed (a host the
    // routes do not have sends them to the store first).
    for i in 0..5 {
        let host = format!("new{i}.fresh.test");
        assert_eq!(add_domain(&rb, json!({"name": host})).await.0, StatusCode::CREATED);
        let target = format!("https://fresh.example/{i}");
        rb.create(json!({"long_url": target, "custom_alias": "first", "domain": host}))
            .await;
        assert_eq!(
            get_on(&rb, &host, "/first", i % 2 == 1),
            format!("{} 302 {target}", ["1.1", "2"][i % 2])
        );
    }
    // A flood of made-up hosts costs the store a few reads a second, not one a request.
    let reads = r#"rebound_adapter_calls_total{adapter="sqlite",operation="high_water",outcome="ok"}"#;
    let (before, started) = (rb.metric(reads).await, Instant::now());
    for i in 0..200 {
        assert_eq!(get_on(&rb, &format!("made-up{i}.example"), "/first", false), "1.1 404 ");
    }
    let (spent, elapsed) = (rb.metric(reads).await - before, started.elapsed().as_millis() as f64);
    // The readings' bucket (10 at once, then 4 a second), the 2 s poll, and a margin for the
    // other counters' reads.
    let bound = 10.0 + elapsed / 250.0 + elapsed / 2000.0 + 20.0;
    assert!(
        spent <= bound,
        "{spent} counter reads for 200 unknown hosts in {elapsed} ms (bound {bound})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_added_a_moment_ago_answers_its_root_and_every_path_at_once() {
    let (_dir, rb) = start_on_domains();
    // No waiting anywhere: the first request of each path on each new host finds the domain
    // routed, with its own pages (an unknown host sends the routes to the store first,
    // whether or not the path is a code).
    for i in 0..4 {
        let host = format!("pages{i}.fresh.test");
        let (root, missing) = (
            format!("https://fresh.example/{i}/root"),
            format!("https://fresh.example/{i}/missing"),
        );
        let body = json!({"name": host, "certificate": "files", "root_url": root, "not_found_url": missing});
        assert_eq!(add_domain(&rb, body).await.0, StatusCode::CREATED);
        // The first request on the host: `/`, a path that is no code, or one that is.
        let (first, then) = match i % 3 {
            0 => ("/", ["/not/a/code", "/nocode1"]),
            1 => ("/not/a/code", ["/", "/nocode1"]),
            _ => ("/nocode1", ["/", "/not/a/code"]),
        };
        let h2 = i % 2 == 1;
        let v = ["1.1", "2"][i % 2];
        for path in std::iter::once(first).chain(then) {
            let want = if path == "/" { &root } else { &missing };
            assert_eq!(
                get_on(&rb, &host, path, h2),
                format!("{v} 302 {want}"),
                "{host}{path}, the first request being {first}"
            );
        }
    }
    // A host of no domain: the default 404, for every path.
    for path in ["/", "/not/a/code", "/nocode1"] {
        assert_eq!(get_on(&rb, "made-up.fresh.test", path, false), "1.1 404 ", "{path}");
    }
}

const APPLE: &str = "/.well-known/apple-app-site-association";
const ANDROID: &str = "/.well-known/assetlinks.json";

/// `method path` on the redirect port of `rb` for `host` (resolved to it), over HTTP/1.1:
/// the status; `Content-Type`, `Cache-Control`, `Content-Length` and `Location` (empty when
/// absent); and the body.
async fn fetch_on(rb: &Rebound, host: &str, path: &str, method: Method) -> (u16, [String; 4], Vec<u8>) {
    let addr: std::net::SocketAddr = rb.redirect().parse().unwrap();
    let client = http_builder()
        .resolve(host, addr)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let url = format!("http://{host}:{}{path}", addr.port());
    let res = client.request(method, url).send().await.unwrap();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map_or(String::new(), |v| v.to_str().unwrap().to_owned())
    };
    let headers = ["content-type", "cache-control", "content-length", "location"].map(header);
    (res.status().as_u16(), headers, res.bytes().await.unwrap().to_vec())
}

/// Waits (bounded) until `path` on `host` answers `want` (a body: 200; none: 404): a change
/// of app links is read by the data plane within its poll (2 s).
async fn serves(rb: &Rebound, host: &str, path: &str, want: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, body) = fetch_on(rb, host, path, Method::GET).await;
        let got = (status == 200).then(|| String::from_utf8_lossy(&body).into_owned());
        if got.as_deref() == want && (status == 200 || status == 404) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{host}{path} answered {status} {got:?}, not {want:?}, for 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// docs/spec.md §14: a domain's app links, set through the API (the default domain's through
/// the CLI), served on that domain alone with their bytes, `application/json` and a public
/// `Cache-Control`, never a redirect; 404 on a domain without them; a change served within
/// the poll; a refused one changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_links_are_served_on_their_domain_and_a_change_follows() {
    let (dir, rb) = start_on_domains();
    for name in ["apps.test", "bare.test"] {
        let (status, d) = add_domain(&rb, json!({"name": name, "certificate": "files"})).await;
        assert_eq!(status, StatusCode::CREATED, "{d}");
    }
    let aasa = json!({"applinks": {"details": [{"appIDs": ["ABCDE12345.com.acme.app"], "components": [{"/": "/*", "comment": "every path"}]}]},
                      "webcredentials": {"apps": ["ABCDE12345.com.acme.app"]}});
    let statements = json!([{"relation": ["delegate_permission/common.handle_all_urls"],
        "target": {"namespace": "android_app", "package_name": "com.acme.app",
                   "sha256_cert_fingerprints": ["14:6D:E9:83:C5:73:06:50:D8:EE:B9:95:2F:34:FC:64:16:A0:83:42:E6:1D:BE:A8:8A:04:96:B2:3F:CF:44:E5"]}}]);
    let (status, view) = rb
        .api(
            Method::PUT,
            "/api/v1/domains/apps.test/app-links",
            Some(json!({"apple_app_site_association": aasa, "assetlinks": statements})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (&view["apple_app_site_association"], &view["assetlinks"]),
        (&aasa, &statements)
    );
    // The default domain's, through the CLI from a file (pretty-printed: served compact);
    // its Apple document, not named, stays none.
    let default_statements = json!([{"relation": ["delegate_permission/common.get_login_creds"],
        "target": {"namespace": "web", "site": format!("https://{DEFAULT}")}}]);
    let file = dir.path().join("assetlinks.json");
    std::fs::write(&file, serde_json::to_string_pretty(&default_statements).unwrap()).unwrap();
    let (ok, out, err) = cli(
        &rb.run.api(),
        Some(OPERATOR_KEY),
        &["domains", "app-links", DEFAULT, "--assetlinks", file.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    assert!(out.contains("assetlinks:") && out.contains("get_login_creds"), "{out}");

    let (aasa_text, statements_text, default_text) =
        (aasa.to_string(), statements.to_string(), default_statements.to_string());
    serves(&rb, "apps.test", APPLE, Some(&aasa_text)).await;
    serves(&rb, DEFAULT, ANDROID, Some(&default_text)).await;
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("apps.test", APPLE, Some(&aasa_text)),
        ("apps.test", ANDROID, Some(&statements_text)),
        ("bare.test", APPLE, None),
        ("bare.test", ANDROID, None),
        (DEFAULT, APPLE, None),
        (DEFAULT, ANDROID, Some(&default_text)),
        // By address: the default domain's.
        ("127.0.0.1", ANDROID, Some(&default_text)),
        ("evil.example", APPLE, None),
        ("evil.example", ANDROID, None),
    ];
    for method in [Method::GET, Method::HEAD] {
        for (host, path, want) in cases {
            let (status, [kind, cache, length, location], body) = fetch_on(&rb, host, path, method.clone()).await;
            let what = format!("{method} {host}{path}");
            match want {
                Some(want) => {
                    assert_eq!(status, 200, "{what}");
                    assert_eq!(
                        (kind.as_str(), cache.as_str(), location.as_str()),
                        ("application/json", "public, max-age=3600", ""),
                        "{what}"
                    );
                    assert_eq!(length, want.len().to_string(), "{what}");
                    let want: &[u8] = if method == Method::HEAD { b"" } else { want.as_bytes() };
                    assert_eq!(body, want, "{what}: the stored bytes");
                }
                None => {
                    assert_eq!(status, 404, "{what}");
                    assert!(kind.starts_with("text/html"), "{what}: the usual page, not {kind}");
                }
            }
        }
    }
    // Over HTTP/2 as well.
    let port = rb.redirect().rsplit_once(':').unwrap().1.to_owned();
    let answer = curl(
        "%{http_version} %{http_code} %{content_type}",
        &[
            "--resolve",
            &format!("apps.test:{port}:127.0.0.1"),
            "--http2-prior-knowledge",
            &format!("http://apps.test:{port}{ANDROID}"),
        ],
    );
    assert_eq!(answer, "2 200 application/json");

    // A change: served within the poll; the document not given goes (404).
    let changed = json!({"applinks": {"details": []}});
    let (status, view) = rb
        .api(
            Method::PUT,
            "/api/v1/domains/apps.test/app-links",
            Some(json!({"apple_app_site_association": changed})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["assetlinks"], Value::Null);
    serves(&rb, "apps.test", APPLE, Some(&changed.to_string())).await;
    serves(&rb, "apps.test", ANDROID, None).await;
    serves(&rb, DEFAULT, ANDROID, Some(&default_text)).await;

    // Refused (the message names the field), and nothing changes.
    let (status, e) = rb
        .api(
            Method::PUT,
            "/api/v1/domains/apps.test/app-links",
            Some(json!({"apple_app_site_association": changed, "assetlinks": {"relation": []}})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_app_links"))
    );
    assert!(e["error"]["message"].as_str().unwrap().starts_with("assetlinks"), "{e}");
    let (_, view) = rb.api(Method::GET, "/api/v1/domains/apps.test", None).await;
    assert_eq!(
        (&view["apple_app_site_association"], &view["assetlinks"]),
        (&changed, &Value::Null)
    );
    let (status, e) = rb
        .api(
            Method::PUT,
            "/api/v1/domains/bare.test/app-links",
            Some(json!({"apple_app_site_association": {"k": "x".repeat(70_000)}})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("document_too_large")),
        "{e}"
    );
    let (status, _) = rb
        .api(Method::PUT, "/api/v1/domains/nope.test/app-links", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(fetch_on(&rb, "bare.test", APPLE, Method::GET).await.0, 404);
    assert!(
        rb.metric(r#"rebound_redirect_requests_total{outcome="app_link"}"#)
            .await
            >= 10.0
    );
}

/// The paragraph of `rebound domains add --help` about `flag`.
fn help_of(flag: &str) -> String {
    let (ok, help, err) = cli("http://127.0.0.1:9", None, &["domains", "add", "--help"]);
    assert!(ok, "{err}");
    let flag = format!("{flag} <");
    let mut lines = help.lines().skip_while(|l| !l.contains(&flag));
    let first = lines.next().unwrap_or_else(|| panic!("{flag} in {help}"));
    // Its lines up to the next option's.
    std::iter::once(first.split_once('>').map_or("", |(_, text)| text))
        .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Issue 42 item 17: a deleted link of a domain goes to its `not_found_url`, never its
/// `expired_url`, and the CLI's help and the API's schema say just that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_link_goes_to_not_found_url_as_the_help_says() {
    let (_dir, rb) = start_on_domains();
    let (status, d) = add_domain(
        &rb,
        json!({"name": "pages.test", "not_found_url": "https://pages.example/missing",
               "expired_url": "https://pages.example/expired"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    rb.create(json!({"long_url": "https://pages.example/t", "custom_alias": "bye", "domain": "pages.test"}))
        .await;
    routed(&rb, "pages.test", "/bye", "1.1 302 https://pages.example/t").await;
    let (status, _) = rb
        .api(Method::DELETE, "/api/v1/links/bye?domain=pages.test", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    routed(&rb, "pages.test", "/bye", "1.1 302 https://pages.example/missing").await;

    let expired = help_of("--expired-url");
    assert!(expired.contains("expired link"), "{expired}");
    assert!(
        !expired.contains("deleted"),
        "a deleted link does not go there: {expired}"
    );
    let not_found = help_of("--not-found-url");
    assert!(not_found.contains("deleted"), "{not_found}");
    let doc: Value = serde_json::from_str(&rebound_control_plane::openapi_json()).unwrap();
    let fields = &doc["components"]["schemas"]["CreateDomainRequest"]["properties"];
    let expired = fields["expired_url"]["description"].as_str().unwrap_or_default();
    assert!(
        expired.contains("expired link") && !expired.contains("deleted"),
        "{expired}"
    );
    let not_found = fields["not_found_url"]["description"].as_str().unwrap_or_default();
    assert!(not_found.contains("deleted"), "{not_found}");
}
