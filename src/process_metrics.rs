//! The metrics every Rebound process exports whatever it runs: the process collector (RSS,
//! CPU seconds, open descriptors, threads, from `/proc`), `rebound_build_info`, and
//! `rebound_ready` (what `/readyz` answers, for alerts).

use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};

/// The commit the binary was built from (`build.rs`).
pub const COMMIT: &str = env!("REBOUND_COMMIT");

/// Declares the process metrics and `rebound_build_info{version, commit}` (always 1) in `registry`.
pub fn register_process_metrics(registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
    let info = IntGaugeVec::new(
        Opts::new(
            "rebound_build_info",
            "The running build: always 1, with the version and the commit as labels.",
        ),
        &["version", "commit"],
    )?;
    info.with_label_values(&[env!("CARGO_PKG_VERSION"), COMMIT]).set(1);
    registry.register(Box::new(info))
}

/// Declares `rebound_ready` in `registry`; the metrics port sets it at each scrape.
pub fn register_readiness_gauge(registry: &Registry) -> prometheus::Result<IntGauge> {
    let ready = IntGauge::new(
        "rebound_ready",
        "1 when /readyz answers 200 (every listener bound and, on a proxy, the issued-code filter loaded), else 0.",
    )?;
    registry.register(Box::new(ready.clone()))?;
    Ok(ready)
}

/// A process's registry, with the metric families that every part of the process shares
/// and that may be declared only once: the process's own, the ports' edges and the
/// backend calls.
#[derive(Clone)]
pub struct ProcessRegistry {
    pub registry: Registry,
    pub edge: rebound_edge::EdgeMetrics,
    pub adapters: rebound_metering::AdapterMetrics,
}

impl ProcessRegistry {
    /// A new registry with those families declared.
    pub fn new() -> prometheus::Result<ProcessRegistry> {
        let registry = Registry::new();
        register_process_metrics(&registry)?;
        Ok(ProcessRegistry {
            edge: rebound_edge::EdgeMetrics::register(&registry)?,
            adapters: rebound_metering::AdapterMetrics::register(&registry)?,
            registry,
        })
    }
}
