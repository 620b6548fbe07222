//! `POST/GET/DELETE /api/v1/domains` and `PUT /api/v1/domains/{name}/app-links`: the domains
//! resource's handlers ([`crate::domains::DomainService`]).

use super::extract::{bad_query, ApiJson, AppLinksJson};
use crate::auth::Caller;
use crate::domains::DomainService;
use crate::error::{ApiError, ErrorBody};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use rebound_api_types::{AppLinksRequest, CreateDomainRequest, DomainList, DomainRemoved, DomainView};
use rebound_core::domain::normalize_domain;
use serde::Deserialize;
use std::sync::Arc;

type Domains = State<Arc<DomainService>>;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/domains", post(create_domain).get(list_domains))
        .route("/api/v1/domains/{name}", get(get_domain).delete(delete_domain))
        .route("/api/v1/domains/{name}/app-links", put(set_app_links))
}

#[utoipa::path(post, path = "/api/v1/domains", tag = "domains", request_body = CreateDomainRequest,
    responses(
        (status = 201, description = "Added; every proxy routes it within seconds", body = DomainView),
        (status = 400, description = "Not a DNS name, a bad page URL (one on a host the fleet serves included) or certificate source, an app links document of the wrong shape (`invalid_app_links`), or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 409, description = "Already added, or the default domain (`domain_exists`); or links, or other domains' page URLs, already target it and would loop once it is served (`domain_targeted`: the message names them)", body = ErrorBody),
        (status = 413, description = "Body too large (`payload_too_large`), or an app links document over 64 KiB as compact JSON (`document_too_large`: the message names it)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn create_domain(
    State(domains): Domains,
    caller: Caller,
    body: Result<ApiJson<CreateDomainRequest>, ApiError>,
) -> Result<(StatusCode, Json<DomainView>), ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let domain = domains.add_domain(&principal, body?.value).await?;
    Ok((StatusCode::CREATED, Json(domains.domain_view(Some(&domain)).await?)))
}

#[utoipa::path(get, path = "/api/v1/domains", tag = "domains",
    responses(
        (status = 200, description = "The default domain first, then the others by name; a key scoped to domains sees only those", body = DomainList),
        (status = 401, description = "No valid key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn list_domains(State(domains): Domains, caller: Caller) -> Result<Json<DomainList>, ApiError> {
    let principal = caller.principal()?;
    let views = domains.list(&principal).await?;
    Ok(Json(DomainList { domains: views }))
}

#[utoipa::path(get, path = "/api/v1/domains/{name}", tag = "domains",
    params(("name" = String, Path, description = "The domain")),
    responses(
        (status = 200, description = "The domain and its certificate's state", body = DomainView),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "A key not scoped to it", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn get_domain(
    State(domains): Domains,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<DomainView>, ApiError> {
    let principal = caller.principal()?;
    Ok(Json(domains.get(&principal, &name).await?))
}

#[utoipa::path(put, path = "/api/v1/domains/{name}/app-links", tag = "domains", request_body = AppLinksRequest,
    params(("name" = String, Path, description = "The domain, the default one included")),
    responses(
        (status = 200, description = "Set: both documents replaced (null or absent: none served); every proxy serves them within seconds", body = DomainView),
        (status = 400, description = "A document of the wrong shape (`invalid_app_links`: the message names it), or malformed; nothing changed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
        (status = 413, description = "A document over 64 KiB as compact JSON (`document_too_large`: the message names it), or a body over 256 KiB (`payload_too_large`); nothing changed", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn set_app_links(
    State(domains): Domains,
    caller: Caller,
    Path(name): Path<String>,
    body: Result<AppLinksJson<AppLinksRequest>, ApiError>,
) -> Result<Json<DomainView>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let AppLinksJson(req) = body?;
    Ok(Json(domains.set_app_links(&principal, &name, req).await?))
}

/// The query of `DELETE /api/v1/domains/{name}`.
#[derive(Debug, Deserialize)]
pub(super) struct RemoveQuery {
    take_down: Option<String>,
}

#[utoipa::path(delete, path = "/api/v1/domains/{name}", tag = "domains",
    params(
        ("name" = String, Path, description = "The domain"),
        ("take_down" = Option<bool>, Query, description = "Take its active links down first (each recorded in the audit log); without it a domain with active links is refused"),
    ),
    responses(
        (status = 200, description = "Removed; its links no longer redirect", body = DomainRemoved),
        (status = 400, description = "take_down is not true or false", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such domain", body = ErrorBody),
        (status = 409, description = "The default domain, or active links and no take_down", body = ErrorBody),
        (status = 503, description = "A link could not be taken down everywhere; retry", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn delete_domain(
    State(domains): Domains,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> Result<Json<DomainRemoved>, ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    let Query(q) = query.map_err(bad_query)?;
    let take_down = match q.take_down.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                "take_down must be true or false",
            ))
        }
    };
    let taken_down = domains.remove_domain(&principal, &name, take_down).await?;
    let name = normalize_domain(&name).unwrap_or(name);
    Ok(Json(DomainRemoved { name, taken_down }))
}
