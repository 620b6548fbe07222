//! The item codec: links, API keys and idempotency keys as DynamoDB items, and the typed
//! reads of an item's attributes.

use aws_sdk_dynamodb::types::AttributeValue;
use rebound_core::RedirectKind;
use rebound_core::{Link, UnixMillis};
use rebound_store::{ApiKeyRecord, Role, StoreError};
use std::collections::HashMap;

pub(crate) type Item = HashMap<String, AttributeValue>;

/// The partition of the `by_time` index: every link, newest first.
pub(crate) const LIST_PARTITION: &str = "links";

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn get_s(item: &Item, k: &str) -> Result<String, StoreError> {
    match item.get(k) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(StoreError::Corrupt(format!("attribute {k} missing or not a string"))),
    }
}

pub(crate) fn opt_s(item: &Item, k: &str) -> Option<String> {
    match item.get(k) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

pub(crate) fn get_n<T: std::str::FromStr>(item: &Item, k: &str) -> Result<T, StoreError> {
    opt_n(item, k)?.ok_or_else(|| StoreError::Corrupt(format!("attribute {k} missing")))
}

pub(crate) fn opt_n<T: std::str::FromStr>(item: &Item, k: &str) -> Result<Option<T>, StoreError> {
    match item.get(k) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map(Some)
            .map_err(|_| StoreError::Corrupt(format!("attribute {k} is not a number"))),
        None | Some(AttributeValue::Null(_)) => Ok(None),
        _ => Err(StoreError::Corrupt(format!("attribute {k} is not a number"))),
    }
}

pub(crate) fn get_bool(item: &Item, k: &str) -> Result<bool, StoreError> {
    match item.get(k) {
        Some(AttributeValue::Bool(b)) => Ok(*b),
        _ => Err(StoreError::Corrupt(format!("attribute {k} missing or not a boolean"))),
    }
}

/// Sort key of the listing indexes: newest first when read backwards.
pub(crate) fn sort_key(created_at: UnixMillis, code: &str) -> String {
    format!("{:015}#{}", created_at.max(0), code)
}

pub(crate) fn link_item(link: &Link) -> Item {
    let mut item = HashMap::from([
        ("code".to_owned(), s(&link.code)),
        ("long_url".to_owned(), s(&link.long_url)),
        ("redirect".to_owned(), n(link.redirect.status())),
        ("forward_query".to_owned(), AttributeValue::Bool(link.forward_query)),
        ("created_at".to_owned(), n(link.created_at)),
        ("created_by".to_owned(), s(&link.created_by)),
        ("is_active".to_owned(), AttributeValue::Bool(link.is_active)),
        ("version".to_owned(), n(link.version)),
        ("list".to_owned(), s(LIST_PARTITION)),
        ("sort".to_owned(), s(sort_key(link.created_at, &link.code))),
    ]);
    let mut opt = |k: &str, v: Option<AttributeValue>| {
        if let Some(v) = v {
            item.insert(k.to_owned(), v);
        }
    };
    opt("expires_at", link.expires_at.map(n));
    opt("deleted_at", link.deleted_at.map(n));
    opt("deleted_by", link.deleted_by.as_ref().map(s));
    opt("delete_reason", link.delete_reason.as_ref().map(s));
    // DynamoDB's TTL reads epoch seconds.
    opt("purge_at", link.purge_at.map(|p| n(p / 1000)));
    opt("purge_at_ms", link.purge_at.map(n));
    opt("password_hash", link.password_hash.as_ref().map(s));
    opt("rules", rebound_core::rules::stored_json(&link.rules).map(s));
    for (k, v) in index_attributes(link) {
        item.insert(k.to_owned(), v);
    }
    item.insert(INDEXED.to_owned(), n(1));
    item
}

/// The attribute every link item written with the two indexes below carries (an item
/// without it was written before them: `index_older_links` puts it in them).
pub(crate) const INDEXED: &str = "indexed";

/// The attributes of the sparse `by_target_host` and `by_domain` indexes: an active link
/// carries its target's host key and its zone (`host_key`, `host_zone`) and, on a domain
/// other than the default, its domain's id (`domain_id`); a link that is down carries none.
pub(crate) fn index_attributes(link: &Link) -> Vec<(&'static str, AttributeValue)> {
    let mut attrs = Vec::new();
    if !link.is_active {
        return attrs;
    }
    if let Some(key) = rebound_core::threat::host_key(&link.long_url) {
        if let Some(zone) = rebound_core::threat::host_key_zone(&key) {
            attrs.push(("host_zone", s(zone)));
            attrs.push(("host_key", s(key)));
        }
    }
    if let Some(id) = rebound_core::domain::split_key(&link.code).1 {
        attrs.push(("domain_id", s(id)));
    }
    if !link.rules.is_empty() {
        attrs.push(("rules_shard", s(rules_shard(&link.code))));
    }
    attrs
}

/// The names of [`index_attributes`], each once.
pub(crate) const INDEX_ATTRIBUTES: [&str; 4] = ["host_zone", "host_key", "domain_id", "rules_shard"];

/// Partitions of the sparse `by_rules` index: the links with rules spread over them by
/// code, so no one partition takes every write.
pub(crate) const RULES_SHARDS: u32 = 16;

/// The `by_rules` partition of the link `code`.
pub(crate) fn rules_shard(code: &str) -> String {
    // FNV-1a: stable across builds, as a key written to the table must be.
    let hash = code
        .bytes()
        .fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("r{}", hash % RULES_SHARDS)
}

pub(crate) fn link_from_item(item: &Item) -> Result<Link, StoreError> {
    let redirect: u16 = get_n(item, "redirect")?;
    Ok(Link {
        code: get_s(item, "code")?,
        long_url: get_s(item, "long_url")?,
        redirect: RedirectKind::from_status(redirect)
            .ok_or_else(|| StoreError::Corrupt(format!("redirect {redirect}")))?,
        forward_query: get_bool(item, "forward_query")?,
        created_at: get_n(item, "created_at")?,
        created_by: get_s(item, "created_by")?,
        is_active: get_bool(item, "is_active")?,
        version: get_n(item, "version")?,
        expires_at: opt_n(item, "expires_at")?,
        deleted_at: opt_n(item, "deleted_at")?,
        deleted_by: opt_s(item, "deleted_by"),
        delete_reason: opt_s(item, "delete_reason"),
        purge_at: opt_n(item, "purge_at_ms")?,
        password_hash: opt_s(item, "password_hash"),
        rules: match opt_s(item, "rules") {
            None => Vec::new(),
            Some(json) => {
                serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("attribute rules: {e}")))?
            }
        },
    })
}

pub(crate) fn key_item(key: &ApiKeyRecord) -> Item {
    let mut item = HashMap::from([
        ("pk".to_owned(), s(format!("hash#{}", key.key_hash))),
        ("id".to_owned(), s(&key.id)),
        ("name".to_owned(), s(&key.name)),
        ("role".to_owned(), s(key.role.as_str())),
        ("key_hash".to_owned(), s(&key.key_hash)),
        ("created_at".to_owned(), n(key.created_at)),
    ]);
    if let Some(r) = key.revoked_at {
        item.insert("revoked_at".to_owned(), n(r));
    }
    if let Some(domains) = &key.domains {
        // A list, not a string set: the order the operator gave is kept.
        item.insert("domains".to_owned(), AttributeValue::L(domains.iter().map(s).collect()));
    }
    item
}

pub(crate) fn key_from_item(item: &Item) -> Result<ApiKeyRecord, StoreError> {
    let role = get_s(item, "role")?;
    Ok(ApiKeyRecord {
        id: get_s(item, "id")?,
        name: get_s(item, "name")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?,
        key_hash: get_s(item, "key_hash")?,
        created_at: get_n(item, "created_at")?,
        revoked_at: opt_n(item, "revoked_at")?,
        domains: match item.get("domains") {
            None => None,
            Some(AttributeValue::L(list)) => Some(
                list.iter()
                    .map(|v| match v {
                        AttributeValue::S(d) => Ok(d.clone()),
                        _ => Err(StoreError::Corrupt("a key's domain is not a string".into())),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err(StoreError::Corrupt("a key's domains are not a list".into())),
        },
    })
}

pub(crate) fn idempotency_pk(scope: &str, key: &str) -> String {
    // Scopes never contain a newline; keys are visible ASCII.
    format!("{scope}\n{key}")
}
