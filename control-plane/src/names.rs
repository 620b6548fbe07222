//! The domains' names (docs/spec.md §11), as every resource of the control plane reads
//! them: which domain a request means, the names of the domains its links' keys carry, a
//! link's short URL, and the own-host rule for the domains the fleet serves.
//!
//! A domain's id is in every key of its links (`rebound_core::domain`); the names are kept
//! here, learnt from the store: a request naming a domain reads it (strongly consistent,
//! so a domain another control plane just added is found), and a listing whose links carry
//! an id not known yet reads the list once.

use crate::auth::{Caller, Principal};
use crate::error::ApiError;
use rebound_core::domain::{is_dns_name, normalize_domain, split_key, Domain};
use rebound_core::target::{served_name_of, TargetError};
use rebound_core::Link;
use rebound_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// A domain a request named, resolved: its canonical name and its id (`None`: the default
/// domain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DomainRef {
    pub(crate) name: String,
    pub(crate) id: Option<String>,
}

impl DomainRef {
    /// The key of `code` on this domain.
    pub(crate) fn key(&self, code: &str) -> String {
        rebound_core::domain::link_key(code, self.id.as_deref())
    }
}

/// The default domain's name and the other domains' names by id, as far as known.
pub(crate) struct DomainNames {
    store: Arc<dyn Store>,
    /// The base of the default domain's short URLs (`https://sho.rt`).
    public_base_url: String,
    default: String,
    by_id: RwLock<Known>,
}

/// Names by id, and the ids of domains found removed: ids are never given twice, so a
/// removed one stays removed and its links do not send every listing to the store.
#[derive(Default)]
struct Known {
    names: HashMap<String, String>,
    removed: std::collections::HashSet<String>,
}

impl DomainNames {
    /// The default domain is the host of `public_base_url` (checked at start).
    pub(crate) fn new(store: Arc<dyn Store>, public_base_url: &str) -> DomainNames {
        let default = url::Url::parse(public_base_url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_end_matches('.').to_ascii_lowercase()))
            .unwrap_or_default();
        DomainNames {
            store,
            public_base_url: public_base_url.to_owned(),
            default,
            by_id: RwLock::new(Known::default()),
        }
    }

    pub(crate) fn default_name(&self) -> &str {
        &self.default
    }

    pub(crate) fn remember(&self, domain: &Domain) {
        self.by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .names
            .insert(domain.id.clone(), domain.name.clone());
    }

    /// The domain `id` was removed.
    pub(crate) fn forget(&self, id: &str) {
        let mut known = self.by_id.write().unwrap_or_else(|e| e.into_inner());
        known.names.remove(id);
        known.removed.insert(id.to_owned());
    }

    /// The name of the domain `id` (`None`: the default one), as known; a removed domain's
    /// links name it `#<id>`.
    pub(crate) fn name_of(&self, id: Option<&str>) -> String {
        match id {
            None => self.default.clone(),
            Some(id) => self
                .by_id
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .names
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("#{id}")),
        }
    }

    /// The name of `link`'s domain, as known.
    pub(crate) fn of_link(&self, link: &Link) -> String {
        self.name_of(split_key(&link.code).1)
    }

    /// Makes sure the names of the domains `links` are on are known: reads the list once
    /// when one is not; an id the list does not have is of a removed domain.
    pub(crate) async fn learn(&self, links: &[Link]) -> Result<(), StoreError> {
        let unknown: Vec<String> = {
            let known = self.by_id.read().unwrap_or_else(|e| e.into_inner());
            links
                .iter()
                .filter_map(|l| split_key(&l.code).1)
                .filter(|id| !known.names.contains_key(*id) && !known.removed.contains(*id))
                .map(str::to_owned)
                .collect()
        };
        if unknown.is_empty() {
            return Ok(());
        }
        let listed = self.store.list_domains().await?;
        let mut known = self.by_id.write().unwrap_or_else(|e| e.into_inner());
        for d in listed {
            known.names.insert(d.id, d.name);
        }
        for id in unknown {
            if !known.names.contains_key(&id) {
                known.removed.insert(id);
            }
        }
        Ok(())
    }

    /// The domain `name` names: the default one, or one in the store; 400 otherwise.
    pub(crate) async fn resolve(&self, name: &str) -> Result<DomainRef, ApiError> {
        let name = normalize_domain(name)
            .or_else(
                |_| match name.trim().trim_end_matches('.').eq_ignore_ascii_case(&self.default) {
                    // The default domain may be an IP address or `localhost`.
                    true => Ok(self.default.clone()),
                    false => Err(()),
                },
            )
            .map_err(|()| ApiError::bad_request("unknown_domain", "domain is not a domain of this service"))?;
        if name == self.default {
            return Ok(DomainRef { name, id: None });
        }
        match self.store.get_domain(&name).await? {
            Some(d) => {
                self.remember(&d);
                Ok(DomainRef {
                    name: d.name,
                    id: Some(d.id),
                })
            }
            None => Err(ApiError::bad_request(
                "unknown_domain",
                "domain is not a domain of this service",
            )),
        }
    }

    /// Every domain of the service: the default one first, then the others as the store
    /// lists them (one strongly consistent read).
    pub(crate) async fn all(&self) -> Result<Vec<DomainRef>, StoreError> {
        let mut all = vec![DomainRef {
            name: self.default.clone(),
            id: None,
        }];
        for d in self.store.list_domains().await? {
            self.remember(&d);
            all.push(DomainRef {
                name: d.name,
                id: Some(d.id),
            });
        }
        Ok(all)
    }

    /// The short URL of `link`: on its domain, with the public base URL's scheme.
    pub(crate) fn short_url(&self, link: &Link) -> String {
        let (code, id) = split_key(&link.code);
        match id {
            None => format!("{}/{}", self.public_base_url.trim_end_matches('/'), code),
            Some(_) => {
                let scheme = self.public_base_url.split_once("://").map_or("https", |(s, _)| s);
                format!("{scheme}://{}/{code}", self.of_link(link))
            }
        }
    }

    /// The domain a create or a link address means for `caller`: `requested`, else the
    /// first domain of a scoped key, else the default one; 403 when the key is not scoped
    /// to it.
    pub(crate) async fn domain_for(&self, caller: &Caller, requested: Option<&str>) -> Result<DomainRef, ApiError> {
        let scope = match caller {
            Caller::Key(p) => p.domains.as_deref(),
            Caller::Anonymous { .. } => None,
        };
        let name = match (requested, scope) {
            (Some(name), _) => name,
            (None, Some([first, ..])) => first.as_str(),
            (None, _) => self.default_name(),
        };
        let domain = self.resolve(name).await?;
        if let Caller::Key(p) = caller {
            p.require_domain(&domain.name)?;
        }
        Ok(domain)
    }

    /// The key of the link `code` on `domain` (the default one when not given), for
    /// `principal`; a domain that is not one of this service has no such link (404).
    pub(crate) async fn key_of(
        &self,
        principal: &Principal,
        code: &str,
        domain: Option<&str>,
    ) -> Result<String, ApiError> {
        match domain {
            None if principal.domains.is_none() => Ok(code.to_owned()),
            _ => match self.domain_for(&Caller::Key(principal.clone()), domain).await {
                Ok(d) => Ok(d.key(code)),
                Err(ApiError::BadRequest { .. }) => Err(ApiError::NotFound("no such link")),
                Err(e) => Err(e),
            },
        }
    }

    /// The own-host rule for the domains added to the fleet (docs/spec.md §5, §11): 400
    /// `invalid_url` when `target` (validated) is on one of them, at any port, as a target
    /// on the default domain's host and port is. `field` names a page URL; `None` is a
    /// link's `long_url`. One strongly consistent read of the store, only for a target on a
    /// name that can be a domain's.
    pub(crate) async fn refuse_served_domain(&self, field: Option<&'static str>, target: &str) -> Result<(), ApiError> {
        match self.is_on_served_domain(target).await? {
            true => Err(own_host(field)),
            false => Ok(()),
        }
    }

    /// Whether `target` is on a domain added to the fleet, at any port (the store says).
    pub(crate) async fn is_on_served_domain(&self, target: &str) -> Result<bool, ApiError> {
        let Some(name) = served_name_of(target).filter(|n| is_dns_name(n) && *n != self.default_name()) else {
            return Ok(false);
        };
        Ok(self.store.get_domain(&name).await?.is_some())
    }
}

/// The refusal of a target on a host the fleet serves; `field` names a page URL.
pub(crate) fn own_host(field: Option<&str>) -> ApiError {
    let e = TargetError::OwnHost;
    match field {
        Some(field) => ApiError::bad_request("invalid_url", format!("{field}: {e}")),
        None => ApiError::bad_request("invalid_url", e.to_string()),
    }
}
