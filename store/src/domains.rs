//! The domains a fleet serves links on besides the default one (docs/spec.md §11): added, listed,
//! updated (their pages, their certificate's last attempt) and removed by the control plane,
//! read whole by every data plane. Ids come from the counter `DOMAIN_ID_COUNTER` and every
//! change bumps `DOMAINS_CHANGED_COUNTER` (both in `rebound_core::domain`), so a data plane
//! reloads the list only when it changed. An in-memory fake beside the port.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::domain::Domain;

/// The domains, by canonical name.
#[async_trait]
pub trait DomainStore: Send + Sync {
    /// Conditional insert: `AlreadyExists` when the name is taken (nothing written then).
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError>;
    /// The domain of `name` (canonical), if any (strongly consistent).
    async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError>;
    /// Every domain, in name order (strongly consistent).
    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError>;
    /// Replaces the record of `domain.name` if it exists: `NotFound` when it does not (a
    /// domain removed meanwhile is not brought back).
    async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError>;
    /// Removes the domain; `NotFound` when there is none.
    async fn delete_domain(&self, name: &str) -> Result<(), StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use memory::MemoryDomains;

#[cfg(any(test, feature = "test-util"))]
mod memory {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// An in-memory [`DomainStore`] for tests; clones share the same contents.
    #[derive(Debug, Clone, Default)]
    pub struct MemoryDomains(Arc<Mutex<BTreeMap<String, Domain>>>);

    impl MemoryDomains {
        fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Domain>> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[async_trait]
    impl DomainStore for MemoryDomains {
        async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
            let mut map = self.map();
            if map.contains_key(&domain.name) {
                return Err(StoreError::AlreadyExists);
            }
            map.insert(domain.name.clone(), domain.clone());
            Ok(())
        }
        async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
            Ok(self.map().get(name).cloned())
        }
        async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
            Ok(self.map().values().cloned().collect())
        }
        async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError> {
            match self.map().get_mut(&domain.name) {
                Some(d) => {
                    *d = domain.clone();
                    Ok(())
                }
                None => Err(StoreError::NotFound),
            }
        }
        async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
            self.map().remove(name).map(|_| ()).ok_or(StoreError::NotFound)
        }
    }
}

/// The contract every [`DomainStore`] adapter must pass (the fake here, SQLite, and
/// DynamoDB against a real DynamoDB-API server). Names are unique to each call, so it runs
/// on a store other tests use.
#[cfg(any(test, feature = "test-util"))]
pub async fn contract(store: &dyn DomainStore) {
    use rebound_core::domain::{CertificateSource, DomainPages};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let (a, b) = (format!("a{nanos}.contract.test"), format!("b{nanos}.contract.test"));
    let domain = |name: &str, id: &str| Domain {
        name: name.to_owned(),
        id: id.to_owned(),
        created_at: 1_000,
        created_by: "op".to_owned(),
        certificate: CertificateSource::Acme,
        pages: DomainPages::default(),
        certificate_error: None,
        certificate_attempt_at: None,
    };
    assert_eq!(store.get_domain(&a).await.unwrap(), None);
    store.insert_domain(&domain(&a, "7")).await.unwrap();
    assert!(matches!(
        store.insert_domain(&domain(&a, "8")).await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(
        store.get_domain(&a).await.unwrap(),
        Some(domain(&a, "7")),
        "the first insert stays"
    );
    store.insert_domain(&domain(&b, "9")).await.unwrap();
    let listed: Vec<Domain> = store
        .list_domains()
        .await
        .unwrap()
        .into_iter()
        .filter(|d| d.name == a || d.name == b)
        .collect();
    assert_eq!(listed, [domain(&a, "7"), domain(&b, "9")], "in name order");

    // Every field reads back as written.
    let updated = Domain {
        certificate: CertificateSource::Files,
        pages: DomainPages {
            not_found_url: Some("https://acme.example/404".into()),
            expired_url: Some("https://acme.example/expired".into()),
            root_url: Some("https://acme.example/".into()),
        },
        certificate_error: Some("urn:ietf:params:acme:error:dns: no such host".into()),
        certificate_attempt_at: Some(2_000),
        ..domain(&a, "7")
    };
    store.update_domain(&updated).await.unwrap();
    assert_eq!(store.get_domain(&a).await.unwrap(), Some(updated));

    store.delete_domain(&a).await.unwrap();
    assert_eq!(store.get_domain(&a).await.unwrap(), None);
    assert!(matches!(store.delete_domain(&a).await, Err(StoreError::NotFound)));
    assert!(
        matches!(store.update_domain(&domain(&a, "7")).await, Err(StoreError::NotFound)),
        "a removed domain is not brought back by an update"
    );
    assert_eq!(store.get_domain(&a).await.unwrap(), None);
    assert!(store.get_domain(&b).await.unwrap().is_some());
    store.delete_domain(&b).await.unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fake_keeps_the_contract() {
        contract(&MemoryDomains::default()).await;
    }
}
