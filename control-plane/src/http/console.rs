//! The operator console (docs/spec.md §10): one HTML page, a stylesheet and a JavaScript module,
//! compiled into the binary and served at `/` on the API port. It talks to the API with
//! the key the person signs in with (kept in `sessionStorage`); the server holds no
//! session. A strict `Content-Security-Policy`: nothing inline, nothing from elsewhere.

use crate::ControlPlane;
use axum::http::header::{
    HeaderName, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("../../console/index.html");
const APP_JS: &str = include_str!("../../console/app.js");
const STYLE_CSS: &str = include_str!("../../console/style.css");
const ICON_SVG: &str = include_str!("../../console/icon.svg");

/// Scripts and styles from this origin only, none inline; images from this origin and the
/// blob URLs the QR code is shown and downloaded through; requests to this origin only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; \
                      connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(super) fn routes() -> Router<ControlPlane> {
    let file = |content_type: &'static str, body: &'static str| get(move || async move { asset(content_type, body) });
    Router::new()
        .route("/", file("text/html; charset=utf-8", INDEX_HTML))
        .route("/console/app.js", file("text/javascript; charset=utf-8", APP_JS))
        .route("/console/style.css", file("text/css; charset=utf-8", STYLE_CSS))
        .route("/console/icon.svg", file("image/svg+xml", ICON_SVG))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, &'static str); 5] = [
        (CONTENT_TYPE, content_type),
        (CONTENT_SECURITY_POLICY, POLICY),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, "no-referrer"),
        // A new build's console is fetched again; the files are small.
        (CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}
