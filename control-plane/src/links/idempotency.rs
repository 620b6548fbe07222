//! How a retried request is compared with the first one its idempotency key recorded.

use crate::error::ApiError;
use rebound_api_types::CreateLinkRequest;
use rebound_core::password::password_fingerprint;
use rebound_store::IdempotencyRecord;
use sha2::{Digest, Sha256};

use super::Creation;

/// How a request is compared with the one an idempotency record was written for: the
/// request as this server understood it (`ttl_seconds: 60.0` is `60`, a `null` is an
/// absent field, key order and spacing do not count), hashed with a version prefix. A
/// record without the prefix was written by an earlier version from the body's JSON, keys
/// sorted; it is compared with that (records live a day, so this can go a day after).
///
/// A password is in the hash only as its keyed MAC ([`password_fingerprint`], with the
/// fleet's secret): never the password, nor a fast unkeyed hash of it, so a reader of the
/// store cannot check guesses against a record; and a replay with another password is
/// another request (409). Records written before this rule (a create's password as
/// `"(given)"`, an import's in the clear) never match a request with a password now: such a
/// retry across the upgrade is refused 409 rather than answered without its password
/// checked; records without a password still match. The old records expire with their
/// retention (`api.idempotency_ttl_secs`, a day).
pub(super) struct RequestHash {
    pub(super) current: String,
    /// The earlier hash of the same body, for records without the prefix; none for an import.
    legacy: Option<String>,
}

pub(super) const REQUEST_HASH_VERSION: &str = "v2:";

impl RequestHash {
    /// A create, its password (if any) as its MAC under `secret`.
    pub(super) fn of_create(request: &CreateLinkRequest, raw: &[u8], secret: &[u8]) -> RequestHash {
        let canonical = serde_json::to_string(&fingerprinted(request, secret)).unwrap_or_default();
        let legacy = serde_json::from_slice::<serde_json::Value>(raw)
            .map(|v| v.to_string())
            .unwrap_or_default();
        RequestHash {
            current: versioned_hash("create", &canonical),
            legacy: Some(hex::encode(Sha256::digest(legacy.as_bytes()))),
        }
    }

    /// An import's links: each as its create request was read, or, when it could not be
    /// read as one, as the JSON value it is (keys sorted); a password, in either, as its
    /// MAC under `secret`.
    pub(super) fn of_import(
        links: &[serde_json::Value],
        requests: &[Result<CreateLinkRequest, ApiError>],
        secret: &[u8],
    ) -> RequestHash {
        let canonical: Vec<serde_json::Value> = links
            .iter()
            .zip(requests)
            .map(|(raw, req)| match req {
                Ok(req) => serde_json::to_value(fingerprinted(req, secret)).unwrap_or_default(),
                Err(_) => {
                    let mut raw = raw.clone();
                    if let Some(password) = raw.get_mut("password") {
                        // Not read as a password (perhaps not a string), but still one.
                        let given = match &*password {
                            serde_json::Value::String(p) => p.clone(),
                            other => other.to_string(),
                        };
                        *password = serde_json::Value::String(password_fingerprint(secret, &given));
                    }
                    raw
                }
            })
            .collect();
        RequestHash {
            current: versioned_hash("import", &serde_json::Value::Array(canonical).to_string()),
            legacy: None,
        }
    }

    /// Whether `stored` (a record's hash) was made for this request.
    pub(super) fn matches(&self, stored: &str) -> bool {
        if stored.starts_with(REQUEST_HASH_VERSION) {
            stored == self.current
        } else {
            self.legacy.as_deref() == Some(stored)
        }
    }
}

/// `request` with its password, if any, replaced by its MAC under `secret`.
fn fingerprinted(request: &CreateLinkRequest, secret: &[u8]) -> CreateLinkRequest {
    CreateLinkRequest {
        password: request.password.as_deref().map(|p| password_fingerprint(secret, p)),
        ..request.clone()
    }
}

pub(super) fn versioned_hash(kind: &str, canonical: &str) -> String {
    let digest = Sha256::new()
        .chain_update(kind.as_bytes())
        .chain_update([0])
        .chain_update(canonical.as_bytes())
        .finalize();
    format!("{REQUEST_HASH_VERSION}{}", hex::encode(digest))
}

pub(super) fn key_reused() -> ApiError {
    ApiError::Conflict {
        code: "idempotency_key_reused",
        message: "this Idempotency-Key was used with another request body",
    }
}

/// The first answer to an idempotent create, when this request is the same one.
pub(super) fn replayed(record: IdempotencyRecord, hash: &RequestHash) -> Result<Creation, ApiError> {
    if !hash.matches(&record.request_hash) {
        return Err(key_reused());
    }
    Ok(Creation::Replayed(record))
}
