//! Where a fleet keeps what ACME gave it (`rebound-acme`): the account's credentials, each
//! domain's certificate chain and key, and the lease that lets one process at a time order a
//! domain's certificate. An in-memory fake beside it.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::UnixMillis;

/// The counter [`CertificateStore::certificates_changed`] reads, in the counters the store
/// keeps (a counter like the code counter: `counter#certificate_changes` in DynamoDB).
pub const CERTIFICATES_CHANGED_COUNTER: &str = "certificate_changes";

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
    /// Stores (or replaces) the certificate of `certificate.domain`, and moves the number
    /// [`CertificateStore::certificates_changed`] reads.
    async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError>;
    /// Every stored certificate, in domain order.
    async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError>;
    /// A number that moves forward whenever a certificate is stored (one strongly
    /// consistent point read): a process that listed the certificates when it read this
    /// number has them all while it reads the same number again.
    async fn certificates_changed(&self) -> Result<u64, StoreError>;
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
    /// Records the answer to an HTTP-01 validation in flight (`token` -> key authorization)
    /// until `until`, so that whichever process of the fleet the CA asks can answer it.
    async fn put_challenge(&self, token: &str, key_authorization: &str, until: UnixMillis) -> Result<(), StoreError>;
    /// The answer recorded for `token`, unless none is or it ended by `now`.
    async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError>;
    /// Forgets the answer for `token` (the order ended); nothing when there is none.
    async fn delete_challenge(&self, token: &str) -> Result<(), StoreError>;
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
        /// token -> (key authorization, until)
        challenges: BTreeMap<String, (String, UnixMillis)>,
        /// Moved by every certificate stored.
        changes: u64,
        /// Calls made: (change number reads, listings, single certificate reads).
        calls: (usize, usize, usize),
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

        /// How many HTTP-01 answers are stored, ended or not.
        pub fn challenge_count(&self) -> usize {
            self.state().challenges.len()
        }

        /// The calls made so far: (`certificates_changed`, `list_certificates`,
        /// `get_certificate`), for a test of how much a caller reads.
        pub fn reads(&self) -> (usize, usize, usize) {
            self.state().calls
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
            let mut state = self.state();
            state.calls.2 += 1;
            Ok(state.certificates.get(domain).cloned())
        }

        async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError> {
            let mut state = self.state();
            state
                .certificates
                .insert(certificate.domain.clone(), certificate.clone());
            state.changes += 1;
            Ok(())
        }

        async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError> {
            let mut state = self.state();
            state.calls.1 += 1;
            Ok(state.certificates.values().cloned().collect())
        }

        async fn certificates_changed(&self) -> Result<u64, StoreError> {
            let mut state = self.state();
            state.calls.0 += 1;
            Ok(state.changes)
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

        async fn put_challenge(
            &self,
            token: &str,
            key_authorization: &str,
            until: UnixMillis,
        ) -> Result<(), StoreError> {
            self.state()
                .challenges
                .insert(token.to_owned(), (key_authorization.to_owned(), until));
            Ok(())
        }

        async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError> {
            Ok(self
                .state()
                .challenges
                .get(token)
                .filter(|(_, until)| *until > now)
                .map(|(answer, _)| answer.clone()))
        }

        async fn delete_challenge(&self, token: &str) -> Result<(), StoreError> {
            self.state().challenges.remove(token);
            Ok(())
        }
    }
}

/// The contract every [`CertificateStore`] adapter must pass (the fake here, SQLite, and
/// DynamoDB against a real DynamoDB-API server). Domains are unique to each call; the
/// account check expects a store with no account yet.
#[cfg(any(test, feature = "test-util"))]
pub async fn contract(store: &dyn CertificateStore) {
    leases(store).await;
    release(store).await;
    account_and_certificates(store).await;
    challenges(store).await;
}

/// An HTTP-01 answer is read back until its end, replaced by a new one, and gone once
/// deleted.
#[cfg(any(test, feature = "test-util"))]
async fn challenges(store: &dyn CertificateStore) {
    let (token, other) = (unique_domain().replace('.', "_"), unique_domain().replace('.', "_"));
    assert_eq!(store.get_challenge(&token, 100).await.unwrap(), None);
    store.put_challenge(&token, "first.thumbprint", 200).await.unwrap();
    assert_eq!(
        store.get_challenge(&token, 199).await.unwrap().as_deref(),
        Some("first.thumbprint")
    );
    assert_eq!(
        store.get_challenge(&token, 200).await.unwrap(),
        None,
        "ended at its end"
    );
    store.put_challenge(&token, "second.thumbprint", 300).await.unwrap();
    assert_eq!(
        store.get_challenge(&token, 250).await.unwrap().as_deref(),
        Some("second.thumbprint")
    );
    assert_eq!(store.get_challenge(&other, 250).await.unwrap(), None);
    store.delete_challenge(&token).await.unwrap();
    assert_eq!(store.get_challenge(&token, 250).await.unwrap(), None);
    store.delete_challenge(&token).await.unwrap();
}

#[cfg(any(test, feature = "test-util"))]
fn unique_domain() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("d{nanos:x}-{}.test", N.fetch_add(1, Ordering::Relaxed))
}

/// A lease is refused only while another owner holds it unexpired; who holds it after each
/// ask is seen from a third owner's asks: refused just before the lease's end, granted at it.
#[cfg(any(test, feature = "test-util"))]
async fn leases(store: &dyn CertificateStore) {
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
        let domain = unique_domain();
        let case = format!("{before:?} then {owner} until {until} at {now}");
        if let Some((holder, held_until)) = before {
            assert!(
                store.try_lease(&domain, holder, *held_until, 0).await.unwrap(),
                "{case}"
            );
        }
        let got = store.try_lease(&domain, owner, *until, *now).await.unwrap();
        assert_eq!(got, *granted, "{case}");
        if let Some((_, held_until)) = after {
            assert!(
                !store
                    .try_lease(&domain, "third", held_until + 1_000, held_until - 1)
                    .await
                    .unwrap(),
                "{case}: still held just before {held_until}"
            );
            assert!(
                store
                    .try_lease(&domain, "third", held_until + 1_000, *held_until)
                    .await
                    .unwrap(),
                "{case}: expired at {held_until}"
            );
        }
        // Another domain's lease is another lease.
        assert!(store.try_lease(&unique_domain(), "c", 1_000, *now).await.unwrap());
    }
}

/// Only the holder gives a lease back.
#[cfg(any(test, feature = "test-util"))]
async fn release(store: &dyn CertificateStore) {
    let domain = unique_domain();
    assert!(store.try_lease(&domain, "a", 200, 100).await.unwrap());
    store.release(&domain, "b").await.unwrap();
    assert!(!store.try_lease(&domain, "b", 300, 100).await.unwrap());
    store.release(&domain, "a").await.unwrap();
    assert!(store.try_lease(&domain, "b", 300, 100).await.unwrap());
    // Nothing to give back: nothing happens.
    store.release(&unique_domain(), "a").await.unwrap();
}

/// The account is stored once; certificates are replaced, read and listed by domain.
#[cfg(any(test, feature = "test-util"))]
async fn account_and_certificates(store: &dyn CertificateStore) {
    assert_eq!(store.get_account().await.unwrap(), None);
    store.put_account("{\"first\":1}").await.unwrap();
    assert!(matches!(
        store.put_account("{\"second\":2}").await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(store.get_account().await.unwrap().as_deref(), Some("{\"first\":1}"));

    let cert = |domain: &str, not_after| StoredCertificate {
        domain: domain.to_owned(),
        chain_pem: format!("-----BEGIN CERTIFICATE-----\nchain of {domain}\n-----END CERTIFICATE-----\n"),
        key_pem: format!("key of {domain}"),
        not_after,
    };
    let (a, b) = (format!("a{}", unique_domain()), format!("b{}", unique_domain()));
    let mut changed = store.certificates_changed().await.unwrap();
    for (domain, not_after) in [(&b, 1), (&a, 2), (&b, 1_800_000_000_000)] {
        store.put_certificate(&cert(domain, not_after)).await.unwrap();
        // Every certificate stored moves the number forward (other processes may too).
        let now = store.certificates_changed().await.unwrap();
        assert!(now > changed, "{now} after {changed}");
        changed = now;
    }
    assert_eq!(
        store.get_certificate(&b).await.unwrap(),
        Some(cert(&b, 1_800_000_000_000))
    );
    assert_eq!(store.get_certificate(&unique_domain()).await.unwrap(), None);
    let listed: Vec<StoredCertificate> = store
        .list_certificates()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.domain == a || c.domain == b)
        .collect();
    assert_eq!(listed, vec![cert(&a, 2), cert(&b, 1_800_000_000_000)]);
    let all: Vec<String> = store
        .list_certificates()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.domain)
        .collect();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "in domain order: {all:?}");
    assert!(!format!("{:?}", listed[0]).contains("key of"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fake_keeps_the_contract() {
        contract(&MemoryCertificates::new()).await;
    }

    #[tokio::test]
    async fn the_fake_shows_the_lease_it_holds() {
        let store = MemoryCertificates::new();
        assert!(store.try_lease("x.test", "a", 200, 100).await.unwrap());
        assert_eq!(store.lease("x.test"), Some(("a".to_owned(), 200)));
    }
}
