//! The TLS port's certificates over ACME (docs/spec.md §11, issue 32), black-box: the all-in-one,
//! started with only `tls_addr` and the ACME settings, orders a certificate for its
//! domain from a real ACME server (Debian's `pebble`, with `pebble-challtestsrv` resolving
//! every name to 127.0.0.1, both started by the test), answering the validation on its
//! own redirect port (HTTP-01) or TLS port (TLS-ALPN-01); then curl, trusting pebble's root,
//! reaches `https://<domain>/<code>` over HTTP/1.1 and HTTP/2. A name that is not a
//! configured domain gets no certificate, and none is ordered for it.

use rebound_test_support as common;

use common::fleet::{api, create, Deployment};
use common::services::free_port;
use common::*;
use rebound_acme::testing::{https_get, Pebble};
use serde_json::json;
use std::time::{Duration, Instant};

const DOMAIN: &str = "go.rebound.test";

async fn issued_and_served(challenge: &str) {
    let (http_port, tls_port) = (free_port(), free_port());
    let pebble = Pebble::start(http_port, tls_port, None).await;
    let dir = temp_dir();
    let ca = dir.path().join("pebble-https-ca.pem");
    std::fs::write(&ca, &pebble.https_ca_pem).unwrap();
    let (redirect, tls) = (format!("127.0.0.1:{http_port}"), format!("127.0.0.1:{tls_port}"));
    let rb = rebound::Rebound::start(
        &dir.path().join("data"),
        &[
            ("REBOUND_REDIRECT_ADDR", &redirect),
            ("REBOUND_TLS_ADDR", &tls),
            ("REBOUND_PUBLIC_BASE_URL", &format!("https://{DOMAIN}")),
            ("REBOUND_ACME_DIRECTORY_URL", &pebble.directory_url),
            ("REBOUND_ACME_CA", ca.to_str().unwrap()),
            ("REBOUND_ACME_CHALLENGE", challenge),
            ("REBOUND_ACME_CONTACT", "mailto:ops@rebound.test"),
        ],
    );
    let code = rb
        .create_code(json!({"long_url": "https://example.com/over-acme"}))
        .await;
    // The first round orders at start: wait (bounded) for the certificate.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rb.metric("rebound_acme_issued_total").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "no certificate within 60 s ({challenge}); failures: {}",
            rb.metric(r#"rebound_acme_failures_total{kind="validation"}"#).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let root = https_get(pebble.management, &pebble.https_ca_pem, "/roots/0").await;
    let root_file = dir.path().join("pebble-root.pem");
    std::fs::write(&root_file, root).unwrap();
    let resolve = format!("{DOMAIN}:{tls_port}:127.0.0.1");
    let url = format!("https://{DOMAIN}:{tls_port}/{code}");
    let cacert = root_file.to_str().unwrap();
    for (version, expected) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let got = curl(
            "%{http_version} %{http_code} %{redirect_url}",
            &["--resolve", &resolve, "--cacert", cacert, version, &url],
        );
        assert_eq!(
            got,
            format!("{expected} 302 https://example.com/over-acme"),
            "{challenge}, {version}"
        );
    }
    // Another name: no certificate of its own and no fallback, so no handshake; and no
    // order was made for it.
    let other = format!("https://other.rebound.test:{tls_port}/{code}");
    let other_resolve = format!("other.rebound.test:{tls_port}:127.0.0.1");
    let got = curl(
        "%{http_code}",
        &["--resolve", &other_resolve, "--cacert", cacert, &other],
    );
    assert_eq!(got, "000", "a name that is not a configured domain");
    assert_eq!(pebble.orders(), 1, "one order, for {DOMAIN} alone");
    let expiry = rb
        .metric(&format!(
            r#"rebound_acme_certificate_expiry_seconds{{domain="{DOMAIN}"}}"#
        ))
        .await;
    assert!(
        expiry > now_millis() as f64 / 1000.0,
        "the expiry is exported: {expiry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble (Debian's pebble package): scripts/test installs it and runs it"]
async fn a_certificate_ordered_over_http01_on_the_redirect_port_serves_the_links() {
    issued_and_served("http-01").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble (Debian's pebble package): scripts/test installs it and runs it"]
async fn a_certificate_ordered_over_tls_alpn01_on_the_tls_port_serves_the_links() {
    issued_and_served("tls-alpn-01").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble, REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL: scripts/test runs it"]
async fn two_proxies_get_one_certificate_and_both_serve_it() {
    // A fleet: two `rebound proxy` processes and a control plane on one store. pebble
    // validates HTTP-01 on the first proxy's redirect port alone, as a load balancer would
    // send it to one of them (started first: a validation reaching nobody backs off for 5
    // minutes). Whichever proxy orders, the answer reaches pebble (from the store when the
    // other one ordered; that path is `an_http01_answer_reaches_the_ca_through_another_process_of_the_fleet`
    // in acme/tests/pebble.rs and the redirect port's unit test), one certificate is
    // ordered for the fleet, and both serve it.
    let http_port = free_port();
    let pebble = Pebble::start(http_port, free_port(), None).await;
    let d = Deployment::new(&shared_aws_url(), Some(&shared_redis_url()));
    let dir = temp_dir();
    let ca = dir.path().join("pebble-https-ca.pem");
    std::fs::write(&ca, &pebble.https_ca_pem).unwrap();
    let cp = d.control_plane(dir.path(), &[("REBOUND_PUBLIC_BASE_URL", &format!("https://{DOMAIN}"))]);
    let code = create(&cp, json!({"long_url": "https://example.com/fleet"})).await;
    let tls_ports = [free_port(), free_port()];
    let redirects = [http_port, free_port()];
    let mut proxies = Vec::new();
    for (tls, redirect) in tls_ports.iter().zip(redirects) {
        let (tls, redirect) = (format!("127.0.0.1:{tls}"), format!("127.0.0.1:{redirect}"));
        proxies.push(
            d.proxy(
                dir.path(),
                &[
                    ("REBOUND_REDIRECT_ADDR", &redirect),
                    ("REBOUND_TLS_ADDR", &tls),
                    ("REBOUND_PUBLIC_BASE_URL", &format!("https://{DOMAIN}")),
                    ("REBOUND_ACME_DIRECTORY_URL", &pebble.directory_url),
                    ("REBOUND_ACME_CA", ca.to_str().unwrap()),
                ],
            )
            .await,
        );
    }
    let root = https_get(pebble.management, &pebble.https_ca_pem, "/roots/0").await;
    let root_file = dir.path().join("pebble-root.pem");
    std::fs::write(&root_file, root).unwrap();
    // Both serve it: the one that ordered at once, the other from the store within its
    // round (15 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    for port in tls_ports {
        let resolve = format!("{DOMAIN}:{port}:127.0.0.1");
        let url = format!("https://{DOMAIN}:{port}/{code}");
        loop {
            let got = curl(
                "%{http_version} %{http_code}",
                &[
                    "--resolve",
                    &resolve,
                    "--cacert",
                    root_file.to_str().unwrap(),
                    "--http2",
                    &url,
                ],
            );
            if got == "2 302" {
                break;
            }
            assert!(Instant::now() < deadline, "port {port} answered {got:?} for 60 s");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let mut issued = 0.0;
    for p in &proxies {
        issued += metric(p, "rebound_acme_issued_total").await;
    }
    assert_eq!((issued, pebble.orders()), (1.0, 1), "one order for the fleet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble, REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL: scripts/test runs it"]
async fn a_domain_added_through_the_api_gets_its_certificate_and_serves_on_two_proxies() {
    // The fleet of `two_proxies_get_one_certificate_and_both_serve_it`, running; then an
    // operator adds a domain through the API and creates a link on it with the alias a link
    // of the default domain has. Without a restart, both proxies order (one of them) and
    // serve its certificate, and each name redirects to its own link over HTTP/2.
    const BRAND: &str = "brand.rebound.test";
    let http_port = free_port();
    let pebble = Pebble::start(http_port, free_port(), None).await;
    let d = Deployment::new(&shared_aws_url(), Some(&shared_redis_url()));
    let dir = temp_dir();
    let ca = dir.path().join("pebble-https-ca.pem");
    std::fs::write(&ca, &pebble.https_ca_pem).unwrap();
    let base = format!("https://{DOMAIN}");
    let cp = d.control_plane(dir.path(), &[("REBOUND_PUBLIC_BASE_URL", &base)]);
    let tls_ports = [free_port(), free_port()];
    let mut proxies = Vec::new();
    for (tls, redirect) in tls_ports.iter().zip([http_port, free_port()]) {
        let (tls, redirect) = (format!("127.0.0.1:{tls}"), format!("127.0.0.1:{redirect}"));
        proxies.push(
            d.proxy(
                dir.path(),
                &[
                    ("REBOUND_REDIRECT_ADDR", &redirect),
                    ("REBOUND_TLS_ADDR", &tls),
                    ("REBOUND_PUBLIC_BASE_URL", &base),
                    ("REBOUND_ACME_DIRECTORY_URL", &pebble.directory_url),
                    ("REBOUND_ACME_CA", ca.to_str().unwrap()),
                ],
            )
            .await,
        );
    }
    let (status, added) = api(
        &cp,
        reqwest::Method::POST,
        "/api/v1/domains",
        Some(json!({"name": BRAND})),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{added}");
    assert_eq!(added["state"], "pending");
    for (domain, target) in [
        (DOMAIN, "https://example.com/default-promo"),
        (BRAND, "https://brand.example/promo"),
    ] {
        let body = json!({"long_url": target, "custom_alias": "promo", "domain": domain});
        assert_eq!(create(&cp, body).await, "promo");
    }
    let root = https_get(pebble.management, &pebble.https_ca_pem, "/roots/0").await;
    let root_file = dir.path().join("pebble-root.pem");
    std::fs::write(&root_file, root).unwrap();
    // Each proxy serves both names: the one that ordered at once, the other from the store
    // within its round (15 s); a certificate only for a name the fleet has.
    let deadline = Instant::now() + Duration::from_secs(90);
    for port in tls_ports {
        for (domain, target) in [
            (DOMAIN, "https://example.com/default-promo"),
            (BRAND, "https://brand.example/promo"),
        ] {
            let resolve = format!("{domain}:{port}:127.0.0.1");
            let url = format!("https://{domain}:{port}/promo");
            let want = format!("2 302 {target}");
            loop {
                let got = curl(
                    "%{http_version} %{http_code} %{redirect_url}",
                    &[
                        "--resolve",
                        &resolve,
                        "--cacert",
                        root_file.to_str().unwrap(),
                        "--http2",
                        &url,
                    ],
                );
                if got == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{domain} on port {port} answered {got:?} for 90 s"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    let (status, view) = api(&cp, reqwest::Method::GET, &format!("/api/v1/domains/{BRAND}"), None).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(view["state"], "issued", "{view}");
    assert!(view["certificate_expires_at"].is_string(), "{view}");
    assert_eq!(pebble.orders(), 2, "one order per domain for the whole fleet");
}
