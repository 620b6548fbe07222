//! `POST/GET/DELETE /api/v1/domains`: the domains resource's handlers
//! ([`crate::domains::DomainService`]).

use super::extract::{bad_query, ApiJson};
use crate::auth::Caller;
use crate::domains::DomainService;
use crate::error::{ApiError, ErrorBody};
use crate::ControlPlane;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rebound_api_types::{CreateDomainRequest, DomainList, DomainRemoved, DomainView};
use rebound_core::domain::normalize_domain;
use serde::Deserialize;
use std::sync::Arc;

type Domains = State<Arc<DomainService>>;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/domains", post(create_domain).get(list_domains))
        .route("/api/v1/domains/{name}", get(get_domain).delete(delete_domain))
}

#[utoipa::path(post, path = "/api/v1/domains", tag = "domains", request_body = CreateDomainRequest,
    responses(
        (status = 201, description = "Added; every proxy routes it within seconds", body = DomainView),
        (status = 400, description = "Not a DNS name, a bad page URL (one on a host the fleet serves included) or certificate source, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 409, description = "Already added, or the default domain (`domain_exists`); or links, or other domains' page URLs, already target it and would loop once it is served (`domain_targeted`: the message names them)", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
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
