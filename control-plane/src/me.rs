//! `GET /api/v1/me`: who the key is (its id and role), so a client such as the console
//! knows what to offer before it is refused.

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use axum::Json;
use rebound_api_types::Me;

#[utoipa::path(get, path = "/api/v1/me", tag = "keys",
    responses(
        (status = 200, description = "The key's id and role", body = Me),
        (status = 401, description = "No valid key", body = ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn whoami(caller: Caller) -> Result<Json<Me>, ApiError> {
    let principal = caller.principal()?;
    Ok(Json(Me {
        id: principal.id,
        role: principal.role.as_str().to_owned(),
        domains: principal.domains,
    }))
}
