//! The domains resource (docs/spec.md §11): adding a domain (its page URLs checked as
//! targets, refused while what already targets it would loop), showing it with its
//! certificate's state, setting its app links (§14; the default domain's too, kept in a
//! record of their own), removing it (its active links taken down first when asked). Every
//! change bumps the store's `DOMAINS_CHANGED_COUNTER`, which the data planes poll. The HTTP
//! handlers are `http::domains`.

use crate::auth::Principal;
use crate::error::ApiError;
use crate::indexes::LinkIndexes;
use crate::links::LinkService;
use crate::names::{own_host, DomainNames};
use rebound_api_types::{AppLinksRequest, CreateDomainRequest, DomainView};
use rebound_core::app_links::{document_text, AppLinkDocument, AppLinkError, AppLinks};
use rebound_core::domain::{
    domain_id, normalize_domain, split_key, CertificateSource, Domain, DomainPages, DOMAINS_CHANGED_COUNTER,
    DOMAIN_ID_COUNTER,
};
use rebound_core::target::is_on_domain;
use rebound_core::time::to_rfc3339;
use rebound_core::{Clock, Link};
use rebound_store::{AuditEvent, Store, StoreError};
use std::sync::Arc;

/// Links read per page when a domain's links are looked for.
const SCAN_PAGE: usize = 1_000;

/// Links a refused domain add names, at most (the message gives the count of the rest).
const NAMED_LINKS: usize = 5;

/// The domains service: what the domain handlers do, apart from HTTP.
pub(crate) struct DomainService {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) names: Arc<DomainNames>,
    /// Takes a removed domain's links down; its target policy checks page URLs.
    pub(crate) links: Arc<LinkService>,
    pub(crate) indexes: Arc<LinkIndexes>,
}

impl DomainService {
    /// Every domain `principal` may use: the default one first, then the others by name.
    pub(crate) async fn list(&self, principal: &Principal) -> Result<Vec<DomainView>, ApiError> {
        let mut views = Vec::new();
        if principal.may_use_domain(self.names.default_name()) {
            views.push(self.domain_view(None).await?);
        }
        for d in self.store.list_domains().await? {
            self.names.remember(&d);
            if principal.may_use_domain(&d.name) {
                views.push(self.domain_view(Some(&d)).await?);
            }
        }
        Ok(views)
    }

    /// The domain `name`, if `principal` may use it (404 when it is no domain).
    pub(crate) async fn get(&self, principal: &Principal, name: &str) -> Result<DomainView, ApiError> {
        let domain = self
            .names
            .resolve(name)
            .await
            .map_err(|_| ApiError::NotFound("no such domain"))?;
        principal.require_domain(&domain.name)?;
        let record = match domain.id {
            None => None,
            Some(_) => Some(
                self.store
                    .get_domain(&domain.name)
                    .await?
                    .ok_or(ApiError::NotFound("no such domain"))?,
            ),
        };
        self.domain_view(record.as_ref()).await
    }

    /// A domain as the API shows it, with its certificate's state.
    pub(crate) async fn domain_view(&self, domain: Option<&Domain>) -> Result<DomainView, ApiError> {
        let name = domain.map_or(self.names.default_name(), |d| d.name.as_str());
        let certificate = self.store.get_certificate(name).await?;
        let source = match (domain, &certificate) {
            (Some(d), _) => d.certificate,
            (None, Some(_)) => CertificateSource::Acme,
            (None, None) => CertificateSource::Files,
        };
        let error = domain.and_then(|d| d.certificate_error.clone());
        let state = match (&certificate, &error, source) {
            (Some(_), None, _) => "issued",
            (_, Some(_), _) => "failing",
            (None, None, CertificateSource::Files) => "files",
            (None, None, CertificateSource::Acme) => "pending",
        };
        let pages = domain.map(|d| d.pages.clone()).unwrap_or_default();
        let app_links = match domain {
            Some(d) => d.app_links.clone(),
            None => self.store.default_app_links().await?,
        };
        let shown =
            |document| {
                app_links.get(document).and_then(|text| match serde_json::from_str(text) {
                Ok(value) => Some(value),
                Err(e) => {
                    // Stored checked: only a store written by hand.
                    tracing::error!(domain = name, error = %e, "an app links document in the store is not JSON");
                    None
                }
            })
            };
        Ok(DomainView {
            name: name.to_owned(),
            default: domain.is_none(),
            certificate: match source {
                CertificateSource::Acme => "acme",
                CertificateSource::Files => "files",
            }
            .to_owned(),
            state: state.to_owned(),
            certificate_expires_at: certificate.map(|c| to_rfc3339(c.not_after)),
            certificate_error: error,
            certificate_attempt_at: domain.and_then(|d| d.certificate_attempt_at).map(to_rfc3339),
            not_found_url: pages.not_found_url,
            expired_url: pages.expired_url,
            root_url: pages.root_url,
            apple_app_site_association: shown(AppLinkDocument::AppleAppSiteAssociation),
            assetlinks: shown(AppLinkDocument::Assetlinks),
            created_at: domain.map(|d| to_rfc3339(d.created_at)),
            created_by: domain.map(|d| d.created_by.clone()),
        })
    }

    /// Tells the data planes the domains changed (they poll the counter's mark).
    async fn domains_changed(&self) -> Result<(), ApiError> {
        self.store.lease_block(DOMAINS_CHANGED_COUNTER, 1).await?;
        Ok(())
    }

    /// A page URL of the domain `name` being added, checked as a link's target: never on
    /// the default domain's host, the domain itself, or another domain the fleet serves.
    async fn page_url(&self, name: &str, field: &'static str, url: Option<String>) -> Result<Option<String>, ApiError> {
        let Some(url) = url else {
            return Ok(None);
        };
        let url = self
            .links
            .targets
            .validate(&url)
            .map_err(|e| ApiError::bad_request("invalid_url", format!("{field}: {e}")))?;
        if is_on_domain(&url, name) {
            return Err(own_host(Some(field)));
        }
        self.names.refuse_served_domain(Some(field), &url).await?;
        Ok(Some(url))
    }

    /// What already targets the name of a domain about to be added, which would loop once it
    /// is served: the links that redirect (active and not expired; an expired link cannot be
    /// edited back, and a reinstated one is checked again), up to [`NAMED_LINKS`] of them by
    /// short URL with the count of all; and the other domains whose page URLs are on it. A
    /// read of the links on that host alone (the store's index by target host).
    async fn targeting(&self, name: &str) -> Result<(Vec<String>, usize, Vec<String>), ApiError> {
        let now = self.clock.now_millis();
        let (mut cursor, mut named, mut count) = (None::<String>, Vec::new(), 0);
        self.indexes.complete().await?;
        let Some(key) = rebound_core::threat::host_key(&format!("https://{name}/")) else {
            return Err(ApiError::bad_request("invalid_domain", "not a domain name"));
        };
        loop {
            let page = self
                .store
                .links_by_target_host(&key, SCAN_PAGE, cursor.as_deref())
                .await?;
            let found: Vec<Link> = page
                .links
                .into_iter()
                .filter(|l| l.is_active && !l.is_expired(now) && is_on_domain(&l.long_url, name))
                .collect();
            count += found.len();
            if named.len() < NAMED_LINKS && !found.is_empty() {
                self.names.learn(&found).await?;
                named.extend(
                    found
                        .iter()
                        .take(NAMED_LINKS - named.len())
                        .map(|l| self.names.short_url(l)),
                );
            }
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        let pages = self
            .store
            .list_domains()
            .await?
            .into_iter()
            .filter(|d| {
                [&d.pages.not_found_url, &d.pages.expired_url, &d.pages.root_url]
                    .into_iter()
                    .flatten()
                    .any(|url| is_on_domain(url, name))
            })
            .map(|d| d.name)
            .collect();
        Ok((named, count, pages))
    }

    /// Adds a domain (docs/spec.md §11): a new id from the counter, the conditional insert, then the
    /// data planes are told and the audit log records it.
    pub(crate) async fn add_domain(&self, principal: &Principal, req: CreateDomainRequest) -> Result<Domain, ApiError> {
        principal.require_operator()?;
        let name =
            normalize_domain(&req.name).map_err(|e| ApiError::bad_request("invalid_domain", format!("name {e}")))?;
        if name == self.names.default_name() {
            return Err(ApiError::Conflict {
                code: "domain_exists",
                message: "this is the default domain",
            });
        }
        let certificate = match req.certificate.as_deref() {
            None | Some("acme") => CertificateSource::Acme,
            Some("files") => CertificateSource::Files,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "invalid_certificate",
                    "certificate must be acme or files",
                ))
            }
        };
        let pages = DomainPages {
            not_found_url: self.page_url(&name, "not_found_url", req.not_found_url).await?,
            expired_url: self.page_url(&name, "expired_url", req.expired_url).await?,
            root_url: self.page_url(&name, "root_url", req.root_url).await?,
        };
        let app_links = app_links_of(AppLinksRequest {
            apple_app_site_association: req.apple_app_site_association,
            assetlinks: req.assetlinks,
        })?;
        if self.store.get_domain(&name).await?.is_some() {
            return Err(ApiError::Conflict {
                code: "domain_exists",
                message: "this domain is already added",
            });
        }
        // Served, the name would loop what already targets it: refused, naming it.
        let (links, count, pages_on_it) = self.targeting(&name).await?;
        if count > 0 || !pages_on_it.is_empty() {
            let mut what = Vec::new();
            if count > 0 {
                let more = match count - links.len() {
                    0 => String::new(),
                    rest => format!(" and {rest} more"),
                };
                what.push(format!("{count} link(s) target it ({}{more})", links.join(", ")));
            }
            if !pages_on_it.is_empty() {
                what.push(format!("the page URLs of {} are on it", pages_on_it.join(", ")));
            }
            return Err(ApiError::ConflictWith {
                code: "domain_targeted",
                message: format!(
                    "served, this domain would loop: {}; edit or delete them first",
                    what.join("; ")
                ),
            });
        }
        // Values from 0: an id is never reused, even when its insert then fails.
        let value = self.store.lease_block(DOMAIN_ID_COUNTER, 1).await?.start + 1;
        let domain = Domain {
            name,
            id: domain_id(value),
            created_at: self.clock.now_millis(),
            created_by: principal.id.clone(),
            certificate,
            pages,
            certificate_error: None,
            certificate_attempt_at: None,
            app_links,
        };
        match self.store.insert_domain(&domain).await {
            Ok(()) => {}
            Err(StoreError::AlreadyExists) => {
                return Err(ApiError::Conflict {
                    code: "domain_exists",
                    message: "this domain is already added",
                })
            }
            Err(e) => return Err(e.into()),
        }
        self.names.remember(&domain);
        self.domains_changed().await?;
        self.audit_domain(principal, "domain_add", &domain.name).await;
        tracing::info!(domain = %domain.name, id = %domain.id, by = %principal.id, "domain added");
        Ok(domain)
    }

    /// The active links of the domain `id`, through the store's per-domain index.
    async fn active_links_of(&self, id: &str) -> Result<Vec<Link>, ApiError> {
        let now = self.clock.now_millis();
        let (mut cursor, mut found) = (None::<String>, Vec::new());
        self.indexes.complete().await?;
        loop {
            let page = self.store.links_on_domain(id, SCAN_PAGE, cursor.as_deref()).await?;
            found.extend(
                page.links
                    .into_iter()
                    .filter(|l| split_key(&l.code).1 == Some(id) && l.is_active && !l.is_expired(now)),
            );
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(found),
            }
        }
    }

    /// Removes a domain: refused while it has active links unless `take_down`, which takes
    /// each down first (recorded in the audit log as any takedown). Its links' keys carry
    /// its id, which is never given again, so a domain added again later does not bring
    /// them back.
    pub(crate) async fn remove_domain(
        &self,
        principal: &Principal,
        name: &str,
        take_down: bool,
    ) -> Result<u64, ApiError> {
        principal.require_operator()?;
        let domain = self.names.resolve(name).await.map_err(|e| match e {
            ApiError::BadRequest { .. } => ApiError::NotFound("no such domain"),
            other => other,
        })?;
        let Some(id) = domain.id else {
            return Err(ApiError::Conflict {
                code: "default_domain",
                message: "the default domain cannot be removed",
            });
        };
        let active = self.active_links_of(&id).await?;
        if !active.is_empty() && !take_down {
            return Err(ApiError::Conflict {
                code: "domain_has_links",
                message: "the domain has active links: take them down first, or remove it with take_down=true",
            });
        }
        let reason = format!("domain {} removed", domain.name);
        for link in &active {
            self.links
                .take_down(principal, &link.code, Some(reason.clone()), "takedown")
                .await?;
        }
        match self.store.delete_domain(&domain.name).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        self.names.forget(&id);
        self.domains_changed().await?;
        self.audit_domain(principal, "domain_remove", &domain.name).await;
        tracing::info!(domain = %domain.name, taken_down = active.len(), by = %principal.id, "domain removed");
        Ok(active.len() as u64)
    }

    /// Replaces the app links of the domain `name` (docs/spec.md §14), the default
    /// domain's included: each document checked first (nothing written when one is
    /// refused), then written apart from the rest of the domain's record; the data planes
    /// are told and the audit log records which documents changed, old and new, by length
    /// and SHA-256.
    pub(crate) async fn set_app_links(
        &self,
        principal: &Principal,
        name: &str,
        req: AppLinksRequest,
    ) -> Result<DomainView, ApiError> {
        principal.require_operator()?;
        let links = app_links_of(req)?;
        let domain = self.names.resolve(name).await.map_err(|e| match e {
            ApiError::BadRequest { .. } => ApiError::NotFound("no such domain"),
            other => other,
        })?;
        let (old, record) = match &domain.id {
            None => {
                let old = self.store.default_app_links().await?;
                self.store.set_default_app_links(&links).await?;
                (old, None)
            }
            Some(_) => {
                let no_such = || ApiError::NotFound("no such domain");
                let record = self.store.get_domain(&domain.name).await?.ok_or_else(no_such)?;
                match self.store.set_app_links(&domain.name, &links).await {
                    Ok(()) => {}
                    Err(StoreError::NotFound) => return Err(no_such()),
                    Err(e) => return Err(e.into()),
                }
                let old = record.app_links.clone();
                (
                    old,
                    Some(Domain {
                        app_links: links.clone(),
                        ..record
                    }),
                )
            }
        };
        self.domains_changed().await?;
        let changes = app_links_changes(&old, &links);
        self.audit_domain_with(principal, "domain_app_links", &domain.name, Some(changes))
            .await;
        tracing::info!(domain = %domain.name, by = %principal.id, "domain app links set");
        match &record {
            Some(record) => self.domain_view(Some(record)).await,
            None => self.domain_view(None).await,
        }
    }

    async fn audit_domain(&self, principal: &Principal, action: &str, name: &str) {
        self.audit_domain_with(principal, action, name, None).await
    }

    async fn audit_domain_with(&self, principal: &Principal, action: &str, name: &str, detail: Option<String>) {
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: action.to_owned(),
            code: None,
            reason: Some(name.to_owned()),
            outcome: "ok".to_owned(),
            detail,
        };
        if let Err(e) = self.store.append_audit(&event).await {
            tracing::warn!(error = %rebound_core::Causes(&e), domain = name, action, "domain change not audited");
        }
    }
}

/// The app links of a request, each document checked (docs/spec.md §14) and made its
/// compact text: 400 `invalid_app_links` for one of the wrong shape, 413
/// `document_too_large` for one over its bound, the message naming it.
pub(crate) fn app_links_of(req: AppLinksRequest) -> Result<AppLinks, ApiError> {
    let text = |document, value: Option<serde_json::Value>| {
        value
            .map(|v| document_text(document, &v))
            .transpose()
            .map_err(|e| match e {
                AppLinkError::TooLarge { .. } => ApiError::DocumentTooLarge(e.to_string()),
                _ => ApiError::bad_request("invalid_app_links", e.to_string()),
            })
    };
    Ok(AppLinks {
        apple_app_site_association: text(AppLinkDocument::AppleAppSiteAssociation, req.apple_app_site_association)?,
        assetlinks: text(AppLinkDocument::Assetlinks, req.assetlinks)?,
    })
}

/// What an app links change did, for the audit log: `{"old": {...}, "new": {...}}` with
/// each document that changed as `{"bytes", "sha256"}` (null: none), not the documents
/// themselves (up to 64 KiB each).
fn app_links_changes(old: &AppLinks, new: &AppLinks) -> String {
    use sha2::{Digest, Sha256};
    let summary = |text: Option<&str>| match text {
        Some(t) => serde_json::json!({"bytes": t.len(), "sha256": hex::encode(Sha256::digest(t.as_bytes()))}),
        None => serde_json::Value::Null,
    };
    let (mut was, mut is) = (serde_json::Map::new(), serde_json::Map::new());
    for document in AppLinkDocument::ALL {
        let (before, after) = (old.get(document), new.get(document));
        if before != after {
            was.insert(document.field().to_owned(), summary(before));
            is.insert(document.field().to_owned(), summary(after));
        }
    }
    serde_json::json!({"old": was, "new": is}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_s_documents_are_checked_and_the_refusal_names_the_field() {
        let statement = json!({"relation": ["delegate_permission/common.handle_all_urls"],
                               "target": {"namespace": "android_app", "package_name": "com.acme"}});
        let req = |apple: serde_json::Value, android: serde_json::Value| AppLinksRequest {
            apple_app_site_association: (!apple.is_null()).then_some(apple),
            assetlinks: (!android.is_null()).then_some(android),
        };
        let big = "x".repeat(rebound_core::app_links::MAX_DOCUMENT_BYTES);
        // The refusal's status, code and the first word of its message; none: accepted.
        type Refusal = Option<(u16, &'static str, &'static str)>;
        let cases: Vec<(AppLinksRequest, Refusal)> = vec![
            (req(json!({"applinks": {}}), json!([statement])), None),
            (req(json!(null), json!(null)), None),
            (req(json!({"applinks": {}}), json!(null)), None),
            (
                req(json!([]), json!(null)),
                Some((400, "invalid_app_links", "apple_app_site_association")),
            ),
            (
                req(json!(null), json!({"relation": []})),
                Some((400, "invalid_app_links", "assetlinks")),
            ),
            (
                req(json!(null), json!([statement, {"relation": ["x"]}])),
                Some((400, "invalid_app_links", "assetlinks[1]")),
            ),
            (
                req(json!({"k": big}), json!([statement])),
                Some((413, "document_too_large", "apple_app_site_association")),
            ),
            (
                req(
                    json!({}),
                    json!([{"relation": ["r"], "target": {"namespace": "web", "site": big}}]),
                ),
                Some((413, "document_too_large", "assetlinks")),
            ),
        ];
        for (request, want) in cases {
            let shown = format!("{request:?}").chars().take(120).collect::<String>();
            match (app_links_of(request), want) {
                (Ok(links), None) => {
                    if let Some(text) = &links.assetlinks {
                        assert_eq!(
                            serde_json::from_str::<serde_json::Value>(text).unwrap(),
                            json!([statement])
                        );
                    }
                }
                (Err(e), Some((status, code, word))) => {
                    let (s, c) = e.status_and_code();
                    assert_eq!((s.as_u16(), c), (status, code), "{shown}");
                    assert!(e.to_string().starts_with(word), "{e}");
                }
                (got, want) => panic!("{shown}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn the_audit_names_the_documents_that_changed_by_length_and_digest() {
        let old = AppLinks {
            apple_app_site_association: Some("{}".into()),
            assetlinks: Some("[]".into()),
        };
        let new = AppLinks {
            apple_app_site_association: Some("{}".into()),
            assetlinks: None,
        };
        let detail: serde_json::Value = serde_json::from_str(&app_links_changes(&old, &new)).unwrap();
        assert_eq!(
            detail,
            json!({
                "old": {"assetlinks": {"bytes": 2, "sha256": "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"}},
                "new": {"assetlinks": null},
            })
        );
    }
}
