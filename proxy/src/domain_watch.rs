//! The data plane's view of the fleet's domains (docs/spec.md §11): loaded from the store before the
//! redirect port serves, then reloaded whenever the store's change counter moves (polled
//! every [`POLL`], one strongly consistent read), into the routes by host (with each
//! domain's app links, and the default domain's, read with the list) and the list of
//! domains ACME orders certificates for (the configured `acme.domains` and every domain
//! added with `certificate: acme`; never any other name). A request for a host the routes do
//! not have asks for the same reading at once ([`Resync`]), so a domain added a moment ago
//! answers its first click.

use crate::domains::{DomainRoutes, Reading, Resync};
use rebound_core::app_links::AppLinks;
use rebound_core::domain::{CertificateSource, Domain, DOMAINS_CHANGED_COUNTER};
use rebound_core::Causes;
use rebound_store::domains::DomainStore;
use rebound_store::{LinkReads, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the change counter is read: a domain added is routed by every proxy within
/// this (plus one list read).
pub const POLL: Duration = Duration::from_secs(2);

/// Where the domains go.
pub struct DomainWatch {
    pub routes: Arc<DomainRoutes>,
    pub store: Arc<dyn DomainStore>,
    /// Where the change counter is read.
    pub changes: Arc<dyn LinkReads>,
    /// The domains ACME orders for: the configured ones first, then the store's.
    pub acme: Option<(Vec<String>, watch::Sender<Vec<String>>)>,
    /// How many domains are routed.
    pub routed: prometheus::IntGauge,
    /// The counter's value the routes were installed at; held through a reading, so two
    /// readings never install out of order.
    pub installed: tokio::sync::Mutex<Option<u64>>,
}

impl DomainWatch {
    /// Reads the counter, then (when it moved since the last reading) the list, and installs
    /// it. Returns the counter's value installed.
    pub async fn sync(&self) -> Result<u64, StoreError> {
        let mut installed = self.installed.lock().await;
        let mark = self.changes.high_water(DOMAINS_CHANGED_COUNTER).await?;
        if Some(mark) == *installed {
            return Ok(mark);
        }
        let domains = self.store.list_domains().await?;
        let default_app_links = self.store.default_app_links().await?;
        self.install(&domains, &default_app_links);
        *installed = Some(mark);
        Ok(mark)
    }

    fn install(&self, domains: &[Domain], default_app_links: &AppLinks) {
        for name in self.routes.install(domains, default_app_links) {
            tracing::error!(domain = %name, "a domain's page URL cannot be a Location header; it gets the built-in pages");
        }
        self.routed.set(domains.len() as i64);
        if let Some((configured, tx)) = &self.acme {
            let mut names = configured.clone();
            names.extend(
                domains
                    .iter()
                    .filter(|d| d.certificate == CertificateSource::Acme && !configured.contains(&d.name))
                    .map(|d| d.name.clone()),
            );
            tx.send_if_modified(|list| {
                let changed = *list != names;
                *list = names;
                changed
            });
        }
    }

    /// Keeps the routes current until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => return,
            }
            match self.sync().await {
                Ok(_) => {
                    failing = false;
                }
                Err(e) if !failing => {
                    // Once per outage: the routes keep what they had.
                    tracing::warn!(error = %Causes(&e), "cannot read the domains; routing what was read last");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    }
}

impl Resync for DomainWatch {
    fn resync(&self) -> Reading<'_> {
        Box::pin(async move {
            if let Err(e) = self.sync().await {
                tracing::debug!(error = %Causes(&e), "cannot read the domains for a host not routed");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::{Routed, UnknownHost};
    use rebound_core::domain::DomainPages;
    use rebound_store::{CounterStore, MemoryStore};

    fn domain(name: &str, id: &str, certificate: CertificateSource) -> Domain {
        Domain {
            name: name.into(),
            id: id.into(),
            created_at: 0,
            created_by: "op".into(),
            certificate,
            pages: DomainPages::default(),
            certificate_error: None,
            certificate_attempt_at: None,
            app_links: Default::default(),
        }
    }

    #[tokio::test]
    async fn the_routes_and_acme_follow_the_store_when_its_counter_moves() {
        let store = Arc::new(MemoryStore::new());
        let (tx, rx) = watch::channel(vec!["sho.rt".to_owned()]);
        let routes = Arc::new(DomainRoutes::new("sho.rt", UnknownHost::NotFound));
        let watch = DomainWatch {
            routes: routes.clone(),
            store: store.clone(),
            changes: store.clone(),
            acme: Some((vec!["sho.rt".to_owned()], tx)),
            routed: prometheus::IntGauge::new("t", "t").unwrap(),
            installed: Default::default(),
        };
        let mark = watch.sync().await.unwrap();
        assert!(routes.is_empty());

        store
            .insert_domain(&domain("go.acme.com", "1", CertificateSource::Acme))
            .await
            .unwrap();
        store
            .insert_domain(&domain("byhand.example", "2", CertificateSource::Files))
            .await
            .unwrap();
        // Not told yet: nothing is read again.
        assert_eq!(watch.sync().await.unwrap(), mark);
        assert!(routes.is_empty());
        store.lease_block(DOMAINS_CHANGED_COUNTER, 1).await.unwrap();
        watch.sync().await.unwrap();
        assert!(matches!(routes.route(Some("go.acme.com")), Routed::Domain(_)));
        assert!(matches!(routes.route(Some("byhand.example")), Routed::Domain(_)));
        assert_eq!(watch.routed.get(), 2);
        assert_eq!(
            *rx.borrow(),
            ["sho.rt", "go.acme.com"],
            "ACME orders for its own domains only"
        );

        store.delete_domain("go.acme.com").await.unwrap();
        store.lease_block(DOMAINS_CHANGED_COUNTER, 1).await.unwrap();
        watch.sync().await.unwrap();
        assert!(matches!(routes.route(Some("go.acme.com")), Routed::Unknown));
        assert_eq!(*rx.borrow(), ["sho.rt"]);

        // App links, a domain's and the default domain's, follow the counter too.
        use rebound_core::app_links::AppLinkDocument::{AppleAppSiteAssociation as Apple, Assetlinks};
        let served = |host: &str| match routes.route(Some(host)) {
            Routed::Domain(route) => (
                route.app_links.answer(Apple, false).is_some(),
                route.app_links.answer(Assetlinks, false).is_some(),
            ),
            _ => {
                let default = routes.default_app_links();
                (
                    default.answer(Apple, false).is_some(),
                    default.answer(Assetlinks, false).is_some(),
                )
            }
        };
        let links = AppLinks {
            apple_app_site_association: Some("{}".into()),
            assetlinks: None,
        };
        store.set_app_links("byhand.example", &links).await.unwrap();
        store
            .set_default_app_links(&AppLinks {
                apple_app_site_association: None,
                assetlinks: Some("[]".into()),
            })
            .await
            .unwrap();
        watch.sync().await.unwrap();
        assert_eq!(
            (served("byhand.example"), served("sho.rt")),
            ((false, false), (false, false))
        );
        store.lease_block(DOMAINS_CHANGED_COUNTER, 1).await.unwrap();
        watch.sync().await.unwrap();
        assert_eq!(
            (served("byhand.example"), served("sho.rt")),
            ((true, false), (false, true))
        );
    }
}
