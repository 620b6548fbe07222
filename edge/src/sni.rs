//! Certificates chosen by the name a client asks for (SNI, docs/spec.md §11): [`SniResolver`] holds
//! each domain's certificate in a map replaced whole at run time (a reader never waits for a
//! writer, and no lock is held across a handshake), falls back to the port's own certificate
//! for any other name and for a client that sends none, and answers a TLS-ALPN-01 validation
//! (RFC 8737: ALPN `acme-tls/1` alone, see [`crate::acme`]) with the challenge certificate in
//! flight for the name, or with none at all.

use crate::acme::{asks_only_acme_tls, ChallengeCerts, ACME_TLS_ALPN};
use crate::tls::{keys_match, ServerTls, TlsError};
use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;

/// Each domain's certificate by SNI, the port's own certificate otherwise.
pub struct SniResolver {
    certs: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// A fingerprint of the PEM text each domain's certificate was loaded from: a reload
    /// parses only what changed (10,000 pairs parsed again every round cost 0.75 CPU-seconds
    /// each time, `benches/results/2026-12-05-domains.md`). Touched by `load_pem` alone.
    loaded_from: std::sync::Mutex<HashMap<String, u64>>,
    fallback: Option<Arc<dyn ResolvesServerCert>>,
    challenges: Option<Arc<dyn ChallengeCerts>>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SniResolver")
            .field("domains", &self.domains())
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl SniResolver {
    /// A resolver with no domain yet: `fallback` (the port's [`ReloadableCert`]) answers a
    /// name without a certificate of its own and a client without SNI (no certificate, so
    /// no handshake, when none); `challenges` answers TLS-ALPN-01 validations (refused when
    /// none).
    ///
    /// [`ReloadableCert`]: crate::tls::ReloadableCert
    pub fn new(
        fallback: Option<Arc<dyn ResolvesServerCert>>,
        challenges: Option<Arc<dyn ChallengeCerts>>,
    ) -> Arc<SniResolver> {
        Arc::new(SniResolver {
            certs: ArcSwap::from_pointee(HashMap::new()),
            loaded_from: std::sync::Mutex::new(HashMap::new()),
            fallback,
            challenges,
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        })
    }

    /// The TLS of a port answering with this resolver: ALPN `h2`, `http/1.1` and `acme-tls/1`.
    pub fn server_tls(self: &Arc<Self>) -> Result<ServerTls, TlsError> {
        ServerTls::new(&self.provider, self.clone(), &[ACME_TLS_ALPN])
    }

    /// Serves `key` for `domain` from the next handshake on.
    pub fn insert(&self, domain: &str, key: Arc<CertifiedKey>) {
        let domain = domain.to_ascii_lowercase();
        self.forget_source(&domain);
        self.certs.rcu(|certs| {
            let mut certs = HashMap::clone(certs);
            certs.insert(domain.clone(), key.clone());
            certs
        });
    }

    /// Stops serving a certificate of its own for `domain`.
    pub fn remove(&self, domain: &str) {
        let domain = domain.to_ascii_lowercase();
        self.forget_source(&domain);
        self.certs.rcu(|certs| {
            let mut certs = HashMap::clone(certs);
            certs.remove(&domain);
            certs
        });
    }

    /// The next `load_pem` parses `domain`'s pair whatever it is.
    fn forget_source(&self, domain: &str) {
        self.loaded_from
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(domain);
    }

    /// The certificate served for `domain`, if it has one of its own.
    pub fn get(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        self.certs.load().get(&domain.to_ascii_lowercase()).cloned()
    }

    /// The domains with a certificate of their own, sorted.
    pub fn domains(&self) -> Vec<String> {
        let mut domains: Vec<String> = self.certs.load().keys().cloned().collect();
        domains.sort();
        domains
    }

    /// Serves exactly the pairs given (domain, chain PEM, key PEM), as the store lists them:
    /// a domain left out stops being served; a pair that does not load is refused and
    /// returned, and that domain keeps the certificate it had.
    /// A pair loaded before from the same text is kept as it was, not parsed again.
    pub fn load_pem<'a>(&self, pairs: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Vec<TlsError> {
        let mut loaded_from = self.loaded_from.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.certs.load_full();
        let mut certs = HashMap::new();
        let mut fingerprints = HashMap::new();
        let mut refused = Vec::new();
        for (domain, chain, key) in pairs {
            let domain = domain.to_ascii_lowercase();
            let fingerprint = {
                use std::hash::{Hash, Hasher};
                // SipHash with fixed keys: the same text, the same fingerprint, every call.
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (chain, key).hash(&mut h);
                h.finish()
            };
            if let (Some(old), Some(&was)) = (before.get(&domain), loaded_from.get(&domain)) {
                if was == fingerprint {
                    certs.insert(domain.clone(), old.clone());
                    fingerprints.insert(domain, fingerprint);
                    continue;
                }
            }
            match certified_key_from_pem(&domain, chain.as_bytes(), key.as_bytes(), &self.provider) {
                Ok(key) => {
                    certs.insert(domain.clone(), Arc::new(key));
                    fingerprints.insert(domain, fingerprint);
                }
                Err(e) => {
                    if let Some(old) = before.get(&domain) {
                        certs.insert(domain.clone(), old.clone());
                        if let Some(&was) = loaded_from.get(&domain) {
                            fingerprints.insert(domain, was);
                        }
                    }
                    refused.push(e);
                }
            }
        }
        self.certs.store(Arc::new(certs));
        *loaded_from = fingerprints;
        refused
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if asks_only_acme_tls(hello.alpn()) {
            // A validation is answered with the challenge certificate or not at all.
            let name = hello.server_name()?;
            return self.challenges.as_ref()?.tls_alpn01(name);
        }
        // rustls hands the name over in lowercase.
        if let Some(key) = hello
            .server_name()
            .and_then(|name| self.certs.load().get(name).cloned())
        {
            return Some(key);
        }
        self.fallback.as_ref()?.resolve(hello)
    }
}

/// A certificate chain (leaf first) and its private key from PEM text; `name` says whose in
/// errors.
pub fn certified_key_from_pem(
    name: &str,
    chain_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let problem = |problem: &dyn std::fmt::Display| TlsError::Pem {
        name: name.to_owned(),
        problem: problem.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| problem(&e))?;
    if chain.is_empty() {
        return Err(problem(&"no certificate in the chain"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| problem(&e))?;
    let signing = provider.key_provider.load_private_key(key).map_err(|e| problem(&e))?;
    let certified = CertifiedKey::new(chain, signing);
    if !keys_match(&certified) {
        return Err(problem(&"the private key does not belong to the certificate"));
    }
    Ok(certified)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::sign::SingleCertAndKey;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A self-signed certificate for `names`: (chain PEM, key PEM, DER).
    pub(crate) fn self_signed(names: &[&str]) -> (String, String, CertificateDer<'static>) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }

    /// The pair [`self_signed`] made, as a handshake serves it.
    pub(crate) fn certified(pem: &(String, String, CertificateDer<'static>)) -> Arc<CertifiedKey> {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        Arc::new(certified_key_from_pem("test", pem.0.as_bytes(), pem.1.as_bytes(), &provider).unwrap())
    }

    #[derive(Default)]
    struct FakeChallenges(Mutex<HashMap<String, Arc<CertifiedKey>>>);

    impl ChallengeCerts for FakeChallenges {
        fn tls_alpn01(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
            self.0.lock().unwrap().get(domain).cloned()
        }
    }

    /// A TLS client trusting `roots` and offering `alpn`.
    pub(crate) fn connector(roots: &[&CertificateDer<'static>], alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store.add((*root).clone()).unwrap();
        }
        let mut config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(store)
                .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// Shakes hands with a port answering with `tls` as a client trusting `roots`, asking for
    /// `name` (an IP address sends no SNI) with `alpn`; the leaf the port sent, or the
    /// client's error. The port sends one byte and closes unless `acme-tls/1` was agreed.
    async fn handshake(
        tls: &ServerTls,
        roots: &[&CertificateDer<'static>],
        name: &str,
        alpn: &[&[u8]],
    ) -> Result<CertificateDer<'static>, std::io::Error> {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let tls = tls.clone();
        let server = tokio::spawn(async move {
            let start = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), server_io).await?;
            let config = tls.config_for(&start.client_hello());
            let mut stream = start.into_stream(config).await?;
            if stream.get_ref().1.alpn_protocol() != Some(ACME_TLS_ALPN) {
                stream.write_all(b"x").await?;
            }
            stream.shutdown().await
        });
        let connector = connector(roots, alpn);
        let result = async {
            let mut stream = connector
                .connect(ServerName::try_from(name.to_owned()).unwrap(), client_io)
                .await?;
            let leaf = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).await?;
            Ok(leaf)
        }
        .await;
        let _ = server.await;
        result
    }

    #[tokio::test]
    async fn each_name_gets_its_own_certificate_and_any_other_the_ports() {
        let default = self_signed(&["default.test", "127.0.0.1"]);
        let a = self_signed(&["a.test"]);
        let b = self_signed(&["b.test"]);
        let other = self_signed(&["other.test"]);
        let fallback: Arc<dyn ResolvesServerCert> = Arc::new(SingleCertAndKey::from(certified(&default)));
        let resolver = SniResolver::new(Some(fallback), None);
        assert!(resolver.load_pem([("A.test", a.0.as_str(), a.1.as_str())]).is_empty());
        let tls = resolver.server_tls().unwrap();
        let roots = [&default.2, &a.2, &b.2, &other.2];
        let h11: &[&[u8]] = &[b"http/1.1"];

        // (name asked, the leaf expected, or none: the client refuses what it got)
        let cases: [(&str, Option<&CertificateDer>); 4] = [
            ("a.test", Some(&a.2)),
            ("default.test", Some(&default.2)),
            ("127.0.0.1", Some(&default.2)),
            // A name without a certificate of its own gets the port's, which does not name it.
            ("other.test", None),
        ];
        for (name, expected) in cases {
            let got = handshake(&tls, &roots, name, h11).await;
            match expected {
                Some(der) => assert_eq!(&got.unwrap(), der, "{name}"),
                None => assert!(got.is_err(), "{name}: {got:?}"),
            }
        }

        // Added while the port serves, then taken away.
        resolver.insert("b.test", certified(&b));
        assert_eq!(handshake(&tls, &roots, "b.test", h11).await.unwrap(), b.2);
        assert_eq!(resolver.domains(), ["a.test", "b.test"]);
        resolver.remove("b.test");
        assert!(handshake(&tls, &roots, "b.test", h11).await.is_err());
    }

    #[tokio::test]
    async fn without_a_port_certificate_only_the_domains_are_served() {
        let a = self_signed(&["a.test"]);
        let resolver = SniResolver::new(None, None);
        resolver.insert("a.test", certified(&a));
        let tls = resolver.server_tls().unwrap();
        assert_eq!(handshake(&tls, &[&a.2], "a.test", &[]).await.unwrap(), a.2);
        assert!(handshake(&tls, &[&a.2], "127.0.0.1", &[]).await.is_err());
    }

    #[tokio::test]
    async fn acme_tls_alone_is_answered_with_the_challenge_certificate_or_refused() {
        let a = self_signed(&["a.test"]);
        let challenge = self_signed(&["a.test"]);
        let default = self_signed(&["default.test"]);
        let challenges = Arc::new(FakeChallenges::default());
        challenges
            .0
            .lock()
            .unwrap()
            .insert("a.test".to_owned(), certified(&challenge));
        let fallback: Arc<dyn ResolvesServerCert> = Arc::new(SingleCertAndKey::from(certified(&default)));
        let resolver = SniResolver::new(Some(fallback), Some(challenges.clone() as Arc<dyn ChallengeCerts>));
        resolver.insert("a.test", certified(&a));
        let tls = resolver.server_tls().unwrap();
        let roots = [&a.2, &challenge.2, &default.2];

        let got = handshake(&tls, &roots, "a.test", &[ACME_TLS_ALPN]).await.unwrap();
        assert_eq!(got, challenge.2);
        // Among other protocols it is an ordinary client.
        let got = handshake(&tls, &roots, "a.test", &[b"h2", ACME_TLS_ALPN])
            .await
            .unwrap();
        assert_eq!(got, a.2);
        // No challenge in flight for the name, or no name: no certificate, never the domain's.
        assert!(handshake(&tls, &roots, "default.test", &[ACME_TLS_ALPN]).await.is_err());
        assert!(handshake(&tls, &roots, "127.0.0.1", &[ACME_TLS_ALPN]).await.is_err());
        challenges.0.lock().unwrap().clear();
        assert!(handshake(&tls, &roots, "a.test", &[ACME_TLS_ALPN]).await.is_err());
    }

    #[test]
    fn a_pair_that_does_not_load_is_refused_and_the_old_one_kept() {
        let a = self_signed(&["a.test"]);
        let a2 = self_signed(&["a.test"]);
        let b = self_signed(&["b.test"]);
        let resolver = SniResolver::new(None, None);
        let refused = resolver.load_pem([
            ("a.test", a.0.as_str(), a.1.as_str()),
            ("b.test", b.0.as_str(), b.1.as_str()),
        ]);
        assert!(refused.is_empty(), "{refused:?}");
        let leaf = |d: &str| resolver.get(d).map(|k| k.cert[0].clone());
        assert_eq!(leaf("a.test"), Some(a.2.clone()));

        // a.test: another certificate's key; c.test: not PEM; b.test: left out.
        let refused = resolver.load_pem([
            ("a.test", a2.0.as_str(), a.1.as_str()),
            ("c.test", "not PEM", b.1.as_str()),
        ]);
        let texts: Vec<String> = refused.iter().map(|e| e.to_string()).collect();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(
            texts[0].contains("a.test") && texts[0].contains("does not belong"),
            "{texts:?}"
        );
        assert!(texts[1].contains("c.test"), "{texts:?}");
        assert_eq!(leaf("a.test"), Some(a.2.clone()));
        assert_eq!(resolver.domains(), ["a.test"]);
    }

    #[test]
    fn a_pair_loaded_before_from_the_same_text_is_kept_not_parsed_again() {
        let a = self_signed(&["a.test"]);
        let a2 = self_signed(&["a.test"]);
        let resolver = SniResolver::new(None, None);
        assert!(resolver.load_pem([("a.test", a.0.as_str(), a.1.as_str())]).is_empty());
        let first = resolver.get("a.test").unwrap();
        assert!(resolver.load_pem([("A.test", a.0.as_str(), a.1.as_str())]).is_empty());
        assert!(
            Arc::ptr_eq(&first, &resolver.get("a.test").unwrap()),
            "the same text: the same key, not a new one"
        );
        // New text: parsed and served.
        assert!(resolver.load_pem([("a.test", a2.0.as_str(), a2.1.as_str())]).is_empty());
        assert_eq!(resolver.get("a.test").unwrap().cert[0], a2.2);
        // A certificate inserted by hand is replaced by the next load, whatever its text.
        resolver.insert("a.test", certified(&a));
        assert!(resolver.load_pem([("a.test", a2.0.as_str(), a2.1.as_str())]).is_empty());
        assert_eq!(resolver.get("a.test").unwrap().cert[0], a2.2);
        // Left out, then back with its old text: parsed again.
        assert!(resolver.load_pem([]).is_empty());
        assert!(resolver.get("a.test").is_none());
        assert!(resolver.load_pem([("a.test", a.0.as_str(), a.1.as_str())]).is_empty());
        assert_eq!(resolver.get("a.test").unwrap().cert[0], a.2);
    }

    #[test]
    fn only_an_alpn_list_of_acme_tls_alone_is_a_validation() {
        let cases: [(Option<&[&[u8]]>, bool); 5] = [
            (None, false),
            (Some(&[]), false),
            (Some(&[ACME_TLS_ALPN]), true),
            (Some(&[ACME_TLS_ALPN, b"h2"]), false),
            (Some(&[b"http/1.1"]), false),
        ];
        for (alpn, expected) in cases {
            assert_eq!(
                asks_only_acme_tls(alpn.map(|a| a.iter().copied())),
                expected,
                "{alpn:?}"
            );
        }
    }
}
