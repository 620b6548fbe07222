//! A create or edit request checked: the target, the alias, the expiry and the redirect.

use super::LinkService;
use crate::auth::Caller;
use crate::error::ApiError;
use rebound_api_types::{CreateLinkRequest, EditLinkRequest, LinkRule, RuleDevice, RuleOs, SplitVariant};
use rebound_core::code::{check_alias, CodeError};
use rebound_core::rules::{self, is_web, Device, Os, Rule, Variant};
use rebound_core::target::TargetPolicy;
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
    /// The rules asked for, checked (the caller checks their targets' hosts are not served
    /// here).
    pub(super) rules: Vec<Rule>,
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
    let rules = check_rules(links, targets, req.rules.unwrap_or_default())?;
    Ok(NewLink {
        rules,
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
            "give at least one of long_url, redirect, forward_query, expires_at, ttl_seconds, password, rules",
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
    if let Some(rules) = req.rules {
        edit.rules = check_rules(links, &links.targets, rules)?;
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

/// A request's rules checked (docs/spec.md §14): their shape and bounds (the core's
/// [`rules::normalize`]), then every target by the policy of a `long_url` (normalised as
/// it is, on no threat list), or, for a rule whose visitors all run iOS or Android, an
/// app's own scheme the operator allows (`api.app_schemes`). 400 `invalid_rules` for the
/// shape, `invalid_url` or `blocked_target` for a target, naming the rule and the field.
pub(super) fn check_rules(
    links: &LinkService,
    targets: &TargetPolicy,
    requested: Vec<LinkRule>,
) -> Result<Vec<Rule>, ApiError> {
    let invalid = |message: String| ApiError::bad_request("invalid_rules", message);
    if let Some(at) = requested
        .iter()
        .position(|r| r.split.as_ref().is_some_and(Vec::is_empty))
    {
        return Err(invalid(format!(
            "rules[{}].split: a split has {} to {} variants, not 0",
            at + 1,
            rules::MIN_VARIANTS,
            rules::MAX_VARIANTS
        )));
    }
    let rules = requested
        .into_iter()
        .map(|r| Rule {
            countries: r.countries,
            os: r.os.into_iter().map(core_os).collect(),
            devices: r.devices.into_iter().map(core_device).collect(),
            languages: r.languages,
            target: r.target,
            split: r
                .split
                .unwrap_or_default()
                .into_iter()
                .map(|v| Variant {
                    target: v.target,
                    weight: v.weight,
                })
                .collect(),
        })
        .collect();
    let mut rules = rules::normalize(rules).map_err(|e| invalid(e.0))?;
    for (at, rule) in rules.iter_mut().enumerate() {
        let for_apps = rule.only_for_apps();
        let check = |field: String, target: &mut String| -> Result<(), ApiError> {
            if is_web(target) {
                // The target policy's words, naming the rule's field instead of long_url.
                *target = targets
                    .validate(target)
                    .map_err(|e| ApiError::bad_request("invalid_url", e.to_string().replacen("long_url", &field, 1)))?;
                return links.refuse_threat_in(&field, target);
            }
            check_app_target(&links.settings.app_schemes, for_apps, target)
                .map_err(|why| ApiError::bad_request("invalid_url", format!("{field} {why}")))
        };
        if let Some(target) = rule.target.as_mut() {
            check(format!("rules[{}].target", at + 1), target)?;
        }
        for (v, variant) in rule.split.iter_mut().enumerate() {
            check(
                format!("rules[{}].split[{}].target", at + 1, v + 1),
                &mut variant.target,
            )?;
        }
    }
    Ok(rules)
}

/// An app's own target (`intent://…`, `myapp://open/x`): a scheme the operator allows,
/// in a rule for iOS or Android visitors alone, a URL without whitespace or control
/// characters, at most 2,048 bytes.
fn check_app_target(allowed: &[String], for_apps: bool, target: &str) -> Result<(), String> {
    let scheme = target.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    let Some(scheme) = scheme.filter(|s| allowed.iter().any(|a| a.eq_ignore_ascii_case(s))) else {
        return Err(match allowed.is_empty() {
            true => "must be an http or https URL (no app scheme is allowed here: api.app_schemes)".to_owned(),
            false => format!(
                "must be an http or https URL, or use an allowed app scheme ({})",
                allowed.join(", ")
            ),
        });
    };
    if !for_apps {
        return Err(format!(
            "an app's own scheme ({scheme}:) only in a rule whose os is ios or android alone"
        ));
    }
    if target.len() > 2048 || target.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("at most 2,048 bytes, without whitespace or control characters".to_owned());
    }
    url::Url::parse(target).map_err(|e| format!("is not a URL: {e}"))?;
    Ok(())
}

fn core_os(os: RuleOs) -> Os {
    match os {
        RuleOs::Ios => Os::Ios,
        RuleOs::Android => Os::Android,
        RuleOs::Windows => Os::Windows,
        RuleOs::Macos => Os::Macos,
        RuleOs::Linux => Os::Linux,
        RuleOs::Chromeos => Os::Chromeos,
        RuleOs::Other => Os::Other,
    }
}

fn core_device(device: RuleDevice) -> Device {
    match device {
        RuleDevice::Desktop => Device::Desktop,
        RuleDevice::Mobile => Device::Mobile,
        RuleDevice::Tablet => Device::Tablet,
        RuleDevice::Other => Device::Other,
    }
}

/// A rule as the API shows it.
pub(crate) fn rule_view(rule: &Rule) -> LinkRule {
    LinkRule {
        countries: rule.countries.clone(),
        os: rule
            .os
            .iter()
            .map(|o| match o {
                Os::Ios => RuleOs::Ios,
                Os::Android => RuleOs::Android,
                Os::Windows => RuleOs::Windows,
                Os::Macos => RuleOs::Macos,
                Os::Linux => RuleOs::Linux,
                Os::Chromeos => RuleOs::Chromeos,
                Os::Other => RuleOs::Other,
            })
            .collect(),
        devices: rule
            .devices
            .iter()
            .map(|d| match d {
                Device::Desktop => RuleDevice::Desktop,
                Device::Mobile => RuleDevice::Mobile,
                Device::Tablet => RuleDevice::Tablet,
                Device::Other => RuleDevice::Other,
            })
            .collect(),
        languages: rule.languages.clone(),
        target: rule.target.clone(),
        split: (!rule.split.is_empty()).then(|| {
            rule.split
                .iter()
                .map(|v| SplitVariant {
                    target: v.target.clone(),
                    weight: v.weight,
                })
                .collect()
        }),
    }
}
