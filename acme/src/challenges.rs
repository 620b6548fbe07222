//! The answers to the challenges in flight, shared by the issuer that sets them and the ports
//! that serve them: HTTP-01 key authorizations by token (RFC 8555 §8.3), for the cleartext
//! port, and TLS-ALPN-01 certificates by domain (RFC 8737), for the TLS port's
//! [`SniResolver`](rebound_edge::sni::SniResolver). [`FleetTlsAlpn`] answers a TLS-ALPN-01
//! validation another process of the fleet started: its digest is in the store, and the
//! challenge certificate is made here (the CA checks the name and the digest, not whose key
//! signed it).

use crate::AcmeError;
use rebound_edge::acme::ChallengeCerts;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The challenge answers in flight. Each lock is held only to copy an entry in or out.
#[derive(Debug)]
pub struct Challenges {
    http01: RwLock<HashMap<String, String>>,
    tls_alpn01: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    provider: Arc<CryptoProvider>,
}

impl Default for Challenges {
    fn default() -> Challenges {
        Challenges {
            http01: RwLock::default(),
            tls_alpn01: RwLock::default(),
            provider: Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        }
    }
}

impl Challenges {
    /// No challenge in flight.
    pub fn new() -> Arc<Challenges> {
        Arc::new(Challenges::default())
    }

    /// Answers `token` with `key_authorization` until cleared.
    pub fn set_http01(&self, token: &str, key_authorization: &str) {
        write(&self.http01).insert(token.to_owned(), key_authorization.to_owned());
    }

    /// Stops answering `token`.
    pub fn clear_http01(&self, token: &str) {
        write(&self.http01).remove(token);
    }

    /// The key authorization for `token`, while its challenge is in flight.
    pub fn http01(&self, token: &str) -> Option<String> {
        read(&self.http01).get(token).cloned()
    }

    /// The body answering a `GET` of `path` (`/.well-known/acme-challenge/{token}`), sent as
    /// `application/octet-stream`; `None` for any other path or a token not in flight (a 404).
    pub fn answer_path(&self, path: &str) -> Option<String> {
        // A token is base64url (RFC 8555 §8.3); nothing else is looked up.
        self.http01(rebound_edge::acme::http01_token(path)?)
    }

    /// Answers TLS-ALPN-01 validations of `domain` with a fresh self-signed certificate
    /// naming it and carrying the acmeIdentifier extension with `digest` (the SHA-256 of the
    /// key authorization, RFC 8737 §3), until cleared.
    pub fn set_tls_alpn01(&self, domain: &str, digest: &[u8]) -> Result<(), AcmeError> {
        let certified = challenge_certificate(&self.provider, domain, digest)?;
        write(&self.tls_alpn01).insert(domain.to_ascii_lowercase(), certified);
        Ok(())
    }

    /// Stops answering TLS-ALPN-01 validations of `domain`.
    pub fn clear_tls_alpn01(&self, domain: &str) {
        write(&self.tls_alpn01).remove(&domain.to_ascii_lowercase());
    }
}

impl rebound_edge::acme::Http01Answers for Challenges {
    fn answer_path(&self, path: &str) -> Option<String> {
        Challenges::answer_path(self, path)
    }
}

impl ChallengeCerts for Challenges {
    fn tls_alpn01(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        read(&self.tls_alpn01).get(domain).cloned()
    }
}

/// A self-signed certificate naming `domain` with the acmeIdentifier extension carrying
/// `digest` (RFC 8737 §3), on a fresh key.
fn challenge_certificate(
    provider: &CryptoProvider,
    domain: &str,
    digest: &[u8],
) -> Result<Arc<CertifiedKey>, AcmeError> {
    if digest.len() != 32 {
        return Err(AcmeError::Internal(format!(
            "a TLS-ALPN-01 digest of {} bytes",
            digest.len()
        )));
    }
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_ascii_lowercase()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key)?;
    let signing = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
        .map_err(|e| AcmeError::Internal(format!("loading a challenge key: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing)))
}

/// Where the store keeps the TLS-ALPN-01 digest of `domain` while its validation is in
/// flight, beside the HTTP-01 answers (never one of their tokens: base64url has no `.`).
pub fn tls_alpn01_token(domain: &str) -> String {
    format!("tls-alpn-01.{}", domain.to_ascii_lowercase())
}

/// A fleet's TLS-ALPN-01 answers: this process's own validations, then those another
/// process started, read from the store (set once the store is open).
pub struct FleetTlsAlpn {
    local: Arc<Challenges>,
    store: std::sync::OnceLock<Arc<dyn rebound_store::certs::CertificateStore>>,
    clock: Arc<dyn rebound_core::Clock>,
}

impl FleetTlsAlpn {
    pub fn new(local: Arc<Challenges>, clock: Arc<dyn rebound_core::Clock>) -> Arc<FleetTlsAlpn> {
        Arc::new(FleetTlsAlpn {
            local,
            store: std::sync::OnceLock::new(),
            clock,
        })
    }

    /// Reads the other processes' validations from `store` from now on.
    pub fn read_from(&self, store: Arc<dyn rebound_store::certs::CertificateStore>) {
        let _ = self.store.set(store);
    }
}

impl rebound_edge::acme::TlsAlpnAnswers for FleetTlsAlpn {
    fn answer<'a>(
        &'a self,
        domain: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Arc<CertifiedKey>>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(own) = self.local.tls_alpn01(domain) {
                return Some(own);
            }
            let stored = self
                .store
                .get()?
                .get_challenge(&tls_alpn01_token(domain), self.clock.now_millis())
                .await;
            let digest = match stored {
                Ok(Some(hex)) => hex::decode(hex).ok()?,
                Ok(None) => return None,
                Err(e) => {
                    tracing::warn!(error = %rebound_core::Causes(&e), domain, "a TLS-ALPN-01 answer could not be read from the store");
                    return None;
                }
            };
            challenge_certificate(&self.local.provider, domain, &digest).ok()
        })
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::prelude::*;

    #[test]
    fn only_a_token_in_flight_under_the_well_known_path_is_answered() {
        let challenges = Challenges::new();
        challenges.set_http01("tok-EN_1", "tok-EN_1.thumb");
        let cases = [
            ("/.well-known/acme-challenge/tok-EN_1", Some("tok-EN_1.thumb")),
            ("/.well-known/acme-challenge/other", None),
            ("/.well-known/acme-challenge/", None),
            ("/.well-known/acme-challenge/tok-EN_1/", None),
            ("/.well-known/acme-challenge/../tok-EN_1", None),
            ("/tok-EN_1", None),
            ("/.well-known/acme-challenge/tok-EN_1?x=1", None),
        ];
        for (path, expected) in cases {
            assert_eq!(challenges.answer_path(path).as_deref(), expected, "{path}");
        }
        challenges.clear_http01("tok-EN_1");
        assert_eq!(challenges.answer_path("/.well-known/acme-challenge/tok-EN_1"), None);
    }

    #[test]
    fn a_tls_alpn_certificate_names_the_domain_and_carries_the_digest_critically() {
        let challenges = Challenges::new();
        let digest = [7u8; 32];
        challenges.set_tls_alpn01("A.Rebound.test", &digest).unwrap();
        let key = challenges.tls_alpn01("a.rebound.test").expect("in flight");
        let (_, cert) = X509Certificate::from_der(key.cert[0].as_ref()).unwrap();
        // (rustls's own key check parses the certificate with webpki, which refuses the
        // critical acmeIdentifier extension: compare the public keys here.)
        let public = key.key.public_key().expect("an ECDSA key tells its public key");
        assert_eq!(public.as_ref(), cert.public_key().raw);
        let san = cert.subject_alternative_name().unwrap().expect("a SAN");
        let names: Vec<&str> = san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(name) => Some(*name),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["a.rebound.test"]);
        // id-pe-acmeIdentifier (1.3.6.1.5.5.7.1.31): critical, an OCTET STRING of the digest.
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(ext.critical);
        let mut der = vec![0x04, 32];
        der.extend_from_slice(&digest);
        assert_eq!(ext.value, der.as_slice());

        assert!(challenges.set_tls_alpn01("a.rebound.test", &[1; 31]).is_err());
        challenges.clear_tls_alpn01("a.rebound.test");
        assert!(challenges.tls_alpn01("a.rebound.test").is_none());
    }
}
