//! Every metric of certificate issuance, declared once: certificates issued and renewed,
//! failures by kind, and each domain's certificate expiry (an alert fires on it before the
//! certificate expires, whatever the issuer says).

use crate::error::FailureKind;
use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// The issuer's metric families.
#[derive(Clone)]
pub struct AcmeMetrics {
    issued: IntCounter,
    renewed: IntCounter,
    failures: IntCounterVec,
    expiry: IntGaugeVec,
}

impl AcmeMetrics {
    /// Declares the issuer's metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<AcmeMetrics> {
        let m = AcmeMetrics::detached();
        registry.register(Box::new(m.issued.clone()))?;
        registry.register(Box::new(m.renewed.clone()))?;
        registry.register(Box::new(m.failures.clone()))?;
        registry.register(Box::new(m.expiry.clone()))?;
        Ok(m)
    }

    /// Metrics registered nowhere (tests, and a process that does not export them).
    pub fn detached() -> AcmeMetrics {
        let failures = IntCounterVec::new(
            Opts::new(
                "rebound_acme_failures_total",
                "Certificate orders that failed, by kind (store, account, refused, unreachable, validation, timeout, certificate, internal).",
            ),
            &["kind"],
        )
        .expect("a valid metric");
        for kind in FailureKind::ALL {
            failures.with_label_values(&[kind.as_str()]);
        }
        AcmeMetrics {
            issued: IntCounter::new(
                "rebound_acme_issued_total",
                "First certificates issued over ACME for a domain that had none.",
            )
            .expect("a valid metric"),
            renewed: IntCounter::new(
                "rebound_acme_renewed_total",
                "Certificates issued over ACME to replace one that was due for renewal.",
            )
            .expect("a valid metric"),
            failures,
            expiry: IntGaugeVec::new(
                Opts::new(
                    "rebound_acme_certificate_expiry_seconds",
                    "When each configured domain's stored certificate expires (notAfter, Unix seconds).",
                ),
                &["domain"],
            )
            .expect("a valid metric"),
        }
    }

    pub(crate) fn issued(&self, renewal: bool) {
        if renewal {
            self.renewed.inc()
        } else {
            self.issued.inc()
        }
    }

    pub(crate) fn failed(&self, kind: FailureKind) {
        self.failures.with_label_values(&[kind.as_str()]).inc();
    }

    pub(crate) fn set_expiry(&self, domain: &str, not_after_millis: i64) {
        self.expiry
            .with_label_values(&[domain])
            .set(not_after_millis.div_euclid(1000));
    }

    pub(crate) fn forget_expiry(&self, domain: &str) {
        let _ = self.expiry.remove_label_values(&[domain]);
    }

    /// First certificates issued so far.
    pub fn issued_count(&self) -> u64 {
        self.issued.get()
    }

    /// Renewals so far.
    pub fn renewed_count(&self) -> u64 {
        self.renewed.get()
    }

    /// Failures of `kind` so far.
    pub fn failure_count(&self, kind: FailureKind) -> u64 {
        self.failures.with_label_values(&[kind.as_str()]).get()
    }

    /// The expiry (Unix seconds) exported for `domain`, if any.
    pub fn expiry(&self, domain: &str) -> Option<i64> {
        use prometheus::core::Collector;
        // Read from what is exported: looking the label up would create it.
        self.expiry
            .collect()
            .iter()
            .flat_map(|family| family.get_metric())
            .find(|m| m.get_label().iter().any(|l| l.value() == domain))
            .map(|m| m.get_gauge().get_value() as i64)
    }
}
