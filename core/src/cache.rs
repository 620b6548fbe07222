//! The cache record (docs/spec.md §2): one shape for Redis `url:{code}` and for L1, and how a
//! reader judges it at a given time.

use crate::link::{Link, RedirectKind};
use crate::rules::Rule;
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// How long cached records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// How long an active record is fresh after it is populated (at most 24 h).
    pub fresh_millis: i64,
    /// How long after `fresh_until` an active record may still be served while the store fails.
    pub stale_grace_millis: i64,
    /// How long a tombstone lives.
    pub tombstone_millis: i64,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            fresh_millis: 24 * 3_600_000,
            stale_grace_millis: 15 * 60_000,
            tombstone_millis: 24 * 3_600_000,
        }
    }
}

/// What a cached record says about its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CacheState {
    /// The link redirects; a tombstone never carries a destination.
    Active {
        long_url: String,
        redirect: RedirectKind,
        forward_query: bool,
        /// The link asks for a password: its redirect answers the form first (the hash
        /// stays in the store).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        protected: bool,
        /// The link's rules (docs/spec.md §14); absent for a link without.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<Rule>,
    },
    /// The link was deleted or taken down.
    Deleted,
}

/// A cached record of one code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheRecord {
    #[serde(flatten)]
    pub state: CacheState,
    pub version: u64,
    pub expires_at: Option<UnixMillis>,
    pub fresh_until: UnixMillis,
    /// When the record must be gone: the Redis key's TTL.
    pub stale_until: UnixMillis,
}

/// How a reader may use a cached record now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachedVerdict {
    /// Fresh and active: redirect.
    Redirect,
    /// A tombstone: 404 without asking the store.
    Tombstone,
    /// Past `expires_at`: never redirect (410).
    Expired,
    /// Active but past `fresh_until`: ask the store; usable only if the store fails.
    Stale,
    /// Past `stale_until`: as good as absent.
    Dead,
}

/// How a cached record with these bounds may be used at `now`: the rule behind
/// [`CacheRecord::verdict`], for holders that keep the fields in their own layout (L1).
#[inline]
pub fn judge(
    tombstone: bool,
    expires_at: Option<UnixMillis>,
    fresh_until: UnixMillis,
    stale_until: UnixMillis,
    now: UnixMillis,
) -> CachedVerdict {
    if tombstone {
        if now < stale_until {
            CachedVerdict::Tombstone
        } else {
            CachedVerdict::Dead
        }
    } else if expires_at.is_some_and(|e| now >= e) {
        CachedVerdict::Expired
    } else if now < fresh_until {
        CachedVerdict::Redirect
    } else if now < stale_until {
        CachedVerdict::Stale
    } else {
        CachedVerdict::Dead
    }
}

impl CacheRecord {
    /// The record to cache for an active link read at `now`.
    pub fn active(link: &Link, now: UnixMillis, policy: &CachePolicy) -> CacheRecord {
        let mut fresh_until = now + policy.fresh_millis;
        let mut stale_until = fresh_until + policy.stale_grace_millis;
        if let Some(e) = link.expires_at {
            fresh_until = fresh_until.min(e);
            stale_until = stale_until.min(e);
        }
        CacheRecord {
            state: CacheState::Active {
                long_url: link.long_url.clone(),
                redirect: link.redirect,
                forward_query: link.forward_query,
                protected: link.password_hash.is_some(),
                rules: link.rules.clone(),
            },
            version: link.version,
            expires_at: link.expires_at,
            fresh_until,
            stale_until,
        }
    }

    /// The tombstone for a link deleted at `version`, written at `now`.
    pub fn tombstone(version: u64, now: UnixMillis, policy: &CachePolicy) -> CacheRecord {
        let until = now + policy.tombstone_millis;
        CacheRecord {
            state: CacheState::Deleted,
            version,
            expires_at: None,
            fresh_until: until,
            stale_until: until,
        }
    }

    /// True for a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self.state, CacheState::Deleted)
    }

    /// Judges the record at `now`.
    pub fn verdict(&self, now: UnixMillis) -> CachedVerdict {
        judge(
            self.is_tombstone(),
            self.expires_at,
            self.fresh_until,
            self.stale_until,
            now,
        )
    }

    /// Whether this record may replace `existing`: never a lower version (equal versions
    /// may overwrite, so retries are idempotent). The Lua script applies the same rule.
    pub fn may_replace(&self, existing: &CacheRecord) -> bool {
        self.may_replace_version(existing.version)
    }

    /// [`CacheRecord::may_replace`] for a holder that keeps only the version.
    pub fn may_replace_version(&self, existing_version: u64) -> bool {
        self.version >= existing_version
    }

    /// Milliseconds until the record must be gone, from `now`: the key's TTL.
    pub fn ttl_millis(&self, now: UnixMillis) -> i64 {
        (self.stale_until - now).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(expires_at: Option<i64>) -> Link {
        Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            expires_at,
        )
    }

    #[test]
    fn a_protected_record_says_so_and_one_written_before_passwords_reads_as_open() {
        let open = CacheRecord::active(&link(None), 0, &CachePolicy::default());
        let json = serde_json::to_string(&open).unwrap();
        assert!(
            !json.contains("protected"),
            "unchanged for links without a password: {json}"
        );
        let locked = CacheRecord::active(
            &Link {
                password_hash: Some("$argon2id$x".into()),
                ..link(None)
            },
            0,
            &CachePolicy::default(),
        );
        let json = serde_json::to_string(&locked).unwrap();
        assert!(
            json.contains(r#""protected":true"#) && !json.contains("argon2"),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<CacheRecord>(&json).unwrap(), locked);
        assert_eq!(
            serde_json::from_str::<CacheRecord>(&serde_json::to_string(&open).unwrap()).unwrap(),
            open
        );
    }

    #[test]
    fn active_record_bounds() {
        let p = CachePolicy::default();
        let r = CacheRecord::active(&link(None), 1000, &p);
        assert_eq!(r.fresh_until, 1000 + p.fresh_millis);
        assert_eq!(r.stale_until, r.fresh_until + p.stale_grace_millis);
        // Expiry caps both.
        let r = CacheRecord::active(&link(Some(5000)), 1000, &p);
        assert_eq!((r.fresh_until, r.stale_until), (5000, 5000));
        let r = CacheRecord::active(&link(Some(1000 + p.fresh_millis + 60_000)), 1000, &p);
        assert_eq!(r.fresh_until, 1000 + p.fresh_millis);
        assert_eq!(r.stale_until, 1000 + p.fresh_millis + 60_000);
    }

    #[test]
    fn verdict_table() {
        let p = CachePolicy {
            fresh_millis: 100,
            stale_grace_millis: 50,
            tombstone_millis: 200,
        };
        let active = CacheRecord::active(&link(None), 0, &p);
        let expiring = CacheRecord::active(&link(Some(120)), 0, &p);
        let tomb = CacheRecord::tombstone(2, 0, &p);
        let cases = [
            (&active, 0, CachedVerdict::Redirect),
            (&active, 99, CachedVerdict::Redirect),
            (&active, 100, CachedVerdict::Stale),
            (&active, 149, CachedVerdict::Stale),
            (&active, 150, CachedVerdict::Dead),
            (&expiring, 99, CachedVerdict::Redirect),
            (&expiring, 110, CachedVerdict::Stale),
            (&expiring, 120, CachedVerdict::Expired),
            (&expiring, 10_000, CachedVerdict::Expired),
            (&tomb, 0, CachedVerdict::Tombstone),
            (&tomb, 199, CachedVerdict::Tombstone),
            (&tomb, 200, CachedVerdict::Dead),
        ];
        for (rec, now, want) in cases {
            assert_eq!(rec.verdict(now), want, "at {now}: {rec:?}");
        }
    }

    #[test]
    fn lower_versions_never_replace() {
        let p = CachePolicy::default();
        let v1 = CacheRecord::active(&link(None), 0, &p);
        let tomb2 = CacheRecord::tombstone(2, 0, &p);
        assert!(!v1.may_replace(&tomb2));
        assert!(tomb2.may_replace(&v1));
        assert!(tomb2.may_replace(&tomb2.clone()));
    }

    #[test]
    fn serialised_shape() {
        let p = CachePolicy::default();
        let tomb = serde_json::to_value(CacheRecord::tombstone(3, 0, &p)).unwrap();
        assert_eq!(tomb["state"], "deleted");
        assert!(
            tomb.get("long_url").is_none(),
            "a tombstone never carries a destination"
        );
        let active = CacheRecord::active(&link(None), 0, &p);
        let json = serde_json::to_string(&active).unwrap();
        assert!(json.contains("\"state\":\"active\""), "{json}");
        assert!(json.contains("\"redirect\":302"), "{json}");
        let back: CacheRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, active);
    }
}
