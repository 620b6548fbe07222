//! The abuse resource (docs/spec.md §12): the threat lists creates and edits are checked
//! against, the rescan that takes matching active links down (`threat-list:<name>`,
//! reversible by an operator: `reinstate`), the lists' state for operators, and anonymous
//! abuse reports. The HTTP handlers are `http::abuse`.
//!
//! Loading the lists (files, URLs, the schedule) is [`crate::threat_loader`]'s: it hands
//! each load to [`AbuseService::install_threat_lists`] and asks for a
//! [`AbuseService::rescan_threats`] when a list changed. Nothing here fetches anything.

use crate::auth::{Caller, Principal};
use crate::error::ApiError;
use crate::indexes::LinkIndexes;
use crate::links::LinkService;
use crate::metrics::ApiMetrics;
use crate::names::DomainNames;
use crate::ratelimit::CreateRateLimiter;
use rebound_api_types::{ReportRequest, ReportView, ThreatListView, ThreatListsView};
use rebound_core::threat::ThreatIndex;
use rebound_core::time::to_rfc3339;
use rebound_core::{Clock, Link, UnixMillis};
use rebound_store::{AuditEvent, Role, Store, StoreError};
use std::sync::Arc;

pub use crate::threat_lists::{ListState, RescanOutcome, ThreatLists};

/// The prefix of the reason of a takedown a threat list made, before the list's name.
pub const THREAT_REASON_PREFIX: &str = "threat-list:";
/// The actor of the takedowns a rescan makes.
pub const THREAT_ACTOR: &str = "threat-lists";
/// The audit stream every report is also appended to, for the operators' listing.
const REPORTS_STREAM: &str = "#reports";
/// Reports a client may send at once, and one more every this many seconds.
const REPORT_BURST: u32 = 5;
const REPORT_EVERY_SECS: f64 = 60.0;
/// Reports listed at most, newest first.
const REPORTS_LISTED: usize = 500;

/// The setting that records an operator's decision that the link `key` stays up while it
/// points at `target`, whatever the lists say: an edit of its target ends it.
fn allowed_setting(key: &str, target: &str) -> String {
    use sha2::Digest;
    let target = hex::encode(sha2::Sha256::digest(target.as_bytes()));
    format!("threat_allowed:{key}:{target}")
}

/// The setting an earlier version recorded for a reinstatement, whatever the target: it
/// still counts until the link's target is edited after that reinstatement.
fn allowed_setting_before_targets(key: &str) -> String {
    format!("threat_allowed:{key}")
}

/// Links read per page of the index of links by target host.
const LOOKUP_PAGE: usize = 1000;

/// The abuse service: threat lists, their rescans, reinstatements and abuse reports.
pub struct AbuseService {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) names: Arc<DomainNames>,
    /// Takes links down and puts them back.
    pub(crate) links: Arc<LinkService>,
    pub(crate) indexes: Arc<LinkIndexes>,
    /// The threat lists in force (shared with the links service, which checks targets).
    pub(crate) threats: Arc<ThreatLists>,
    /// Held by the rescan under way: one at a time.
    pub(crate) rescanning: tokio::sync::Mutex<()>,
    /// Reports per client (its own buckets, apart from the creation limits).
    pub(crate) reports_limiter: CreateRateLimiter,
    pub(crate) metrics: ApiMetrics,
}

impl AbuseService {
    /// The threat lists in force (their loader installs them).
    pub fn threat_lists(&self) -> &ThreatLists {
        &self.threats
    }

    /// Now, by its clock.
    pub fn now(&self) -> UnixMillis {
        self.clock.now_millis()
    }

    /// Puts the lists' index and states in force after a load of every list (counted in the
    /// metrics: a state with an error is a load that failed).
    pub fn install_threat_lists(&self, index: ThreatIndex, lists: Vec<ListState>) {
        self.threats.install_index(index);
        self.update_threat_lists(lists);
    }

    /// Puts the lists' states in force after a load of every list that changed no list's
    /// entries (the index in force stays; counted in the metrics like an install).
    pub fn update_threat_lists(&self, lists: Vec<ListState>) {
        for l in &lists {
            self.metrics.threat_loaded(&l.name, l.entries, l.error.is_some());
        }
        self.threats.install_states(lists);
    }

    /// Takes down each active link a list holds (reason `threat-list:<name>`, actor
    /// `threat-lists`, audited), unless an operator reinstated it for its present target.
    /// Run by the loader after a list changed; one rescan at a time. Reads only the links on
    /// the hosts of the entries added since the last rescan with no failure (all entries
    /// after a start), through the store's index of active links by target host: links
    /// made or edited since were checked against the entries in force when they were
    /// written, so what an entry there before matched is down already. A list that goes
    /// back to entries it dropped looks them up again. A store written by an older version
    /// has its links indexed first, once for the fleet ([`LinkIndexes::complete`]).
    pub async fn rescan_threats(&self) -> Result<RescanOutcome, StoreError> {
        let _one = self.rescanning.lock().await;
        let started = std::time::Instant::now();
        let index = self.threats.index();
        let before = self.threats.rescanned.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut outcome = RescanOutcome {
            at: self.clock.now_millis(),
            ..RescanOutcome::default()
        };
        let keys = index.host_keys_added_since(before.as_deref());
        self.indexes.complete().await?;
        // Each link checked once, though both reads below may find it.
        let mut checked = std::collections::HashSet::new();
        for key in &keys {
            outcome.looked_up += 1;
            let mut cursor: Option<String> = None;
            loop {
                let page = self
                    .store
                    .links_by_target_host(key, LOOKUP_PAGE, cursor.as_deref())
                    .await?;
                self.check_against(&index, &page.links, &mut checked, &mut outcome)
                    .await?;
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        // The targets of links' rules (docs/spec.md §14) are not in the index by host: when
        // any entry was added, every link with rules is read through its own index and
        // each of its targets checked.
        if !keys.is_empty() {
            let mut cursor: Option<String> = None;
            loop {
                let page = self.store.links_with_rules(LOOKUP_PAGE, cursor.as_deref()).await?;
                self.check_against(&index, &page.links, &mut checked, &mut outcome)
                    .await?;
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        outcome.millis = started.elapsed().as_millis() as u64;
        if outcome.failed == 0 {
            *self.threats.rescanned.write().unwrap_or_else(|e| e.into_inner()) = Some(index);
        }
        *self.threats.last_rescan.write().unwrap_or_else(|e| e.into_inner()) = Some(outcome.clone());
        Ok(outcome)
    }

    /// Takes down each of `links` that is active, unexpired and on a list of `index`,
    /// unless an operator reinstated it for its present target; counted in `outcome`.
    async fn check_against(
        &self,
        index: &ThreatIndex,
        links: &[Link],
        checked: &mut std::collections::HashSet<String>,
        outcome: &mut RescanOutcome,
    ) -> Result<(), StoreError> {
        let system = Principal {
            id: THREAT_ACTOR.to_owned(),
            role: Role::Operator,
            domains: None,
        };
        let now = self.clock.now_millis();
        for link in links {
            if !checked.insert(link.code.clone()) {
                continue;
            }
            outcome.scanned += 1;
            if !link.is_active || link.is_expired(now) {
                continue;
            }
            // The link's own target, or any web target of its rules: whichever matched,
            // the link goes down.
            let rule_targets = rebound_core::rules::targets(&link.rules).filter(|t| rebound_core::rules::is_web(t));
            let Some(list) = std::iter::once(link.long_url.as_str())
                .chain(rule_targets)
                .find_map(|t| index.find(t))
            else {
                continue;
            };
            outcome.matched += 1;
            if self.reinstated_for_its_target(link).await? {
                outcome.allowed += 1;
                continue;
            }
            let reason = format!("{THREAT_REASON_PREFIX}{list}");
            match self
                .links
                .take_down(&system, &link.code, Some(reason), "takedown")
                .await
            {
                Ok(_) => {
                    outcome.taken_down += 1;
                    self.metrics.threat_takedown(list);
                    tracing::warn!(code = %link.code, list, "taken down: the target is on a threat list");
                }
                Err(e) => {
                    outcome.failed += 1;
                    tracing::warn!(code = %link.code, list, error = %e, "threat-list takedown failed; retried at the next rescan");
                }
            }
        }
        Ok(())
    }

    /// Whether an operator reinstated `link` while it pointed at its present target. A
    /// decision recorded by an earlier version (for no target in particular) counts until
    /// the link's first edit after it.
    async fn reinstated_for_its_target(&self, link: &Link) -> Result<bool, StoreError> {
        if self
            .store
            .read_setting(&allowed_setting(&link.code, &link.long_url))
            .await?
            .is_some()
        {
            return Ok(true);
        }
        if self
            .store
            .read_setting(&allowed_setting_before_targets(&link.code))
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let log = self.store.audit_for(&link.code).await?;
        let reinstated = log.iter().rposition(|e| e.action == "reinstate" && e.outcome == "ok");
        let edited = log.iter().rposition(|e| e.action == "edit" && e.outcome == "ok");
        Ok(match (reinstated, edited) {
            (Some(r), Some(e)) => r > e,
            (Some(_), None) => true,
            (None, _) => false,
        })
    }
}

impl AbuseService {
    /// Undoes a threat list's takedown of `key` (an operator's call): the link active again
    /// at its next version, told to every cache like an edit, audited `reinstate`; and the
    /// operator's decision recorded, so no rescan takes it down again.
    pub(crate) async fn restore(&self, principal: &Principal, key: &str) -> Result<Link, ApiError> {
        let link = self.links.visible_link(principal, key).await?;
        let by_a_list = !link.is_active
            && link
                .delete_reason
                .as_deref()
                .is_some_and(|r| r.starts_with(THREAT_REASON_PREFIX))
            && link.deleted_by.as_deref() == Some(THREAT_ACTOR);
        if !by_a_list {
            return Err(ApiError::Conflict {
                code: "not_restorable",
                message: "only a link a threat list took down can be restored; deletes and takedowns are final",
            });
        }
        // Its target may be on a domain added since: served, it would loop.
        self.names.refuse_served_domain(None, &link.long_url).await?;
        let now = self.clock.now_millis();
        self.store
            .get_or_init_setting(&allowed_setting(key, &link.long_url), &principal.id)
            .await?;
        let lease = self.links.propagations.lease_from(now);
        let restored = match self.store.restore_link_pending(key, link.version, &lease).await {
            Ok(restored) => restored,
            // Changed meanwhile; or this very write landed and the store client's retry of it
            // found its condition spent: active one version on is this reinstatement.
            Err(StoreError::ConditionFailed) => match self.store.get_link(key).await? {
                Some(now) if now.is_active && now.version == link.version + 1 => now,
                _ => {
                    return Err(ApiError::Conflict {
                        code: "conflict",
                        message: "the link was changed by another request meanwhile; retry",
                    })
                }
            },
            Err(e) => return Err(e.into()),
        };
        let delivered = self.links.events.changed(&restored).await;
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: "reinstate".to_owned(),
            code: Some(key.to_owned()),
            reason: link.delete_reason.clone(),
            outcome: "ok".to_owned(),
            detail: None,
        };
        match self.links.settle(&restored, delivered, event).await? {
            true => Ok(restored),
            false => Err(ApiError::EditNotPropagated),
        }
    }
}

impl AbuseService {
    /// The link key a report names: a short URL of this service (its host picks the
    /// domain) or a bare code on the default domain.
    async fn reported_key(&self, named: &str) -> Result<String, ApiError> {
        let named = named.trim();
        let not_ours = || ApiError::bad_request("invalid_link", "link must be a short URL of this service or its code");
        let (host, code) = match url::Url::parse(named) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {
                let code = url.path().trim_start_matches('/').to_owned();
                (url.host_str().map(str::to_owned), code)
            }
            _ => (None, named.to_owned()),
        };
        if rebound_core::code::check_code(&code).is_err() {
            return Err(not_ours());
        }
        let host = host.unwrap_or_else(|| self.names.default_name().to_owned());
        // Apart from the shape above (the document's pattern states it): the host is not
        // one the document can know.
        let domain = self.names.resolve(&host).await.map_err(|e| match e {
            ApiError::BadRequest { .. } => {
                ApiError::bad_request("invalid_link", "link's host is not a domain of this service")
            }
            other => other,
        })?;
        Ok(domain.key(&code))
    }
}

impl AbuseService {
    /// Every configured list with its entries in force and its last load, and the last
    /// rescan.
    pub(crate) fn lists_view(&self) -> ThreatListsView {
        let last = self
            .threats
            .last_rescan
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ThreatListsView {
            lists: self
                .threats
                .lists()
                .into_iter()
                .map(|l| ThreatListView {
                    name: l.name,
                    format: l.format,
                    source: l.source,
                    entries: l.entries as u64,
                    skipped: l.skipped as u64,
                    loaded_at: l.loaded_at.map(to_rfc3339),
                    error: l.error,
                })
                .collect(),
            last_rescan_at: last.as_ref().map(|r| to_rfc3339(r.at)),
            last_rescan_scanned: last.as_ref().map(|r| r.scanned),
            last_rescan_taken_down: last.as_ref().map(|r| r.taken_down),
        }
    }

    /// Records `caller`'s report of a link for the operators (charged to the caller before
    /// any store read).
    pub(crate) async fn report(&self, caller: &Caller, req: ReportRequest) -> Result<(), ApiError> {
        let reason = req.reason.trim().to_owned();
        if reason.is_empty()
            || req.reason.chars().count() > 1000
            || req.reason.chars().any(|c| c.is_control() && c != '\n')
        {
            return Err(ApiError::bad_request(
                "invalid_reason",
                "reason must be 1-1000 characters without control characters",
            ));
        }
        if req.link.len() > 2048 {
            return Err(ApiError::bad_request("invalid_link", "link is longer than 2048 bytes"));
        }
        let now = self.clock.now_millis();
        let (who, actor) = match &caller {
            Caller::Key(p) => (format!("report:{}", p.id), p.id.clone()),
            Caller::Anonymous { ip } => {
                let bucket = crate::ratelimit::anonymous_bucket(*ip);
                (format!("report:{bucket}"), bucket)
            }
        };
        // Charged before any store read: a flood of reports of made-up links costs no more.
        self.reports_limiter
            .take(&who, 1.0 / REPORT_EVERY_SECS, REPORT_BURST, now)
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })?;
        let key = self.reported_key(&req.link).await?;
        let link = self
            .store
            .get_link(&key)
            .await?
            .ok_or(ApiError::NotFound("no such link"))?;
        let detail = serde_json::json!({ "link": link.code, "short_url": self.names.short_url(&link) }).to_string();
        for code in [link.code.as_str(), REPORTS_STREAM] {
            self.store
                .append_audit(&AuditEvent {
                    at: now,
                    actor: actor.clone(),
                    action: "report".to_owned(),
                    code: Some(code.to_owned()),
                    reason: Some(reason.clone()),
                    outcome: "open".to_owned(),
                    detail: Some(detail.clone()),
                })
                .await?;
        }
        self.metrics.reports.inc();
        Ok(())
    }

    /// The newest reports, newest first.
    pub(crate) async fn reports(&self) -> Result<Vec<ReportView>, ApiError> {
        let mut events = self.store.audit_for(REPORTS_STREAM).await?;
        events.reverse();
        events.truncate(REPORTS_LISTED);
        let reports: Vec<ReportView> = events
            .into_iter()
            .map(|e| {
                let detail: serde_json::Value = e
                    .detail
                    .as_deref()
                    .and_then(|d| serde_json::from_str(d).ok())
                    .unwrap_or_default();
                let key = detail["link"].as_str().unwrap_or_default();
                let (code, _) = rebound_core::domain::split_key(key);
                ReportView {
                    at: to_rfc3339(e.at),
                    reporter: e.actor,
                    code: code.to_owned(),
                    short_url: detail["short_url"].as_str().unwrap_or_default().to_owned(),
                    reason: e.reason.unwrap_or_default(),
                }
            })
            .collect();
        Ok(reports)
    }
}
