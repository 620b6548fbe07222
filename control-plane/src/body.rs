//! The JSON body extractor: content type, size limit and parse errors answered in the
//! API's own error shape (415, 413, 400), never axum's plain-text rejections.

use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::{FromRequest, Request};
use axum::http::header;
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
        read_json(req, state.config.api.max_body_bytes).await
    }
}

/// The body of a bulk import: JSON like [`ApiJson`], with the larger import limit.
pub struct ImportJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<ControlPlane>> for ImportJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<ControlPlane>) -> Result<Self, ApiError> {
        read_json(req, state.config.api.max_import_body_bytes)
            .await
            .map(|b: ApiJson<T>| ImportJson(b.value))
    }
}

async fn read_json<T: DeserializeOwned>(req: Request, limit: usize) -> Result<ApiJson<T>, ApiError> {
    {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let raw = axum::body::to_bytes(req.into_body(), limit).await.map_err(|e| {
            if is_length_limit(&e) {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::bad_request("invalid_body", "the request body could not be read")
            }
        })?;
        let value = serde_json::from_slice(&raw).map_err(|e| {
            let message = match e.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    "request body is not valid JSON".to_owned()
                }
                _ => format!("request body is invalid: {}", strip_location(&e.to_string())),
            };
            ApiError::bad_request("invalid_json", message)
        })?;
        Ok(ApiJson { value, raw })
    }
}

/// serde's messages end with " at line 1 column 17"; drop that.
fn strip_location(message: &str) -> &str {
    message.rsplit_once(" at line ").map_or(message, |(m, _)| m)
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}
