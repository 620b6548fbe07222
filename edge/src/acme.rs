//! The ACME challenges a port answers (RFC 8555 §8.3, RFC 8737): what an HTTP-01 path and a
//! TLS-ALPN-01 handshake look like, and the ports through which the certificates' issuer
//! (`rebound-acme`) supplies the answers. The TLS configuration ([`crate::tls`]) and the
//! SNI resolver ([`crate::sni`]) both read this; neither reads the other for it.
//!
//! A connection that negotiated [`ACME_TLS_ALPN`] carries no HTTP: whoever serves the port
//! closes it once the handshake is done.

use rustls::server::ClientHello;
use rustls::sign::CertifiedKey;
use std::sync::Arc;

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The TLS-ALPN-01 challenge certificates in flight, by domain (`rebound-acme`'s
/// `Challenges`).
pub trait ChallengeCerts: Send + Sync {
    /// The self-signed certificate with the acmeIdentifier extension for `domain`, while its
    /// validation is in flight.
    fn tls_alpn01(&self, domain: &str) -> Option<Arc<CertifiedKey>>;
}

/// The TLS-ALPN-01 answers of a fleet (`rebound-acme`'s): the challenge certificate for a
/// domain whose validation is in flight here or, read from the store, in another process.
pub trait TlsAlpnAnswers: Send + Sync {
    fn answer<'a>(
        &'a self,
        domain: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Arc<CertifiedKey>>> + Send + 'a>>;
}

/// The name a ClientHello asks a TLS-ALPN-01 validation for: `Some` when it offers
/// `acme-tls/1` alone (RFC 8737 §3) and names a host (lowercase, as rustls hands it over).
pub fn acme_validation(hello: &ClientHello<'_>) -> Option<String> {
    match asks_only_acme_tls(hello.alpn()) {
        true => hello.server_name().map(str::to_owned),
        false => None,
    }
}

/// Where the cleartext port is asked for HTTP-01 answers (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The token of an HTTP-01 validation's `path` (`/.well-known/acme-challenge/{token}`, the
/// token base64url, at most 128 characters); `None` for any other path.
pub fn http01_token(path: &str) -> Option<&str> {
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    let base64url = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    ((1..=128).contains(&token.len()) && token.bytes().all(base64url)).then_some(token)
}

/// The HTTP-01 answers in flight (`rebound-acme`'s `Challenges`), for the cleartext port.
pub trait Http01Answers: Send + Sync {
    /// The key authorization to answer `path` with, when it is
    /// `/.well-known/acme-challenge/{token}` of a validation in flight.
    fn answer_path(&self, path: &str) -> Option<String>;
}

/// Whether the client's ALPN list is `acme-tls/1` alone (RFC 8737 §3).
pub(crate) fn asks_only_acme_tls<'a>(alpn: Option<impl Iterator<Item = &'a [u8]>>) -> bool {
    let Some(mut offered) = alpn else {
        return false;
    };
    offered.next() == Some(ACME_TLS_ALPN) && offered.next().is_none()
}
