//! The keys resource: API keys made (shown once, stored as a hash) and revoked. The
//! handlers are `http::keys`; how a key is checked is `auth`.

use crate::auth::{generate_key, generate_key_id, hash_key, Principal};
use crate::error::ApiError;
use crate::names::DomainNames;
use rebound_api_types::{CreateKeyRequest, KeyCreated};
use rebound_core::domain::normalize_domain;
use rebound_core::Clock;
use rebound_store::{ApiKeyRecord, Role, Store, StoreError};
use std::sync::Arc;

/// The keys service.
pub(crate) struct KeyService {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Resolves the domains a key is scoped to.
    pub(crate) names: Arc<DomainNames>,
}

impl KeyService {
    /// Makes a key as `principal` (an operator) asks: a name, a role, and for a creator key
    /// the domains it is scoped to, if any. The key itself is answered this once.
    pub(crate) async fn create(&self, principal: &Principal, req: CreateKeyRequest) -> Result<KeyCreated, ApiError> {
        principal.require_operator()?;
        let name = req.name.trim().to_owned();
        if name.is_empty() || req.name.chars().count() > 100 || req.name.chars().any(char::is_control) {
            return Err(ApiError::bad_request(
                "invalid_name",
                "name must be 1-100 characters without control characters",
            ));
        }
        let role = Role::parse(&req.role)
            .ok_or_else(|| ApiError::bad_request("invalid_role", "role must be creator or operator"))?;
        let domains = match req.domains {
            None => None,
            Some(_) if role == Role::Operator => {
                return Err(ApiError::bad_request(
                    "invalid_domains",
                    "an operator key is never scoped to domains",
                ))
            }
            Some(names) if names.is_empty() || names.len() > 100 => {
                return Err(ApiError::bad_request(
                    "invalid_domains",
                    "domains must list 1 to 100 domains",
                ))
            }
            Some(names) => {
                let mut scope: Vec<String> = Vec::with_capacity(names.len());
                for name in &names {
                    let d = self.names.resolve(name).await.map_err(|e| match e {
                        ApiError::BadRequest { .. } => ApiError::bad_request(
                            "invalid_domains",
                            format!(
                                "{:?} is not a domain of this service",
                                normalize_domain(name).unwrap_or(name.clone())
                            ),
                        ),
                        other => other,
                    })?;
                    if !scope.contains(&d.name) {
                        scope.push(d.name);
                    }
                }
                Some(scope)
            }
        };
        let key = generate_key();
        let record = ApiKeyRecord {
            id: generate_key_id(),
            name,
            role,
            key_hash: hash_key(&key),
            created_at: self.clock.now_millis(),
            revoked_at: None,
            domains,
        };
        self.store.insert_key(&record).await?;
        tracing::info!(id = %record.id, role = role.as_str(), by = %principal.id, "API key created");
        Ok(KeyCreated {
            id: record.id,
            name: record.name,
            role: role.as_str().to_owned(),
            domains: record.domains,
            key,
        })
    }

    /// Revokes the key `id` as `principal` (an operator): it stops working at once.
    pub(crate) async fn revoke(&self, principal: &Principal, id: &str) -> Result<(), ApiError> {
        principal.require_operator()?;
        match self.store.revoke_key(id, self.clock.now_millis()).await {
            Ok(_) => {
                tracing::info!(%id, by = %principal.id, "API key revoked");
                Ok(())
            }
            Err(StoreError::NotFound) => Err(ApiError::NotFound("no such key")),
            Err(e) => Err(e.into()),
        }
    }
}
