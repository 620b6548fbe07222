//! The one error type of the API. The client sees a clean message in the body shape of
//! docs/spec.md §6; the log sees the cause.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rebound_core::Causes;
use rebound_store::StoreError;

/// An API failure, classified once, where the response is chosen.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    Forbidden(&'static str),
    #[error("{0}")]
    NotFound(&'static str),
    #[error("{0}")]
    MethodNotAllowed(&'static str),
    #[error("the request body did not arrive within {} ms of its head", .0.as_millis())]
    BodyTimeout(std::time::Duration),
    #[error("{message}")]
    Conflict { code: &'static str, message: &'static str },
    /// A conflict whose message names what it is with (a domain's name that live links
    /// already target).
    #[error("{message}")]
    ConflictWith { code: &'static str, message: String },
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// A document in the body (a domain's app links) over its own bound: the message names
    /// it.
    #[error("{0}")]
    DocumentTooLarge(String),
    #[error("request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("too many links created; retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("the link is down but the caches could not be told yet; retry")]
    InvalidationFailed,
    /// An edit is stored, but not every cache was told: a retry with the same edit (and the
    /// same `If-Match`) tells them again.
    #[error("the edit is stored but the caches could not be told yet; retry the same edit")]
    EditNotPropagated,
    /// The `If-Match` of an edit names another version than the link's.
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("an edit must name the version it changes: If-Match: \"<version>\" (from the link's ETag)")]
    PreconditionRequired,
    #[error("the service is temporarily unavailable; retry")]
    Unavailable(String),
    #[error("this write is made in the home region, which cannot be reached; retry")]
    HomeUnavailable(String),
    /// A change of a link made in this region moments ago, which the home region (where a
    /// link's changes are decided) has not received yet.
    #[error("the link was made in this region moments ago and the home region, which decides its changes, does not have it yet; retry")]
    NotReplicated,
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::Conflict { code, .. } | ApiError::ConflictWith { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::DocumentTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "document_too_large"),
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::InvalidationFailed | ApiError::EditNotPropagated => {
                (StatusCode::SERVICE_UNAVAILABLE, "invalidation_failed")
            }
            ApiError::PreconditionFailed(_) => (StatusCode::PRECONDITION_FAILED, "version_mismatch"),
            ApiError::PreconditionRequired => (StatusCode::PRECONDITION_REQUIRED, "if_match_required"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::HomeUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "home_unavailable"),
            ApiError::NotReplicated => (StatusCode::SERVICE_UNAVAILABLE, "not_replicated"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

/// A store error no handler turned into its own answer: an outage is a 503 (retry), a
/// race with another writer a 404 or 409, a bug a 500 with its cause logged.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            // The log line gets the whole chain of causes: the client's verdict is under it.
            StoreError::Unavailable { .. } => ApiError::Unavailable(Causes(&e).to_string()),
            StoreError::BadCursor => ApiError::bad_request("invalid_cursor", "cursor is not valid"),
            StoreError::NotFound => ApiError::NotFound("no such item (it was removed meanwhile)"),
            StoreError::AlreadyExists | StoreError::IdempotencyKeyExists | StoreError::ConditionFailed => {
                ApiError::Conflict {
                    code: "conflict",
                    message: "the item was changed by another request meanwhile; retry",
                }
            }
            // The code space running out is no outage: retrying does not help.
            StoreError::Exhausted | StoreError::Corrupt(_) | StoreError::Internal(_) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

pub use rebound_api_types::{ErrorBody, ErrorDetail};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        match &self {
            ApiError::Internal(cause) => tracing::error!(%cause, "request failed"),
            ApiError::Unavailable(cause) => tracing::warn!(%cause, "store unavailable"),
            ApiError::HomeUnavailable(cause) => tracing::warn!(%cause, "home region unavailable"),
            _ => {}
        }
        let message = match &self {
            ApiError::Unavailable(_) => "the service is temporarily unavailable; retry".to_owned(),
            other => other.to_string(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match &self {
            ApiError::RateLimited { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            ApiError::InvalidationFailed
            | ApiError::EditNotPropagated
            | ApiError::Unavailable(_)
            | ApiError::HomeUnavailable(_)
            | ApiError::NotReplicated => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // The rest of the body may still be on its way: the connection is not reused.
            ApiError::BodyTimeout(_) => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

/// The answer to a handler that panicked (a last line of defence, never the fix): a 500 in
/// the API's error shape, with the panic message in the log only.
pub(crate) fn panic_response(cause: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = cause
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| cause.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    ApiError::Internal(format!("a handler panicked: {detail}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_are_classified_once_an_outage_a_503_and_a_bug_a_500() {
        let table = [
            (StoreError::unavailable("DynamoDB", "timeout"), 503, "unavailable"),
            (StoreError::Exhausted, 500, "internal"),
            (StoreError::BadCursor, 400, "invalid_cursor"),
            (StoreError::NotFound, 404, "not_found"),
            (StoreError::AlreadyExists, 409, "conflict"),
            (StoreError::IdempotencyKeyExists, 409, "conflict"),
            (StoreError::ConditionFailed, 409, "conflict"),
            (StoreError::Corrupt("role x".into()), 500, "internal"),
            (StoreError::Internal("no such column".into()), 500, "internal"),
        ];
        for (e, status, code) in table {
            let shown = e.to_string();
            let (s, c) = ApiError::from(e).status_and_code();
            assert_eq!((s.as_u16(), c), (status, code), "{shown}");
        }
    }

    #[test]
    fn an_outage_is_logged_with_its_causes() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        match ApiError::from(StoreError::unavailable("DynamoDB", refused)) {
            ApiError::Unavailable(cause) => assert_eq!(cause, "DynamoDB is unavailable: connection refused"),
            other => panic!("{other:?}"),
        }
    }
}
