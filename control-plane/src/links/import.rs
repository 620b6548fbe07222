//! A bulk import: each link read, validated, charged and created on its own, with an
//! idempotency record per link when the import has a key.

use super::idempotency::{key_reused, RequestHash};
use super::validate::{validate_create, NewLink};
use super::LinkService;
use super::{Creator, GENERATED_CODE_ATTEMPTS};
use crate::auth::Caller;
use crate::error::ApiError;
use rebound_api_types::{CreateLinkRequest, ErrorDetail, ImportOutcome, ImportResults, LinkCreated, MAX_IMPORT};
use rebound_core::Link;
use rebound_store::{IdempotencyRecord, StoreError};

impl LinkService {
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
        let hash = RequestHash::of_import(&links, &requests, &self.idempotency_secret);
        drop(links);
        let keys: Option<Vec<String>> = idem_key
            .as_ref()
            .map(|k| (0..requests.len()).map(|i| format!("{k}#{i}")).collect());
        let mut outcomes: Vec<Option<ImportOutcome>> = match &keys {
            Some(keys) => self.replayed_links(&scope, keys, &hash, now).await?,
            None => vec![None; requests.len()],
        };
        let mut valid: Vec<(usize, NewLink)> = Vec::new();
        // Each target host is looked up among the served domains once per import.
        let mut loops_by_host: std::collections::HashMap<Option<String>, bool> = std::collections::HashMap::new();
        for (i, req) in requests.into_iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            let new = match req.and_then(|req| validate_create(self, caller, req, now)) {
                Ok(new) => new,
                Err(e) => {
                    outcomes[i] = Some(failed(e));
                    continue;
                }
            };
            let host = rebound_core::target::served_name_of(&new.long_url);
            let loops = match loops_by_host.get(&host) {
                Some(&loops) => loops,
                None => {
                    let loops = self.names.is_on_served_domain(&new.long_url).await?;
                    loops_by_host.insert(host, loops);
                    loops
                }
            };
            if loops {
                outcomes[i] = Some(failed(crate::names::own_host(None)));
                continue;
            }
            match self.refuse_served_rule_targets(&new.rules).await {
                Err(e @ (ApiError::Unavailable(_) | ApiError::Internal(_))) => return Err(e),
                Err(e) => outcomes[i] = Some(failed(e)),
                Ok(()) => valid.push((i, new)),
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
        // Each domain named is read once per import.
        let mut domains: std::collections::HashMap<Option<String>, crate::names::DomainRef> =
            std::collections::HashMap::new();
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
            let domain = match domains.get(&new.domain) {
                Some(d) => d.clone(),
                None => match self.names.domain_for(caller, new.domain.as_deref()).await {
                    Ok(d) => domains.entry(new.domain.clone()).or_insert(d).clone(),
                    Err(e @ (ApiError::Unavailable(_) | ApiError::Internal(_))) => return Err(e),
                    Err(e) => {
                        outcomes[i] = Some(failed(e));
                        continue;
                    }
                },
            };
            let generated = new.alias.is_none();
            let code = match new.alias {
                Some(a) => {
                    let key = domain.key(&a);
                    self.store.record_alias(&key).await.map(|()| key)?
                }
                None => domain.key(&self.next_code().await?),
            };
            let password_hash = match new.password {
                Some(password) => Some(self.hash_password(password).await?),
                None => None,
            };
            let link = Link {
                password_hash,
                rules: new.rules,
                ..Link::new_active(
                    code,
                    new.long_url,
                    new.redirect,
                    new.forward_query,
                    now,
                    owner.clone(),
                    new.expires_at,
                )
            };
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
                expires_at: now + (self.settings.idempotency_ttl_secs as i64) * 1000,
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
                        let domain = rebound_core::domain::split_key(&link.code).1.map(str::to_owned);
                        link.code = rebound_core::domain::link_key(&self.next_code().await?, domain.as_deref());
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
                        tracing::warn!(code = %link.code, error = %rebound_core::Causes(&e), "creation not announced");
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
}

/// A link of a keyed import as its first attempt created it, when this is the same import.
pub(super) fn replayed_link(record: IdempotencyRecord, hash: &RequestHash) -> Result<ImportOutcome, ApiError> {
    if !hash.matches(&record.request_hash) {
        return Err(key_reused());
    }
    serde_json::from_str::<LinkCreated>(&record.body)
        .map(ImportOutcome::Created)
        .map_err(|e| ApiError::Internal(format!("idempotency record {} unreadable: {e}", record.key)))
}

/// A link of an import that failed, as its outcome.
pub(super) fn failed(e: ApiError) -> ImportOutcome {
    let (_, code) = e.status_and_code();
    ImportOutcome::Failed {
        error: ErrorDetail {
            code: code.to_owned(),
            message: e.to_string(),
        },
    }
}
