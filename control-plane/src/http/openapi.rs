//! The OpenAPI document, generated from the handlers' attributes and from their request
//! and response types (`rebound_api_types`, shared with the CLI), with the rules the
//! attributes cannot write added where they belong.

use super::{abuse, domains, keys, links, stats};
use crate::error::ErrorBody;
use crate::ControlPlane;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rebound_api_types::*;
use rebound_core::code::RESERVED_WORDS;
use utoipa::OpenApi;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new().route("/api/v1/openapi.json", get(openapi))
}

#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "This document")))]
pub(super) async fn openapi() -> Response {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

struct BearerAuth;

/// What every call with a key can also answer: a second `Authorization` header (400), a
/// store outage (503, retry) and a bug (500).
struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{Ref, ResponseBuilder};
        let common = [
            (
                "400",
                "More than one Authorization, Idempotency-Key, Content-Type or Content-Length header",
            ),
            ("500", "Internal error (logged)"),
            ("503", "The store is unavailable; retry"),
        ];
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                if op.security.is_none() {
                    continue;
                }
                for (status, description) in common {
                    op.responses.responses.entry(status.to_owned()).or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(description)
                            .content(
                                "application/json",
                                utoipa::openapi::Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                            )
                            .build()
                            .into()
                    });
                }
            }
        }
    }
}

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Rebound control plane", description = "Create, inspect, delete and take down short links on the service's domains; manage domains and API keys; read click statistics."),
    paths(links::create_link, links::import_links, links::get_link, links::edit_link, links::list_links, links::delete_link, links::take_down_link,
        stats::link_stats, stats::stats_summary, keys::create_key, keys::revoke_key, openapi,
        links::link_qr, links::link_audit, keys::whoami,
        domains::create_domain, domains::list_domains, domains::get_domain, domains::delete_domain, domains::set_app_links,
        abuse::restore_link, abuse::report, abuse::reports, abuse::threat_lists),
    components(schemas(CreateLinkRequest, EditLinkRequest, LinkRule, SplitVariant, RuleOs, RuleDevice, ImportRequest, ImportResults, ImportOutcome, LinkCreated, LinkView, LinkList, TakedownRequest, LinkStats, DayClicks, Breakdown, ValueClicks, StatsSummary, LinkClicks, CreateKeyRequest, KeyCreated, ErrorBody,
        LinkAudit, AuditEntry, Me, CreateDomainRequest, AppLinksRequest, DomainView, DomainList, DomainRemoved,
        ReportRequest, ReportView, ReportList, ThreatListView, ThreatListsView)),
    modifiers(&BearerAuth, &CommonResponses)
)]
struct ApiDoc;

/// The OpenAPI 3 document of the API, as JSON: utoipa's, with the rules its attributes
/// cannot write added where they belong: those that tie two fields of a body together
/// ([`cross_field_rules`]) and a custom alias's reserved words ([`not_reserved`]).
pub fn openapi_json() -> String {
    let Ok(mut doc) = serde_json::to_value(ApiDoc::openapi()) else {
        return "{}".to_owned();
    };
    let rules = cross_field_rules()
        .into_iter()
        .chain(item_rules())
        .map(|(name, rule)| (format!("/components/schemas/{name}"), rule))
        .chain([(
            "/components/schemas/CreateLinkRequest/properties/custom_alias".to_owned(),
            not_reserved(),
        )]);
    for (at, rule) in rules {
        let schema = doc.pointer_mut(&at).and_then(serde_json::Value::as_object_mut);
        if let (Some(schema), serde_json::Value::Object(keywords)) = (schema, rule) {
            schema.extend(keywords);
        }
    }
    doc.to_string()
}

/// A custom alias is none of [`RESERVED_WORDS`], in any case: `{"not": {"type": "string",
/// "pattern": "^([Aa][Pp][Ii]|…)$"}}` (a null alias is no word).
fn not_reserved() -> serde_json::Value {
    let any_case = |word: &str| -> String {
        word.chars()
            .map(|c| match c.is_ascii_alphabetic() {
                true => format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase()),
                false => c.to_string(),
            })
            .collect()
    };
    let words: Vec<String> = RESERVED_WORDS.iter().map(|w| any_case(w)).collect();
    serde_json::json!({ "not": { "type": "string", "pattern": format!("^({})$", words.join("|")) } })
}
