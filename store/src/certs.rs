//! Where a fleet keeps what ACME gave it (`rebound-acme`): the account's credentials, each
//! domain's certificate chain and key, and the lease that lets one process at a time order a
//! domain's certificate. An in-memory fake beside it.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::UnixMillis;

/// A domain's certificate as issued: the chain (leaf first) and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCertificate {
    /// The domain it was issued for (lowercase, no trailing dot).
    pub domain: String,
    pub chain_pem: String,
    pub key_pem: String,
    /// The leaf's notAfter.
    pub not_after: UnixMillis,
}

impl std::fmt::Debug for StoredCertificate {
    // Never the private key in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCertificate")
            .field("domain", &self.domain)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// The certificates of the fleet's domains, the ACME account they were ordered with, and
/// the per-domain order lease.
#[async_trait]
pub trait CertificateStore: Send + Sync {
    /// The ACME account's credentials (an opaque JSON text), if one was stored.
    async fn get_account(&self) -> Result<Option<String>, StoreError>;
    /// Stores the account's credentials if none are stored (conditional put):
    /// `AlreadyExists` when another process stored its own first (read them and use those).
    async fn put_account(&self, credentials: &str) -> Result<(), StoreError>;
    /// The certificate of `domain`, if any.
    async fn get_certificate(&self, domain: &str) -> Result<Option<StoredCertificate>, StoreError>;
    /// Stores (or replaces) the certificate of `certificate.domain`.
    async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError>;
    /// Every stored certificate, in domain order.
    async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError>;
    /// Takes or extends the lease on ordering `domain`'s certificate for `owner` until `until`:
    /// true unless another owner holds a lease unexpired at `now` (expired once
    /// `until <= now`). A conditional write.
    async fn try_lease(
        &self,
        domain: &str,
        owner: &str,
        until: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError>;
    /// Gives back `owner`'s lease on `domain`; nothing when another owner holds it.
    async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use memory::MemoryCertificates;

#[cfg(any(test, feature = "test-util"))]
mod memory {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    struct State {
        account: Option<String>,
        certificates: BTreeMap<String, StoredCertificate>,
        /// domain -> (owner, until)
        leases: BTreeMap<String, (String, UnixMillis)>,
    }

    /// An in-memory [`CertificateStore`] for tests; clones share the same contents.
    #[derive(Debug, Clone, Default)]
    pub struct MemoryCertificates(std::sync::Arc<Mutex<State>>);

    impl MemoryCertificates {
        pub fn new() -> MemoryCertificates {
            MemoryCertificates::default()
        }

        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// The lease on `domain` as stored (owner, until), expired or not.
        pub fn lease(&self, domain: &str) -> Option<(String, UnixMillis)> {
            self.state().leases.get(domain).cloned()
        }
    }

    #[async_trait]
    impl CertificateStore for MemoryCertificates {
        async fn get_account(&self) -> Result<Option<String>, StoreError> {
            Ok(self.state().account.clone())
        }

        async fn put_account(&self, credentials: &str) -> Result<(), StoreError> {
            let mut state = self.state();
            if state.account.is_some() {
                return Err(StoreError::AlreadyExists);
            }
            state.account = Some(credentials.to_owned());
            Ok(())
        }

        async fn get_certificate(&self, domain: &str) -> Result<Option<StoredCertificate>, StoreError> {
            Ok(self.state().certificates.get(domain).cloned())
        }

        async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError> {
            self.state()
                .certificates
                .insert(certificate.domain.clone(), certificate.clone());
            Ok(())
        }

        async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError> {
            Ok(self.state().certificates.values().cloned().collect())
        }

        async fn try_lease(
            &self,
            domain: &str,
            owner: &str,
            until: UnixMillis,
            now: UnixMillis,
        ) -> Result<bool, StoreError> {
            let mut state = self.state();
            if let Some((holder, held_until)) = state.leases.get(domain) {
                if holder != owner && *held_until > now {
                    return Ok(false);
                }
            }
            state.leases.insert(domain.to_owned(), (owner.to_owned(), until));
            Ok(true)
        }

        async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError> {
            let mut state = self.state();
            if state.leases.get(domain).is_some_and(|(holder, _)| holder == owner) {
                state.leases.remove(domain);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_is_refused_only_while_another_owner_holds_it_unexpired() {
        // (held by, until) before; (owner, until, now) asked; granted; held after.
        type Lease = Option<(&'static str, UnixMillis)>;
        type Ask = (&'static str, UnixMillis, UnixMillis);
        let cases: &[(Lease, Ask, bool, Lease)] = &[
            (None, ("a", 200, 100), true, Some(("a", 200))),
            // Another owner, unexpired: refused, the lease unchanged.
            (Some(("b", 200)), ("a", 300, 100), false, Some(("b", 200))),
            (Some(("b", 200)), ("a", 300, 199), false, Some(("b", 200))),
            // Expired at `until` itself, and after it.
            (Some(("b", 200)), ("a", 300, 200), true, Some(("a", 300))),
            (Some(("b", 200)), ("a", 300, 250), true, Some(("a", 300))),
            // The holder extends or shortens its own lease.
            (Some(("a", 200)), ("a", 400, 100), true, Some(("a", 400))),
            (Some(("a", 200)), ("a", 150, 100), true, Some(("a", 150))),
        ];
        for (before, (owner, until, now), granted, after) in cases {
            let store = MemoryCertificates::new();
            if let Some((holder, held_until)) = before {
                assert!(store.try_lease("x.test", holder, *held_until, 0).await.unwrap());
            }
            let got = store.try_lease("x.test", owner, *until, *now).await.unwrap();
            assert_eq!(got, *granted, "{before:?} then {owner} until {until} at {now}");
            let held = store.lease("x.test");
            assert_eq!(
                held.as_ref().map(|(o, u)| (o.as_str(), *u)),
                *after,
                "{before:?} then {owner} until {until} at {now}"
            );
            // Another domain's lease is another lease.
            assert!(store.try_lease("y.test", "c", 1_000, *now).await.unwrap());
        }
    }

    #[tokio::test]
    async fn only_the_holder_releases_a_lease() {
        let store = MemoryCertificates::new();
        assert!(store.try_lease("x.test", "a", 200, 100).await.unwrap());
        store.release("x.test", "b").await.unwrap();
        assert!(!store.try_lease("x.test", "b", 300, 100).await.unwrap());
        store.release("x.test", "a").await.unwrap();
        assert!(store.try_lease("x.test", "b", 300, 100).await.unwrap());
    }

    #[tokio::test]
    async fn the_account_is_stored_once_and_certificates_are_listed_by_domain() {
        let store = MemoryCertificates::new();
        assert_eq!(store.get_account().await.unwrap(), None);
        store.put_account("{\"first\":1}").await.unwrap();
        assert!(matches!(
            store.put_account("{\"second\":2}").await,
            Err(StoreError::AlreadyExists)
        ));
        assert_eq!(store.get_account().await.unwrap().as_deref(), Some("{\"first\":1}"));

        let cert = |domain: &str, not_after| StoredCertificate {
            domain: domain.to_owned(),
            chain_pem: format!("chain of {domain}"),
            key_pem: format!("key of {domain}"),
            not_after,
        };
        store.put_certificate(&cert("b.test", 1)).await.unwrap();
        store.put_certificate(&cert("a.test", 2)).await.unwrap();
        store.put_certificate(&cert("b.test", 3)).await.unwrap();
        assert_eq!(store.get_certificate("b.test").await.unwrap(), Some(cert("b.test", 3)));
        assert_eq!(store.get_certificate("c.test").await.unwrap(), None);
        let listed = store.list_certificates().await.unwrap();
        assert_eq!(listed, vec![cert("a.test", 2), cert("b.test", 3)]);
        assert!(!format!("{:?}", listed[0]).contains("key of"));
    }
}
