//! The link record as the store keeps it (docs/spec.md §2).

use crate::rules::Rule;
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// How a link redirects: the HTTP status of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(try_from = "u16", into = "u16")]
pub enum RedirectKind {
    /// 301 Moved Permanently.
    Permanent,
    /// 302 Found, the default.
    #[default]
    Found,
    /// 307 Temporary Redirect.
    Temporary,
    /// 308 Permanent Redirect.
    PermanentKeepMethod,
}

impl RedirectKind {
    /// The HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            RedirectKind::Permanent => 301,
            RedirectKind::Found => 302,
            RedirectKind::Temporary => 307,
            RedirectKind::PermanentKeepMethod => 308,
        }
    }

    /// The kind for a status code, if it is one of 301, 302, 307, 308.
    pub fn from_status(status: u16) -> Option<Self> {
        match status {
            301 => Some(RedirectKind::Permanent),
            302 => Some(RedirectKind::Found),
            307 => Some(RedirectKind::Temporary),
            308 => Some(RedirectKind::PermanentKeepMethod),
            _ => None,
        }
    }
}

impl TryFrom<u16> for RedirectKind {
    type Error = String;
    fn try_from(v: u16) -> Result<Self, Self::Error> {
        RedirectKind::from_status(v).ok_or_else(|| format!("redirect must be 301, 302, 307 or 308, not {v}"))
    }
}

impl From<RedirectKind> for u16 {
    fn from(k: RedirectKind) -> u16 {
        k.status()
    }
}

/// How long a deleted link's record is kept before the store's TTL may purge it.
pub const DELETED_RETENTION_MILLIS: i64 = 30 * 86_400_000;

/// A short link, keyed by `code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub code: String,
    /// The validated, normalised target; changed only by an edit (a new version).
    pub long_url: String,
    pub redirect: RedirectKind,
    pub forward_query: bool,
    pub created_at: UnixMillis,
    /// The principal (API key id) that created it.
    pub created_by: String,
    pub is_active: bool,
    /// Starts at 1 and grows by one on every state change.
    pub version: u64,
    pub expires_at: Option<UnixMillis>,
    pub deleted_at: Option<UnixMillis>,
    pub deleted_by: Option<String>,
    pub delete_reason: Option<String>,
    /// When the store's TTL may remove the record: cleanup only, never a correctness gate.
    pub purge_at: Option<UnixMillis>,
    /// The password's Argon2id hash (a PHC string, `password`), when the link asks for one:
    /// never the password, never shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// Rules that choose the target by who clicks (docs/spec.md §14), checked and
    /// normalised ([`crate::rules::normalize`]); none for most links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

/// What an edit sets: the new values of every field an edit may change (docs/spec.md §12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEdit {
    pub long_url: String,
    pub redirect: RedirectKind,
    pub forward_query: bool,
    pub expires_at: Option<UnixMillis>,
    /// The new password's hash; `None`: no password.
    pub password_hash: Option<String>,
    pub rules: Vec<Rule>,
}

/// What a delete or takedown records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub at: UnixMillis,
    pub by: String,
    pub reason: Option<String>,
}

impl Link {
    /// A new active link at version 1.
    pub fn new_active(
        code: String,
        long_url: String,
        redirect: RedirectKind,
        forward_query: bool,
        created_at: UnixMillis,
        created_by: String,
        expires_at: Option<UnixMillis>,
    ) -> Link {
        Link {
            code,
            long_url,
            redirect,
            forward_query,
            created_at,
            created_by,
            is_active: true,
            version: 1,
            expires_at,
            deleted_at: None,
            deleted_by: None,
            delete_reason: None,
            purge_at: expires_at,
            password_hash: None,
            rules: Vec::new(),
        }
    }

    /// The record after `deletion`: inactive, next version, purge 30 days later
    /// (or at expiry, if that comes first).
    pub fn deactivated(&self, deletion: &Deletion) -> Link {
        let purge = deletion.at + DELETED_RETENTION_MILLIS;
        Link {
            is_active: false,
            version: self.version + 1,
            deleted_at: Some(deletion.at),
            deleted_by: Some(deletion.by.clone()),
            delete_reason: deletion.reason.clone(),
            purge_at: Some(self.expires_at.map_or(purge, |e| e.min(purge))),
            ..self.clone()
        }
    }

    /// The fields an edit may change, as they are now.
    pub fn editable(&self) -> LinkEdit {
        LinkEdit {
            long_url: self.long_url.clone(),
            redirect: self.redirect,
            forward_query: self.forward_query,
            expires_at: self.expires_at,
            password_hash: self.password_hash.clone(),
            rules: self.rules.clone(),
        }
    }

    /// The record after `edit`: the same link at the next version, purged at its new expiry.
    pub fn edited(&self, edit: &LinkEdit) -> Link {
        Link {
            long_url: edit.long_url.clone(),
            redirect: edit.redirect,
            forward_query: edit.forward_query,
            expires_at: edit.expires_at,
            purge_at: edit.expires_at,
            password_hash: edit.password_hash.clone(),
            rules: edit.rules.clone(),
            version: self.version + 1,
            ..self.clone()
        }
    }

    /// The record after an operator restored it (a link a threat list took down by
    /// mistake): active again at the next version, without its deletion record, purged at
    /// its expiry as an active link is.
    pub fn restored(&self) -> Link {
        Link {
            is_active: true,
            version: self.version + 1,
            deleted_at: None,
            deleted_by: None,
            delete_reason: None,
            purge_at: self.expires_at,
            ..self.clone()
        }
    }

    /// True once `expires_at` has passed.
    pub fn is_expired(&self, now: UnixMillis) -> bool {
        self.expires_at.is_some_and(|e| now >= e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_kind_table() {
        for (status, want) in [
            (301, Some(RedirectKind::Permanent)),
            (302, Some(RedirectKind::Found)),
            (307, Some(RedirectKind::Temporary)),
            (308, Some(RedirectKind::PermanentKeepMethod)),
            (300, None),
            (200, None),
            (303, None),
            (0, None),
        ] {
            assert_eq!(RedirectKind::from_status(status), want);
            if let Some(k) = want {
                assert_eq!(k.status(), status);
            }
        }
        assert_eq!(RedirectKind::default().status(), 302);
    }

    #[test]
    fn deactivation_bumps_the_version_and_sets_purge() {
        let link = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            10,
            "k".into(),
            None,
        );
        let d = link.deactivated(&Deletion {
            at: 100,
            by: "op".into(),
            reason: Some("spam".into()),
        });
        assert!(!d.is_active);
        assert_eq!(d.version, 2);
        assert_eq!(d.deleted_at, Some(100));
        assert_eq!(d.purge_at, Some(100 + DELETED_RETENTION_MILLIS));
        assert_eq!(d.long_url, link.long_url);

        let expiring = Link {
            expires_at: Some(500),
            ..link
        };
        let d = expiring.deactivated(&Deletion {
            at: 100,
            by: "op".into(),
            reason: None,
        });
        assert_eq!(d.purge_at, Some(500));
    }

    #[test]
    fn an_edit_bumps_the_version_and_follows_the_new_expiry() {
        let link = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            10,
            "k".into(),
            Some(500),
        );
        assert_eq!(
            link.edited(&link.editable()),
            Link {
                version: 2,
                ..link.clone()
            }
        );
        let edit = LinkEdit {
            long_url: "https://f.com/".into(),
            redirect: RedirectKind::Permanent,
            forward_query: true,
            expires_at: None,
            password_hash: Some("$argon2id$…".into()),
            rules: vec![crate::rules::Rule {
                os: vec![crate::rules::Os::Ios],
                target: Some("https://apps.example/".into()),
                ..Default::default()
            }],
        };
        let e = link.edited(&edit);
        assert_eq!(
            (e.version, e.is_active, e.created_at, e.created_by.as_str()),
            (2, true, 10, "k")
        );
        assert_eq!(e.editable(), edit);
        assert_eq!(e.purge_at, None, "no expiry: never purged");
    }

    #[test]
    fn a_restore_undoes_a_takedown_at_the_next_version() {
        let link = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            10,
            "k".into(),
            Some(9_000),
        );
        let down = link.deactivated(&Deletion {
            at: 100,
            by: "threat-lists".into(),
            reason: Some("threat-list:urlhaus".into()),
        });
        assert_eq!(down.restored(), Link { version: 3, ..link });
    }
}
