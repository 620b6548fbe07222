//! Every metric of the data plane, declared in one place with its help text. Handles to
//! labelled series are resolved once here, so the request path only bumps atomics; the
//! state of the issued-code filter and of the invalidation channel is read at scrape time.

use crate::issued::IssuedCodeGate;
use crate::trust::InvalidationTrust;
use prometheus::{Counter, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use rebound_core::Clock;
use std::sync::Arc;

/// The data plane's metrics.
#[derive(Clone)]
pub struct ProxyMetrics {
    pub redirects: IntCounter,
    pub not_found: IntCounter,
    pub gone: IntCounter,
    pub unavailable: IntCounter,
    pub bad_method: IntCounter,
    /// Answers of password-protected links: the form, and the attempts by outcome.
    pub unlock_forms: IntCounter,
    pub unlock_attempts: IntCounterVec,
    pub bad_path: IntCounter,
    /// App links documents served (docs/spec.md §14).
    pub app_links: IntCounter,
    /// Requests for a host that is no domain of the fleet (404).
    pub unknown_host: IntCounter,
    /// Domains routed besides the default one.
    pub domains_routed: IntGauge,
    pub l1_hits: IntCounter,
    pub l1_tombstones: IntCounter,
    pub l1_misses: IntCounter,
    pub l2_hits: IntCounter,
    pub l2_misses: IntCounter,
    pub l2_errors: IntCounter,
    /// Live L2 records written before Redis last changed identity: read from the store.
    pub l2_unconfirmed: IntCounter,
    pub bloom_rejects: IntCounter,
    pub bloom_bypassed: IntCounter,
    pub store_reads: IntCounter,
    pub store_errors: IntCounter,
    pub singleflight_waits: IntCounter,
    pub stale_served: IntCounter,
    pub fills_dropped: IntCounter,
    pub reads_outdated: IntCounter,
    pub reads_superseded: IntCounter,
    /// Reads of a version an edit voided while they were in flight: made again.
    pub reads_edited: IntCounter,
    pub home_found: IntCounter,
    pub home_absent: IntCounter,
    pub home_errors: IntCounter,
    pub clicks_queued: IntCounter,
    pub bot_clicks_queued: IntCounter,
    pub clicks_dropped: IntCounter,
    pub breakdown_clicks_dropped: IntCounter,
    /// The click stream (docs/analytics.md): events dropped at a full queue, put, lost.
    pub click_events_dropped: IntCounter,
    pub click_events_sent: IntCounter,
    pub click_events_lost: IntCounter,
    /// Reloads of the country database after its file changed, by outcome.
    pub country_db_reloads: IntCounterVec,
    pub breakdown_batches_failed: IntCounter,
    pub clicks_flushed: IntCounter,
    pub click_batches_failed: IntCounter,
    pub click_pending_codes: IntGauge,
    pub click_persist_lag: Gauge,
    pub click_rows_written: IntCounter,
    pub click_batches_written: IntCounter,
    pub click_write_seconds: Counter,
    pub click_shipper_wakeups: IntCounter,
    pub bloom_loaded_codes: IntGauge,
    /// Answers that looked past memory (L2, the issued-code filter, the store), timed.
    pub lookup_latency: Histogram,
}

impl ProxyMetrics {
    /// Declares every metric in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<ProxyMetrics> {
        let requests = IntCounterVec::new(
            Opts::new(
                "rebound_redirect_requests_total",
                "Requests on the redirect port, by outcome",
            ),
            &["outcome"],
        )?;
        let lookups = IntCounterVec::new(
            Opts::new(
                "rebound_lookups_total",
                "Lookups per tier (l1, l2, store, and home: the home region's replica read before a 404) and result",
            ),
            &["tier", "result"],
        )?;
        // Registers a metric and hands back its handle.
        fn registered<M: prometheus::core::Collector + Clone + 'static>(
            registry: &Registry,
            metric: M,
        ) -> prometheus::Result<M> {
            registry.register(Box::new(metric.clone()))?;
            Ok(metric)
        }
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            registered(registry, IntCounter::new(name, help)?)
        };
        let metrics = ProxyMetrics {
            redirects: requests.with_label_values(&["redirect"]),
            not_found: requests.with_label_values(&["not_found"]),
            gone: requests.with_label_values(&["gone"]),
            unavailable: requests.with_label_values(&["unavailable"]),
            bad_method: requests.with_label_values(&["method_not_allowed"]),
            unlock_forms: requests.with_label_values(&["password_form"]),
            unlock_attempts: registered(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "rebound_password_attempts_total",
                        "Passwords posted to protected links, by outcome (unlocked, wrong, limited: 429, busy: 503 with every check slot taken)",
                    ),
                    &["outcome"],
                )?,
            )?,
            bad_path: requests.with_label_values(&["bad_path"]),
            app_links: requests.with_label_values(&["app_link"]),
            unknown_host: requests.with_label_values(&["unknown_host"]),
            domains_routed: registered(
                registry,
                IntGauge::new(
                    "rebound_domains_routed",
                    "Domains this proxy routes besides the default one (docs/spec.md §11)",
                )?,
            )?,
            l1_hits: lookups.with_label_values(&["l1", "hit"]),
            l1_tombstones: lookups.with_label_values(&["l1", "tombstone"]),
            l1_misses: lookups.with_label_values(&["l1", "miss"]),
            l2_hits: lookups.with_label_values(&["l2", "hit"]),
            l2_misses: lookups.with_label_values(&["l2", "miss"]),
            l2_errors: lookups.with_label_values(&["l2", "error"]),
            l2_unconfirmed: lookups.with_label_values(&["l2", "unconfirmed"]),
            store_reads: lookups.with_label_values(&["store", "read"]),
            store_errors: lookups.with_label_values(&["store", "error"]),
            home_found: lookups.with_label_values(&["home", "found"]),
            home_absent: lookups.with_label_values(&["home", "absent"]),
            home_errors: lookups.with_label_values(&["home", "error"]),
            bloom_rejects: counter(
                "rebound_bloom_rejects_total",
                "Unknown codes answered 404 by the issued-code filter (high-water mark and alias filter) without a store read",
            )?,
            bloom_bypassed: counter(
                "rebound_bloom_bypassed_total",
                "Lookups that skipped the issued-code filter because it was not known to be current",
            )?,
            singleflight_waits: counter(
                "rebound_singleflight_waits_total",
                "Requests that waited on another request's store read of the same code",
            )?,
            stale_served: counter(
                "rebound_stale_served_total",
                "Redirects served from a stale record because the store failed",
            )?,
            fills_dropped: counter(
                "rebound_l1_fills_dropped_total",
                "Reads whose answer was kept out of L1 because the invalidation channel lapsed while they were in flight",
            )?,
            reads_outdated: counter(
                "rebound_reads_outdated_total",
                "Reads made again because they took so long that a delete may have returned meanwhile unheard by this proxy",
            )?,
            reads_superseded: counter(
                "rebound_reads_superseded_total",
                "Store reads of an active link older than a tombstone of it already seen (a replica behind the delete): answered 404, cached nowhere",
            )?,
            reads_edited: counter(
                "rebound_reads_edited_total",
                "Reads below L1 that found a version an edit voided while they were in flight: made again",
            )?,
            clicks_queued: counter(
                "rebound_clicks_queued_total",
                "People's clicks taken off the redirect path for shipping (counted on the L1 entries, then taken)",
            )?,
            bot_clicks_queued: counter(
                "rebound_bot_clicks_queued_total",
                "Bots' clicks (link unfurlers, crawlers, HEAD) taken off the redirect path for shipping, counted apart",
            )?,
            clicks_dropped: counter(
                "rebound_clicks_dropped_total",
                "Clicks (people's or bots') dropped because the click queue was full",
            )?,
            country_db_reloads: registered(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "rebound_country_db_reloads_total",
                        "Reloads of the country database after its file changed: ok, or refused (the previous one kept)",
                    ),
                    &["outcome"],
                )?,
            )?,
            breakdown_clicks_dropped: counter(
                "rebound_breakdown_clicks_dropped_total",
                "People's clicks the breakdowns missed because their queue was full (the totals count them)",
            )?,
            click_events_dropped: counter(
                "rebound_click_events_dropped_total",
                "Click events (people's and bots') the click stream dropped because its queue was full",
            )?,
            click_events_sent: counter(
                "rebound_click_events_sent_total",
                "Click events the click stream (Kinesis) took",
            )?,
            click_events_lost: counter(
                "rebound_click_events_lost_total",
                "Click events put to the click stream and not taken (a failed call or a refused record; never retried)",
            )?,
            breakdown_batches_failed: counter(
                "rebound_breakdown_batches_failed_total",
                "Breakdown batches that could not be written (the breakdowns miss their clicks; the totals do not)",
            )?,
            clicks_flushed: counter("rebound_clicks_flushed_total", "Clicks, people's and bots', shipped to the rollups")?,
            click_batches_failed: counter(
                "rebound_click_batches_failed_total",
                "Click batches that could not be shipped (their clicks are lost)",
            )?,
            click_pending_codes: registered(
                registry,
                IntGauge::new(
                    "rebound_click_pending_codes",
                    "Codes with clicks counted and not yet written to the rollups (or handed to the click queue)",
                )?,
            )?,
            click_persist_lag: registered(
                registry,
                Gauge::new(
                    "rebound_click_persist_lag_seconds",
                    "Age of the oldest click not yet written (or handed to the click queue); 0 when none is pending",
                )?,
            )?,
            click_shipper_wakeups: counter(
                "rebound_click_shipper_wakeups_total",
                "Times the click shipper woke to drain the queue (with nothing counted it sleeps until a click is queued)",
            )?,
            click_rows_written: counter(
                "rebound_click_rows_written_total",
                "Rollup rows (one per code and day) handed to the sink, shipped or failed",
            )?,
            click_batches_written: counter(
                "rebound_click_batches_written_total",
                "Click batches handed to the sink (one SQS message each in distributed mode)",
            )?,
            click_write_seconds: registered(
                registry,
                Counter::new(
                    "rebound_click_write_seconds_total",
                    "Wall time spent writing click batches (SQLite transactions or SQS sends)",
                )?,
            )?,
            bloom_loaded_codes: registered(
                registry,
                IntGauge::new(
                    "rebound_bloom_codes",
                    "Aliases inserted into the issued-code filter (from the alias index and the creation feed); generated codes are told by the high-water mark",
                )?,
            )?,
            lookup_latency: {
                let h = Histogram::with_opts(
                    HistogramOpts::new(
                        "rebound_redirect_lookup_duration_seconds",
                        "Time to answer a request on the redirect port whose code was looked up past memory (L2, the issued-code filter, the store). Answers from memory and refused requests never wait and are not timed: every request is in rebound_redirect_requests_total",
                    )
                    .buckets(vec![
                        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0,
                    ]),
                )?;
                registry.register(Box::new(h.clone()))?;
                h
            },
        };
        // Every outcome shows 0 before its first attempt, so dashboards and alerts find it.
        for outcome in ["unlocked", "wrong", "limited", "busy"] {
            metrics.unlock_attempts.with_label_values(&[outcome]);
        }
        registry.register(Box::new(requests))?;
        registry.register(Box::new(lookups))?;
        Ok(metrics)
    }
}

/// `rebound_bloom_current`, `rebound_issued_high_water` and
/// `rebound_invalidation_channel_healthy`, read from the filter and the proxy's own keepalive
/// at scrape time (nothing on the request path).
pub struct TierHealth {
    bloom: Arc<IssuedCodeGate>,
    bloom_current: IntGauge,
    high_water: IntGauge,
    channel: Option<(Arc<InvalidationTrust>, Arc<dyn Clock>, IntGauge)>,
}

impl TierHealth {
    /// Declares the gauges in `registry`; the channel's only where invalidation travels
    /// over Redis (`trust`), not in process.
    pub fn register(
        registry: &Registry,
        bloom: Arc<IssuedCodeGate>,
        trust: Option<(Arc<InvalidationTrust>, Arc<dyn Clock>)>,
    ) -> prometheus::Result<()> {
        let bloom_current = IntGauge::new(
            "rebound_bloom_current",
            "1 while the issued-code filter is known to be current and answers; 0 while it is bypassed",
        )?;
        let high_water = IntGauge::new(
            "rebound_issued_high_water",
            "The code counter's high-water mark this proxy knows: generated codes of values above it (and its slack) are never issued",
        )?;
        let channel = match trust {
            Some((trust, clock)) => Some((
                trust,
                clock,
                IntGauge::new(
                    "rebound_invalidation_channel_healthy",
                    "1 while this proxy heard its own keepalive on the invalidation channel within invalidation_timeout (no lapse since); 0 while L1 is not trusted",
                )?,
            )),
            None => None,
        };
        registry.register(Box::new(TierHealth {
            bloom,
            bloom_current,
            high_water,
            channel,
        }))
    }
}

impl prometheus::core::Collector for TierHealth {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut descs = self.bloom_current.desc();
        descs.extend(self.high_water.desc());
        if let Some((_, _, gauge)) = &self.channel {
            descs.extend(gauge.desc());
        }
        descs
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.bloom_current.set(i64::from(self.bloom.is_current()));
        let mut families = self.bloom_current.collect();
        self.high_water
            .set(i64::try_from(self.bloom.high_water()).unwrap_or(i64::MAX));
        families.extend(self.high_water.collect());
        if let Some((trust, clock, gauge)) = &self.channel {
            gauge.set(i64::from(trust.is_trusted(clock.now_millis())));
            families.extend(gauge.collect());
        }
        families
    }
}
