//! The links service: what the link handlers of `api` do, apart from HTTP. Creating (rate
//! limits, KGS codes with retries, aliases, idempotency), importing, deleting and taking
//! down (the versioned write, then the invalidation, then the audit event), and reading
//! daily clicks. Handlers extract and answer; every rule of SPEC §5 lives here.

use crate::auth::{Caller, Principal};
use crate::error::ApiError;
use crate::ControlPlane;
use rebound_api_types::{
    CreateLinkRequest, DayClicks, ErrorDetail, ImportOutcome, ImportResults, LinkCreated, LinkStats, MAX_IMPORT,
};
use rebound_core::code::{check_alias, check_code, CodeError};
use rebound_core::link::Deletion;
use rebound_core::time::parse_rfc3339;
use rebound_core::{Day, Link, RedirectKind};
use rebound_store::{AuditEvent, IdempotencyRecord, Role, StoreError};
use sha2::{Digest, Sha256};

const MAX_TTL_SECONDS: i64 = 10 * 365 * 86_400;
const MAX_STATS_DAYS: i32 = 366;
const DEFAULT_STATS_DAYS: i32 = 30;

/// Attempts at a generated code before giving up (a taken one is skipped).
const GENERATED_CODE_ATTEMPTS: usize = 16;

/// Who creates: the owner of the new links and the scope of their idempotency keys.
pub(crate) struct Creator {
    owner: String,
    scope: String,
}

/// What a create did.
pub(crate) enum Creation {
    /// A new link.
    Created(Link),
    /// The first answer to the same request with the same idempotency key.
    Replayed(IdempotencyRecord),
}

impl ControlPlane {
    /// Creates a link (SPEC §5): the rate limit, a generated code from the KGS (skipping
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
        let hash = RequestHash::of_create(&request, raw);
        if let Some(key) = &idem_key {
            if let Some(record) = self.store.get_idempotency(&scope, key, now).await? {
                // A replay creates nothing, so it costs nothing: a retry is never refused 429.
                return replayed(record, &hash);
            }
        }
        let new = validate_create(self, caller, request, now)?;
        self.charge(caller, now)?;
        let api = &self.config.api;
        let mut attempts = 0;
        let link = loop {
            attempts += 1;
            let code = match &new.alias {
                // Indexed before it exists, so a proxy never takes an alias for a code never issued.
                Some(alias) => self.store.record_alias(alias).await.map(|()| alias.clone())?,
                None => self.next_code().await?,
            };
            let link = Link::new_active(
                code,
                new.long_url.clone(),
                new.redirect,
                new.forward_query,
                now,
                owner.clone(),
                new.expires_at,
            );
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
            tracing::warn!(code = %link.code, error = %rebound_store::Causes(&e), "creation not announced");
        }
        Ok(Creation::Created(link))
    }

    /// A bulk import (up to 1,000 links): each link read as a create request, validated,
    /// charged and created on its own; one outcome per link, in order. With an idempotency
    /// key `K`, link `i` is written with its own record `K#i` in the same transaction (the
    /// hash of the whole import in it), so a retry, even after a crash halfway, answers
    /// each link created before as it was and creates only the others (docs/http.md).
    pub(crate) async fn import_links(
        &self,
        caller: &Caller,
        creator: Creator,
        idem_key: Option<String>,
        links: Vec<serde_json::Value>,
    ) -> Result<ImportResults, ApiError> {
        let now = self.clock.now_millis();
        let Creator { owner, scope } = creator;
        if links.is_empty() || links.len() > MAX_IMPORT {
            return Err(ApiError::bad_request(
                "invalid_import",
                "an import holds 1 to 1000 links",
            ));
        }
        let requests: Vec<Result<CreateLinkRequest, ApiError>> = links
            .iter()
            .map(|v| {
                // serde would also read a struct from an array of its fields in order.
                if !v.is_object() {
                    return Err(ApiError::bad_request("invalid_json", "the link must be a JSON object"));
                }
                serde_json::from_value::<CreateLinkRequest>(v.clone())
                    .map_err(|e| ApiError::bad_request("invalid_json", format!("the link is invalid: {e}")))
            })
            .collect();
        let hash = RequestHash::of_import(&links, &requests);
        drop(links);
        let keys: Option<Vec<String>> = idem_key
            .as_ref()
            .map(|k| (0..requests.len()).map(|i| format!("{k}#{i}")).collect());
        let mut outcomes: Vec<Option<ImportOutcome>> = match &keys {
            Some(keys) => self.replayed_links(&scope, keys, &hash, now).await?,
            None => vec![None; requests.len()],
        };
        let mut valid: Vec<(usize, NewLink)> = Vec::new();
        for (i, req) in requests.into_iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            match req.and_then(|req| validate_create(self, caller, req, now)) {
                Ok(new) => valid.push((i, new)),
                Err(e) => outcomes[i] = Some(failed(e)),
            }
        }
        // Only links that would be written are charged (a replayed one is not); those the
        // bucket cannot cover now are answered one by one, so an import larger than the
        // burst still makes progress.
        let (covered, retry_after_secs) = if valid.is_empty() {
            (0, None)
        } else {
            self.charge_up_to(caller, valid.len(), now)?
        };
        let mut pending: Vec<(usize, Link, bool)> = Vec::new();
        for (n, (i, new)) in valid.into_iter().enumerate() {
            if n >= covered {
                outcomes[i] = Some(ImportOutcome::Failed {
                    error: ErrorDetail {
                        code: "rate_limited".to_owned(),
                        message: "the rate limit did not cover this link; import it again after retry_after_secs"
                            .to_owned(),
                    },
                });
                continue;
            }
            let generated = new.alias.is_none();
            let code = match new.alias {
                Some(a) => self.store.record_alias(&a).await.map(|()| a)?,
                None => self.next_code().await?,
            };
            let link = Link::new_active(
                code,
                new.long_url,
                new.redirect,
                new.forward_query,
                now,
                owner.clone(),
                new.expires_at,
            );
            pending.push((i, link, generated));
        }
        let record = |i: usize, link: &Link| {
            keys.as_ref().map(|keys| IdempotencyRecord {
                scope: scope.clone(),
                key: keys[i].clone(),
                request_hash: hash.current.clone(),
                status: 201,
                body: serde_json::to_string(&self.created_view(link)).unwrap_or_default(),
                created_at: now,
                expires_at: now + (self.config.api.idempotency_ttl_secs as i64) * 1000,
            })
        };
        let stored: Vec<Result<(), StoreError>> = if keys.is_some() {
            // Each link with its record, in one transaction each, up to 16 at a time.
            use futures_util::StreamExt;
            let writes: Vec<(Link, Option<IdempotencyRecord>)> = pending
                .iter()
                .map(|(i, link, _)| (link.clone(), record(*i, link)))
                .collect();
            let store = self.store.clone();
            futures_util::stream::iter(writes)
                .map(move |(link, rec)| {
                    let store = store.clone();
                    async move { store.insert_link(&link, rec.as_ref()).await }
                })
                .buffered(16)
                .collect()
                .await
        } else {
            let links: Vec<Link> = pending.iter().map(|(_, l, _)| l.clone()).collect();
            self.store.insert_links(&links).await?
        };
        for ((i, mut link, generated), result) in pending.into_iter().zip(stored) {
            let result = match result {
                // A generated code an alias took earlier: retry with fresh codes.
                Err(StoreError::AlreadyExists) if generated => {
                    let mut retried = Err(StoreError::AlreadyExists);
                    for _ in 1..GENERATED_CODE_ATTEMPTS {
                        link.code = self.next_code().await?;
                        retried = self.store.insert_link(&link, record(i, &link).as_ref()).await;
                        if !matches!(retried, Err(StoreError::AlreadyExists)) {
                            break;
                        }
                    }
                    retried
                }
                other => other,
            };
            outcomes[i] = Some(match result {
                Ok(()) => {
                    if let Err(e) = self.events.created(&link).await {
                        tracing::warn!(code = %link.code, error = %rebound_store::Causes(&e), "creation not announced");
                    }
                    ImportOutcome::Created(self.created_view(&link))
                }
                Err(StoreError::AlreadyExists) => failed(ApiError::Conflict {
                    code: "alias_taken",
                    message: "this alias is already taken",
                }),
                // A concurrent import with the same key wrote this link first.
                Err(StoreError::IdempotencyKeyExists) => {
                    let keys = keys.as_deref().unwrap_or_default();
                    match self.store.get_idempotency(&scope, &keys[i], now).await? {
                        Some(record) => replayed_link(record, &hash).unwrap_or_else(failed),
                        None => failed(ApiError::Internal("idempotency record vanished".into())),
                    }
                }
                Err(e) => failed(e.into()),
            });
        }
        let results: Vec<ImportOutcome> = outcomes
            .into_iter()
            .map(|o| o.expect("every link has an outcome"))
            .collect();
        let created = results
            .iter()
            .filter(|r| matches!(r, ImportOutcome::Created(_)))
            .count();
        Ok(ImportResults {
            created,
            failed: results.len() - created,
            retry_after_secs,
            results,
        })
    }

    /// The links of a keyed import that an earlier attempt created, answered as then (the
    /// others `None`); 409 when the key was used with another import.
    async fn replayed_links(
        &self,
        scope: &str,
        keys: &[String],
        hash: &RequestHash,
        now: i64,
    ) -> Result<Vec<Option<ImportOutcome>>, ApiError> {
        use futures_util::StreamExt;
        let (store, scope) = (self.store.clone(), scope.to_owned());
        let records: Vec<Result<Option<IdempotencyRecord>, StoreError>> = futures_util::stream::iter(keys.to_vec())
            .map(move |key| {
                let (store, scope) = (store.clone(), scope.clone());
                async move { store.get_idempotency(&scope, &key, now).await }
            })
            .buffered(16)
            .collect()
            .await;
        records
            .into_iter()
            .map(|r| r?.map(|record| replayed_link(record, hash)).transpose())
            .collect()
    }

    /// Delete and takedown (SPEC §5): conditional update (recording the propagation
    /// pending, leased to this control plane), then the tombstone and the invalidation,
    /// and only then success. Done, the pending record is cleared; failed, its lease is
    /// given back and a reconciler finishes it (`reconcile`). A link already down keeps
    /// its deletion record and gets its tombstone written again.
    pub(crate) async fn take_down(
        &self,
        principal: &Principal,
        code: &str,
        reason: Option<String>,
        action: &'static str,
    ) -> Result<Link, ApiError> {
        let mut link = self.visible_link(principal, code).await?;
        let mut outcome = "already_down";
        for _ in 0..8 {
            if !link.is_active {
                break;
            }
            let deletion = Deletion {
                at: self.clock.now_millis(),
                by: principal.id.clone(),
                reason: reason.clone(),
            };
            let lease = self.propagations.lease_from(deletion.at);
            match self
                .store
                .deactivate_link_pending(code, link.version, &deletion, &lease)
                .await
            {
                Ok(down) => {
                    link = down;
                    outcome = "ok";
                }
                // Someone changed it meanwhile: read again and decide again.
                Err(StoreError::ConditionFailed) => {
                    link = self
                        .store
                        .get_link(code)
                        .await?
                        .ok_or(ApiError::NotFound("no such link"))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if link.is_active {
            return Err(ApiError::Unavailable("the link kept changing; retry".into()));
        }
        let delivered = self.events.deactivated(&link).await;
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: action.to_owned(),
            code: Some(code.to_owned()),
            reason,
            outcome: if delivered.is_ok() {
                outcome
            } else {
                "invalidate_failed"
            }
            .to_owned(),
        };
        let audited = self.store.append_audit(&event).await;
        // After the audit event, so a reconciler's `propagated` follows `invalidate_failed`.
        match &delivered {
            Ok(()) => self.propagations.finished_by_the_api(code, link.version).await,
            Err(_) => self.propagations.give_back(code, link.version).await,
        }
        if let Err(e) = audited {
            tracing::error!(code, action, error = %rebound_store::Causes(&e), "audit event not recorded");
            return Err(e.into());
        }
        if let Err(e) = delivered {
            tracing::warn!(code, action, error = %rebound_store::Causes(&e), "tombstone not written; a reconciler finishes it");
            return Err(ApiError::InvalidationFailed);
        }
        Ok(link)
    }

    /// A link's daily clicks over `from..=to` (UTC days; defaults: the 30 days to today),
    /// every day of the range, from the rollups (and, all-in-one, what is still pending).
    pub(crate) async fn daily_clicks(
        &self,
        principal: &Principal,
        code: &str,
        from: Option<String>,
        to: Option<String>,
    ) -> Result<LinkStats, ApiError> {
        let parse = |name: &str, value: &Option<String>| -> Result<Option<Day>, ApiError> {
            value
                .as_ref()
                .map(|s| {
                    Day::parse(s).ok_or_else(|| {
                        ApiError::bad_request("invalid_date", format!("{name} must be a date YYYY-MM-DD"))
                    })
                })
                .transpose()
        };
        let (from, to) = (parse("from", &from)?, parse("to", &to)?);
        let today = Day::of_millis(self.clock.now_millis());
        let to = to.unwrap_or(today);
        let from = from.unwrap_or(to.plus(1 - DEFAULT_STATS_DAYS));
        // A defaulted `from` can fall before the first day `YYYY-MM-DD` can name.
        if !from.is_supported() || !to.is_supported() {
            return Err(ApiError::bad_request(
                "invalid_date",
                "dates must be from 0000-01-01 to 9999-12-31",
            ));
        }
        if from > to {
            return Err(ApiError::bad_request("invalid_date", "from must not be after to"));
        }
        if to.0 - from.0 + 1 > MAX_STATS_DAYS {
            return Err(ApiError::bad_request(
                "invalid_date",
                "the range may cover at most 366 days",
            ));
        }
        let link = self.visible_link(principal, code).await?;
        let counts: std::collections::HashMap<Day, u64> = self
            .click_counts
            .read_clicks(&link.code, from, to)
            .await?
            .into_iter()
            .collect();
        let days: Vec<DayClicks> = (from.0..=to.0)
            .map(|d| DayClicks {
                day: Day(d).to_iso(),
                clicks: counts.get(&Day(d)).copied().unwrap_or(0),
            })
            .collect();
        Ok(LinkStats {
            code: link.code,
            total: days.iter().map(|d| d.clicks).sum(),
            days,
        })
    }

    /// Who a created link belongs to, and the scope of its idempotency keys; 401 when the
    /// caller may not create. Handlers ask first, before they read the body.
    pub(crate) fn creator(&self, caller: &Caller) -> Result<Creator, ApiError> {
        match caller {
            Caller::Key(p) => Ok(Creator {
                owner: p.id.clone(),
                scope: p.id.clone(),
            }),
            Caller::Anonymous { ip } if self.config.api.anonymous_create => Ok(Creator {
                owner: "anonymous".to_owned(),
                scope: format!("anonymous:{ip}"),
            }),
            Caller::Anonymous { .. } => Err(caller.clone().principal().unwrap_err()),
        }
    }

    /// The caller's rate-limit bucket, its rate and its burst; `None` for operators (exempt).
    fn bucket(&self, caller: &Caller) -> Option<(String, f64, u32)> {
        let api = &self.config.api;
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
    fn charge(&self, caller: &Caller, now: i64) -> Result<(), ApiError> {
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
    fn charge_up_to(&self, caller: &Caller, n: usize, now: i64) -> Result<(usize, Option<u64>), ApiError> {
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

    /// A generated code from the KGS.
    async fn next_code(&self) -> Result<String, ApiError> {
        self.codes.next_code().await.map_err(|e| match e {
            StoreError::Exhausted => ApiError::Internal("the code space is exhausted".into()),
            other => other.into(),
        })
    }

    /// Reads a link the caller may see; a malformed code is simply not found.
    pub(crate) async fn visible_link(&self, principal: &Principal, code: &str) -> Result<Link, ApiError> {
        if check_code(code).is_err() {
            return Err(ApiError::NotFound("no such link"));
        }
        let link = self
            .store
            .get_link(code)
            .await?
            .ok_or(ApiError::NotFound("no such link"))?;
        principal.require_owner(&link.created_by)?;
        Ok(link)
    }
}

fn code_error(field: &str, e: CodeError) -> ApiError {
    match e {
        CodeError::Reserved => ApiError::bad_request("reserved_alias", format!("{field} is a reserved word")),
        other => ApiError::bad_request("invalid_alias", format!("{field} {other}")),
    }
}

/// The validated parts of a create request.
struct NewLink {
    long_url: String,
    alias: Option<String>,
    expires_at: Option<i64>,
    redirect: RedirectKind,
    forward_query: bool,
}

fn validate_create(cp: &ControlPlane, caller: &Caller, req: CreateLinkRequest, now: i64) -> Result<NewLink, ApiError> {
    let targets = match caller {
        Caller::Key(_) => &cp.targets,
        Caller::Anonymous { .. } => &cp.anonymous_targets,
    };
    let long_url = targets
        .validate(&req.long_url)
        .map_err(|e| ApiError::bad_request("invalid_url", e.to_string()))?;
    if let Some(alias) = &req.custom_alias {
        check_alias(alias).map_err(|e| code_error("custom_alias", e))?;
    }
    let expires_at = match (req.expires_at, req.ttl_seconds) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_expiry",
                "give expires_at or ttl_seconds, not both",
            ));
        }
        (Some(at), None) => {
            let at = parse_rfc3339(&at)
                .ok_or_else(|| ApiError::bad_request("invalid_expiry", "expires_at must be an RFC 3339 time"))?;
            if at <= now {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "expires_at must be in the future",
                ));
            }
            if at > now + MAX_TTL_SECONDS * 1000 {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "expires_at must be at most 10 years ahead",
                ));
            }
            Some(at)
        }
        (None, Some(ttl)) => {
            if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "ttl_seconds must be between 1 and 315360000 (10 years)",
                ));
            }
            Some(now + ttl * 1000)
        }
        (None, None) => None,
    };
    let redirect = match req.redirect {
        None => RedirectKind::default(),
        Some(s) => RedirectKind::from_status(s)
            .ok_or_else(|| ApiError::bad_request("invalid_redirect", "redirect must be 301, 302, 307 or 308"))?,
    };
    Ok(NewLink {
        long_url,
        alias: req.custom_alias,
        expires_at,
        redirect,
        forward_query: req.forward_query.unwrap_or(false),
    })
}

/// How a request is compared with the one an idempotency record was written for: the
/// request as this server understood it (`ttl_seconds: 60.0` is `60`, a `null` is an
/// absent field, key order and spacing do not count), hashed with a version prefix. A
/// record without the prefix was written by an earlier version from the body's JSON, keys
/// sorted; it is compared with that (records live a day, so this can go a day after).
struct RequestHash {
    current: String,
    /// The earlier hash of the same body, for records without the prefix; none for an import.
    legacy: Option<String>,
}

const REQUEST_HASH_VERSION: &str = "v2:";

impl RequestHash {
    fn of_create(request: &CreateLinkRequest, raw: &[u8]) -> RequestHash {
        let canonical = serde_json::to_string(request).unwrap_or_default();
        let legacy = serde_json::from_slice::<serde_json::Value>(raw)
            .map(|v| v.to_string())
            .unwrap_or_default();
        RequestHash {
            current: versioned_hash("create", &canonical),
            legacy: Some(hex::encode(Sha256::digest(legacy.as_bytes()))),
        }
    }

    /// An import's links: each as its create request was read, or, when it could not be
    /// read as one, as the JSON value it is (keys sorted).
    fn of_import(links: &[serde_json::Value], requests: &[Result<CreateLinkRequest, ApiError>]) -> RequestHash {
        let canonical: Vec<serde_json::Value> = links
            .iter()
            .zip(requests)
            .map(|(raw, req)| match req {
                Ok(req) => serde_json::to_value(req).unwrap_or_default(),
                Err(_) => raw.clone(),
            })
            .collect();
        RequestHash {
            current: versioned_hash("import", &serde_json::Value::Array(canonical).to_string()),
            legacy: None,
        }
    }

    /// Whether `stored` (a record's hash) was made for this request.
    fn matches(&self, stored: &str) -> bool {
        if stored.starts_with(REQUEST_HASH_VERSION) {
            stored == self.current
        } else {
            self.legacy.as_deref() == Some(stored)
        }
    }
}

fn versioned_hash(kind: &str, canonical: &str) -> String {
    let digest = Sha256::new()
        .chain_update(kind.as_bytes())
        .chain_update([0])
        .chain_update(canonical.as_bytes())
        .finalize();
    format!("{REQUEST_HASH_VERSION}{}", hex::encode(digest))
}

fn key_reused() -> ApiError {
    ApiError::Conflict {
        code: "idempotency_key_reused",
        message: "this Idempotency-Key was used with another request body",
    }
}

/// The first answer to an idempotent create, when this request is the same one.
fn replayed(record: IdempotencyRecord, hash: &RequestHash) -> Result<Creation, ApiError> {
    if !hash.matches(&record.request_hash) {
        return Err(key_reused());
    }
    Ok(Creation::Replayed(record))
}

/// A link of a keyed import as its first attempt created it, when this is the same import.
fn replayed_link(record: IdempotencyRecord, hash: &RequestHash) -> Result<ImportOutcome, ApiError> {
    if !hash.matches(&record.request_hash) {
        return Err(key_reused());
    }
    serde_json::from_str::<LinkCreated>(&record.body)
        .map(ImportOutcome::Created)
        .map_err(|e| ApiError::Internal(format!("idempotency record {} unreadable: {e}", record.key)))
}

/// A link of an import that failed, as its outcome.
fn failed(e: ApiError) -> ImportOutcome {
    let (_, code) = e.status_and_code();
    ImportOutcome::Failed {
        error: ErrorDetail {
            code: code.to_owned(),
            message: e.to_string(),
        },
    }
}

/// A takedown's reason, trimmed: 1-1000 characters without control characters.
pub(crate) fn takedown_reason(raw: &str) -> Result<String, ApiError> {
    let reason = raw.trim().to_owned();
    if reason.is_empty() || raw.chars().count() > 1000 || raw.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_reason",
            "reason must be 1-1000 characters without control characters",
        ));
    }
    Ok(reason)
}
