//! A create or edit request checked: the target, the alias, the expiry and the redirect.

use super::LinkService;
use crate::auth::Caller;
use crate::error::ApiError;
use rebound_api_types::{CreateLinkRequest, EditLinkRequest};
use rebound_core::code::{check_alias, CodeError};
use rebound_core::time::parse_rfc3339;
use rebound_core::{Link, LinkEdit, RedirectKind};

pub(super) const MAX_TTL_SECONDS: i64 = 10 * 365 * 86_400;

pub(super) fn code_error(field: &str, e: CodeError) -> ApiError {
    match e {
        CodeError::Reserved => ApiError::bad_request("reserved_alias", format!("{field} is a reserved word")),
        other => ApiError::bad_request("invalid_alias", format!("{field} {other}")),
    }
}

/// The validated parts of a create request.
pub(super) struct NewLink {
    pub(super) long_url: String,
    pub(super) alias: Option<String>,
    pub(super) expires_at: Option<i64>,
    pub(super) redirect: RedirectKind,
    pub(super) forward_query: bool,
    /// The domain asked for, resolved by the caller (it reads the store).
    pub(super) domain: Option<String>,
    /// The password asked for, checked; the caller hashes it.
    pub(super) password: Option<String>,
}

pub(super) fn validate_create(
    links: &LinkService,
    caller: &Caller,
    req: CreateLinkRequest,
    now: i64,
) -> Result<NewLink, ApiError> {
    let targets = match caller {
        Caller::Key(_) => &links.targets,
        Caller::Anonymous { .. } => &links.anonymous_targets,
    };
    let long_url = targets
        .validate(&req.long_url)
        .map_err(|e| ApiError::bad_request("invalid_url", e.to_string()))?;
    links.refuse_threat(&long_url)?;
    if let Some(alias) = &req.custom_alias {
        check_alias(alias).map_err(|e| code_error("custom_alias", e))?;
    }
    let expires_at = expiry(req.expires_at.map(Some), req.ttl_seconds, now)?.flatten();
    let redirect = redirect(req.redirect)?.unwrap_or_default();
    if let Some(password) = &req.password {
        check_password(password)?;
    }
    Ok(NewLink {
        long_url,
        alias: req.custom_alias,
        expires_at,
        redirect,
        forward_query: req.forward_query.unwrap_or(false),
        domain: req.domain,
        password: req.password,
    })
}

/// The expiry a request asks for: `None` when it gives none, `Some(None)` when it removes
/// it (an edit's `"expires_at": null`), `Some(Some(at))` for a time in the future at most 10
/// years ahead (`expires_at`, or `ttl_seconds` from `now`).
fn expiry(
    expires_at: Option<Option<String>>,
    ttl_seconds: Option<i64>,
    now: i64,
) -> Result<Option<Option<i64>>, ApiError> {
    match (expires_at, ttl_seconds) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "invalid_expiry",
            "give expires_at or ttl_seconds, not both",
        )),
        (Some(None), None) => Ok(Some(None)),
        (Some(Some(at)), None) => {
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
            Ok(Some(Some(at)))
        }
        (None, Some(ttl)) => {
            if !(1..=MAX_TTL_SECONDS).contains(&ttl) {
                return Err(ApiError::bad_request(
                    "invalid_expiry",
                    "ttl_seconds must be between 1 and 315360000 (10 years)",
                ));
            }
            Ok(Some(Some(now + ttl * 1000)))
        }
        (None, None) => Ok(None),
    }
}

/// The redirect kind a request asks for, if any.
fn redirect(status: Option<u16>) -> Result<Option<RedirectKind>, ApiError> {
    status
        .map(|s| {
            RedirectKind::from_status(s)
                .ok_or_else(|| ApiError::bad_request("invalid_redirect", "redirect must be 301, 302, 307 or 308"))
        })
        .transpose()
}

/// A password checked, or 400 `invalid_password`.
fn check_password(password: &str) -> Result<(), ApiError> {
    rebound_core::password::check_password(password)
        .map_err(|e| ApiError::bad_request("invalid_password", e.to_string()))
}

/// An edit of `link` checked by the rules of a create (a key holder's target policy: the
/// blocklist, this service's own hosts): the link's new editable fields, and the new
/// password when it sets one (the caller hashes it into the edit). 400 `empty_edit` when it
/// changes nothing it could (no field given).
pub(super) fn validate_edit(
    links: &LinkService,
    link: &Link,
    req: EditLinkRequest,
    now: i64,
) -> Result<(LinkEdit, Option<String>), ApiError> {
    if req == EditLinkRequest::default() {
        return Err(ApiError::bad_request(
            "empty_edit",
            "give at least one of long_url, redirect, forward_query, expires_at, ttl_seconds",
        ));
    }
    let mut edit = link.editable();
    if let Some(url) = req.long_url {
        edit.long_url = links
            .targets
            .validate(&url)
            .map_err(|e| ApiError::bad_request("invalid_url", e.to_string()))?;
        links.refuse_threat(&edit.long_url)?;
    }
    if let Some(kind) = redirect(req.redirect)? {
        edit.redirect = kind;
    }
    if let Some(forward) = req.forward_query {
        edit.forward_query = forward;
    }
    if let Some(expires_at) = expiry(req.expires_at, req.ttl_seconds, now)? {
        edit.expires_at = expires_at;
    }
    let password = match req.password {
        Some(Some(password)) => {
            check_password(&password)?;
            Some(password)
        }
        Some(None) => {
            edit.password_hash = None;
            None
        }
        None => None,
    };
    Ok((edit, password))
}
