//! `GET /api/v1/links/{code}/qr.svg`: the QR code of a link's short URL, as SVG, drawn by
//! the `qrcode` crate.

use crate::auth::Caller;
use crate::error::ApiError;
use crate::ControlPlane;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Side of the drawn code, quiet zone included, at least.
const QR_MIN_PIXELS: u32 = 256;

#[utoipa::path(get, path = "/api/v1/links/{code}/qr.svg", tag = "links",
    params(("code" = String, Path, description = "The short code"), ("domain" = Option<String>, Query, description = "The domain the link is on; the default domain when not given")),
    responses(
        (status = 200, description = "The QR code of the short URL", content_type = "image/svg+xml", body = String),
        (status = 401, description = "No valid key", body = crate::error::ErrorBody),
        (status = 403, description = "Another key's link", body = crate::error::ErrorBody),
        (status = 404, description = "No such link", body = crate::error::ErrorBody),
    ),
    security(("api_key" = [])))]
pub(crate) async fn link_qr(
    State(cp): State<Arc<ControlPlane>>,
    caller: Caller,
    Path(code): Path<String>,
    query: Result<axum::extract::Query<crate::api::OnDomain>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = caller.principal()?;
    let key = cp
        .key_of(&principal, &code, crate::api::on_domain(query)?.as_deref())
        .await?;
    let link = cp.visible_link(&principal, &key).await?;
    let svg = qr_svg(&cp.short_url(&link))?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        svg,
    )
        .into_response())
}

/// The QR code of `text`, black on white, as an SVG document.
pub fn qr_svg(text: &str) -> Result<String, ApiError> {
    let code = qrcode::QrCode::new(text.as_bytes()).map_err(|e| ApiError::Internal(format!("QR code: {e}")))?;
    Ok(code
        .render::<qrcode::render::svg::Color>()
        .min_dimensions(QR_MIN_PIXELS, QR_MIN_PIXELS)
        .quiet_zone(true)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_is_a_square_document_of_the_requested_size() {
        let svg = qr_svg("https://sho.rt/abc").unwrap();
        assert!(svg.starts_with("<?xml"), "{svg}");
        assert!(svg.contains("<svg"));
        let width: u32 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert!(width >= QR_MIN_PIXELS);
        assert_ne!(qr_svg("https://sho.rt/abd").unwrap(), svg, "the text is encoded");
    }
}
