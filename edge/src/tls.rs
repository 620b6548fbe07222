//! TLS for a listening port: rustls (aws-lc-rs), TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`, session resumption (a session cache and stateless tickets), and a
//! certificate that can be replaced while the port serves: [`ReloadableCert`] answers each
//! handshake with the pair loaded last; a new pair is loaded on `SIGHUP` or when either
//! file changes, and a pair that does not load (unreadable, not PEM, key not matching the
//! certificate) is refused with a log line while the old one keeps serving.
//!
//! [`ServerTls`] chooses the cipher suite as BoringSSL and Go do: AES-128-GCM with SHA-256
//! for a client with AES hardware, whatever its own order, and ChaCha20-Poly1305 for a
//! client that puts it first (one without). Every suite offered is strong; what differs is
//! the cost, and most of a short connection's cost is the handshake's key schedule, whose
//! SHA-256 has hardware instructions where SHA-384 has none. A handshake sends one TLS 1.3
//! session ticket: the stateless tickets can be used again, and a second one (rustls's
//! default) only costs every client a message to process.

use crate::metrics::EdgeMetrics;
use rustls::crypto::aws_lc_rs::cipher_suite as suite;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, ServerConfig, SupportedCipherSuite};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("{0}: the private key does not belong to the certificate")]
    KeyMismatch(PathBuf),
    /// A pair given as PEM text (a stored certificate) that does not load; `name` says whose.
    #[error("the certificate of {name}: {problem}")]
    Pem { name: String, problem: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate chain and key files of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What was last seen of the files, to notice a change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen(Option<(SystemTime, u64)>, Option<(SystemTime, u64)>);

fn seen(files: &CertificateFiles) -> Seen {
    let meta = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    Seen(meta(&files.cert), meta(&files.key))
}

/// The certificate every handshake is answered with, replaceable at run time.
#[derive(Debug)]
pub struct ReloadableCert {
    files: CertificateFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    seen: Mutex<Seen>,
}

impl ReloadableCert {
    /// Loads the pair; start-up fails if it does not load.
    pub fn load(files: CertificateFiles) -> Result<Arc<ReloadableCert>, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let before = seen(&files);
        let key = load_pair(&files, &provider)?;
        Ok(Arc::new(ReloadableCert {
            files,
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new(before),
        }))
    }

    /// Loads the pair again; on failure the current one stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen(&self.files);
        let key = load_pair(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    /// Whether either file changed since the last load or attempt.
    pub fn changed_on_disk(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != seen(&self.files)
    }

    /// The TLS of a port that answers with this certificate.
    pub fn server_tls(self: &Arc<Self>) -> Result<ServerTls, TlsError> {
        ServerTls::new(&self.provider, self.clone(), &[])
    }
}

/// The suites a port offers, in the order it prefers them for a client with AES hardware.
const AES_FIRST: &[SupportedCipherSuite] = &[
    suite::TLS13_AES_128_GCM_SHA256,
    suite::TLS13_AES_256_GCM_SHA384,
    suite::TLS13_CHACHA20_POLY1305_SHA256,
    suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// What a TLS port answers a handshake with: the client's first choice when that is
/// ChaCha20-Poly1305 (the choice of a client without AES hardware), otherwise the port's
/// order, AES-128-GCM first.
#[derive(Clone)]
pub struct ServerTls {
    aes_first: Arc<ServerConfig>,
    clients_order: Arc<ServerConfig>,
    /// TLS-ALPN-01 validations answered per connection, when the port's certificates come
    /// from ACME (with the provider to build their one-off configurations).
    acme: Option<(Arc<dyn crate::acme::TlsAlpnAnswers>, Arc<CryptoProvider>)>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("acme", &self.acme.is_some())
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// The TLS of a port whose certificates `resolver` chooses, offering ALPN `h2`,
    /// `http/1.1` and then `extra_alpn`.
    pub fn new(
        provider: &CryptoProvider,
        resolver: Arc<dyn ResolvesServerCert>,
        extra_alpn: &[&[u8]],
    ) -> Result<ServerTls, TlsError> {
        // Both configurations resume each other's sessions: one cache, one ticket key.
        let sessions = ServerSessionMemoryCache::new(16 * 1024);
        let ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
        let config = |suites: &[SupportedCipherSuite], servers_order: bool| -> Result<Arc<ServerConfig>, TlsError> {
            let provider = CryptoProvider {
                cipher_suites: suites.to_vec(),
                ..provider.clone()
            };
            let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
                .with_no_client_auth()
                .with_cert_resolver(resolver.clone());
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            config.alpn_protocols.extend(extra_alpn.iter().map(|p| p.to_vec()));
            config.session_storage = sessions.clone() as Arc<dyn StoresServerSessions>;
            config.ticketer = ticketer.clone();
            config.send_tls13_tickets = 1;
            config.ignore_client_order = servers_order;
            Ok(Arc::new(config))
        };
        Ok(ServerTls {
            aes_first: config(AES_FIRST, true)?,
            clients_order: config(AES_FIRST, false)?,
            acme: None,
        })
    }

    /// Answers each TLS-ALPN-01 validation (a ClientHello offering `acme-tls/1` alone) with
    /// the certificate `answers` finds for its name, which may take a store read: the CA may
    /// ask any process of a fleet, not only the one that ordered.
    pub fn answering_acme(mut self, answers: Arc<dyn crate::acme::TlsAlpnAnswers>) -> ServerTls {
        self.acme = Some((answers, Arc::new(rustls::crypto::aws_lc_rs::default_provider())));
        self
    }

    /// The configuration for the handshake `start` began: [`ServerTls::config_for`], or for a
    /// TLS-ALPN-01 validation, one serving its challenge certificate alone; `None` when a
    /// validation has no answer here (the handshake is refused).
    pub async fn config_for_start<IO>(&self, start: &tokio_rustls::StartHandshake<IO>) -> Option<Arc<ServerConfig>>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let validation = match &self.acme {
            Some((answers, provider)) => crate::acme::acme_validation(&start.client_hello())
                .map(|name| (answers.clone(), provider.clone(), name)),
            None => None,
        };
        let Some((answers, provider, name)) = validation else {
            return Some(self.config_for(&start.client_hello()));
        };
        let key = answers.answer(&name).await?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .ok()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCertificate(key)));
        config.alpn_protocols = vec![crate::acme::ACME_TLS_ALPN.to_vec()];
        Some(Arc::new(config))
    }

    /// The configuration for the client that sent `hello`.
    pub fn config_for(&self, hello: &ClientHello<'_>) -> Arc<ServerConfig> {
        if prefers_chacha(hello.cipher_suites()) {
            self.clients_order.clone()
        } else {
            self.aes_first.clone()
        }
    }
}

/// Answers every handshake with one certificate (a TLS-ALPN-01 challenge's).
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesServerCert for OneCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Whether the first of the `offered` suites that the port supports is a ChaCha20 one
/// (unknown and GREASE values are skipped).
fn prefers_chacha(offered: &[CipherSuite]) -> bool {
    offered
        .iter()
        .find(|offered| AES_FIRST.iter().any(|s| s.suite() == **offered))
        .is_some_and(|first| {
            matches!(
                first,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
                    | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
                    | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            )
        })
}

impl ResolvesServerCert for ReloadableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

fn file_error(path: &Path, problem: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        problem: problem.to_string(),
    }
}

fn load_pair(files: &CertificateFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_error(&files.cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(&files.cert, e))?;
    if chain.is_empty() {
        return Err(file_error(&files.cert, "no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| file_error(&files.key, e))?;
    let certified = CertifiedKey::new(chain, signing);
    match keys_match(&certified) {
        true => Ok(certified),
        false => Err(TlsError::KeyMismatch(files.key.clone())),
    }
}

/// Whether the key belongs to the leaf certificate (true as well when the provider cannot
/// tell).
pub(crate) fn keys_match(certified: &CertifiedKey) -> bool {
    matches!(
        certified.keys_match(),
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown))
    )
}

/// Reloads `cert` on `SIGHUP` and when its files change (checked every `poll`), until
/// `stop` turns true.
pub async fn watch_certificate(
    cert: Arc<ReloadableCert>,
    metrics: EdgeMetrics,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP; certificates reload on file changes only");
            None
        }
    };
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let why = tokio::select! {
            _ = async { hangup.as_mut().expect("guarded").recv().await }, if hangup.is_some() => "SIGHUP",
            _ = tick.tick() => {
                if !cert.changed_on_disk() {
                    continue;
                }
                "a changed file"
            }
            _ = stop.changed() => return,
        };
        match cert.reload() {
            Ok(()) => {
                metrics.reload(true);
                tracing::info!(cert = %cert.files.cert.display(), "TLS certificate reloaded after {why}");
            }
            Err(e) => {
                metrics.reload(false);
                tracing::error!(error = %e, "TLS certificate reload after {why} refused; the previous certificate keeps serving");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chacha_is_chosen_only_for_a_client_that_puts_it_before_every_other_suite_of_ours() {
        use CipherSuite::*;
        let grease = CipherSuite::from(0x0a0a);
        let cases: &[(&[CipherSuite], bool)] = &[
            // A browser with AES hardware, and OpenSSL's default order (AES-256 first).
            (
                &[
                    grease,
                    TLS13_AES_128_GCM_SHA256,
                    TLS13_AES_256_GCM_SHA384,
                    TLS13_CHACHA20_POLY1305_SHA256,
                ],
                false,
            ),
            (
                &[
                    TLS13_AES_256_GCM_SHA384,
                    TLS13_CHACHA20_POLY1305_SHA256,
                    TLS13_AES_128_GCM_SHA256,
                ],
                false,
            ),
            // A client without AES hardware, GREASE and unknown values before it.
            (
                &[grease, TLS13_CHACHA20_POLY1305_SHA256, TLS13_AES_128_GCM_SHA256],
                true,
            ),
            (&[CipherSuite::from(0x1305), TLS13_CHACHA20_POLY1305_SHA256], true),
            // TLS 1.2 only.
            (
                &[
                    TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
                    TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
                ],
                true,
            ),
            (
                &[
                    TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
                    TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                ],
                false,
            ),
            // A suite the port does not offer first: the next one decides.
            (
                &[
                    TLS_RSA_WITH_AES_128_GCM_SHA256,
                    TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
                ],
                true,
            ),
            (&[], false),
        ];
        for (offered, chacha) in cases {
            assert_eq!(prefers_chacha(offered), *chacha, "{offered:?}");
        }
    }
}
