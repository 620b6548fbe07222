//! Domains (docs/spec.md §11) in the control plane: which domain a request means, the names of the
//! domains its links' keys carry, and `POST/GET/DELETE /api/v1/domains`.
//!
//! A domain's id is in every key of its links (`rebound_core::domain`); the names are kept
//! here, learnt from the store: a request naming a domain reads it (strongly consistent,
//! so a domain another control plane just added is found), and a listing whose links carry
//! an id not known yet reads the list once. Every change bumps the store's
//! `DOMAINS_CHANGED_COUNTER`, which the data planes poll.

use crate::auth::{Caller, Principal};
use crate::error::{ApiError, ErrorBody};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use rebound_api_types::{CreateDomainRequest, DomainList, DomainRemoved, DomainView};
use rebound_core::domain::is_dns_name;
use rebound_core::domain::{
    domain_id, normalize_domain, split_key, CertificateSource, Domain, DomainPages, DOMAINS_CHANGED_COUNTER,
    DOMAIN_ID_COUNTER,
};
use rebound_core::target::{is_on_domain, served_name_of, TargetError};
use rebound_core::time::to_rfc3339;
use rebound_core::Link;
use rebound_store::{AuditEvent, StoreError};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Links read per page when a domain's links are looked for.
const SCAN_PAGE: usize = 1_000;

/// Links a refused domain add names, at most (the message gives the count of the rest).
const NAMED_LINKS: usize = 5;

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
pub(crate) struct Domains {
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

impl Domains {
    /// The default domain is the host of `public_base_url` (checked at start).
    pub(crate) fn new(public_base_url: &str) -> Domains {
        let default = url::Url::parse(public_base_url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_end_matches('.').to_ascii_lowercase()))
            .unwrap_or_default();
        Domains {
            default,
            by_id: RwLock::new(Known::default()),
        }
    }

    pub(crate) fn default_name(&self) -> &str {
        &self.default
    }

    fn remember(&self, domain: &Domain) {
        self.by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .names
            .insert(domain.id.clone(), domain.name.clone());
    }

    /// The domain `id` was removed.
    fn forget(&self, id: &str) {
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
    pub(crate) async fn learn(&self, store: &dyn rebound_store::Store, links: &[Link]) -> Result<(), StoreError> {
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
        let listed = store.list_domains().await?;
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
    pub(crate) async fn resolve(&self, store: &dyn rebound_store::Store, name: &str) -> Result<DomainRef, ApiError> {
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
        match store.get_domain(&name).await? {
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
}

impl ControlPlane {
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
            (None, _) => self.domains.default_name(),
        };
        let domain = self.domains.resolve(self.store.as_ref(), name).await?;
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

    /// A domain as the API shows it, with its certificate's state.
    async fn domain_view(&self, domain: Option<&Domain>) -> Result<DomainView, ApiError> {
        let name = domain.map_or(self.domains.default_name(), |d| d.name.as_str());
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
            .targets
            .validate(&url)
            .map_err(|e| ApiError::bad_request("invalid_url", format!("{field}: {e}")))?;
        if is_on_domain(&url, name) {
            return Err(own_host(Some(field)));
        }
        self.refuse_served_domain(Some(field), &url).await?;
        Ok(Some(url))
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
        let Some(name) = served_name_of(target).filter(|n| is_dns_name(n) && *n != self.domains.default_name()) else {
            return Ok(false);
        };
        Ok(self.store.get_domain(&name).await?.is_some())
    }

    /// What already targets the name of a domain about to be added, which would loop once it
    /// is served: the links that redirect (active and not expired; an expired link cannot be
    /// edited back, and a reinstated one is checked again), up to [`NAMED_LINKS`] of them by
    /// short URL with the count of all; and the other domains whose page URLs are on it. A
    /// read of the links on that host alone (the store's index by target host).
    async fn targeting(&self, name: &str) -> Result<(Vec<String>, usize, Vec<String>), ApiError> {
        let now = self.clock.now_millis();
        let (mut cursor, mut named, mut count) = (None::<String>, Vec::new(), 0);
        self.index_older_links().await?;
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
                self.domains.learn(self.store.as_ref(), &found).await?;
                named.extend(found.iter().take(NAMED_LINKS - named.len()).map(|l| self.short_url(l)));
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
    async fn add_domain(&self, principal: &Principal, req: CreateDomainRequest) -> Result<Domain, ApiError> {
        principal.require_operator()?;
        let name =
            normalize_domain(&req.name).map_err(|e| ApiError::bad_request("invalid_domain", format!("name {e}")))?;
        if name == self.domains.default_name() {
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
        self.domains.remember(&domain);
        self.domains_changed().await?;
        self.audit_domain(principal, "domain_add", &domain.name).await;
        tracing::info!(domain = %domain.name, id = %domain.id, by = %principal.id, "domain added");
        Ok(domain)
    }

    /// The active links of the domain `id`, through the store's per-domain index.
    async fn active_links_of(&self, id: &str) -> Result<Vec<Link>, ApiError> {
        let now = self.clock.now_millis();
        let (mut cursor, mut found) = (None::<String>, Vec::new());
        self.index_older_links().await?;
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
    async fn remove_domain(&self, principal: &Principal, name: &str, take_down: bool) -> Result<u64, ApiError> {
        principal.require_operator()?;
        let domain = self
            .domains
            .resolve(self.store.as_ref(), name)
            .await
            .map_err(|e| match e {
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
            self.take_down(principal, &link.code, Some(reason.clone()), "takedown")
                .await?;
        }
        match self.store.delete_domain(&domain.name).await {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        self.domains.forget(&id);
        self.domains_changed().await?;
        self.audit_domain(principal, "domain_remove", &domain.name).await;
        tracing::info!(domain = %domain.name, taken_down = active.len(), by = %principal.id, "domain removed");
        Ok(active.len() as u64)
    }

    async fn audit_domain(&self, principal: &Principal, action: &str, name: &str) {
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: action.to_owned(),
            code: None,
            reason: Some(name.to_owned()),
            outcome: "ok".to_owned(),
            detail: None,
        };
        if let Err(e) = self.store.append_audit(&event).await {
            tracing::warn!(error = %rebound_core::Causes(&e), domain = name, action, "domain change not audited");
        }
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

type Cp = State<Arc<ControlPlane>>;

#[utoipa::path(post, path = "/api/v1/domains", tag = "domains", request_body = CreateDomainRequest,
    responses(
        (status = 201, description = "Added; every proxy routes it within seconds", body = DomainView),
        (status = 400, description = "Not a DNS name, a bad page URL (one on a host the fleet serves included) or certificate source, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 409, description = "Already added, or the default domain (`domain_exists`); or links, or other domains' page URLs, already target it and would loop once it is served (`domain_targeted`: the message names them)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn create_domain(
    State(cp): Cp,
    caller: Caller,
    body: Result<crate::body::ApiJson<CreateDomainRequest>, ApiError>,
) -> Result<(StatusCode, Json<DomainView>), ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let domain = cp.add_domain(&principal, body?.value).await?;
    Ok((StatusCode::CREATED, Json(cp.domain_view(Some(&domain)).await?)))
}

#[utoipa::path(get, path = "/api/v1/domains", tag = "domains",
    responses(
        (status = 200, description = "The default domain first, then the others by name; a key scoped to domains sees only those", body = DomainList),
        (status = 401, description = "No valid key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn list_domains(State(cp): Cp, caller: Caller) -> Result<Json<DomainList>, ApiError> {
    let principal = caller.principal()?;
    let mut views = Vec::new();
    if principal.may_use_domain(cp.domains.default_name()) {
        views.push(cp.domain_view(None).await?);
    }
    for d in cp.store.list_domains().await? {
        cp.domains.remember(&d);
        if principal.may_use_domain(&d.name) {
            views.push(cp.domain_view(Some(&d)).await?);
        }
    }
    Ok(Json(DomainList { domains: views }))
}

#[utoipa::path(get, path = "/api/v1/domains/{name}", tag = "domains",
    params(("name" = String, Path, description = "The domain")),
    responses(
        (status = 200, description = "The domain and its certificate's state", body = DomainView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "A key not scoped to it", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn get_domain(
    State(cp): Cp,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<DomainView>, ApiError> {
    let principal = caller.principal()?;
    let domain = cp
        .domains
        .resolve(cp.store.as_ref(), &name)
        .await
        .map_err(|_| ApiError::NotFound("no such domain"))?;
    principal.require_domain(&domain.name)?;
    let record = match domain.id {
        None => None,
        Some(_) => Some(
            cp.store
                .get_domain(&domain.name)
                .await?
                .ok_or(ApiError::NotFound("no such domain"))?,
        ),
    };
    Ok(Json(cp.domain_view(record.as_ref()).await?))
}

/// The query of `DELETE /api/v1/domains/{name}`.
#[derive(Debug, Deserialize)]
pub(crate) struct RemoveQuery {
    take_down: Option<String>,
}

#[utoipa::path(delete, path = "/api/v1/domains/{name}", tag = "domains",
    params(
        ("name" = String, Path, description = "The domain"),
        ("take_down" = Option<bool>, Query, description = "Take its active links down first (each recorded in the audit log); without it a domain with active links is refused"),
    ),
    responses(
        (status = 200, description = "Removed; its links no longer redirect", body = DomainRemoved),
        (status = 400, description = "take_down is not true or false", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
        (status = 409, description = "The default domain, or active links and no take_down", body = ErrorBody),
        (status = 503, description = "A link could not be taken down everywhere; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn delete_domain(
    State(cp): Cp,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> Result<Json<DomainRemoved>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let Query(q) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let take_down = match q.take_down.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                "take_down must be true or false",
            ))
        }
    };
    let taken_down = cp.remove_domain(&principal, &name, take_down).await?;
    let name = normalize_domain(&name).unwrap_or(name);
    Ok(Json(DomainRemoved { name, taken_down }))
}
