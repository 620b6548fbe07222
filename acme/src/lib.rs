//! # rebound-acme
//!
//! Certificates for the fleet's custom domains (docs/spec.md §11), issued and renewed over ACME
//! (RFC 8555) with [instant-acme], answered by HTTP-01 or TLS-ALPN-01 (RFC 8737), and kept
//! in the store for the whole fleet ([`CertificateStore`]), one issuer at a time per domain.
//! A certificate is only ever ordered for a domain in the list the caller gives: nothing is
//! issued on demand for a name a client asks for.
//!
//! # Layout
//!
//! - `challenges`: [`Challenges`], the answers in flight: HTTP-01 key authorizations for
//!   the cleartext port ([`Challenges::answer_path`]), TLS-ALPN-01 certificates for the TLS
//!   port's [`SniResolver`] (it implements [`ChallengeCerts`]).
//! - `issuer`: [`Issuer`], which orders (account from the store or created, lease, challenge,
//!   bounded polling, ECDSA P-256 key and CSR, store) and renews ([`renew_at`]: a third of
//!   the lifetime left; [`ari_renew_at`]: the CA's suggested window, RFC 9773, when it offers
//!   one): [`Issuer::renew_due`] for one round, [`Issuer::run`] on a timer,
//!   [`install_stored`] to serve what the store holds.
//! - `client`: the HTTPS client instant-acme speaks through (rustls with aws-lc-rs, the
//!   system's roots or configured ones).
//! - `error`: [`AcmeError`], classified once into a [`FailureKind`].
//! - `metrics`: [`AcmeMetrics`], every metric of the crate.
//!
//! # Wiring it in
//!
//! One [`Challenges`] and one [`Issuer`] per process, each with its own lease owner name:
//!
//! - the cleartext (port 80) service answers `GET /.well-known/acme-challenge/{token}` with
//!   [`Challenges::answer_path`] (200, `application/octet-stream`) before anything else, and
//!   404 when it returns `None`;
//! - the TLS port is built from an [`SniResolver`] with the port's own certificate as the
//!   fallback and the [`Challenges`] as its [`ChallengeCerts`]
//!   ([`SniResolver::server_tls`]), and closes a connection that negotiated
//!   [`ACME_TLS_ALPN`] right after the handshake;
//! - [`Issuer::run`] gets the configured domains (a watch channel, updated when operators
//!   add or remove one) and the resolver, so every process serves what any of them ordered.
//!
//! In a fleet, the ACME server's validation request reaches whichever process the load
//! balancer picks, while the answer is set in the ordering process alone: the answers must
//! be shared (the store, or the fleet channel) before more than one process serves a domain.
//!
//! [instant-acme]: https://docs.rs/instant-acme
//! [`CertificateStore`]: rebound_store::certs::CertificateStore
//! [`SniResolver`]: rebound_edge::sni::SniResolver
//! [`SniResolver::server_tls`]: rebound_edge::sni::SniResolver::server_tls
//! [`ChallengeCerts`]: rebound_edge::acme::ChallengeCerts
//! [`ACME_TLS_ALPN`]: rebound_edge::acme::ACME_TLS_ALPN
#![forbid(unsafe_code)]

pub mod challenges;
mod client;
pub mod error;
pub mod issuer;
pub mod metrics;
#[cfg(feature = "test-util")]
pub mod testing;

pub use challenges::{tls_alpn01_token, Challenges, FleetTlsAlpn};
pub use error::{AcmeError, FailureKind};
pub use issuer::{ari_renew_at, install_stored, renew_at, ChallengeKind, Issuer, IssuerConfig, Outcome, RENEW_LEFT};
pub use metrics::AcmeMetrics;
