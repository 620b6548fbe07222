//! Issuance against a real ACME server: Debian's `pebble`, with `pebble-challtestsrv` as its
//! DNS (every name resolves to 127.0.0.1), both started by each test on free loopback ports
//! and killed when it ends. The test serves pebble's HTTP-01 and TLS-ALPN-01 validations
//! itself, from `Challenges` and the `SniResolver`, and those another process started from
//! the store (`FleetTlsAlpn`), as the product's ports do.

use rebound_acme::testing::{client_config, Pebble};
use rebound_acme::{install_stored, ChallengeKind, Challenges, FleetTlsAlpn, Issuer, IssuerConfig, Outcome};
use rebound_acme::{AcmeMetrics, FailureKind};
use rebound_edge::acme::{ChallengeCerts, ACME_TLS_ALPN};
use rebound_edge::sni::SniResolver;
use rebound_store::certs::{CertificateStore, MemoryCertificates, StoredCertificate};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The cleartext port: HTTP-01 answers from `challenges`, 404 for anything else.
async fn serve_http01(listener: TcpListener, challenges: Arc<Challenges>, store: MemoryCertificates) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    loop {
        let Ok((tcp, _)) = listener.accept().await else { return };
        let (challenges, store) = (challenges.clone(), store.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                // This process's answers first, then the fleet's in the store (as the
                // redirect port does).
                let path = req.uri().path().to_owned();
                let (challenges, store) = (challenges.clone(), store.clone());
                async move {
                    let answer = match challenges.answer_path(&path) {
                        Some(answer) => Some(answer),
                        None => match rebound_edge::acme::http01_token(&path) {
                            Some(token) => store.get_challenge(token, now_millis()).await.unwrap(),
                            None => None,
                        },
                    };
                    match answer {
                        Some(body) => hyper::Response::builder()
                            .header("content-type", "application/octet-stream")
                            .body(Full::new(Bytes::from(body))),
                        None => hyper::Response::builder().status(404).body(Full::new(Bytes::new())),
                    }
                }
            });
            let io = hyper_util::rt::TokioIo::new(tcp);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// The TLS port: certificates from `resolver`, validations answered by `answers`; an
/// `acme-tls/1` connection is closed after its handshake, any other gets a two-byte answer.
async fn serve_tls(listener: TcpListener, resolver: Arc<SniResolver>, answers: Arc<FleetTlsAlpn>) {
    let tls = resolver.server_tls().unwrap().answering_acme(answers);
    loop {
        let Ok((tcp, _)) = listener.accept().await else { return };
        let tls = tls.clone();
        tokio::spawn(async move {
            let Ok(start) = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await
            else {
                return;
            };
            let Some(config) = tls.config_for_start(&start).await else {
                return;
            };
            let Ok(mut stream) = start.into_stream(config).await else {
                return;
            };
            if stream.get_ref().1.alpn_protocol() != Some(ACME_TLS_ALPN) {
                let _ = stream.write_all(b"ok").await;
            }
            let _ = stream.shutdown().await;
        });
    }
}

/// A running test: pebble, the two ports, one store and one `Challenges`.
struct Rig {
    pebble: Pebble,
    store: MemoryCertificates,
    challenges: Arc<Challenges>,
    resolver: Arc<SniResolver>,
    tls_port: u16,
}

impl Rig {
    async fn start(validity: Option<u64>) -> Rig {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (http_port, tls_port) = (http.local_addr().unwrap().port(), tls.local_addr().unwrap().port());
        let challenges = Challenges::new();
        let store = MemoryCertificates::new();
        let resolver = SniResolver::new(None, Some(challenges.clone() as Arc<dyn ChallengeCerts>));
        tokio::spawn(serve_http01(http, challenges.clone(), store.clone()));
        let answers = FleetTlsAlpn::new(challenges.clone(), Arc::new(rebound_core::SystemClock));
        answers.read_from(Arc::new(store.clone()));
        tokio::spawn(serve_tls(tls, resolver.clone(), answers));
        Rig {
            pebble: Pebble::start(http_port, tls_port, validity).await,
            store,
            challenges,
            resolver,
            tls_port,
        }
    }

    fn issuer(&self, config: IssuerConfig, metrics: &AcmeMetrics) -> Issuer {
        Issuer::new(
            config,
            Arc::new(self.store.clone()),
            self.challenges.clone(),
            metrics.clone(),
        )
    }

    /// Installs the stored certificates of `domains` and shakes hands for `name` as a client
    /// trusting only pebble's issuing root: the leaf served, or the client's error.
    async fn verify(&self, domains: &[String], name: &str) -> Result<CertificateDer<'static>, std::io::Error> {
        let refused = install_stored(&self.store, domains, &self.resolver).await.unwrap();
        assert!(refused.is_empty(), "{refused:?}");
        let root = self.pebble.issuing_root().await;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(&[root], &[b"http/1.1"])));
        let tcp = TcpStream::connect(("127.0.0.1", self.tls_port)).await.unwrap();
        let mut tls = connector
            .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
            .await?;
        let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await?;
        assert_eq!(answer, "ok");
        Ok(leaf)
    }
}

fn domains(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn leaf_of(stored: &StoredCertificate) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(stored.chain_pem.as_bytes()).unwrap()
}

/// Issues the first certificate of `domain` with challenges of `kind`, and checks that it is
/// stored, counted, exported and served by SNI with a chain to pebble's root.
async fn issues_and_serves(kind: ChallengeKind) {
    let rig = Rig::start(None).await;
    let metrics = AcmeMetrics::detached();
    let issuer = rig.issuer(rig.pebble.config("one", kind), &metrics);
    let list = domains(&["a.rebound.test"]);
    let before = now_millis();

    let outcomes = issuer.renew_due(&list, now_millis()).await;
    assert_eq!(outcomes.len(), 1);
    let not_after = match &outcomes[0] {
        (domain, Outcome::Issued { not_after }) if domain == "a.rebound.test" => *not_after,
        other => panic!(
            "{other:?}\npebble's log:\n{}",
            std::fs::read_to_string(&rig.pebble.log).unwrap()
        ),
    };
    let stored = rig
        .store
        .get_certificate("a.rebound.test")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.not_after, not_after);
    assert!(not_after > before + 86_400_000, "valid for days: {not_after}");
    assert!(stored.key_pem.contains("PRIVATE KEY"));
    assert_eq!(metrics.issued_count(), 1);
    assert_eq!(metrics.renewed_count(), 0);
    assert_eq!(metrics.expiry("a.rebound.test"), Some(not_after / 1000));
    assert_eq!(rig.pebble.orders(), 1);
    // The answers are taken back once the order is over.
    assert!(rig.challenges.tls_alpn01("a.rebound.test").is_none());

    let served = rig
        .verify(&list, "a.rebound.test")
        .await
        .expect("a chain to pebble's root");
    assert_eq!(served, leaf_of(&stored));
    // Another name gets no certificate from this port (it has no certificate of its own).
    assert!(rig.verify(&list, "b.rebound.test").await.is_err());

    // Due no more: a second round orders nothing.
    let outcomes = issuer.renew_due(&list, now_millis()).await;
    assert!(matches!(outcomes[0].1, Outcome::NotDue { .. }), "{outcomes:?}");
    assert_eq!(rig.pebble.orders(), 1);
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn http01_issues_a_certificate_that_the_sni_resolver_serves() {
    issues_and_serves(ChallengeKind::Http01).await;
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn tls_alpn01_issues_a_certificate_that_the_sni_resolver_serves() {
    issues_and_serves(ChallengeKind::TlsAlpn01).await;
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn a_certificate_expiring_within_the_window_is_renewed() {
    // Valid 120 s, renewed with all of its lifetime left: due as soon as issued.
    let rig = Rig::start(Some(120)).await;
    let metrics = AcmeMetrics::detached();
    let mut config = rig.pebble.config("one", ChallengeKind::Http01);
    config.renew_left = 1.0;
    let issuer = rig.issuer(config.clone(), &metrics);
    let list = domains(&["r.rebound.test"]);

    let outcomes = issuer.renew_due(&list, now_millis()).await;
    let first = match &outcomes[0].1 {
        Outcome::Issued { not_after } => *not_after,
        other => panic!("{other:?}"),
    };
    assert!(first <= now_millis() + 121_000, "short-lived: {first}");
    let first_leaf = leaf_of(&rig.store.get_certificate("r.rebound.test").await.unwrap().unwrap());

    let outcomes = issuer.renew_due(&list, now_millis()).await;
    let second = match &outcomes[0].1 {
        Outcome::Renewed { not_after } => *not_after,
        other => panic!("{other:?}"),
    };
    let stored = rig.store.get_certificate("r.rebound.test").await.unwrap().unwrap();
    assert_eq!(stored.not_after, second);
    assert!(second >= first, "{second} before {first}");
    assert_ne!(leaf_of(&stored), first_leaf, "a new certificate");
    assert_eq!((metrics.issued_count(), metrics.renewed_count()), (1, 1));
    assert_eq!(metrics.expiry("r.rebound.test"), Some(second / 1000));
    assert_eq!(rig.pebble.orders(), 2);
    assert_eq!(rig.verify(&list, "r.rebound.test").await.unwrap(), leaf_of(&stored));

    // Renewed with a twentieth left (6 s): nothing is due.
    config.renew_left = 0.05;
    let patient = rig.issuer(config, &metrics);
    let outcomes = patient.renew_due(&list, now_millis()).await;
    assert!(matches!(outcomes[0].1, Outcome::NotDue { .. }), "{outcomes:?}");
    assert_eq!(rig.pebble.orders(), 2);
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn a_short_lived_certificate_is_ordered_once_per_lifetime_share_not_every_round() {
    // Valid 15 s (as Let's Encrypt's 6-day profile, scaled down), the default renewal at a
    // third left; a round every 250 ms for 16 s: each name is issued, renewed once about 10 s
    // later, and left alone in every other round.
    let rig = Rig::start(Some(15)).await;
    let metrics = AcmeMetrics::detached();
    let config = rig.pebble.config("one", ChallengeKind::Http01);
    assert_eq!(config.renew_left, rebound_acme::RENEW_LEFT);
    let issuer = rig.issuer(config, &metrics);
    let list = domains(&["s1.rebound.test", "s2.rebound.test"]);
    let started = std::time::Instant::now();
    let mut rounds = 0;
    // Per name, each order: when, what it did, the validity of the certificate it replaced.
    let mut ordered: Vec<Ordered> = Vec::new();
    while started.elapsed() < Duration::from_secs(16) {
        let before: Vec<Option<(i64, i64)>> = {
            let mut v = Vec::new();
            for name in &list {
                v.push(rig.store.get_certificate(name).await.unwrap().map(|c| validity_of(&c)));
            }
            v
        };
        let now = now_millis();
        for (i, (name, outcome)) in issuer.renew_due(&list, now).await.into_iter().enumerate() {
            match outcome {
                Outcome::NotDue { .. } => {}
                Outcome::Issued { .. } => ordered.push((name, now, "issued".into(), None)),
                Outcome::Renewed { .. } => ordered.push((name, now, "renewed".into(), before[i])),
                other => panic!("{name}: {other:?}"),
            }
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let summary: Vec<(&str, &str)> = ordered
        .iter()
        .map(|(n, _, what, _)| (n.as_str(), what.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("s1.rebound.test", "issued"),
            ("s2.rebound.test", "issued"),
            ("s1.rebound.test", "renewed"),
            ("s2.rebound.test", "renewed"),
        ],
        "in {rounds} rounds"
    );
    assert!(rounds > 20, "{rounds} rounds");
    assert_eq!(
        rig.pebble.orders(),
        4,
        "one order per name per lifetime share, not per round"
    );
    // Each renewal came once a third of the replaced certificate's lifetime was left, not
    // before, and before it expired.
    for (name, at, _, replaced) in ordered.iter().filter(|o| o.2 == "renewed") {
        let (not_before, not_after) = replaced.expect("a certificate replaced");
        let due = rebound_acme::renew_at(not_before, not_after, rebound_acme::RENEW_LEFT);
        assert!(
            *at >= due && *at < not_after,
            "{name}: renewed at {at}, due {due}, expiring {not_after}"
        );
    }
    assert_eq!((metrics.issued_count(), metrics.renewed_count()), (2, 2));
}

/// An order a round made: the name, when, what it did, and the validity of the
/// certificate it replaced.
type Ordered = (String, i64, String, Option<(i64, i64)>);

/// The stored certificate's leaf notBefore and notAfter, in Unix milliseconds.
fn validity_of(stored: &StoredCertificate) -> (i64, i64) {
    let leaf = leaf_of(stored);
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).unwrap();
    let v = cert.validity();
    (v.not_before.timestamp() * 1000, v.not_after.timestamp() * 1000)
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn a_domain_not_in_the_list_is_never_ordered() {
    let rig = Rig::start(None).await;
    let metrics = AcmeMetrics::detached();
    let issuer = rig.issuer(rig.pebble.config("one", ChallengeKind::TlsAlpn01), &metrics);
    // A certificate stored for a domain no longer configured, long expired.
    let stale = StoredCertificate {
        domain: "gone.rebound.test".to_owned(),
        chain_pem: "old chain".to_owned(),
        key_pem: "old key".to_owned(),
        not_after: now_millis() - 86_400_000,
    };
    rig.store.put_certificate(&stale).await.unwrap();

    assert!(issuer.renew_due(&[], now_millis()).await.is_empty());
    let list = domains(&["a.rebound.test"]);
    let outcomes = issuer.renew_due(&list, now_millis()).await;
    let names: Vec<&str> = outcomes.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(names, ["a.rebound.test"]);
    assert!(matches!(outcomes[0].1, Outcome::Issued { .. }), "{outcomes:?}");
    assert_eq!(rig.pebble.orders(), 1);
    assert_eq!(
        rig.store.get_certificate("gone.rebound.test").await.unwrap(),
        Some(stale)
    );
    assert_eq!(metrics.expiry("gone.rebound.test"), None);

    // A client asking for other names orders nothing either (no issuance on demand), and
    // the stale certificate is not served: only configured domains are installed.
    assert!(rig.verify(&list, "gone.rebound.test").await.is_err());
    assert!(rig.verify(&list, "new.rebound.test").await.is_err());
    assert_eq!(rig.resolver.domains(), ["a.rebound.test"]);
    issuer.renew_due(&list, now_millis()).await;
    assert_eq!(rig.pebble.orders(), 1);
    assert_eq!(metrics.issued_count(), 1);
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn two_issuers_on_one_store_order_once() {
    let rig = Rig::start(None).await;
    let (m1, m2) = (AcmeMetrics::detached(), AcmeMetrics::detached());
    let one = rig.issuer(rig.pebble.config("one", ChallengeKind::Http01), &m1);
    let two = rig.issuer(rig.pebble.config("two", ChallengeKind::Http01), &m2);
    let list = domains(&["a.rebound.test", "b.rebound.test"]);

    let now = now_millis();
    let (first, second) = tokio::join!(one.renew_due(&list, now), two.renew_due(&list, now));
    for (i, domain) in list.iter().enumerate() {
        let outcomes = [&first[i].1, &second[i].1];
        // The other one found the lease taken, or (had the first finished by then) the
        // certificate stored.
        let issued = outcomes.iter().filter(|o| matches!(o, Outcome::Issued { .. })).count();
        let left = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::LeasedElsewhere | Outcome::NotDue { .. }))
            .count();
        assert_eq!((issued, left), (1, 1), "{domain}: {outcomes:?}");
    }
    assert_eq!(m1.issued_count() + m2.issued_count(), 2);
    assert_eq!(rig.pebble.orders(), 2);
    // One account for the fleet, the lease given back.
    assert!(rig.store.get_account().await.unwrap().is_some());
    assert_eq!(rig.store.lease("a.rebound.test"), None);

    // The one that lost the lease finds the certificate stored and orders nothing.
    let later = now_millis();
    let (first, second) = tokio::join!(one.renew_due(&list, later), two.renew_due(&list, later));
    for (_, outcome) in first.iter().chain(&second) {
        assert!(matches!(outcome, Outcome::NotDue { .. }), "{outcome:?}");
    }
    assert_eq!(rig.pebble.orders(), 2);
    assert_eq!(
        m1.failure_count(FailureKind::Validation) + m2.failure_count(FailureKind::Validation),
        0
    );
}

#[tokio::test]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn a_failed_validation_is_counted_and_backed_off() {
    let rig = Rig::start(None).await;
    let metrics = AcmeMetrics::detached();
    // Nothing answers: the issuer keeps its answers in a store and Challenges of its own,
    // and the test's HTTP server answers from the rig's, which stay empty.
    let (lost, elsewhere) = (Challenges::new(), MemoryCertificates::new());
    let issuer = Issuer::new(
        rig.pebble.config("one", ChallengeKind::Http01),
        Arc::new(elsewhere.clone()),
        lost,
        metrics.clone(),
    );
    let list = domains(&["a.rebound.test"]);
    let now = now_millis();
    let outcomes = issuer.renew_due(&list, now).await;
    match &outcomes[0].1 {
        Outcome::Failed(e) => assert_eq!(e.kind(), FailureKind::Validation, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(metrics.failure_count(FailureKind::Validation), 1);
    let outcomes = issuer.renew_due(&list, now + 1_000).await;
    assert!(
        matches!(outcomes[0].1, Outcome::BackingOff { until } if until == now + 300_000),
        "{outcomes:?}"
    );
    assert_eq!(rig.pebble.orders(), 1);
    assert_eq!(elsewhere.get_certificate("a.rebound.test").await.unwrap(), None);
    // The lease stays with the failed issuer for the back-off: the fleet waits too.
    assert_eq!(
        elsewhere.lease("a.rebound.test"),
        Some(("one".to_owned(), now + 300_000))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble (Debian's pebble package): scripts/test runs it"]
async fn an_http01_answer_reaches_the_ca_through_another_process_of_the_fleet() {
    // The issuer is another process: its own answers are not the served ones, so the CA's
    // validation is answered from the store alone.
    let rig = Rig::start(None).await;
    let metrics = AcmeMetrics::detached();
    let elsewhere = Issuer::new(
        rig.pebble.config("elsewhere", ChallengeKind::Http01),
        Arc::new(rig.store.clone()),
        Challenges::new(),
        metrics.clone(),
    );
    let names = domains(&["fleet.rebound.test"]);
    let outcomes = elsewhere.renew_due(&names, now_millis()).await;
    assert!(matches!(outcomes[0].1, Outcome::Issued { .. }), "{outcomes:?}");
    rig.verify(&names, "fleet.rebound.test").await.unwrap();
    // The answer leaves the store once the order ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rig.store.challenge_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP-01 answer stayed in the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pebble (Debian's pebble package): scripts/test installs it and runs it"]
async fn a_tls_alpn01_answer_reaches_the_ca_through_another_process_of_the_fleet() {
    // As the HTTP-01 case: the issuer is another process, whose own challenge certificate is
    // not the one served; the port makes one from the digest in the store.
    let rig = Rig::start(None).await;
    let metrics = AcmeMetrics::detached();
    let elsewhere = Issuer::new(
        rig.pebble.config("elsewhere", ChallengeKind::TlsAlpn01),
        Arc::new(rig.store.clone()),
        Challenges::new(),
        metrics.clone(),
    );
    let names = domains(&["fleet-alpn.rebound.test"]);
    let outcomes = elsewhere.renew_due(&names, now_millis()).await;
    assert!(matches!(outcomes[0].1, Outcome::Issued { .. }), "{outcomes:?}");
    rig.verify(&names, "fleet-alpn.rebound.test").await.unwrap();
    assert!(
        rig.challenges.tls_alpn01("fleet-alpn.rebound.test").is_none(),
        "the serving process never had a validation of its own"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rig.store.challenge_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the TLS-ALPN-01 digest stayed in the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
