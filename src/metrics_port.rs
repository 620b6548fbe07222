//! The metrics port: `/metrics` (the process's registry), `/healthz` and `/readyz`.

use rebound_proxy::issued::IssuedCodeGate;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What `/readyz` checks: every listener bound and, on a proxy, the issued-code filter loaded.
#[derive(Clone, Default)]
pub struct Readiness {
    listeners_bound: Arc<AtomicBool>,
    issued: Option<Arc<IssuedCodeGate>>,
    /// Gauges read at scrape time.
    aliases_gauge: Option<prometheus::IntGauge>,
}

impl Readiness {
    pub fn bound(issued: Option<Arc<IssuedCodeGate>>) -> Readiness {
        Readiness {
            listeners_bound: Arc::new(AtomicBool::new(true)),
            issued,
            aliases_gauge: None,
        }
    }

    pub fn with_gauge(mut self, gauge: prometheus::IntGauge) -> Readiness {
        self.aliases_gauge = Some(gauge);
        self
    }

    fn refresh_gauges(&self) {
        if let (Some(issued), Some(gauge)) = (&self.issued, &self.aliases_gauge) {
            gauge.set(issued.aliases() as i64);
        }
    }

    fn is_ready(&self) -> bool {
        // A proxy whose filter was loaded once stays ready while the feed reconnects:
        // the filter is bypassed meanwhile, never wrong.
        self.listeners_bound.load(Ordering::Acquire) && self.issued.as_ref().is_none_or(|b| b.was_loaded())
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn metrics_router(registry: prometheus::Registry, readiness: Readiness) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    let scrape_readiness = readiness.clone();
    // Each process builds one metrics router per registry: the name cannot be taken.
    let ready = crate::process_metrics::register_readiness_gauge(&registry).expect("rebound_ready is declared once");
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                scrape_readiness.refresh_gauges();
                ready.set(i64::from(scrape_readiness.is_ready()));
                async move {
                    let mut out = String::new();
                    match prometheus::TextEncoder::new().encode_utf8(&registry.gather(), &mut out) {
                        Ok(()) => (StatusCode::OK, [("content-type", prometheus::TEXT_FORMAT)], out),
                        Err(e) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [("content-type", "text/plain")],
                            e.to_string(),
                        ),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    if readiness.is_ready() {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
}
