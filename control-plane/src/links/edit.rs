//! Edit (docs/spec.md §12): the versioned write of the new fields with the propagation pending,
//! then the new record and the invalidation of every older version, then the audit event
//! with the old and the new values.

use super::validate::validate_edit;
use super::LinkService;
use crate::auth::Caller;
use crate::error::ApiError;
use rebound_api_types::EditLinkRequest;
use rebound_core::time::to_rfc3339;
use rebound_core::{Link, LinkEdit};
use rebound_store::{AuditEvent, StoreError};
use serde_json::{json, Map, Value};

impl LinkService {
    /// Edits the link `key` at version `if_match` (docs/spec.md §12): the rules of a create for
    /// the new values, the owner or an operator, the creation rate limit; then the
    /// conditional write (the propagation pending, leased to this control plane), the
    /// propagation (no proxy answers with an older version once it returned), and the audit
    /// event. 412 when the link is at another version; a retry of an edit that was stored
    /// but not propagated (the link one version on, with the same values) propagates it
    /// again. An edit that changes nothing returns the link as it is.
    pub(crate) async fn edit_link(
        &self,
        caller: &Caller,
        key: &str,
        if_match: u64,
        request: EditLinkRequest,
    ) -> Result<Link, ApiError> {
        let principal = caller.clone().principal()?;
        let link = self.visible_link(&principal, key).await?;
        let now = self.clock.now_millis();
        if !link.is_active {
            return Err(ApiError::Conflict {
                code: "link_inactive",
                message: "the link is deleted or taken down; it cannot be edited",
            });
        }
        if link.is_expired(now) {
            return Err(ApiError::Conflict {
                code: "link_expired",
                message: "the link has expired; it cannot be edited",
            });
        }
        let retried = link.version == if_match + 1;
        if link.version != if_match && !retried {
            return Err(stale(&link));
        }
        let (mut edit, password) = validate_edit(self, &link, request, now)?;
        if edit.long_url != link.long_url {
            self.names.refuse_served_domain(None, &edit.long_url).await?;
        }
        if edit.rules != link.rules {
            self.refuse_served_rule_targets(&edit.rules).await?;
        }
        if retried {
            // The same edit again, after a 503: the link holds it already. Tell the caches
            // again (harmless when they knew); any other edit of that version is stale.
            let same_password = match (password, &link.password_hash) {
                (Some(given), Some(hash)) => self.password_matches(given, hash.clone()).await?,
                (Some(_), None) => false,
                (None, _) => true,
            };
            // The password's hash differs with each salt: the rest compared as values.
            let rest_same = LinkEdit {
                password_hash: link.password_hash.clone(),
                ..edit.clone()
            } == link.editable();
            let removal_same = edit.password_hash.is_some() || link.password_hash.is_none();
            if !(same_password && rest_same && removal_same) {
                return Err(stale(&link));
            }
            return match self.events.changed(&link).await {
                Ok(()) => Ok(link),
                Err(_) => Err(ApiError::EditNotPropagated),
            };
        }
        if let Some(password) = password {
            edit.password_hash = Some(self.hash_password(password).await?);
        }
        if edit == link.editable() {
            return Ok(link);
        }
        self.charge(caller, now)?;
        let lease = self.propagations.lease_from(now);
        let edited = match self.store.edit_link_pending(key, if_match, &edit, &lease).await {
            Ok(edited) => edited,
            // Changed, or taken down, meanwhile; or this very write landed and a retry of it
            // (the store client's, after a lost answer) found its condition spent: the link
            // one version on with exactly these fields (the password's hash is this write's,
            // salt and all) is this edit.
            Err(StoreError::ConditionFailed) => match self.store.get_link(key).await? {
                Some(now) if now.is_active && now.version == if_match + 1 && now.editable() == edit => now,
                found => {
                    return Err(match found {
                        Some(now) if now.is_active => stale(&now),
                        Some(_) => ApiError::Conflict {
                            code: "link_inactive",
                            message: "the link is deleted or taken down; it cannot be edited",
                        },
                        None => ApiError::NotFound("no such link"),
                    })
                }
            },
            Err(StoreError::NotFound) => return Err(ApiError::NotFound("no such link")),
            Err(e) => return Err(e.into()),
        };
        let delivered = self.events.changed(&edited).await;
        let event = AuditEvent {
            at: self.clock.now_millis(),
            actor: principal.id.clone(),
            action: "edit".to_owned(),
            code: Some(key.to_owned()),
            reason: None,
            outcome: "ok".to_owned(),
            detail: Some(changes(&link.editable(), &edit).to_string()),
        };
        match self.settle(&edited, delivered, event).await? {
            true => Ok(edited),
            false => Err(ApiError::EditNotPropagated),
        }
    }
}

/// 412: the link is at another version than the edit names.
fn stale(link: &Link) -> ApiError {
    ApiError::PreconditionFailed(format!(
        "the link is at version {}; read it again and send If-Match: \"{}\"",
        link.version, link.version
    ))
}

/// The audit detail of an edit: `{"old": {...}, "new": {...}}` with the fields it changed.
fn changes(old: &LinkEdit, new: &LinkEdit) -> Value {
    let (mut was, mut is) = (Map::new(), Map::new());
    let mut field = |name: &str, a: Value, b: Value| {
        if a != b {
            was.insert(name.to_owned(), a);
            is.insert(name.to_owned(), b);
        }
    };
    field("long_url", json!(old.long_url), json!(new.long_url));
    field("redirect", json!(old.redirect.status()), json!(new.redirect.status()));
    field("forward_query", json!(old.forward_query), json!(new.forward_query));
    field(
        "expires_at",
        json!(old.expires_at.map(to_rfc3339)),
        json!(new.expires_at.map(to_rfc3339)),
    );
    // The rules whole, old and new (docs/spec.md §14): an audit reader sees what changed.
    field("rules", json!(old.rules), json!(new.rules));
    // Never the hash: whether there is a password, and whether it changed.
    if old.password_hash != new.password_hash {
        let then = old.password_hash.as_ref().map(|_| "set");
        let now = new
            .password_hash
            .as_ref()
            .map(|_| if then.is_some() { "changed" } else { "set" });
        field("password", json!(then), json!(now));
    }
    json!({ "old": was, "new": is })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::RedirectKind;

    #[test]
    fn the_audit_detail_names_only_what_changed() {
        let old = LinkEdit {
            long_url: "https://a.example/".into(),
            redirect: RedirectKind::Found,
            forward_query: false,
            expires_at: Some(0),
            password_hash: None,
            rules: Vec::new(),
        };
        let ios = vec![rebound_core::rules::Rule {
            os: vec![rebound_core::rules::Os::Ios],
            target: Some("https://apps.example/".into()),
            ..Default::default()
        }];
        let cases = [
            (old.clone(), json!({"old": {}, "new": {}})),
            (
                LinkEdit {
                    long_url: "https://b.example/".into(),
                    ..old.clone()
                },
                json!({"old": {"long_url": "https://a.example/"}, "new": {"long_url": "https://b.example/"}}),
            ),
            (
                LinkEdit {
                    redirect: RedirectKind::Permanent,
                    forward_query: true,
                    expires_at: None,
                    ..old.clone()
                },
                json!({
                    "old": {"redirect": 302, "forward_query": false, "expires_at": "1970-01-01T00:00:00.000Z"},
                    "new": {"redirect": 301, "forward_query": true, "expires_at": null}
                }),
            ),
            (
                LinkEdit {
                    rules: ios.clone(),
                    ..old.clone()
                },
                json!({"old": {"rules": []}, "new": {"rules": [{"os": ["ios"], "target": "https://apps.example/"}]}}),
            ),
        ];
        for (new, want) in cases {
            assert_eq!(changes(&old, &new), want, "{new:?}");
        }
    }
}
