//! Clicks leave the request path as a count on the L1 entry that answered. The first click
//! since the counts were last taken pushes the entry onto a bounded lock-free queue (a
//! full queue drops that entry's clicks and counts them); later clicks of the same code
//! only add to its count, so the request path never waits, allocates or hashes for a
//! click. The shipper empties the queue every few milliseconds, takes the counts when they
//! are due (one row per code and day), and a writer hands them to a [`ClickSink`] in
//! batches, on the runtime the caller chose (the all-in-one gives it a low-priority
//! thread, so rollup writes only use CPU the redirects leave idle).

use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use async_trait::async_trait;
use crossbeam_queue::ArrayQueue;
use rebound_core::{Clock, Day};
use rebound_store::{ClickAdd, ClickBatch, Store, MAX_BATCH_ADDS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Batches handed to the sink at once (10 is also SQS's limit per call).
const SHIP_GROUP: usize = 10;
/// How often the shipper empties the queue: short enough that a full queue means more
/// distinct codes clicked in this time than it has slots.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// The bounded queue between the request path and the shipper: entries with clicks
/// counted since the last take.
pub struct ClickQueue {
    queue: ArrayQueue<L1Entry>,
    metrics: ProxyMetrics,
}

impl ClickQueue {
    pub fn new(capacity: usize, metrics: ProxyMetrics) -> ClickQueue {
        ClickQueue {
            queue: ArrayQueue::new(capacity),
            metrics,
        }
    }

    /// Counts a click on `entry`; the first one since the last take queues the entry, or,
    /// when the queue is full, drops the clicks counted on it and counts them as dropped.
    /// Never waits.
    #[inline]
    pub fn record(&self, entry: &L1Entry) {
        if entry.count_click() {
            if let Err(entry) = self.queue.push(entry.clone()) {
                self.metrics.clicks_dropped.inc_by(entry.take_clicks());
            }
        }
    }

    fn drain_into(&self, dirty: &mut Vec<L1Entry>) {
        while let Some(entry) = self.queue.pop() {
            dirty.push(entry);
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

/// Distinct codes below which counts are shipped every `every` (light load: the stats stay
/// fresh).
const LIGHT_LOAD: usize = 5_000;
/// Longest counts are held to merge with later clicks of the same codes (heavy load: the
/// store writes one row per code per window, not one per click). The window grows with
/// the number of distinct codes pending: a second per 5,000, at most a minute.
const MAX_HOLD: Duration = Duration::from_secs(60);

/// How long counts for `distinct` codes may wait before they are written.
fn hold_for(distinct: usize) -> Duration {
    Duration::from_secs((distinct / LIGHT_LOAD) as u64).min(MAX_HOLD)
}

/// Counts taken from the entries, all for one day.
struct Taken {
    day: Day,
    counts: Vec<(L1Entry, u64)>,
}

/// Where the shipper's writes run, and what it shares with them.
pub struct ClickWriter {
    /// The runtime the writes run on.
    pub runtime: tokio::runtime::Handle,
    pub sink: Arc<dyn ClickSink>,
}

/// Empties the queue every few milliseconds; takes the counts and has them written when
/// they are few (light load) and `every` has passed, or when they have waited long enough
/// for their number (`hold_for`), in both cases once the previous write is done; and at
/// once when the UTC day changes (so clicks count for the day they happened, give or take
/// a drain) and when `shutdown` flips (that last write runs on the caller's runtime), after
/// which it waits for any write still in flight.
pub async fn run_click_shipper(
    queue: Arc<ClickQueue>,
    writer: ClickWriter,
    clock: Arc<dyn Clock>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let ids = Arc::new(BatchIds::new());
    let mut tick = tokio::time::interval(DRAIN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty: Vec<L1Entry> = Vec::new();
    let mut period_day = Day::of_millis(clock.now_millis());
    let mut held_since = tokio::time::Instant::now();
    let mut last_take = tokio::time::Instant::now();
    let mut writing: Option<JoinHandle<()>> = None;
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        } || *shutdown.borrow();
        let today = Day::of_millis(clock.now_millis());
        if dirty.is_empty() {
            held_since = tokio::time::Instant::now();
            period_day = today;
        }
        queue.drain_into(&mut dirty);
        let writer_idle = writing.as_ref().is_none_or(|w| w.is_finished());
        let due = last_take.elapsed() >= every
            && (dirty.len() <= LIGHT_LOAD || held_since.elapsed() >= hold_for(dirty.len()));
        if !dirty.is_empty() && (stopping || today != period_day || (due && writer_idle)) {
            let taken = take(&queue.metrics, period_day, std::mem::take(&mut dirty));
            last_take = tokio::time::Instant::now();
            if stopping {
                // The last counts are written here, at this runtime's priority: the writer's
                // may get no CPU at all on a busy machine. Adds commute, so this write need
                // not wait for one still in flight.
                write(&queue.metrics, writer.sink.as_ref(), &ids, taken).await;
            } else {
                let (previous, sink, ids, metrics) =
                    (writing.take(), writer.sink.clone(), ids.clone(), queue.metrics.clone());
                writing = Some(writer.runtime.spawn(async move {
                    // One write at a time, in order.
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    write(&metrics, sink.as_ref(), &ids, taken).await;
                }));
            }
        }
        if stopping {
            if let Some(in_flight) = writing {
                let _ = in_flight.await;
            }
            return;
        }
    }
}

/// Takes the counts of `entries` (each at most once: an entry is queued again only after
/// its count was taken).
fn take(metrics: &ProxyMetrics, day: Day, entries: Vec<L1Entry>) -> Taken {
    let mut clicks = 0;
    let counts: Vec<(L1Entry, u64)> = entries
        .into_iter()
        .filter_map(|e| {
            let n = e.take_clicks();
            clicks += n;
            (n > 0).then_some((e, n))
        })
        .collect();
    metrics.clicks_queued.inc_by(clicks);
    Taken { day, counts }
}

/// Hands the taken counts to the sink, `SHIP_GROUP` batches at a time, in code order: in
/// SQLite each transaction then touches a few neighbouring B-tree pages instead of a page
/// per row (measured: a million rows in under 2 s instead of about 16).
async fn write(metrics: &ProxyMetrics, sink: &dyn ClickSink, ids: &BatchIds, mut taken: Taken) {
    taken.counts.sort_unstable_by(|(a, _), (b, _)| a.code().cmp(b.code()));
    // One code can have several entries (each fill of a code is a new entry, and the old
    // one may still hold clicks): one add per code, since a DynamoDB transaction refuses
    // two operations on one item.
    taken.counts.dedup_by(|(later, n), (kept, total)| {
        let same = later.code() == kept.code();
        if same {
            *total += *n;
        }
        same
    });
    for group in taken.counts.chunks(MAX_BATCH_ADDS * SHIP_GROUP) {
        let batches: Vec<ClickBatch> = group
            .chunks(MAX_BATCH_ADDS)
            .map(|chunk| ClickBatch {
                id: ids.next(),
                adds: chunk
                    .iter()
                    .map(|(entry, clicks)| ClickAdd {
                        code: entry.code().to_owned(),
                        day: taken.day,
                        clicks: *clicks,
                    })
                    .collect(),
            })
            .collect();
        let clicks: u64 = group.iter().map(|(_, n)| n).sum();
        match sink.ship(&batches).await {
            Ok(()) => metrics.clicks_flushed.inc_by(clicks),
            Err(e) => {
                metrics.click_batches_failed.inc_by(batches.len() as u64);
                tracing::warn!(error = %e, clicks, "click batches not shipped; their clicks are lost");
            }
        }
    }
}

/// A runtime on its own thread at the lowest CPU priority (`SCHED_IDLE`, inherited by the
/// threads its blocking pool starts): click rollup writes run there, so under load they
/// take only CPU time the redirect threads leave idle. The thread lives as long as the
/// process.
pub fn low_priority_runtime(name: &str) -> std::io::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread_name = name.to_owned();
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        lower_this_threads_priority();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(thread_name)
            .max_blocking_threads(2)
            .build();
        match runtime {
            Ok(runtime) => {
                let _ = tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(std::future::pending::<()>());
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    })?;
    rx.recv().map_err(std::io::Error::other)?
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class: it runs only when a core has
/// nothing else to run, and a waking redirect thread preempts it at once (a low nice value
/// alone still lets it finish a time slice first). Threads it creates inherit the class.
/// Failing is harmless: writes then compete as equals.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) = set_thread_priority_and_policy(thread_native_id(), thread_priority::ThreadPriority::Min, idle) {
            tracing::debug!(error = ?e, "could not lower the click writer's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{CacheRecord, Link, ManualClock, RedirectKind};
    use rebound_store::{MemoryStore, RollupStore};
    use std::sync::Mutex;

    fn entry(code: &str) -> L1Entry {
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

    fn metrics() -> ProxyMetrics {
        ProxyMetrics::register(&prometheus::Registry::new()).unwrap()
    }

    /// A sink that keeps what it is given.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<ClickBatch>>);

    #[async_trait]
    impl ClickSink for Recorded {
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), String> {
            self.0.lock().unwrap().extend_from_slice(batches);
            Ok(())
        }
    }

    impl Recorded {
        fn adds(&self) -> Vec<(String, Day, u64)> {
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

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_runtime_and_its_blocking_threads_run_only_when_a_core_is_idle() {
        use thread_priority::unix::{thread_schedule_policy, NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        let runtime = low_priority_runtime("clicks-test").unwrap();
        let (on_runtime, on_blocking) = runtime
            .spawn(async {
                let here = thread_schedule_policy().unwrap();
                let blocking = tokio::task::spawn_blocking(|| thread_schedule_policy().unwrap())
                    .await
                    .unwrap();
                (here, blocking)
            })
            .await
            .unwrap();
        assert_eq!(on_runtime, idle);
        assert_eq!(on_blocking, idle, "the SQLite writes run on the blocking pool");
        assert_ne!(thread_schedule_policy().unwrap(), idle, "the caller keeps its class");
    }

    #[test]
    fn the_hold_grows_with_the_load() {
        assert_eq!(hold_for(10), Duration::ZERO);
        assert_eq!(hold_for(50_000), Duration::from_secs(10));
        assert_eq!(hold_for(5_000_000), MAX_HOLD);
    }

    #[test]
    fn an_entry_is_queued_once_per_take_and_a_full_queue_drops_its_clicks() {
        let metrics = metrics();
        let q = ClickQueue::new(2, metrics.clone());
        let (a, b, c) = (entry("aaa"), entry("bbb"), entry("ccc"));
        for _ in 0..5 {
            q.record(&a);
        }
        q.record(&b);
        // The queue is full: c's clicks are dropped and counted, each time.
        q.record(&c);
        q.record(&c);
        assert_eq!(q.queue.len(), 2, "a once, b once");
        assert_eq!(metrics.clicks_dropped.get(), 2);
        let mut dirty = Vec::new();
        q.drain_into(&mut dirty);
        let taken = take(&metrics, Day(3), dirty);
        let counts: Vec<_> = taken.counts.iter().map(|(e, n)| (e.code(), *n)).collect();
        assert_eq!(counts, vec![("aaa", 5), ("bbb", 1)]);
        assert_eq!(metrics.clicks_queued.get(), 6);
        // Room again: c is queued with only its new click.
        q.record(&c);
        assert_eq!(q.queue.len(), 1);
        assert_eq!(c.take_clicks(), 1);
    }

    /// A shipper running on this runtime, and the switch that stops it.
    struct Shipper {
        stop: tokio::sync::watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    impl Shipper {
        /// Starts a shipper whose writes run on `runtime`.
        fn start(
            q: &Arc<ClickQueue>,
            sink: Arc<dyn ClickSink>,
            runtime: tokio::runtime::Handle,
            clock: &ManualClock,
            every: Duration,
        ) -> Shipper {
            let (stop, rx) = tokio::sync::watch::channel(false);
            let writer = ClickWriter { runtime, sink };
            let task = tokio::spawn(run_click_shipper(q.clone(), writer, Arc::new(clock.clone()), every, rx));
            Shipper { stop, task }
        }

        /// Flips shutdown and waits for the shipper to return.
        async fn stop(self) {
            self.stop.send(true).unwrap();
            self.task.await.unwrap();
        }
    }

    /// Ships what `q` holds at shutdown (the interval never passes).
    async fn run_until_stopped(q: Arc<ClickQueue>, sink: Arc<dyn ClickSink>, clock: ManualClock) {
        let runtime = tokio::runtime::Handle::current();
        Shipper::start(&q, sink, runtime, &clock, Duration::from_secs(3600))
            .stop()
            .await;
    }

    #[tokio::test]
    async fn shipped_clicks_land_in_the_rollups_aggregated() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(10_000, metrics.clone()));
        let entries: Vec<_> = (0..150).map(|i| entry(&format!("c{i:02}"))).collect();
        for i in 0..300 {
            q.record(&entries[i % 150]);
        }
        let store = Arc::new(MemoryStore::new());
        let clock = ManualClock::at(5 * 86_400_000 + 1);
        run_until_stopped(q, Arc::new(StoreClickSink(store.clone())), clock).await;
        assert_eq!(metrics.clicks_flushed.get(), 300);
        assert_eq!(
            store.read_clicks("c07", Day(5), Day(5)).await.unwrap(),
            vec![(Day(5), 2)]
        );
    }

    #[tokio::test]
    async fn the_last_write_at_shutdown_does_not_wait_for_the_writer_runtime() {
        // A writer runtime that never gets to run anything, as an idle-class thread on a
        // machine kept busy.
        let stalled = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let q = Arc::new(ClickQueue::new(100, metrics()));
        q.record(&entry("abc"));
        let sink = Arc::new(Recorded::default());
        let shipper = Shipper::start(
            &q,
            sink.clone(),
            stalled.handle().clone(),
            &ManualClock::at(0),
            Duration::from_secs(3600),
        );
        tokio::time::timeout(Duration::from_secs(5), shipper.stop())
            .await
            .expect("the shipper stopped without the writer runtime");
        assert_eq!(sink.adds(), vec![("abc".to_owned(), Day(0), 1)]);
        tokio::task::spawn_blocking(move || drop(stalled)).await.unwrap();
    }

    #[tokio::test]
    async fn counts_are_written_in_code_order_one_add_per_code() {
        let q = Arc::new(ClickQueue::new(100, metrics()));
        // Two entries for bbb, as after a refill of the code: one add with both counts.
        let (bbb, bbb_again) = (entry("bbb"), entry("bbb"));
        for e in [
            entry("ccc"),
            entry("aaa"),
            bbb.clone(),
            entry("aab"),
            bbb_again.clone(),
            bbb,
        ] {
            q.record(&e);
        }
        q.record(&bbb_again);
        let sink = Arc::new(Recorded::default());
        run_until_stopped(q, sink.clone(), ManualClock::at(0)).await;
        let written: Vec<(String, u64)> = sink
            .0
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| b.adds.iter().map(|a| (a.code.clone(), a.clicks)))
            .collect();
        let want = [("aaa", 1), ("aab", 1), ("bbb", 4), ("ccc", 1)].map(|(c, n)| (c.to_owned(), n));
        assert_eq!(written, want);
    }

    #[tokio::test(start_paused = true)]
    async fn clicks_count_for_the_day_they_happened_across_midnight() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(100, metrics.clone()));
        let clock = ManualClock::at(2 * 86_400_000 - 1_000);
        let sink = Arc::new(Recorded::default());
        let runtime = tokio::runtime::Handle::current();
        // A long flush interval: only the day change may ship before the stop.
        let shipper = Shipper::start(&q, sink.clone(), runtime, &clock, Duration::from_secs(3600));
        let e = entry("abc");
        for _ in 0..3 {
            q.record(&e);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(2_000); // past midnight
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..2 {
            q.record(&e);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        shipper.stop().await;
        assert_eq!(
            sink.adds(),
            vec![("abc".to_owned(), Day(1), 3), ("abc".to_owned(), Day(2), 2)]
        );
        assert_eq!(metrics.clicks_flushed.get(), 5);
    }

    /// A sink whose writes wait for permits.
    struct Gated {
        permits: tokio::sync::Semaphore,
        kept: Recorded,
    }

    #[async_trait]
    impl ClickSink for Gated {
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), String> {
            self.permits.acquire().await.unwrap().forget();
            self.kept.ship(batches).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn light_load_ships_every_interval_and_one_write_at_a_time() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(100, metrics.clone()));
        let clock = ManualClock::at(86_400_000);
        let sink = Arc::new(Gated {
            permits: tokio::sync::Semaphore::new(1),
            kept: Recorded::default(),
        });
        let runtime = tokio::runtime::Handle::current();
        let _shipper = Shipper::start(&q, sink.clone(), runtime, &clock, Duration::from_secs(1));
        let e = entry("abc");
        q.record(&e);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(
            sink.kept.adds(),
            vec![("abc".to_owned(), Day(1), 1)],
            "shipped within the interval"
        );
        // The next write blocks in the sink.
        q.record(&e);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(metrics.clicks_queued.get(), 1, "not taken before the interval");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(metrics.clicks_queued.get(), 2, "taken after the interval");
        // While that write waits, new clicks stay counted on the entry: no second take.
        for _ in 0..3 {
            q.record(&e);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(metrics.clicks_queued.get(), 2, "one write at a time");
        assert_eq!(metrics.clicks_flushed.get(), 1);
        sink.permits.add_permits(2);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(metrics.clicks_flushed.get(), 5);
        assert_eq!(
            sink.kept.adds(),
            vec![
                ("abc".to_owned(), Day(1), 1),
                ("abc".to_owned(), Day(1), 1),
                ("abc".to_owned(), Day(1), 3)
            ],
            "the clicks made during the slow write were merged into one row"
        );
    }
}
