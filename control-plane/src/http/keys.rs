//! The keys resource's handlers: `POST /api/v1/keys`, `DELETE /api/v1/keys/{id}`, and
//! `GET /api/v1/me` (who the caller's key is, so a client such as the console knows what
//! to offer before it is refused).

use super::extract::ApiJson;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::keys::KeyService;
use crate::ControlPlane;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use rebound_api_types::{CreateKeyRequest, KeyCreated, Me};
use std::sync::Arc;

type Keys = State<Arc<KeyService>>;

pub(super) fn routes() -> Router<ControlPlane> {
    Router::new()
        .route("/api/v1/keys", post(create_key))
        .route("/api/v1/keys/{id}", delete(revoke_key))
        .route("/api/v1/me", get(whoami))
}

#[utoipa::path(post, path = "/api/v1/keys", tag = "keys", request_body = CreateKeyRequest,
    responses(
        (status = 201, description = "The key, shown this once", body = KeyCreated),
        (status = 400, description = "Bad name or role, or malformed", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the head timeout of its head", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn create_key(
    State(keys): Keys,
    caller: Caller,
    body: Result<ApiJson<CreateKeyRequest>, ApiError>,
) -> Result<(StatusCode, Json<KeyCreated>), ApiError> {
    let principal = caller.principal()?;
    principal.require_operator()?;
    Ok((StatusCode::CREATED, Json(keys.create(&principal, body?.value).await?)))
}

#[utoipa::path(delete, path = "/api/v1/keys/{id}", tag = "keys",
    params(("id" = String, Path, description = "The key id")),
    responses(
        (status = 204, description = "Revoked; it stops working at once"),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "Not an operator", body = ErrorBody),
        (status = 404, description = "No such key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn revoke_key(
    State(keys): Keys,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    keys.revoke(&caller.principal()?, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/me", tag = "keys",
    responses(
        (status = 200, description = "The key's id and role", body = Me),
        (status = 401, description = "No valid key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(super) async fn whoami(caller: Caller) -> Result<Json<Me>, ApiError> {
    let principal = caller.principal()?;
    Ok(Json(Me {
        id: principal.id,
        role: principal.role.as_str().to_owned(),
        domains: principal.domains,
    }))
}
