//! API keys: how they are made, hashed and checked, and who the caller is (read from a
//! request by `http::extract`).

use crate::error::ApiError;
use rand::Rng;
use rebound_store::{Role, Store};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::Arc;

/// The principal id of the bootstrap key from configuration.
pub const BOOTSTRAP_PRINCIPAL: &str = "bootstrap";

/// A caller holding a valid key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's id: recorded as `created_by`, `deleted_by` and audit actor.
    pub id: String,
    pub role: Role,
    /// The domains the key is scoped to (canonical names); `None`: every domain.
    pub domains: Option<Vec<String>>,
}

impl Principal {
    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }

    /// Fails unless the caller is an operator.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this call needs an operator key"))
        }
    }

    /// Whether the key may create and see links on `domain` (canonical).
    pub fn may_use_domain(&self, domain: &str) -> bool {
        self.domains.as_ref().is_none_or(|d| d.iter().any(|d| d == domain))
    }

    /// Fails unless the key may use `domain`: 403, naming no other domain.
    pub fn require_domain(&self, domain: &str) -> Result<(), ApiError> {
        match self.may_use_domain(domain) {
            true => Ok(()),
            false => Err(ApiError::Forbidden("this key is not scoped to that domain")),
        }
    }

    /// Fails unless the caller owns the link or is an operator.
    pub fn require_owner(&self, created_by: &str) -> Result<(), ApiError> {
        if self.is_operator() || self.id == created_by {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this link belongs to another key"))
        }
    }
}

/// Who is calling: a key holder, or someone without a key.
#[derive(Debug, Clone)]
pub enum Caller {
    Key(Principal),
    Anonymous { ip: IpAddr },
}

impl Caller {
    /// The key holder, or 401.
    pub fn principal(self) -> Result<Principal, ApiError> {
        match self {
            Caller::Key(p) => Ok(p),
            Caller::Anonymous { .. } => Err(ApiError::Unauthorized(
                "an API key is required (Authorization: Bearer <key>)",
            )),
        }
    }
}

/// Hex SHA-256 of a key: what the store keeps. Keys carry 238 bits of entropy, so a fast
/// hash is enough.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

const KEY_ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A new secret key: `rbk_` and 40 base62 characters.
pub fn generate_key() -> String {
    let mut rng = rand::thread_rng();
    let body: String = (0..40)
        .map(|_| KEY_ALPHABET[rng.gen_range(0..KEY_ALPHABET.len())] as char)
        .collect();
    format!("rbk_{body}")
}

/// A new key id: 16 hex characters.
pub fn generate_key_id() -> String {
    let bytes: [u8; 8] = rand::thread_rng().gen();
    hex::encode(bytes)
}

/// Checks keys: the bootstrap key from configuration, or a key in the store.
pub(crate) struct Authenticator {
    pub(crate) store: Arc<dyn Store>,
    /// The hash of the operator key accepted from start-up, if one is configured.
    pub(crate) bootstrap_key_hash: Option<String>,
}

impl Authenticator {
    /// The holder of `key`; 401 when it is no key or a revoked one.
    pub(crate) async fn holder_of(&self, key: &str) -> Result<Principal, ApiError> {
        let hash = hash_key(key);
        if self.bootstrap_key_hash.as_deref() == Some(hash.as_str()) {
            return Ok(Principal {
                id: BOOTSTRAP_PRINCIPAL.to_owned(),
                role: Role::Operator,
                domains: None,
            });
        }
        match self.store.find_key_by_hash(&hash).await? {
            Some(key) if key.revoked_at.is_none() => Ok(Principal {
                id: key.id,
                role: key.role,
                domains: key.domains,
            }),
            _ => Err(ApiError::Unauthorized("the API key is not valid or was revoked")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_hash_stably() {
        let a = generate_key();
        let b = generate_key();
        assert_ne!(a, b);
        assert!(a.starts_with("rbk_") && a.len() == 44);
        assert_eq!(hash_key(&a), hash_key(&a));
        assert_eq!(hash_key(&a).len(), 64);
        assert_ne!(hash_key(&a), hash_key(&b));
        assert_eq!(generate_key_id().len(), 16);
    }
}
