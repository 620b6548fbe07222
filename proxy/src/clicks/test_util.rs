//! What the click tests share: entries, a German click's dimensions, a clock, metrics, a sink that keeps what it is
//! given, pacing without the time share, and a shipper to start and stop.

use super::{run_click_shipper, ClickPacing, ClickQueue, ClickSink, ClickWriter};
use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use async_trait::async_trait;
use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Clock, Day, Link, ManualClock, RedirectKind};
use rebound_store::{ClickBatch, StoreError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

pub(super) fn entry(code: &str) -> L1Entry {
    let link = Link::new_active(
        code.into(),
        "https://e.com/".into(),
        RedirectKind::Found,
        false,
        0,
        "k".into(),
        None,
    );
    L1Entry::new(code, CacheRecord::active(&link, 0, &CachePolicy::default()), 0)
}

/// A person's click from Germany, with no other dimension.
pub(super) fn from_de() -> rebound_core::dimensions::Dimensions {
    rebound_core::dimensions::Dimensions {
        country: Some(rebound_core::dimensions::cdn_country(b"DE")),
        ..Default::default()
    }
}

pub(super) fn clock_at(millis: i64) -> Arc<dyn Clock> {
    Arc::new(ManualClock::at(millis))
}

pub(super) fn metrics() -> ProxyMetrics {
    ProxyMetrics::register(&prometheus::Registry::new()).unwrap()
}

/// A sink that keeps what it is given.
#[derive(Default)]
pub(super) struct Recorded(pub(super) Mutex<Vec<ClickBatch>>);

#[async_trait]
impl ClickSink for Recorded {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.0.lock().unwrap().extend_from_slice(batches);
        Ok(())
    }
}

impl Recorded {
    pub(super) fn adds(&self) -> Vec<(String, Day, u64)> {
        let mut adds: Vec<_> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| b.adds.iter().map(|a| (a.code.clone(), a.day, a.clicks)))
            .collect();
        adds.sort();
        adds
    }
}

pub(super) fn pacing(every_ms: u64, rows_per_sec: u64, max_hold_ms: u64) -> ClickPacing {
    ClickPacing {
        every: Duration::from_millis(every_ms),
        rows_per_sec,
        write_share: 1.0,
        max_hold: Duration::from_millis(max_hold_ms),
    }
}

/// A shipper running on this runtime, and the switch that stops it.
pub(super) struct Shipper {
    stop: tokio::sync::watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Shipper {
    /// Starts a shipper whose writes run on `runtime`.
    pub(super) fn start(
        q: &Arc<ClickQueue>,
        sink: Arc<dyn ClickSink>,
        runtime: tokio::runtime::Handle,
        every: Duration,
    ) -> Shipper {
        let pacing = ClickPacing {
            every,
            rows_per_sec: 1_000_000,
            write_share: 1.0,
            max_hold: Duration::from_secs(3600),
        };
        Shipper::paced(q, sink, runtime, pacing)
    }

    /// Starts a shipper paced by `pacing`.
    pub(super) fn paced(
        q: &Arc<ClickQueue>,
        sink: Arc<dyn ClickSink>,
        runtime: tokio::runtime::Handle,
        pacing: ClickPacing,
    ) -> Shipper {
        Shipper::writing(
            q,
            ClickWriter {
                runtime,
                cpu: None,
                sink,
                breakdowns: None,
            },
            pacing,
        )
    }

    /// Starts a shipper with `writer`, paced by `pacing`.
    pub(super) fn writing(q: &Arc<ClickQueue>, writer: ClickWriter, pacing: ClickPacing) -> Shipper {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(run_click_shipper(q.clone(), writer, pacing, rx));
        Shipper { stop, task }
    }

    /// Flips shutdown and waits for the shipper to return.
    pub(super) async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}
