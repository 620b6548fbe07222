//! The links service: what the link handlers (`http::links`) do, apart from HTTP; every
//! rule of docs/spec.md §5 lives here. This module creates links (rate limits, KGS codes
//! with retries, aliases, idempotency) and shows them; `import` imports up to 1,000 at
//! once, `down` deletes and takes down (the versioned write, then the invalidation, then
//! the audit event), `edit` edits (the same, with the new record), `validate` checks a
//! create request, and `idempotency` compares a retried request with the first.

mod down;
mod edit;
mod idempotency;
mod import;
mod validate;

pub(crate) use down::takedown_reason;

use crate::auth::{Caller, Principal};
use crate::config::ApiSettings;
use crate::error::ApiError;
use crate::kgs::KeyRangeLease;
use crate::metrics::ApiMetrics;
use crate::names::DomainNames;
use crate::ratelimit::CreateRateLimiter;
use crate::reconcile::Propagations;
use crate::threat_lists::ThreatLists;
use idempotency::{replayed, RequestHash};
use rebound_api_types::{CreateLinkRequest, LinkCreated, LinkView};
use rebound_core::domain::{is_valid_key, split_key};
use rebound_core::rules::{is_web, Rule};
use rebound_core::target::TargetPolicy;
use rebound_core::time::to_rfc3339;
use rebound_core::{Clock, Link};
use rebound_store::{IdempotencyRecord, LinkEvents, Role, Store, StoreError};
use std::sync::Arc;
use validate::validate_create;

/// Attempts at a generated code before giving up (a taken one is skipped).
const GENERATED_CODE_ATTEMPTS: usize = 16;

/// Who creates: the owner of the new links and the scope of their idempotency keys.
pub(crate) struct Creator {
    pub(super) owner: String,
    pub(super) scope: String,
}

/// What a create did.
pub(crate) enum Creation {
    /// A new link.
    Created(Link),
    /// The first answer to the same request with the same idempotency key.
    Replayed(IdempotencyRecord),
}

/// Passwords a control plane hashes at once, at most.
pub const HASHES_AT_ONCE: usize = 2;

/// The links service: the ports and policies the links' rules need.
pub(crate) struct LinkService {
    pub(crate) settings: ApiSettings,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) events: Arc<dyn LinkEvents>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) names: Arc<DomainNames>,
    /// Targets of key holders.
    pub(crate) targets: TargetPolicy,
    /// Targets of anonymous callers: also never a mixed-script host.
    pub(crate) anonymous_targets: TargetPolicy,
    pub(crate) codes: KeyRangeLease,
    pub(crate) limiter: CreateRateLimiter,
    /// The threat lists in force, which creates and edits are checked against.
    pub(crate) threats: Arc<ThreatLists>,
    pub(crate) metrics: ApiMetrics,
    /// Pending propagations of deletes, takedowns and edits: cleared by this service,
    /// finished by the reconciler.
    pub(crate) propagations: Propagations,
    /// Passwords hashed or checked at once, at most (each 19 MiB, tens of milliseconds).
    pub(crate) hashing: tokio::sync::Semaphore,
    /// The key of a password's MAC in idempotency fingerprints (the store's
    /// `IDEMPOTENCY_KEY_SETTING`, made once for the fleet).
    pub(crate) idempotency_secret: Vec<u8>,
}

impl LinkService {
    /// Creates a link (docs/spec.md §5): the rate limit, a generated code from the KGS (skipping
    /// one an alias took) or the alias, the conditional insert with its idempotency record
    /// in one write, then the announcement. A retried request with the same key and body
    /// gets the first answer back; with another body, 409.
    pub(crate) async fn create_link(
        &self,
        caller: &Caller,
        creator: Creator,
        idem_key: Option<String>,
        raw: &[u8],
        request: CreateLinkRequest,
    ) -> Result<Creation, ApiError> {
        let now = self.clock.now_millis();
        let Creator { owner, scope } = creator;
        let hash = RequestHash::of_create(&request, raw, &self.idempotency_secret);
        if let Some(key) = &idem_key {
            if let Some(record) = self.store.get_idempotency(&scope, key, now).await? {
                // A replay creates nothing, so it costs nothing: a retry is never refused 429.
                return replayed(record, &hash);
            }
        }
        let new = validate_create(self, caller, request, now)?;
        self.names.refuse_served_domain(None, &new.long_url).await?;
        self.refuse_served_rule_targets(&new.rules).await?;
        let domain = self.names.domain_for(caller, new.domain.as_deref()).await?;
        self.charge(caller, now)?;
        let password_hash = match &new.password {
            Some(password) => Some(self.hash_password(password.clone()).await?),
            None => None,
        };
        let api = &self.settings;
        let mut attempts = 0;
        let link = loop {
            attempts += 1;
            // The key carries the domain: an alias is unique on its domain, a generated code
            // on every domain (the KGS never gives one twice).
            let code = match &new.alias {
                // Indexed before it exists, so a proxy never takes an alias for a code never issued.
                Some(alias) => {
                    let key = domain.key(alias);
                    self.store.record_alias(&key).await.map(|()| key)?
                }
                None => domain.key(&self.next_code().await?),
            };
            let link = Link {
                password_hash: password_hash.clone(),
                rules: new.rules.clone(),
                ..Link::new_active(
                    code,
                    new.long_url.clone(),
                    new.redirect,
                    new.forward_query,
                    now,
                    owner.clone(),
                    new.expires_at,
                )
            };
            let record = idem_key.as_ref().map(|key| IdempotencyRecord {
                scope: scope.clone(),
                key: key.clone(),
                request_hash: hash.current.clone(),
                status: 201,
                body: serde_json::to_string(&self.created_view(&link)).unwrap_or_default(),
                created_at: now,
                expires_at: now + (api.idempotency_ttl_secs as i64) * 1000,
            });
            match self.store.insert_link(&link, record.as_ref()).await {
                Ok(()) => break link,
                Err(StoreError::AlreadyExists) if new.alias.is_some() => {
                    return Err(ApiError::Conflict {
                        code: "alias_taken",
                        message: "this alias is already taken",
                    });
                }
                // A generated code an alias took earlier: skip it.
                Err(StoreError::AlreadyExists) if attempts < GENERATED_CODE_ATTEMPTS => continue,
                Err(StoreError::IdempotencyKeyExists) => {
                    // A concurrent request with the same key won; answer as it did.
                    let key = idem_key.as_deref().unwrap_or_default();
                    let record = self
                        .store
                        .get_idempotency(&scope, key, now)
                        .await?
                        .ok_or_else(|| ApiError::Internal("idempotency record vanished".into()))?;
                    return replayed(record, &hash);
                }
                Err(e) => return Err(e.into()),
            }
        };
        if let Err(e) = self.events.created(&link).await {
            // The link is stored; proxies that missed the announcement bypass their filter.
            tracing::warn!(code = %link.code, error = %rebound_core::Causes(&e), "creation not announced");
        }
        Ok(Creation::Created(link))
    }

    /// Who a created link belongs to, and the scope of its idempotency keys; 401 when the
    /// caller may not create. Handlers ask first, before they read the body.
    pub(crate) fn creator(&self, caller: &Caller) -> Result<Creator, ApiError> {
        match caller {
            Caller::Key(p) => Ok(Creator {
                owner: p.id.clone(),
                scope: p.id.clone(),
            }),
            Caller::Anonymous { ip } if self.settings.anonymous_create => Ok(Creator {
                owner: "anonymous".to_owned(),
                scope: format!("anonymous:{ip}"),
            }),
            Caller::Anonymous { .. } => Err(caller.clone().principal().unwrap_err()),
        }
    }

    /// The caller's rate-limit bucket, its rate and its burst; `None` for operators (exempt).
    pub(super) fn bucket(&self, caller: &Caller) -> Option<(String, f64, u32)> {
        let api = &self.settings;
        match caller {
            Caller::Key(p) if p.role == Role::Operator => None,
            Caller::Key(p) => Some((p.id.clone(), api.creator_rate_per_sec, api.creator_burst)),
            Caller::Anonymous { ip } => Some((
                crate::ratelimit::anonymous_bucket(*ip),
                api.anonymous_rate_per_sec,
                api.anonymous_burst,
            )),
        }
    }

    /// Takes one creation from the caller's rate limit.
    pub(super) fn charge(&self, caller: &Caller, now: i64) -> Result<(), ApiError> {
        let Some((who, rate, burst)) = self.bucket(caller) else {
            return Ok(());
        };
        self.limiter
            .take(&who, rate, burst, now)
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })
    }

    /// Takes up to `n` creations (a bulk import): how many the rate limit covers now, and,
    /// when it covers fewer than `n`, the seconds until it covers the rest (or a full
    /// bucket, when the rest is more than the burst). 429 when it covers none.
    pub(super) fn charge_up_to(&self, caller: &Caller, n: usize, now: i64) -> Result<(usize, Option<u64>), ApiError> {
        let Some((who, rate, burst)) = self.bucket(caller) else {
            return Ok((n, None));
        };
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let taken = self
            .limiter
            .take_up_to(&who, n, rate, burst, now)
            .map_err(|retry_after_secs| ApiError::RateLimited { retry_after_secs })?;
        let rest = n - taken;
        let retry = (rest > 0).then(|| self.limiter.wait_for(&who, rest, rate, burst, now));
        Ok((taken as usize, retry))
    }

    /// The Argon2id hash of `password` with a fresh salt, made on a blocking thread, at
    /// most [`HASHES_AT_ONCE`] at a time (each takes 19 MiB and tens of
    /// milliseconds).
    pub(crate) async fn hash_password(&self, password: String) -> Result<String, ApiError> {
        let _permit = self
            .hashing
            .acquire()
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let salt: [u8; 16] = rand::random();
        tokio::task::spawn_blocking(move || rebound_core::password::hash_password(&password, salt))
            .await
            .map_err(|e| ApiError::Internal(format!("hashing a password: {e}")))
    }

    /// Whether `password` is the one `hash` was made from, checked as
    /// [`LinkService::hash_password`] makes hashes.
    pub(crate) async fn password_matches(&self, password: String, hash: String) -> Result<bool, ApiError> {
        let _permit = self
            .hashing
            .acquire()
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        tokio::task::spawn_blocking(move || rebound_core::password::verify_password(&password, &hash))
            .await
            .map_err(|e| ApiError::Internal(format!("checking a password: {e}")))
    }

    /// A generated code from the KGS.
    pub(super) async fn next_code(&self) -> Result<String, ApiError> {
        self.codes.next_code().await.map_err(|e| match e {
            StoreError::Exhausted => ApiError::Internal("the code space is exhausted".into()),
            other => other.into(),
        })
    }

    /// Reads a link the caller may see (by its key, which carries its domain); a malformed
    /// key is simply not found, and a link on a domain the key is not scoped to is 403.
    pub(crate) async fn visible_link(&self, principal: &Principal, key: &str) -> Result<Link, ApiError> {
        if !is_valid_key(key) {
            return Err(ApiError::NotFound("no such link"));
        }
        let link = self
            .store
            .get_link(key)
            .await?
            .ok_or(ApiError::NotFound("no such link"))?;
        principal.require_owner(&link.created_by)?;
        self.names.learn(std::slice::from_ref(&link)).await?;
        principal.require_domain(&self.names.of_link(&link))?;
        Ok(link)
    }

    /// The link `code` on `domain` (the default one when not given) that `principal` may
    /// see: [`DomainNames::key_of`], then [`LinkService::visible_link`].
    pub(crate) async fn visible_at(
        &self,
        principal: &Principal,
        code: &str,
        domain: Option<&str>,
    ) -> Result<Link, ApiError> {
        let key = self.names.key_of(principal, code, domain).await?;
        self.visible_link(principal, &key).await
    }

    /// 400 `blocked_target` when a threat list holds `target` (a normalised target).
    pub(crate) fn refuse_threat(&self, target: &str) -> Result<(), ApiError> {
        self.refuse_threat_in("long_url", target)
    }

    /// [`LinkService::refuse_threat`] for the target in `field`.
    pub(crate) fn refuse_threat_in(&self, field: &str, target: &str) -> Result<(), ApiError> {
        match self.threats.find(target) {
            Some(list) => {
                self.metrics.threat_refused(&list);
                Err(ApiError::bad_request(
                    "blocked_target",
                    format!("{field} is on the threat list {list:?}"),
                ))
            }
            None => Ok(()),
        }
    }

    /// 400 `invalid_url` when a rule's target is on a domain this service serves (a loop),
    /// as for `long_url`.
    pub(crate) async fn refuse_served_rule_targets(&self, rules: &[Rule]) -> Result<(), ApiError> {
        for (at, rule) in rules.iter().enumerate() {
            for (v, target) in rule.targets().enumerate() {
                if !is_web(target) {
                    continue;
                }
                let field = match rule.split.is_empty() {
                    true => format!("rules[{}].target", at + 1),
                    false => format!("rules[{}].split[{}].target", at + 1, v + 1),
                };
                if self.names.is_on_served_domain(target).await? {
                    let e = rebound_core::target::TargetError::OwnHost.to_string();
                    return Err(ApiError::bad_request("invalid_url", e.replacen("long_url", &field, 1)));
                }
            }
        }
        Ok(())
    }

    /// `link` as the API shows it.
    pub(crate) fn view(&self, link: &Link) -> LinkView {
        LinkView {
            code: split_key(&link.code).0.to_owned(),
            domain: self.names.of_link(link),
            short_url: self.names.short_url(link),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
            password_protected: link.password_hash.is_some(),
            rules: link.rules.iter().map(validate::rule_view).collect(),
            expires_at: link.expires_at.map(to_rfc3339),
            created_at: to_rfc3339(link.created_at),
            created_by: link.created_by.clone(),
            is_active: link.is_active,
            version: link.version,
            deleted_at: link.deleted_at.map(to_rfc3339),
            deleted_by: link.deleted_by.clone(),
            delete_reason: link.delete_reason.clone(),
        }
    }

    /// A link just created, as the create answers it.
    pub(crate) fn created_view(&self, link: &Link) -> LinkCreated {
        LinkCreated {
            code: split_key(&link.code).0.to_owned(),
            domain: self.names.of_link(link),
            short_url: self.names.short_url(link),
            long_url: link.long_url.clone(),
            redirect: link.redirect.status(),
            forward_query: link.forward_query,
            expires_at: link.expires_at.map(to_rfc3339),
            created_at: to_rfc3339(link.created_at),
            version: link.version,
            password_protected: link.password_hash.is_some(),
        }
    }
}
