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
            // A CA that validates before it answers the challenge (pebble, now and then)
            // answers with the validation's problem: a failed validation, not a refusal.
            AcmeError::Acme {
                step: ANSWERING_THE_CHALLENGE,
                source: instant_acme::Error::Api(problem),
            } if is_validation_problem(problem) => FailureKind::Validation,
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

/// The step of an order that answers a challenge (`AcmeError::Acme::step`).
pub const ANSWERING_THE_CHALLENGE: &str = "answering the challenge";

/// Whether `problem` is one a CA gives a domain it could not validate (RFC 8555 §6.7).
fn is_validation_problem(problem: &instant_acme::Problem) -> bool {
    const TYPES: [&str; 6] = ["connection", "dns", "incorrectResponse", "tls", "unauthorized", "caa"];
    problem
        .r#type
        .as_deref()
        .and_then(|t| t.strip_prefix("urn:ietf:params:acme:error:"))
        .is_some_and(|t| TYPES.contains(&t))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(step: &'static str, kind: &str) -> AcmeError {
        let problem: instant_acme::Problem = serde_json::from_value(serde_json::json!({
            "type": format!("urn:ietf:params:acme:error:{kind}"),
            "detail": "...",
            "status": 403,
        }))
        .unwrap();
        AcmeError::Acme {
            step,
            source: instant_acme::Error::Api(problem),
        }
    }

    #[test]
    fn a_problem_is_a_failed_validation_only_where_a_challenge_is_answered() {
        for (step, kind, want) in [
            (ANSWERING_THE_CHALLENGE, "unauthorized", FailureKind::Validation),
            (ANSWERING_THE_CHALLENGE, "incorrectResponse", FailureKind::Validation),
            (ANSWERING_THE_CHALLENGE, "connection", FailureKind::Validation),
            (ANSWERING_THE_CHALLENGE, "rateLimited", FailureKind::Refused),
            (ANSWERING_THE_CHALLENGE, "malformed", FailureKind::Refused),
            ("creating the order", "unauthorized", FailureKind::Refused),
            ("finalizing the order", "badCSR", FailureKind::Refused),
        ] {
            assert_eq!(api(step, kind).kind(), want, "{step}: {kind}");
        }
    }
}
