//! The JSON body extractor: content type, size limit and parse errors answered in the
//! API's own error shape (415, 413, 400), never axum's plain-text rejections.

use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// A JSON request body of type `T`, with the raw bytes kept for idempotency hashing.
pub struct ApiJson<T> {
    pub value: T,
    pub raw: axum::body::Bytes,
}

impl<T: DeserializeOwned> FromRequest<Arc<ControlPlane>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<ControlPlane>) -> Result<Self, ApiError> {
        read_json(req, state.config.api.max_body_bytes, state.config.api.body_timeout).await
    }
}

/// The body of a bulk import: JSON like [`ApiJson`], with the larger import limit.
pub struct ImportJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<ControlPlane>> for ImportJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<ControlPlane>) -> Result<Self, ApiError> {
        read_json(
            req,
            state.config.api.max_import_body_bytes,
            state.config.api.body_timeout,
        )
        .await
        .map(|b: ApiJson<T>| ImportJson(b.value))
    }
}

async fn read_json<T: DeserializeOwned>(
    req: Request,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<ApiJson<T>, ApiError> {
    {
        let is_json = one_header(req.headers(), &header::CONTENT_TYPE, "invalid_content_type")?
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        let declared = one_header(req.headers(), &header::CONTENT_LENGTH, "invalid_content_length")?
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let raw = tokio::time::timeout(timeout, axum::body::to_bytes(req.into_body(), limit))
            .await
            .map_err(|_| ApiError::BodyTimeout(timeout))?
            .map_err(|e| {
                if is_length_limit(&e) {
                    ApiError::PayloadTooLarge(limit)
                } else {
                    ApiError::bad_request("invalid_body", "the request body could not be read")
                }
            })?;
        let json: serde_json::Value = serde_json::from_slice(&raw)
            .map_err(|_| ApiError::bad_request("invalid_json", "request body is not valid JSON"))?;
        // serde would also read a struct from an array of its fields in order.
        if !json.is_object() {
            return Err(ApiError::bad_request(
                "invalid_json",
                "request body must be a JSON object",
            ));
        }
        let value = serde_json::from_value(json).map_err(|e| {
            ApiError::bad_request(
                "invalid_json",
                format!("request body is invalid: {}", strip_location(&e.to_string())),
            )
        })?;
        Ok(ApiJson { value, raw })
    }
}

/// The value of a header the API reads as one value, if given; 400 `code` when it is given
/// twice (even twice the same), as for `Authorization`: with two, a proxy in front and this
/// service might each believe a different one.
pub(crate) fn one_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    code: &'static str,
) -> Result<Option<&'a HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ApiError::bad_request(code, format!("send at most one {name} header")));
    }
    Ok(first)
}

/// serde's messages end with " at line 1 column 17"; drop that.
fn strip_location(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}

pub(crate) fn is_length_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}
