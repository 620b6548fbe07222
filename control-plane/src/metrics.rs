//! Every metric of the control plane, declared in one place with its help text: requests
//! by route template, method and status with their latency, writes by outcome, rate-limit
//! refusals, KGS leases, the propagation reconciler's, and the click consumer's. Route labels are the router's templates
//! (`/api/v1/links/{code}`), never a raw path, so every label set is bounded.

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use std::time::Instant;

/// The API's request and write metrics.
#[derive(Clone)]
pub struct ApiMetrics {
    requests: IntCounterVec,
    latency: HistogramVec,
    writes: IntCounterVec,
    rate_limited: IntCounterVec,
    kgs_leases: IntCounterVec,
    threat_refused: IntCounterVec,
    threat_takedowns: IntCounterVec,
    threat_entries: prometheus::IntGaugeVec,
    threat_loads: IntCounterVec,
    /// Abuse reports recorded.
    pub(crate) reports: IntCounter,
}

impl ApiMetrics {
    /// The families, registered nowhere yet ([`ApiMetrics::register`] adds them to a registry).
    pub(crate) fn unregistered() -> ApiMetrics {
        let families = || -> prometheus::Result<ApiMetrics> {
            Ok(ApiMetrics {
                requests: IntCounterVec::new(
                    Opts::new(
                        "rebound_api_requests_total",
                        "API requests, by route template, method and status.",
                    ),
                    &["route", "method", "status"],
                )?,
                latency: HistogramVec::new(
                    HistogramOpts::new(
                        "rebound_api_request_duration_seconds",
                        "Time to answer an API request, by route template.",
                    )
                    .buckets(vec![
                        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                    ]),
                    &["route"],
                )?,
                writes: IntCounterVec::new(
                    Opts::new(
                        "rebound_api_writes_total",
                        "Writes (create, import, delete, takedown, key_create, key_revoke), by outcome.",
                    ),
                    &["operation", "outcome"],
                )?,
                rate_limited: IntCounterVec::new(
                    Opts::new(
                        "rebound_api_rate_limit_refusals_total",
                        "Requests refused 429 by the creation rate limits, by operation.",
                    ),
                    &["operation"],
                )?,
                kgs_leases: IntCounterVec::new(
                    Opts::new(
                        "rebound_kgs_leases_total",
                        "Counter blocks leased from the store for generated codes, by outcome (ok, failed).",
                    ),
                    &["outcome"],
                )?,
                threat_refused: IntCounterVec::new(
                    Opts::new(
                        "rebound_threat_refused_total",
                        "Creates and edits refused blocked_target, by the threat list that holds the target.",
                    ),
                    &["list"],
                )?,
                threat_takedowns: IntCounterVec::new(
                    Opts::new(
                        "rebound_threat_takedowns_total",
                        "Active links a rescan took down because a threat list holds their target, by list.",
                    ),
                    &["list"],
                )?,
                threat_entries: prometheus::IntGaugeVec::new(
                    Opts::new(
                        "rebound_threat_list_entries",
                        "Entries in force of each threat list (from its last load that succeeded).",
                    ),
                    &["list"],
                )?,
                threat_loads: IntCounterVec::new(
                    Opts::new(
                        "rebound_threat_list_loads_total",
                        "Loads of each threat list, by outcome (ok, failed: the entries before stay in force).",
                    ),
                    &["list", "outcome"],
                )?,
                reports: IntCounter::new(
                    "rebound_abuse_reports_total",
                    "Abuse reports recorded (POST /api/v1/abuse-reports).",
                )?,
            })
        };
        let metrics = families().expect("metric names and labels are valid");
        // The rate-limited operations show 0 before their first refusal, so dashboards and
        // alerts find the series.
        for operation in ["create", "import"] {
            metrics.rate_limited.with_label_values(&[operation]);
        }
        metrics
    }

    /// Declares the families in `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.requests.clone()))?;
        registry.register(Box::new(self.latency.clone()))?;
        registry.register(Box::new(self.writes.clone()))?;
        registry.register(Box::new(self.rate_limited.clone()))?;
        registry.register(Box::new(self.kgs_leases.clone()))?;
        registry.register(Box::new(self.threat_refused.clone()))?;
        registry.register(Box::new(self.threat_takedowns.clone()))?;
        registry.register(Box::new(self.reports.clone()))?;
        registry.register(Box::new(self.threat_entries.clone()))?;
        registry.register(Box::new(self.threat_loads.clone()))?;
        Ok(())
    }

    /// A create or edit refused because `list` holds its target.
    pub(crate) fn threat_refused(&self, list: &str) {
        self.threat_refused.with_label_values(&[list]).inc();
    }

    /// A load of `list`: its entries in force, and whether this load failed.
    pub(crate) fn threat_loaded(&self, list: &str, entries: usize, failed: bool) {
        self.threat_entries.with_label_values(&[list]).set(entries as i64);
        let outcome = if failed { "failed" } else { "ok" };
        self.threat_loads.with_label_values(&[list, outcome]).inc();
    }

    /// A link taken down because `list` holds its target.
    pub(crate) fn threat_takedown(&self, list: &str) {
        self.threat_takedowns.with_label_values(&[list]).inc();
    }

    /// The KGS lease counters, one per outcome.
    pub(crate) fn kgs_leases(&self) -> KgsLeaseMetrics {
        KgsLeaseMetrics {
            ok: self.kgs_leases.with_label_values(&["ok"]),
            failed: self.kgs_leases.with_label_values(&["failed"]),
        }
    }

    fn observe(&self, route: &str, method: &Method, status: StatusCode, seconds: f64) {
        let method = method_label(method);
        self.requests.with_label_values(&[route, method, status.as_str()]).inc();
        let status = status.as_u16();
        self.latency.with_label_values(&[route]).observe(seconds);
        if let Some(operation) = write_operation(method, route) {
            self.writes.with_label_values(&[operation, write_outcome(status)]).inc();
            if status == 429 {
                self.rate_limited.with_label_values(&[operation]).inc();
            }
        }
    }
}

/// KGS leases by outcome.
#[derive(Clone)]
pub(crate) struct KgsLeaseMetrics {
    pub ok: IntCounter,
    pub failed: IntCounter,
}

/// The middleware that counts and times every request (outermost layer of the router).
pub(crate) async fn count_request(metrics: ApiMetrics, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let response = next.run(request).await;
    metrics.observe(&route, &method, response.status(), started.elapsed().as_secs_f64());
    response
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Which write a request is, from its method and route template.
fn write_operation(method: &str, route: &str) -> Option<&'static str> {
    Some(match (method, route) {
        ("POST", "/api/v1/links") => "create",
        ("POST", "/api/v1/links/import") => "import",
        ("DELETE", "/api/v1/links/{code}") => "delete",
        ("POST", "/api/v1/links/{code}/takedown") => "takedown",
        ("PATCH", "/api/v1/links/{code}") => "edit",
        ("POST", "/api/v1/links/{code}/reinstate") => "reinstate",
        ("POST", "/api/v1/abuse-reports") => "report",
        ("POST", "/api/v1/keys") => "key_create",
        ("DELETE", "/api/v1/keys/{id}") => "key_revoke",
        _ => return None,
    })
}

/// A write's outcome, from the status the API chose for it (the API classifies its errors once).
fn write_outcome(status: u16) -> &'static str {
    match status {
        200..=299 => "ok",
        400 | 413 | 415 | 422 => "invalid",
        401 => "unauthenticated",
        403 => "forbidden",
        404 => "not_found",
        409 => "conflict",
        429 => "rate_limited",
        503 => "unavailable",
        _ => "error",
    }
}

/// The propagation reconciler's metrics (pending deletes finished by the system).
#[derive(Clone)]
pub struct PropagationMetrics {
    pub finished: IntCounter,
    pub failed: IntCounter,
    pub pending: IntGauge,
}

impl PropagationMetrics {
    /// The metrics, registered nowhere yet ([`PropagationMetrics::register`] adds them).
    pub(crate) fn unregistered() -> PropagationMetrics {
        let metrics = || -> prometheus::Result<PropagationMetrics> {
            Ok(PropagationMetrics {
                finished: IntCounter::new(
                    "rebound_propagations_finished_total",
                    "Pending propagations (tombstone, invalidation, acknowledgements) this control plane's reconciler finished.",
                )?,
                failed: IntCounter::new(
                    "rebound_propagations_failed_total",
                    "Attempts of this control plane's reconciler at a pending propagation that failed (retried about a second later).",
                )?,
                pending: IntGauge::new(
                    "rebound_propagations_pending",
                    "Pending propagations whose lease had expired at the reconciler's last look (at most one page, 16).",
                )?,
            })
        };
        metrics().expect("the propagation metrics are well-formed")
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.finished.clone()))?;
        registry.register(Box::new(self.failed.clone()))?;
        registry.register(Box::new(self.pending.clone()))
    }
}

/// The click consumer's metrics.
#[derive(Clone)]
pub struct ConsumerMetrics {
    pub received: IntCounter,
    pub applied: IntCounter,
    pub redeliveries_skipped: IntCounter,
    pub unreadable: IntCounter,
    pub apply_failed: IntCounter,
    pub dead_lettered: IntCounter,
    pub queue_messages: IntGaugeVec,
    pub oldest_message_age: IntGauge,
}

impl ConsumerMetrics {
    /// Declares the consumer's metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<ConsumerMetrics> {
        let failures = IntCounterVec::new(
            Opts::new(
                "rebound_consumer_failures_total",
                "Click messages not applied, by reason (unreadable, apply_failed); they are received again.",
            ),
            &["reason"],
        )?;
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let queue_messages = IntGaugeVec::new(
            Opts::new(
                "rebound_click_queue_messages",
                "Messages in the click queue and its dead-letter queue (queue: clicks, dead_letter), by state (visible, in_flight, delayed), from the SQS attributes.",
            ),
            &["queue", "state"],
        )?;
        let oldest_message_age = IntGauge::new(
            "rebound_consumer_oldest_message_age_seconds",
            "Age (from its SentTimestamp) of the oldest click message in the last receive; 0 when the receive found none.",
        )?;
        let metrics = ConsumerMetrics {
            received: counter(
                "rebound_consumer_messages_received_total",
                "Click messages received from SQS.",
            )?,
            applied: counter(
                "rebound_consumer_batches_applied_total",
                "Click batches added to the rollups, and breakdowns' batches to the breakdowns.",
            )?,
            redeliveries_skipped: counter(
                "rebound_consumer_redeliveries_skipped_total",
                "Click messages whose batch was applied before (a redelivery), deleted without adding.",
            )?,
            dead_lettered: counter(
                "rebound_consumer_dead_lettered_total",
                "Click messages that failed on their last allowed receive, so SQS moves them to the dead-letter queue.",
            )?,
            unreadable: failures.with_label_values(&["unreadable"]),
            apply_failed: failures.with_label_values(&["apply_failed"]),
            queue_messages: queue_messages.clone(),
            oldest_message_age: oldest_message_age.clone(),
        };
        registry.register(Box::new(failures))?;
        registry.register(Box::new(queue_messages))?;
        registry.register(Box::new(oldest_message_age))?;
        Ok(metrics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_named_by_route_template_and_method_only() {
        assert_eq!(write_operation("POST", "/api/v1/links"), Some("create"));
        assert_eq!(write_operation("GET", "/api/v1/links"), None);
        assert_eq!(write_operation("DELETE", "/api/v1/links/{code}"), Some("delete"));
        assert_eq!(
            write_operation("DELETE", "/api/v1/links/abc"),
            None,
            "a raw path is never a label"
        );
        assert_eq!(write_outcome(201), "ok");
        assert_eq!(write_outcome(429), "rate_limited");
    }
}
