//! The bodies of Rebound's control-plane API (docs/spec.md §6): what the server reads and writes,
//! what its OpenAPI document is generated from (utoipa), and what the CLI sends and reads.
//! One definition, so the three cannot drift apart. No behaviour beyond (de)serialising.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A new link.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateLinkRequest {
    /// Absolute http(s) URL with a host and no user-info, at most 2,048 bytes (configurable),
    /// without whitespace or control characters; not on this service's own host, not on a
    /// blocked domain.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    pub long_url: String,
    /// A code of your choice: `[A-Za-z0-9_-]{3,32}`, not a reserved word (any case).
    #[schema(pattern = r"^[A-Za-z0-9_-]{3,32}$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_alias: Option<String>,
    /// RFC 3339 time in the future, at most 10 years ahead; not with `ttl_seconds`.
    #[schema(format = DateTime)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Seconds until expiry, 1 to 10 years; not with `expires_at`.
    #[schema(minimum = 1, maximum = 315_360_000)]
    #[serde(default, deserialize_with = "whole_number", skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
    /// 301, 302 (default), 307 or 308.
    #[schema(schema_with = redirect_schema)]
    #[serde(default, deserialize_with = "whole_number", skip_serializing_if = "Option::is_none")]
    pub redirect: Option<u16>,
    /// Append the request's query string to the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_query: Option<bool>,
    /// The domain the link is on (docs/spec.md §11): the default domain (the host of the public
    /// base URL) when not given, or the first domain of a key scoped to domains.
    #[schema(max_length = 253)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// A password visitors must give before the redirect (docs/spec.md §12): 4 to 128 characters
    /// without control characters, stored as an Argon2id hash, never shown again.
    #[schema(min_length = 4, max_length = 128, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Rules that choose the target by who clicks (docs/spec.md §14): the first that
    /// matches decides; none matching, `long_url` answers. At most 20.
    #[schema(max_items = 20)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<LinkRule>>,
}

/// One rule of a link (docs/spec.md §14). It matches when every condition it names holds
/// (within a list, any value), and sends the visitor to `target`, or to one of `split`'s
/// targets by weight (sticky per visitor). Every target obeys the rules of `long_url`; an
/// app's own scheme (`intent:`, `myapp:`) only where the operator allows it
/// (`api.app_schemes`) and only in a rule whose `os` is iOS or Android alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct LinkRule {
    /// ISO 3166-1 alpha-2 codes (`US`, `de`: two letters, any case), from the visitor's
    /// address or a trusted CDN.
    #[schema(max_items = 250)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub countries: Vec<String>,
    /// Operating system families, from the User-Agent.
    #[schema(max_items = 7)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub os: Vec<RuleOs>,
    /// Device classes, from the User-Agent.
    #[schema(max_items = 4)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<RuleDevice>,
    /// Language ranges (`fr`, `pt-BR`) matched against the visitor's preferred language:
    /// the `Accept-Language` item of the highest q that some rule of the link matches
    /// (`fr` matches `fr-CA`). A range is subtags of 1 to 8 letters or digits joined by
    /// `-`, the first of letters only, at most 35 bytes.
    #[schema(max_items = 32)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub languages: Vec<String>,
    /// Where the rule sends a visitor it matches; not with `split`. A web address (the
    /// rules of `long_url`), or an app's own scheme the operator allows.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A weighted split of 2 to 10 targets; not with `target`.
    #[schema(min_items = 2, max_items = 10)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<SplitVariant>>,
}

/// An operating system family a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuleOs {
    Ios,
    Android,
    Windows,
    Macos,
    Linux,
    Chromeos,
    Other,
}

/// A device class a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RuleDevice {
    Desktop,
    Mobile,
    Tablet,
    Other,
}

/// One target of a split and its weight (1 to 10,000; shares are weight / sum).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitVariant {
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    pub target: String,
    #[schema(minimum = 1, maximum = 10_000)]
    #[serde(deserialize_with = "required_whole_number")]
    pub weight: u32,
}

/// An edit of a link (docs/spec.md §12): only the fields given change. Sent with `If-Match: "<version>"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditLinkRequest {
    /// The new target, under the rules of a create.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_url: Option<String>,
    /// 301, 302, 307 or 308; null or absent: unchanged.
    #[schema(schema_with = redirect_schema)]
    #[serde(default, deserialize_with = "whole_number", skip_serializing_if = "Option::is_none")]
    pub redirect: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_query: Option<bool>,
    /// RFC 3339 time in the future, at most 10 years ahead; null removes the expiry; not
    /// with `ttl_seconds`.
    #[schema(value_type = Option<String>, format = DateTime, nullable)]
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Option<String>>,
    /// Seconds from now until expiry, 1 to 10 years; not with `expires_at`.
    #[schema(minimum = 1, maximum = 315_360_000)]
    #[serde(default, deserialize_with = "whole_number", skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
    /// A new password (4 to 128 characters without control characters); null removes the
    /// password.
    #[schema(
        value_type = Option<String>,
        min_length = 4,
        max_length = 128,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$",
        nullable
    )]
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub password: Option<Option<String>>,
    /// The link's new rules, replacing all of them; `[]` removes them.
    #[schema(max_items = 20)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<LinkRule>>,
}

/// A field that may be given as null: absent is `None` (by `#[serde(default)]`), null is
/// `Some(None)`.
pub fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// [`whole_number`] for a field that must be given.
pub fn required_whole_number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    whole_number(d)?.ok_or_else(|| serde::de::Error::custom("a whole number is required"))
}

/// A whole JSON number, written `20` or `20.0` (JSON has one number type, and JSON Schema's
/// `integer` is any number without a fraction), in `T`'s range.
pub fn whole_number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    n.as_i64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                .map(|f| f as i64)
        })
        .and_then(|w| T::try_from(w).ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a whole number in range")))
}

/// The rules of request bodies that tie two fields together, in JSON Schema (an object of
/// keywords), each with the name of the schema it belongs to: what `#[schema]` attributes
/// cannot write (utoipa has no `not`, `anyOf` of requirements or `if`). The OpenAPI
/// document adds each keyword to its schema; the server refuses what they refuse (400), so
/// a body the document allows is not refused for them.
pub fn cross_field_rules() -> [(&'static str, serde_json::Value); 4] {
    use serde_json::json;
    let given = json!({ "not": { "type": "null" } });
    [
        // `expires_at` and `ttl_seconds` not both (null is not given).
        (
            "CreateLinkRequest",
            json!({ "not": {
                "required": ["expires_at", "ttl_seconds"],
                "properties": { "expires_at": given, "ttl_seconds": given },
            } }),
        ),
        // Not both either (an edit's `"expires_at": null` is given: it removes the expiry),
        // and at least one field given (400 `empty_edit`).
        (
            "EditLinkRequest",
            json!({
                "not": {
                    "required": ["expires_at", "ttl_seconds"],
                    "properties": { "ttl_seconds": given },
                },
                "anyOf": [
                    { "required": ["long_url"], "properties": { "long_url": given } },
                    { "required": ["redirect"], "properties": { "redirect": given } },
                    { "required": ["forward_query"], "properties": { "forward_query": given } },
                    { "required": ["expires_at"] },
                    { "required": ["ttl_seconds"], "properties": { "ttl_seconds": given } },
                    { "required": ["password"] },
                    { "required": ["rules"], "properties": { "rules": given } },
                ],
            }),
        ),
        // A rule sends to a `target` or splits (`split`), one of the two (null is not given).
        (
            "LinkRule",
            json!({ "oneOf": [
                { "required": ["target"], "properties": { "target": given } },
                { "required": ["split"], "properties": { "split": given } },
            ] }),
        ),
        // `domains` only on a creator key.
        (
            "CreateKeyRequest",
            json!({
                "if": { "required": ["role"], "properties": { "role": { "const": "operator" } } },
                "then": { "properties": { "domains": { "type": "null" } } },
            }),
        ),
    ]
}

/// The rules of list items the `#[schema]` attributes cannot write (utoipa puts no pattern
/// on a `Vec<String>`'s items): each with the path of its property under the schemas. The
/// OpenAPI document adds each keyword there.
pub fn item_rules() -> [(&'static str, serde_json::Value); 2] {
    use serde_json::json;
    [
        (
            "LinkRule/properties/countries",
            json!({ "items": { "type": "string", "pattern": "^[A-Za-z]{2}$" } }),
        ),
        (
            "LinkRule/properties/languages",
            json!({ "items": {
                "type": "string",
                "maxLength": 35,
                "pattern": "^[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*$",
            } }),
        ),
    ]
}

/// Up to 1,000 new links at once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// Each read as a [`CreateLinkRequest`] on its own: one of the wrong shape (not an
    /// object, an unknown field, a wrong type) fails alone, as `invalid_json` in `results`.
    #[schema(schema_with = import_links_schema)]
    pub links: Vec<serde_json::Value>,
}

/// The links of an import: 1 to 1,000 values, each meant as a `CreateLinkRequest`. Their
/// shapes and values are judged one by one (a link that is not one fails alone, in
/// `results`), so the request states only that it is an array, of any values.
pub fn import_links_schema() -> utoipa::openapi::Array {
    use utoipa::openapi::schema::SchemaType;
    let link = utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(
            "A link as in CreateLinkRequest (`long_url`, and optionally `custom_alias`, `expires_at`, \
             `ttl_seconds`, `redirect`, `forward_query`, `domain`). Each is judged on its own: one of another \
             shape (not an object, an unknown field, a wrong type) or with a bad value fails alone, \
             in results, as `invalid_json` or as its create would.",
        ));
    utoipa::openapi::ArrayBuilder::new()
        .items(link)
        .min_items(Some(1))
        .max_items(Some(MAX_IMPORT))
        .build()
}

/// `redirect` of a create request: one of the four redirect statuses, or null (302).
pub fn redirect_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .enum_values(Some([
            serde_json::json!(301),
            serde_json::json!(302),
            serde_json::json!(307),
            serde_json::json!(308),
            serde_json::Value::Null,
        ]))
        .description(Some("301, 302 (default), 307 or 308."))
        .build()
}

/// One outcome per imported link, in request order: the created link, or why not.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImportResults {
    pub created: usize,
    pub failed: usize,
    /// When some links failed `rate_limited`: seconds until the rate limit covers them
    /// again (all of them, or a full burst when they are more); null otherwise.
    pub retry_after_secs: Option<u64>,
    pub results: Vec<ImportOutcome>,
}

/// The outcome of one imported link.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ImportOutcome {
    Created(LinkCreated),
    Failed { error: ErrorDetail },
}

/// Most links in one import request.
pub const MAX_IMPORT: usize = 1000;

/// A link just created.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkCreated {
    pub code: String,
    /// The domain the link is on.
    pub domain: String,
    pub short_url: String,
    pub long_url: String,
    pub redirect: u16,
    pub forward_query: bool,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub version: u64,
    /// Visitors give a password before the redirect.
    #[serde(default)]
    pub password_protected: bool,
}

/// A link as stored, deleted ones included.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkView {
    pub code: String,
    /// The domain the link is on.
    pub domain: String,
    pub short_url: String,
    pub long_url: String,
    pub redirect: u16,
    pub forward_query: bool,
    /// Visitors give a password before the redirect (the password is never shown).
    #[serde(default)]
    pub password_protected: bool,
    /// The link's rules (docs/spec.md §14); absent when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<LinkRule>,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub created_by: String,
    pub is_active: bool,
    pub version: u64,
    pub deleted_at: Option<String>,
    pub deleted_by: Option<String>,
    pub delete_reason: Option<String>,
}

/// A page of links, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkList {
    pub links: Vec<LinkView>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Why a link is taken down.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TakedownRequest {
    /// 1 to 1,000 characters, no control characters; trimmed.
    #[schema(
        min_length = 1,
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub reason: String,
}

/// Daily clicks of one link: people's, and bots' apart.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkStats {
    pub code: String,
    /// People's clicks over the range.
    pub total: u64,
    /// Bots' clicks over the range.
    pub bot_total: u64,
    pub days: Vec<DayClicks>,
    /// With `by=`: people's clicks over the range by value of that dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
}

/// People's clicks of a link over a range of days by value of one dimension (docs/http.md,
/// "Breakdowns"). Exact for the clicks it counted; `counted` may fall short of `total`
/// for clicks made while breakdowns were off, or dropped under overload (counted in
/// `rebound_clicks_dropped_total`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Breakdown {
    /// The dimension: `country`, `referrer`, `device`, `browser`, `os`, `utm_source`,
    /// `utm_medium`, `utm_campaign` or `rule` (which of a link's rules chose the target:
    /// `default`, `N`, or `N/V` for variant V of rule N's split).
    pub by: String,
    /// Most clicked first. A link's day keeps its first 50 values of a dimension; the
    /// clicks of later ones count under `(other)`.
    pub values: Vec<ValueClicks>,
    /// The sum of `values`.
    pub counted: u64,
}

/// One value of a breakdown and its people's clicks.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ValueClicks {
    /// A country (ISO 3166-1 alpha-2, or `unknown`), a referrer's host (or `direct`), a
    /// device class, a browser or OS family, a campaign value, or `(other)`.
    pub value: String,
    pub clicks: u64,
}

/// An operator's summary of the links of one domain, or of every domain the key may use
/// (docs/http.md, "The summary"): clicks per day, and the links, countries and referrers
/// most clicked over the range. Kept by the data planes as the clicks are written, so it
/// counts the clicks since it was kept (a release with the summary), as the breakdowns do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StatsSummary {
    /// The domains summed, the default domain first.
    pub domains: Vec<String>,
    /// `YYYY-MM-DD`, UTC: the first day of the range.
    pub from: String,
    /// `YYYY-MM-DD`, UTC: the last day of the range.
    pub to: String,
    /// People's clicks over the range.
    pub total: u64,
    /// Bots' clicks over the range.
    pub bot_total: u64,
    /// Every day of the range.
    pub days: Vec<DayClicks>,
    /// People's clicks per link, most clicked first, at most `top`. A domain's day keeps
    /// its first 1,000 links clicked; the clicks of later ones count under the code
    /// `(other)`, one per domain.
    pub top_links: Vec<LinkClicks>,
    /// People's clicks per country over the domains' links, most clicked first, at most
    /// `top` (a domain's day keeps its first 50 values; later ones count as `(other)`).
    pub top_countries: Vec<ValueClicks>,
    /// People's clicks per referrer's host (or `direct`), as `top_countries`.
    pub top_referrers: Vec<ValueClicks>,
}

/// One link of a summary and its people's clicks over the range.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkClicks {
    /// The link's code, or `(other)`: the domain's links beyond the 1,000 a day keeps.
    pub code: String,
    /// The domain it is on.
    pub domain: String,
    pub clicks: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DayClicks {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// Redirects to people.
    pub clicks: u64,
    /// Redirects to link unfurlers and crawlers (Slackbot, Twitterbot,
    /// facebookexternalhit, Googlebot and the like, by User-Agent) and answers to `HEAD`:
    /// answered as usual, counted apart. Counted as lossily as `clicks`.
    pub bot_clicks: u64,
}

/// A new API key.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    /// 1 to 100 characters, no control characters; trimmed.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    pub name: String,
    /// `creator` or `operator`.
    #[schema(schema_with = role_schema)]
    pub role: String,
    /// Only for a creator key: the domains it may create and see links on (1 to 100,
    /// each a domain of the fleet, the default one included). Every domain when not given.
    #[schema(min_items = 1, max_items = 100)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
}

/// The roles of a key.
pub fn role_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["creator", "operator"]))
        .description(Some("`creator` or `operator`."))
        .build()
}

/// An API key just created; `key` is shown only here.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    pub id: String,
    pub name: String,
    #[schema(schema_with = role_schema)]
    pub role: String,
    /// The domains it is scoped to; null for every domain.
    pub domains: Option<Vec<String>>,
    pub key: String,
}

/// The error body of every failed call.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong, for machines (`code`) and for people (`message`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case identifier, e.g. `alias_taken`.
    pub code: String,
    pub message: String,
}

/// The audit log of one link, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkAudit {
    pub code: String,
    pub events: Vec<AuditEntry>,
}

/// One recorded action.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// RFC 3339, UTC.
    pub at: String,
    /// The key id that acted (for `propagated`, the control plane that finished it).
    pub actor: String,
    /// `delete`, `takedown`, `edit`, or `propagated`: a control plane finished the
    /// propagation of a delete, takedown or edit whose own attempt could not confirm it
    /// (after an `invalidate_failed`).
    pub action: String,
    pub reason: Option<String>,
    /// `ok`, `already_down` or `invalidate_failed`.
    pub outcome: String,
    /// An edit's changed fields as they were (`long_url`, `redirect`, `forward_query`,
    /// `expires_at`); absent for other actions.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<serde_json::Value>,
    /// The same fields as the edit made them.
    #[schema(value_type = Option<Object>)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<serde_json::Value>,
}

/// The caller's key.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Me {
    /// The key id: `created_by` of its links, the actor of its takedowns.
    pub id: String,
    /// `creator` or `operator`.
    #[schema(schema_with = role_schema)]
    pub role: String,
    /// The domains it is scoped to; null for every domain.
    pub domains: Option<Vec<String>>,
}

/// A domain to serve links on (docs/spec.md §11).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDomainRequest {
    /// A DNS name of two labels or more, in ASCII (an internationalized name in its `xn--`
    /// form), one trailing dot allowed; not the default domain. Kept lower case.
    #[schema(
        min_length = 1,
        max_length = 253,
        pattern = r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$"
    )]
    pub name: String,
    /// `acme` (default): its certificate is ordered and renewed over ACME when the TLS port
    /// has ACME; `files`: it is in the TLS port's certificate files, managed by hand.
    #[schema(schema_with = certificate_source_or_null_schema)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// Where a code this domain does not have, or a deleted or taken-down link of it,
    /// redirects (302); the built-in 404 page when not given. Same rules as a link's
    /// `long_url`.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found_url: Option<String>,
    /// Where an expired link of this domain redirects (302); the built-in 410 page when
    /// not given. Same rules as a link's `long_url`.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_url: Option<String>,
    /// Where `/` of this domain redirects; the built-in page when not given. Same rules as
    /// a link's `long_url`.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s\x00-\x1f\x7f-\x9f]+$"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_url: Option<String>,
    /// Its Apple app-site-association, served at `/.well-known/apple-app-site-association`
    /// (as for `PUT /api/v1/domains/{name}/app-links`); none when not given.
    #[schema(schema_with = apple_app_site_association_schema)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apple_app_site_association: Option<serde_json::Value>,
    /// Its Android Digital Asset Links statements, served at `/.well-known/assetlinks.json`
    /// (as for `PUT /api/v1/domains/{name}/app-links`); none when not given.
    #[schema(schema_with = assetlinks_schema)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assetlinks: Option<serde_json::Value>,
}

/// A domain's app links (docs/spec.md §14): both documents, each replacing the domain's.
/// The redirect port serves each on the domain with `Content-Type: application/json`, as
/// the compact JSON of the value given; a document null or absent is not served (404).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppLinksRequest {
    /// Served at `/.well-known/apple-app-site-association`: a JSON object, at most 64 KiB
    /// as compact JSON.
    #[schema(schema_with = apple_app_site_association_schema)]
    #[serde(default)]
    pub apple_app_site_association: Option<serde_json::Value>,
    /// Served at `/.well-known/assetlinks.json`: a JSON array of statements, each with
    /// `relation` (strings) and `target` (an object with `namespace`), at most 64 KiB as
    /// compact JSON.
    #[schema(schema_with = assetlinks_schema)]
    #[serde(default)]
    pub assetlinks: Option<serde_json::Value>,
}

/// Apple's app-site-association: any JSON object (its keys are Apple's to define), or null.
pub fn apple_app_site_association_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(
            "Served at /.well-known/apple-app-site-association: a JSON object, at most 64 KiB as compact JSON; \
             null: none.",
        ))
        .build()
}

/// Android's Digital Asset Links statement list: an array of statements, each an object
/// with `relation` (a non-empty array of strings) and `target` (an object with a string
/// `namespace`), or null.
pub fn assetlinks_schema() -> utoipa::openapi::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    let strings = ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String))
        .min_items(Some(1));
    let target = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("namespace", ObjectBuilder::new().schema_type(Type::String))
        .required("namespace");
    let statement = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("relation", strings)
        .property("target", target)
        .required("relation")
        .required("target");
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .items(statement)
        .description(Some(
            "Served at /.well-known/assetlinks.json: an array of statements, at most 64 KiB as compact JSON; \
             null: none.",
        ))
        .build()
}

/// Where a domain's certificate comes from.
pub fn certificate_source_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["acme", "files"]))
        .description(Some("`acme` or `files`."))
        .build()
}

/// `certificate` of a new domain: `acme`, `files`, or null (`acme`).
pub fn certificate_source_or_null_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{SchemaType, Type};
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some([
            serde_json::json!("acme"),
            serde_json::json!("files"),
            serde_json::Value::Null,
        ]))
        .description(Some("`acme` (default) or `files`."))
        .build()
}

/// A domain and the state of its certificate.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainView {
    pub name: String,
    /// True for the default domain (the host of the public base URL): it cannot be removed.
    pub default: bool,
    /// `acme` or `files` (the default domain: `files`, or `acme` when the TLS port orders its
    /// certificate).
    #[schema(schema_with = certificate_source_schema)]
    pub certificate: String,
    /// `pending` (no certificate stored yet, no failure: ordered within a round when the
    /// TLS port has ACME), `issued` (a certificate is stored and served), `failing` (the last
    /// order failed: see `certificate_error`), `files` (the operator's certificate files).
    pub state: String,
    /// When the stored certificate expires (RFC 3339).
    pub certificate_expires_at: Option<String>,
    /// Why the last order failed, when it did.
    pub certificate_error: Option<String>,
    /// When a certificate was last ordered or tried (RFC 3339).
    pub certificate_attempt_at: Option<String>,
    pub not_found_url: Option<String>,
    pub expired_url: Option<String>,
    pub root_url: Option<String>,
    /// What `/.well-known/apple-app-site-association` serves on it; null: 404.
    #[schema(value_type = Option<Object>)]
    pub apple_app_site_association: Option<serde_json::Value>,
    /// What `/.well-known/assetlinks.json` serves on it; null: 404.
    #[schema(value_type = Option<Vec<Object>>)]
    pub assetlinks: Option<serde_json::Value>,
    /// Null for the default domain.
    pub created_at: Option<String>,
    pub created_by: Option<String>,
}

/// Every domain, the default one first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainList {
    pub domains: Vec<DomainView>,
}

/// A domain removed, and how many of its links were taken down with it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DomainRemoved {
    pub name: String,
    pub taken_down: u64,
}

/// An abuse report of a short link (anyone may send one; rate limited).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    /// The short URL (`https://sho.rt/abc`: http or https, a host name or IPv4 address,
    /// an optional port, the code as the whole path, an optional query or fragment), or its
    /// code on the default domain. Its host must be a domain of this service.
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^([A-Za-z0-9_-]{3,32}|[Hh][Tt][Tt][Pp][Ss]?://(((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])|([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4}))?/[A-Za-z0-9_-]{3,32}([?#][!-~]*)?)$"
    )]
    pub link: String,
    /// What is wrong with it: 1 to 1,000 characters, not only white space, no control
    /// characters but line feeds; trimmed.
    #[schema(
        min_length = 1,
        max_length = 1000,
        pattern = r"^[^\x00-\x09\x0b-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x09\x0b-\x1f\x7f-\x9f]*$"
    )]
    pub reason: String,
}

/// One abuse report, for operators.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReportView {
    /// RFC 3339, UTC.
    pub at: String,
    /// The key id that reported, or `anonymous:<network>`.
    pub reporter: String,
    pub code: String,
    pub short_url: String,
    pub reason: String,
}

/// The newest reports, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReportList {
    pub reports: Vec<ReportView>,
}

/// A configured threat list and its last load.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ThreatListView {
    pub name: String,
    /// `urlhaus`, `phishtank`, `openphish` or `domains`.
    pub format: String,
    /// The file or URL it is read from.
    pub source: String,
    /// Entries in force.
    pub entries: u64,
    /// Lines the last good load could not read.
    pub skipped: u64,
    /// When the entries in force were loaded; null: never.
    pub loaded_at: Option<String>,
    /// Why the last load failed (the entries before it stay in force); null when it did not.
    pub error: Option<String>,
}

/// The threat lists and the last rescan of the links against them.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ThreatListsView {
    pub lists: Vec<ThreatListView>,
    pub last_rescan_at: Option<String>,
    pub last_rescan_scanned: Option<u64>,
    pub last_rescan_taken_down: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_leaves_out_what_is_not_given_and_reads_whole_numbers_with_a_fraction() {
        let req = CreateLinkRequest {
            long_url: "https://example.com/".into(),
            custom_alias: None,
            expires_at: None,
            ttl_seconds: Some(60),
            redirect: None,
            forward_query: None,
            domain: None,
            password: None,
            rules: None,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"long_url":"https://example.com/","ttl_seconds":60}"#
        );
        let back: CreateLinkRequest =
            serde_json::from_str(r#"{"long_url":"https://e.com/","ttl_seconds":60.0,"redirect":null}"#).unwrap();
        assert_eq!((back.ttl_seconds, back.redirect), (Some(60), None));
        assert!(serde_json::from_str::<CreateLinkRequest>(r#"{"long_url":"x","redirect":301.5}"#).is_err());
        assert!(serde_json::from_str::<CreateLinkRequest>(r#"{"long_url":"x","redirect":70000}"#).is_err());
        assert!(serde_json::from_str::<CreateLinkRequest>(r#"{"long_url":"x","bogus":1}"#).is_err());
    }

    #[test]
    fn an_edit_tells_an_absent_expiry_from_a_null_one() {
        let read = |json: &str| serde_json::from_str::<EditLinkRequest>(json).unwrap();
        assert_eq!(read("{}"), EditLinkRequest::default());
        assert_eq!(read(r#"{"expires_at":null}"#).expires_at, Some(None));
        assert_eq!(
            read(r#"{"expires_at":"2030-01-01T00:00:00Z"}"#).expires_at,
            Some(Some("2030-01-01T00:00:00Z".into()))
        );
        assert_eq!(read(r#"{"redirect":301.0}"#).redirect, Some(301));
        let removing = EditLinkRequest {
            expires_at: Some(None),
            ..Default::default()
        };
        assert_eq!(serde_json::to_string(&removing).unwrap(), r#"{"expires_at":null}"#);
        assert_eq!(serde_json::to_string(&EditLinkRequest::default()).unwrap(), "{}");
        assert!(serde_json::from_str::<EditLinkRequest>(r#"{"custom_alias":"x"}"#).is_err());
    }

    /// A rule that names a field its schema does not have would hold for every body.
    #[test]
    fn each_cross_field_rule_names_fields_of_its_schema() {
        use utoipa::PartialSchema;
        let schema_of = |name: &str| {
            let schema = match name {
                "CreateLinkRequest" => CreateLinkRequest::schema(),
                "EditLinkRequest" => EditLinkRequest::schema(),
                "LinkRule" => LinkRule::schema(),
                "CreateKeyRequest" => CreateKeyRequest::schema(),
                other => panic!("no schema {other}"),
            };
            serde_json::to_value(schema).unwrap()
        };
        fn named(rule: &serde_json::Value, names: &mut Vec<String>) {
            match rule {
                serde_json::Value::Object(keywords) => {
                    for (keyword, value) in keywords {
                        match keyword.as_str() {
                            "required" => {
                                names.extend(value.as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()))
                            }
                            "properties" => names.extend(value.as_object().unwrap().keys().cloned()),
                            _ => {}
                        }
                        named(value, names);
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(|i| named(i, names)),
                _ => {}
            }
        }
        for (name, rule) in cross_field_rules() {
            let schema = schema_of(name);
            let mut names = Vec::new();
            named(&rule, &mut names);
            assert!(!names.is_empty(), "{name}");
            for field in names {
                assert!(schema["properties"].get(&field).is_some(), "{name} has no {field}");
            }
        }
    }

    #[test]
    fn an_import_outcome_reads_back_as_what_it_was() {
        let failed: ImportOutcome = serde_json::from_str(r#"{"error":{"code":"invalid_url","message":"no"}}"#).unwrap();
        assert!(matches!(failed, ImportOutcome::Failed { error } if error.code == "invalid_url"));
        let created: ImportOutcome = serde_json::from_str(
            r#"{"code":"abc","domain":"s","short_url":"https://s/abc","long_url":"https://e/","redirect":302,"forward_query":false,"expires_at":null,"created_at":"2026-01-01T00:00:00Z","version":1}"#,
        )
        .unwrap();
        assert!(matches!(created, ImportOutcome::Created(l) if l.code == "abc"));
    }
}
