//! The domains a fleet serves links on besides the default one (docs/spec.md §11): added, listed,
//! updated (their pages, their certificate's last attempt, their app links) and removed by
//! the control plane, read whole by every data plane. Ids come from the counter
//! `DOMAIN_ID_COUNTER` and every change bumps `DOMAINS_CHANGED_COUNTER` (both in
//! `rebound_core::domain`), so a data plane reloads the list only when it changed. An
//! in-memory fake beside the port.
//!
//! A domain's app links (docs/spec.md §14) are kept beside its record and written apart
//! from it, so the ACME worker recording a certificate's state and an operator setting the
//! documents never undo each other's write. The default domain has no record (its pages and
//! certificate are settings); its app links are one record of their own.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::app_links::AppLinks;
use rebound_core::domain::Domain;

/// The domains, by canonical name.
#[async_trait]
pub trait DomainStore: Send + Sync {
    /// Conditional insert, its app links included: `AlreadyExists` when the name is taken
    /// (nothing written then).
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError>;
    /// The domain of `name` (canonical), with its app links, if any (strongly consistent).
    async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError>;
    /// Every domain, with its app links, in name order (strongly consistent).
    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError>;
    /// Replaces the record of `domain.name` if it exists, but not its app links (kept as
    /// they are, whatever `domain.app_links` holds): `NotFound` when it does not (a domain
    /// removed meanwhile is not brought back).
    async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError>;
    /// Removes the domain and its app links; `NotFound` when there is none.
    async fn delete_domain(&self, name: &str) -> Result<(), StoreError>;
    /// Replaces the app links of the domain `name` alone (the rest of its record is left as
    /// it is): `NotFound` when there is no such domain (none is made).
    async fn set_app_links(&self, name: &str, app_links: &AppLinks) -> Result<(), StoreError>;
    /// The default domain's app links; none until set (strongly consistent).
    async fn default_app_links(&self) -> Result<AppLinks, StoreError>;
    /// Replaces the default domain's app links.
    async fn set_default_app_links(&self, app_links: &AppLinks) -> Result<(), StoreError>;
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
    pub struct MemoryDomains(Arc<Mutex<Contents>>);

    /// The domains by name, and the default domain's app links.
    #[derive(Debug, Default)]
    pub struct Contents {
        domains: BTreeMap<String, Domain>,
        default_app_links: AppLinks,
    }

    impl MemoryDomains {
        fn contents(&self) -> std::sync::MutexGuard<'_, Contents> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[async_trait]
    impl DomainStore for MemoryDomains {
        async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
            let map = &mut self.contents().domains;
            if map.contains_key(&domain.name) {
                return Err(StoreError::AlreadyExists);
            }
            map.insert(domain.name.clone(), domain.clone());
            Ok(())
        }
        async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
            Ok(self.contents().domains.get(name).cloned())
        }
        async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
            Ok(self.contents().domains.values().cloned().collect())
        }
        async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError> {
            match self.contents().domains.get_mut(&domain.name) {
                Some(d) => {
                    let app_links = std::mem::take(&mut d.app_links);
                    *d = Domain {
                        app_links,
                        ..domain.clone()
                    };
                    Ok(())
                }
                None => Err(StoreError::NotFound),
            }
        }
        async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
            self.contents()
                .domains
                .remove(name)
                .map(|_| ())
                .ok_or(StoreError::NotFound)
        }
        async fn set_app_links(&self, name: &str, app_links: &AppLinks) -> Result<(), StoreError> {
            match self.contents().domains.get_mut(name) {
                Some(d) => {
                    d.app_links = app_links.clone();
                    Ok(())
                }
                None => Err(StoreError::NotFound),
            }
        }
        async fn default_app_links(&self) -> Result<AppLinks, StoreError> {
            Ok(self.contents().default_app_links.clone())
        }
        async fn set_default_app_links(&self, app_links: &AppLinks) -> Result<(), StoreError> {
            self.contents().default_app_links = app_links.clone();
            Ok(())
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
        app_links: AppLinks::default(),
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
    assert_eq!(store.get_domain(&a).await.unwrap(), Some(updated.clone()));

    // App links are written apart from the rest of the record, each write leaving the other.
    let links = AppLinks {
        apple_app_site_association: Some(r#"{"applinks":{"details":[{"appIDs":["T.com.acme"]}]}}"#.into()),
        assetlinks: Some(format!(
            r#"[{{"relation":["delegate_permission/common.handle_all_urls"],"target":{{"namespace":"web","site":"{}"}}}}]"#,
            "x".repeat(rebound_core::app_links::MAX_DOCUMENT_BYTES - 100)
        )),
    };
    store.set_app_links(&a, &links).await.unwrap();
    let with_links = Domain {
        app_links: links.clone(),
        ..updated.clone()
    };
    assert_eq!(store.get_domain(&a).await.unwrap(), Some(with_links.clone()));
    let listed = store.list_domains().await.unwrap();
    assert_eq!(
        listed.iter().find(|d| d.name == a),
        Some(&with_links),
        "listed with them"
    );
    // An update of the rest (read before the links were set) does not undo them …
    let later = Domain {
        certificate_error: None,
        certificate_attempt_at: Some(3_000),
        ..updated.clone()
    };
    store.update_domain(&later).await.unwrap();
    let later = Domain {
        app_links: links.clone(),
        ..later
    };
    assert_eq!(store.get_domain(&a).await.unwrap(), Some(later.clone()));
    // … and setting them leaves the rest.
    let apple_only = AppLinks {
        assetlinks: None,
        ..links.clone()
    };
    store.set_app_links(&a, &apple_only).await.unwrap();
    assert_eq!(
        store.get_domain(&a).await.unwrap(),
        Some(Domain {
            app_links: apple_only,
            ..later.clone()
        })
    );
    store.set_app_links(&a, &AppLinks::default()).await.unwrap();
    assert_eq!(
        store.get_domain(&a).await.unwrap().unwrap().app_links,
        AppLinks::default()
    );
    assert!(
        matches!(
            store.set_app_links(&format!("c{nanos}.contract.test"), &links).await,
            Err(StoreError::NotFound)
        ),
        "no domain is made by its app links"
    );
    assert_eq!(
        store.get_domain(&format!("c{nanos}.contract.test")).await.unwrap(),
        None
    );
    // Given at insert, they are kept from the start.
    let c = format!("c{nanos}.contract.test");
    let born_with = Domain {
        app_links: links.clone(),
        ..domain(&c, "10")
    };
    store.insert_domain(&born_with).await.unwrap();
    assert_eq!(store.get_domain(&c).await.unwrap(), Some(born_with));
    store.delete_domain(&c).await.unwrap();
    assert_eq!(store.get_domain(&c).await.unwrap(), None);
    // A domain added again under a removed one's name has none of its links.
    store.insert_domain(&domain(&c, "11")).await.unwrap();
    assert_eq!(store.get_domain(&c).await.unwrap(), Some(domain(&c, "11")));
    store.delete_domain(&c).await.unwrap();

    // The default domain's, a record of their own, in no listing.
    let before = store.list_domains().await.unwrap().len();
    store.set_default_app_links(&links).await.unwrap();
    assert_eq!(store.default_app_links().await.unwrap(), links);
    assert_eq!(store.list_domains().await.unwrap().len(), before);
    store.set_default_app_links(&android_only_of(&links)).await.unwrap();
    assert_eq!(store.default_app_links().await.unwrap(), android_only_of(&links));
    store.set_default_app_links(&AppLinks::default()).await.unwrap();
    assert_eq!(store.default_app_links().await.unwrap(), AppLinks::default());

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

/// `links` with its Android document alone.
#[cfg(any(test, feature = "test-util"))]
fn android_only_of(links: &AppLinks) -> AppLinks {
    AppLinks {
        apple_app_site_association: None,
        assetlinks: links.assetlinks.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_fake_keeps_the_contract() {
        contract(&MemoryDomains::default()).await;
    }
}
