//! Why an order failed, classified once ([`AcmeError::kind`]) for the failure counter, with
//! the cause kept whole for the log.

use rebound_store::StoreError;

/// Why a certificate could not be ordered or stored.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The certificate store failed.
    #[error("the certificate store failed")]
    Store(#[from] StoreError),
    /// The stored ACME account credentials cannot be read.
    #[error("the stored ACME account cannot be read")]
    Account(#[source] serde_json::Error),
    /// The ACME server refused a request (a problem document, RFC 8555 §6.7), or could not be
    /// reached: `step` says which.
    #[error("ACME {step}")]
    Acme {
        step: &'static str,
        #[source]
        source: instant_acme::Error,
    },
    /// The server could not validate the domain (the authorization or order turned invalid).
    #[error("validation of {domain} failed: {detail}")]
    Validation { domain: String, detail: String },
    /// The server offers no challenge this issuer answers (HTTP-01, TLS-ALPN-01).
    #[error("no HTTP-01 or TLS-ALPN-01 challenge offered for {0}")]
    NoChallenge(String),
    /// The order did not finish within the bound.
    #[error("the order of {0} did not finish in time")]
    Timeout(String),
    /// The certificate issued does not load (not PEM, no leaf, a leaf without validity, a key
    /// that does not match).
    #[error("the certificate issued for {domain} cannot be used: {problem}")]
    Certificate { domain: String, problem: String },
    /// A key or CSR could not be made.
    #[error("a key or request could not be made")]
    Key(#[from] rcgen::Error),
    /// A fault of this program.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AcmeError {
    /// `source` failed at `step` ("creating the order").
    pub fn acme(step: &'static str) -> impl FnOnce(instant_acme::Error) -> AcmeError {
        move |source| AcmeError::Acme { step, source }
    }

    /// The kind counted in the failure metric.
    pub fn kind(&self) -> FailureKind {
        match self {
            AcmeError::Store(_) => FailureKind::Store,
            AcmeError::Account(_) => FailureKind::Account,
            AcmeError::Acme {
                source: instant_acme::Error::Api(_),
                ..
            } => FailureKind::Refused,
            AcmeError::Acme {
                source: instant_acme::Error::Timeout(_),
                ..
            } => FailureKind::Timeout,
            AcmeError::Acme { .. } => FailureKind::Unreachable,
            AcmeError::Validation { .. } | AcmeError::NoChallenge(_) => FailureKind::Validation,
            AcmeError::Timeout(_) => FailureKind::Timeout,
            AcmeError::Certificate { .. } => FailureKind::Certificate,
            AcmeError::Key(_) | AcmeError::Internal(_) => FailureKind::Internal,
        }
    }
}

/// What kind of failure an order met: the label of the failure counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The certificate store failed.
    Store,
    /// The stored account cannot be read.
    Account,
    /// The ACME server refused a request (rate limit, bad CSR, unauthorized, ...).
    Refused,
    /// The ACME server could not be reached or answered with something unreadable.
    Unreachable,
    /// The domain could not be validated.
    Validation,
    /// The order did not finish in time.
    Timeout,
    /// The certificate issued cannot be used.
    Certificate,
    /// A fault of this program.
    Internal,
}

impl FailureKind {
    pub const ALL: [FailureKind; 8] = [
        FailureKind::Store,
        FailureKind::Account,
        FailureKind::Refused,
        FailureKind::Unreachable,
        FailureKind::Validation,
        FailureKind::Timeout,
        FailureKind::Certificate,
        FailureKind::Internal,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Store => "store",
            FailureKind::Account => "account",
            FailureKind::Refused => "refused",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Validation => "validation",
            FailureKind::Timeout => "timeout",
            FailureKind::Certificate => "certificate",
            FailureKind::Internal => "internal",
        }
    }
}
