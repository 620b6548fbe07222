//! TLS for a listening port: rustls (aws-lc-rs), TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`, session resumption (a session cache and stateless tickets), and a
//! certificate that can be replaced while the port serves: [`ReloadableCert`] answers each
//! handshake with the pair loaded last; a new pair is loaded on `SIGHUP` or when either
//! file changes, and a pair that does not load (unreadable, not PEM, key not matching the
//! certificate) is refused with a log line while the old one keeps serving.

use crate::metrics::EdgeMetrics;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
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

    /// The server configuration of a port that answers with this certificate.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = ServerSessionMemoryCache::new(16 * 1024);
        config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
        Ok(Arc::new(config))
    }
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
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
        Err(_) => Err(TlsError::KeyMismatch(files.key.clone())),
    }
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
