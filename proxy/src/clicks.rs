//! Clicks leave the request path through a bounded lock-free queue: `record` never waits,
//! and a full queue drops the click and counts it. A background shipper aggregates them per
//! (code, day) and hands batches to a [`ClickSink`].

use crate::metrics::ProxyMetrics;
use async_trait::async_trait;
use crossbeam_queue::ArrayQueue;
use rebound_core::Day;
use rebound_store::{ClickAdd, ClickBatch, Store, MAX_BATCH_ADDS};
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Batches handed to the sink at once (10 is also SQS's limit per call).
const SHIP_GROUP: usize = 10;
/// Pause between groups of one flush.
const SHIP_PAUSE: Duration = Duration::from_millis(2);

/// One click.
#[derive(Debug, Clone)]
pub struct Click {
    pub code: Arc<str>,
    pub day: Day,
}

/// The bounded queue between the request path and the shipper.
pub struct ClickQueue {
    queue: ArrayQueue<Click>,
    metrics: ProxyMetrics,
}

impl ClickQueue {
    pub fn new(capacity: usize, metrics: ProxyMetrics) -> ClickQueue {
        ClickQueue {
            queue: ArrayQueue::new(capacity),
            metrics,
        }
    }

    /// Queues a click, or drops and counts it when the queue is full. Never waits.
    #[inline]
    pub fn record(&self, click: Click) {
        if self.queue.push(click).is_ok() {
            self.metrics.clicks_queued.inc();
        } else {
            self.metrics.clicks_dropped.inc();
        }
    }

    fn drain_into(&self, counts: &mut HashMap<(Arc<str>, Day), u64>) {
        while let Some(click) = self.queue.pop() {
            *counts.entry((click.code, click.day)).or_insert(0) += 1;
        }
    }
}

/// Where aggregated clicks go: the rollups directly (embedded) or a queue (SQS).
#[async_trait]
pub trait ClickSink: Send + Sync {
    /// Ships the batches of one flush.
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), String>;
}

/// Embedded mode: adds batches to the store's rollups.
pub struct StoreClickSink(pub Arc<dyn Store>);

#[async_trait]
impl ClickSink for StoreClickSink {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), String> {
        self.0
            .apply_click_batches(batches)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Distributed mode: sends batches to SQS for the control plane's consumer.
pub struct SqsClickSink(pub rebound_store::sqs::LazyClickQueue);

#[async_trait]
impl ClickSink for SqsClickSink {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), String> {
        let queue = self.0.get().await.map_err(|e| e.to_string())?;
        queue.send(batches).await.map_err(|e| e.to_string())
    }
}

/// Unique batch ids: this process's start time and pid, and a sequence.
struct BatchIds {
    prefix: String,
    seq: AtomicU64,
}

impl BatchIds {
    fn new() -> BatchIds {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        BatchIds {
            prefix: format!("{:x}-{}", nanos, std::process::id()),
            seq: AtomicU64::new(0),
        }
    }
    fn next(&self) -> String {
        format!("{}-{}", self.prefix, self.seq.fetch_add(1, Ordering::Relaxed))
    }
}

/// Distinct (code, day) counts below which a drain is shipped at once (light load: the
/// stats stay fresh).
const LIGHT_LOAD: usize = 5_000;
/// Longest counts are held to merge with later clicks of the same codes (heavy load: the
/// store writes one row per code per window, not one per click). The window grows with
/// the number of distinct codes pending: a second per 5,000, at most a minute.
const MAX_HOLD: Duration = Duration::from_secs(60);

/// How long counts for `distinct` codes may wait before they are written.
fn hold_for(distinct: usize) -> Duration {
    Duration::from_secs((distinct / LIGHT_LOAD) as u64).min(MAX_HOLD)
}

/// Drains the queue every `every` into running counts, and ships them when they are few
/// (light load), when they have waited long enough for their number (`hold_for`), and
/// once more when `shutdown` flips.
pub async fn run_click_shipper(
    queue: Arc<ClickQueue>,
    sink: Arc<dyn ClickSink>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let ids = BatchIds::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pending: HashMap<(Arc<str>, Day), u64> = HashMap::default();
    let mut held_since = tokio::time::Instant::now();
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        };
        if pending.is_empty() {
            held_since = tokio::time::Instant::now();
        }
        queue.drain_into(&mut pending);
        let stopping = stopping || *shutdown.borrow();
        if stopping || pending.len() <= LIGHT_LOAD || held_since.elapsed() >= hold_for(pending.len()) {
            ship(&queue, sink.as_ref(), &ids, std::mem::take(&mut pending)).await;
        }
        if stopping {
            return;
        }
    }
}

async fn ship(queue: &ClickQueue, sink: &dyn ClickSink, ids: &BatchIds, counts: HashMap<(Arc<str>, Day), u64>) {
    if counts.is_empty() {
        return;
    }
    let adds: Vec<ClickAdd> = counts
        .into_iter()
        .map(|((code, day), clicks)| ClickAdd {
            code: code.to_string(),
            day,
            clicks,
        })
        .collect();
    let batches: Vec<ClickBatch> = adds
        .chunks(MAX_BATCH_ADDS)
        .map(|chunk| ClickBatch {
            id: ids.next(),
            adds: chunk.to_vec(),
        })
        .collect();
    // Shipped a few batches at a time with a short pause between, so a large flush spreads
    // over a few milliseconds instead of taking a core from the redirects in one burst.
    for (i, group) in batches.chunks(SHIP_GROUP).enumerate() {
        if i > 0 {
            tokio::time::sleep(SHIP_PAUSE).await;
        }
        let clicks: u64 = group.iter().flat_map(|b| &b.adds).map(|a| a.clicks).sum();
        match sink.ship(group).await {
            Ok(()) => queue.metrics.clicks_flushed.inc_by(clicks),
            Err(e) => {
                queue.metrics.click_batches_failed.inc_by(group.len() as u64);
                tracing::warn!(error = %e, clicks, "click batches not shipped; their clicks are lost");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_grows_with_the_load() {
        assert_eq!(hold_for(10), Duration::ZERO);
        assert_eq!(hold_for(50_000), Duration::from_secs(10));
        assert_eq!(hold_for(5_000_000), MAX_HOLD);
    }
    use rebound_store::{MemoryStore, RollupStore};

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let metrics = ProxyMetrics::register(&prometheus::Registry::new()).unwrap();
        let q = ClickQueue::new(2, metrics.clone());
        for _ in 0..5 {
            q.record(Click {
                code: Arc::from("abc"),
                day: Day(1),
            });
        }
        assert_eq!(metrics.clicks_queued.get(), 2);
        assert_eq!(metrics.clicks_dropped.get(), 3);
    }

    #[tokio::test]
    async fn shipped_clicks_land_in_the_rollups_aggregated() {
        let metrics = ProxyMetrics::register(&prometheus::Registry::new()).unwrap();
        let q = Arc::new(ClickQueue::new(10_000, metrics.clone()));
        for i in 0..300 {
            q.record(Click {
                code: Arc::from(format!("c{}", i % 150).as_str()),
                day: Day(5),
            });
        }
        let store = Arc::new(MemoryStore::new());
        let (tx, rx) = tokio::sync::watch::channel(false);
        let shipper = tokio::spawn(run_click_shipper(
            q,
            Arc::new(StoreClickSink(store.clone())),
            Duration::from_secs(3600),
            rx,
        ));
        tx.send(true).unwrap();
        shipper.await.unwrap();
        assert_eq!(metrics.clicks_flushed.get(), 300);
        assert_eq!(
            store.read_clicks("c7", Day(5), Day(5)).await.unwrap(),
            vec![(Day(5), 2)]
        );
    }
}
