//! The API over HTTP: the router, the handlers by resource (each in its own file, reaching
//! its service through a `FromRef` sub-state of [`ControlPlane`]), the extractors they
//! share, the OpenAPI document and the operator console.

mod abuse;
mod console;
mod domains;
pub(crate) mod extract;
mod keys;
mod links;
mod openapi;
mod stats;

pub use openapi::openapi_json;

use crate::error::{self, ApiError};
use crate::{home, metrics, ControlPlane};
use axum::Router;
use std::sync::Arc;

/// Every API route, by resource.
fn routes() -> Router<ControlPlane> {
    Router::new()
        .merge(links::routes())
        .merge(stats::routes())
        .merge(abuse::routes())
        .merge(domains::routes())
        .merge(keys::routes())
        .merge(openapi::routes())
        .fallback(|| async { ApiError::NotFound("no such endpoint") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed("method not allowed on this endpoint") })
}

/// The API router.
pub fn router(cp: ControlPlane) -> Router {
    router_forwarding(cp, None)
}

/// [`router`], outside the home region: the writes that need uniqueness are forwarded to
/// `home` (counted and timed here like the rest).
pub fn router_forwarding(cp: ControlPlane, home: Option<Arc<dyn home::HomeRegion>>) -> Router {
    let metrics = cp.metrics.clone();
    let mut routes = routes();
    if let Some(home) = home {
        let forwarding = home::Forwarding {
            home,
            here: routes.clone().with_state(cp.clone()),
            limits: cp.bodies,
        };
        routes = routes.layer(axum::middleware::from_fn_with_state(
            forwarding,
            home::forward_unique_writes,
        ));
    }
    guard_panics(routes.merge(console::routes()).with_state(cp)).layer(axum::middleware::from_fn(
        move |request, next| metrics::count_request(metrics.clone(), request, next),
    ))
}

/// A handler that panics is answered 500 in the API's error shape, and logged, instead of
/// dropping the connection.
fn guard_panics(app: Router) -> Router {
    app.layer(tower_http::catch_panic::CatchPanicLayer::custom(error::panic_response))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_is_answered_500_in_the_error_shape() {
        let app = guard_panics(Router::new().route(
            "/boom",
            axum::routing::get(|| async {
                if true {
                    panic!("boom in a test handler");
                }
                "unreachable"
            }),
        ));
        let res = app
            .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(res.headers()["cache-control"], "no-store");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "internal");
        assert_eq!(
            v["error"]["message"], "internal error",
            "the panic message stays in the log"
        );
    }
}
