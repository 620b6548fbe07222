//! The shipper: empties the queue as often as it must not to fill up, takes the counts
//! when they are due, and has a writer hand them to a [`ClickSink`] in batches, one write
//! at a time; with nothing counted it sleeps until a click comes; and the sink of the
//! embedded mode, the store's rollups.

use super::low_priority::ThreadsCpu;
use super::pacing::ClickPacing;
use super::queue::ClickQueue;
use super::summary::{link_adds, Summary};
use crate::l1::L1Entry;
use async_trait::async_trait;
use rebound_core::Day;
use rebound_store::{
    BreakdownSink, BreakdownStore, ClickAdd, ClickBatch, ClickSink, DimensionAdd, DimensionBatch, RollupStore,
    StoreError, MAX_BATCH_ADDS,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Batches handed to the sink at once (10 is also SQS's limit per call).
const SHIP_GROUP: usize = 10;
/// Breakdown adds per batch (one store transaction each).
const BREAKDOWN_BATCH_ADDS: usize = 500;
/// The shortest time between two drains of the queue: at high rates of new codes the
/// queue is emptied this often, so a full queue means more distinct codes clicked in this
/// time than it has slots.
const DRAIN_SHORTEST: Duration = Duration::from_millis(10);
/// The longest, while counts are pending: the queue then fills in this time only if the
/// rate of codes new to it jumps a hundredfold from the last drain's (at low rates a drain
/// every 10 ms was most of a redirect's fixed cost, issue 43).
const DRAIN_LONGEST: Duration = Duration::from_millis(100);

/// How long until the next drain: before a quarter of the smaller queue fills at the rate
/// of the last drain (`moved` entries in `since`), before the counts are due (`due_in`),
/// within [`DRAIN_SHORTEST`, `DRAIN_LONGEST`].
fn next_drain_in(capacity: usize, moved: usize, since: Duration, due_in: Duration) -> Duration {
    let quarter_fills = match moved {
        0 => DRAIN_LONGEST,
        n => since.mul_f64((capacity / 4).max(1) as f64 / n as f64),
    };
    quarter_fills.min(due_in).clamp(DRAIN_SHORTEST, DRAIN_LONGEST)
}

/// Embedded mode: adds batches to the store's rollups.
pub struct StoreClickSink(pub Arc<dyn RollupStore>);

#[async_trait]
impl ClickSink for StoreClickSink {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.0.apply_click_batches(batches).await.map(|_| ())
    }
}

/// Embedded mode: adds breakdowns' batches to the store's breakdowns.
pub struct StoreBreakdownSink(pub Arc<dyn BreakdownStore>);

impl StoreBreakdownSink {
    /// The breakdowns of `store` as a sink, when it keeps them.
    pub fn of(store: Arc<dyn rebound_store::Store>) -> Option<Arc<dyn BreakdownSink>> {
        let breakdowns = rebound_store::breakdowns::breakdowns_of(store)?;
        Some(Arc::new(StoreBreakdownSink(breakdowns)))
    }
}

#[async_trait]
impl BreakdownSink for StoreBreakdownSink {
    async fn ship_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError> {
        for batch in batches {
            self.0.apply_dimensions(batch).await?;
        }
        Ok(())
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

/// Where the shipper's writes run, and what it shares with them.
pub struct ClickWriter {
    /// The runtime the writes run on.
    pub runtime: tokio::runtime::Handle,
    /// The CPU time its threads spend, when it is theirs alone: a write's then paces the
    /// next (`click_write_share`) rather than its wall time, which counts waits for the CPU.
    pub cpu: Option<ThreadsCpu>,
    pub sink: Arc<dyn ClickSink>,
    /// Where the breakdowns go: the embedded store's breakdowns, or the click queue; none
    /// when the store keeps none (the redirect path then captures nothing for them).
    pub breakdowns: Option<Arc<dyn BreakdownSink>>,
}

/// Empties the queue every 10 to 100 milliseconds while counts are pending ([`next_drain_in`]),
/// and sleeps until a click is queued when none are; takes the counts and has them written
/// when `pacing` says they are due, once the previous write is done; and at once when the
/// UTC day changes (so clicks count for the day they happened, give or take a drain) and
/// when `shutdown` flips (that last write runs on the caller's runtime), after which it
/// waits for any write still in flight.
pub async fn run_click_shipper(
    queue: Arc<ClickQueue>,
    writer: ClickWriter,
    pacing: ClickPacing,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let ids = Arc::new(BatchIds::new());
    // On the shipper's runtime, not the writes' `SCHED_IDLE` thread: on a busy machine an
    // idle-class thread still gets a scheduler tick now and then, and a redirect thread then
    // waited up to 4 ms for the CPU; it also dropped 4.5 % of the clicks it could not count
    // in time (`benches/results/2026-12-07a-side-breakdowns.md`).
    let counter = tokio::spawn(count_breakdowns(queue.clone()));
    let capacity = queue.queue.capacity().min(queue.bots.capacity());
    let (mut last_take, mut last_drain) = (Instant::now(), Instant::now());
    let mut next_drain = Some(last_drain + DRAIN_SHORTEST);
    let mut writing: Option<JoinHandle<()>> = None;
    // How long the last take's write took, in nanoseconds (its task records it).
    let last_write = Arc::new(AtomicU64::new(0));
    // Since when the breakdowns have held clicks no take handed over, as first seen: their
    // rows' own age does not cover them once the rows were taken without them (their
    // counter lagged the take), and they would otherwise wait for the budget alone.
    let mut breakdowns_since: Option<Instant> = None;
    loop {
        let stopping = tokio::select! {
            _ = sleep_until_some(next_drain) => false,
            _ = queue.wake.notified(), if next_drain.is_none() => false,
            _ = shutdown.changed() => true,
        } || *shutdown.borrow();
        queue.metrics.click_shipper_wakeups.inc();
        let now = Instant::now();
        let today = Day::of_millis(queue.clock.now_millis());
        let writer_idle = writing.as_ref().is_none_or(|w| w.is_finished());
        if !queue.breakdowns.is_empty() {
            queue.count_wake.notify_one();
        }
        let breakdowns = queue.breakdowns_pending();
        breakdowns_since = breakdowns.then(|| breakdowns_since.unwrap_or(now));
        let taken = {
            let mut s = queue.unpersisted.lock();
            let moved = queue.drain_into(&mut s);
            let held = s
                .oldest
                .into_iter()
                .chain(breakdowns_since)
                .map(|o| now - o)
                .max()
                .unwrap_or(Duration::ZERO);
            let wrote = Duration::from_nanos(last_write.load(Ordering::Relaxed));
            let due_in = pacing.due_in(s.dirty_codes(), now - last_take, wrote, held);
            let due = writer_idle && due_in.is_zero();
            let taken = if (!s.is_clean() || breakdowns) && (stopping || today != s.day || due) {
                last_take = now;
                breakdowns_since = None;
                s.take(&queue.metrics, now, breakdowns)
            } else {
                None
            };
            s.report(&queue.metrics, now);
            // Nothing pending: asleep until a click is queued (decided under the lock, which
            // a stats read that drains the queue takes too, so that read wakes it).
            next_drain = match s.is_clean() && queue.sleep_if_idle() {
                true => None,
                false => Some(now + next_drain_in(capacity, moved, now - last_drain, due_in)),
            };
            last_drain = now;
            taken
        };
        if let Some(take) = taken {
            if stopping {
                // The last counts are written here, at this runtime's priority: the writer's
                // may get no CPU at all on a busy machine. Adds commute, so this write need
                // not wait for one still in flight.
                write(
                    &queue,
                    writer.sink.as_ref(),
                    writer.breakdowns.as_deref(),
                    &ids,
                    take,
                    true,
                )
                .await;
            } else {
                let (previous, queue, sink, ids) = (writing.take(), queue.clone(), writer.sink.clone(), ids.clone());
                let (breakdowns, cpu) = (writer.breakdowns.clone(), writer.cpu.clone());
                let took = last_write.clone();
                writing = Some(writer.runtime.spawn(async move {
                    // One write at a time, in order.
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    let started = (Instant::now(), cpu.as_ref().and_then(ThreadsCpu::spent));
                    write(&queue, sink.as_ref(), breakdowns.as_deref(), &ids, take, false).await;
                    let spent = match (started.1, cpu.as_ref().and_then(ThreadsCpu::spent)) {
                        (Some(before), Some(after)) => after.saturating_sub(before),
                        _ => started.0.elapsed(),
                    };
                    took.store(spent.as_nanos() as u64, Ordering::Relaxed);
                }));
            }
        }
        if stopping {
            counter.abort();
            if let Some(in_flight) = writing {
                let _ = in_flight.await;
            }
            queue.unpersisted.lock().report(&queue.metrics, Instant::now());
            return;
        }
    }
}

/// The breakdowns' counter: counts their queue's clicks into the tally each time the
/// shipper finds some there (it drains every 10 to 100 ms while clicks come).
async fn count_breakdowns(queue: Arc<ClickQueue>) {
    loop {
        queue.count_wake.notified().await;
        queue.count_breakdowns().await;
    }
}

/// Sleeps until `deadline`; never ends without one.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes take `id`: its rows to the sink ([`write_rows`]), then the breakdowns' adds
/// counted so far (with `last`, the clicks still queued for them counted first); where
/// breakdowns are kept, then the summaries of the domains it clicked ([`write_summary`]).
/// The adds are made a group at a time as they are written, never all held at once.
async fn write(
    queue: &ClickQueue,
    sink: &dyn ClickSink,
    breakdowns: Option<&dyn BreakdownSink>,
    ids: &BatchIds,
    id: u64,
    last: bool,
) {
    // First, so that the tally's table is gone before the links' handles are gathered (at a
    // take of 1,000,000 codes, 34 MiB of table while its 16 MiB of sorted slots are made).
    let mut adds = queue.take_breakdowns(last);
    // Where breakdowns are kept: the domains' totals, and the links with people's clicks
    // (a handle each, for their codes once the rows are written and the take is gone).
    let summary = breakdowns.map(|_| {
        let s = queue.unpersisted.lock();
        match s.takes.iter().find(|t| t.id == id) {
            Some(t) => {
                let summary = Summary::new(t.day, t.rows.iter().map(|r| (r.entry.code(), r.clicks)));
                let mut links: Vec<(L1Entry, u64)> = Vec::with_capacity(t.rows.len());
                links.extend(
                    t.rows
                        .iter()
                        .filter(|r| r.clicks.clicks > 0)
                        .map(|r| (r.entry.clone(), r.clicks.clicks)),
                );
                (summary, links, t.day)
            }
            None => (Summary::default(), Vec::new(), Day(0)),
        }
    });
    write_rows(queue, sink, ids, id).await;
    let Some((mut summary, links, day)) = summary else {
        if adds.has_adds() {
            // No sink: the clicks are counted as the breakdowns' drops.
            write_breakdowns(queue, None, ids, Vec::new, adds.clicks()).await;
        }
        return;
    };
    if adds.has_adds() {
        let clicks = adds.clicks();
        let next = || {
            let group = adds.next_group(BREAKDOWN_BATCH_ADDS * SHIP_GROUP);
            summary.observe(&group);
            group
        };
        write_breakdowns(queue, breakdowns, ids, next, clicks).await;
    }
    write_summary(queue, sink, breakdowns, ids, summary, day, links).await;
}

/// Ships a take's summary: the domains' daily totals to the sink as one more batch, their
/// links (`links`, the take's of `day` with people's clicks), countries and referrers to
/// the breakdowns' sink. A failure is counted and logged as the rows' and breakdowns' are;
/// the summary then misses those clicks.
async fn write_summary(
    queue: &ClickQueue,
    sink: &dyn ClickSink,
    breakdowns: Option<&dyn BreakdownSink>,
    ids: &BatchIds,
    summary: Summary,
    day: Day,
    links: Vec<(L1Entry, u64)>,
) {
    for chunk in summary.totals().chunks(MAX_BATCH_ADDS) {
        let batch = ClickBatch {
            id: ids.next(),
            adds: chunk.to_vec(),
        };
        if let Err(e) = sink.ship(std::slice::from_ref(&batch)).await {
            queue.metrics.click_batches_failed.inc();
            tracing::warn!(error = %rebound_core::Causes(&e), "a summary batch was not shipped; the domains' daily totals miss its clicks");
        }
    }
    let mut groups = links.chunks(BREAKDOWN_BATCH_ADDS * SHIP_GROUP);
    let next = || {
        groups
            .next()
            .map_or_else(Vec::new, |g| link_adds(day, g.iter().map(|(e, n)| (e.code(), *n))))
    };
    write_breakdowns(queue, breakdowns, ids, next, 0).await;
    let mut summed = summary.into_summed().into_iter();
    let next = || summed.by_ref().take(BREAKDOWN_BATCH_ADDS * SHIP_GROUP).collect();
    write_breakdowns(queue, breakdowns, ids, next, 0).await;
}

/// Hands the breakdowns' adds that `next` makes a group at a time (counting `clicks`
/// people's clicks) to their sink, until it makes none, in batches of
/// [`BREAKDOWN_BATCH_ADDS`], a group's batches at once; a group that fails is counted and
/// its adds are lost; with no sink, the clicks are counted as the breakdowns' drops.
async fn write_breakdowns(
    queue: &ClickQueue,
    breakdowns: Option<&dyn BreakdownSink>,
    ids: &BatchIds,
    mut next: impl FnMut() -> Vec<DimensionAdd> + Send,
    clicks: u64,
) {
    let Some(sink) = breakdowns else {
        queue.metrics.breakdown_clicks_dropped.inc_by(clicks);
        return;
    };
    loop {
        let group = next();
        if group.is_empty() {
            return;
        }
        let len = group.len();
        let mut adds = group.into_iter().peekable();
        let mut batches = Vec::with_capacity(len.div_ceil(BREAKDOWN_BATCH_ADDS));
        while adds.peek().is_some() {
            batches.push(DimensionBatch {
                id: ids.next(),
                adds: adds.by_ref().take(BREAKDOWN_BATCH_ADDS).collect(),
            });
        }
        if let Err(e) = sink.ship_breakdowns(&batches).await {
            queue.metrics.breakdown_batches_failed.inc_by(batches.len() as u64);
            tracing::warn!(error = %rebound_core::Causes(&e), adds = len, "breakdown batches not written; the breakdowns miss their clicks");
        }
    }
}

/// Hands the rows of take `id` to the sink, `SHIP_GROUP` batches at a time, marking each
/// group as being written, then written, so that stats reads stay exact.
async fn write_rows(queue: &ClickQueue, sink: &dyn ClickSink, ids: &BatchIds, id: u64) {
    let (u, metrics) = (&queue.unpersisted, &queue.metrics);
    loop {
        let (batches, rows, clicks) = {
            let mut s = u.lock();
            let Some(t) = s.takes.iter_mut().find(|t| t.id == id) else {
                return;
            };
            let group = t.done..(t.done + MAX_BATCH_ADDS * SHIP_GROUP).min(t.rows.len());
            if group.is_empty() {
                // A take of breakdowns alone: no row to ship.
                s.takes.retain(|t| t.id != id);
                s.report(metrics, Instant::now());
                drop(s);
                u.written.notify_waiters();
                return;
            }
            t.writing = group.end;
            let rows = &t.rows[group];
            let batches: Vec<ClickBatch> = rows
                .chunks(MAX_BATCH_ADDS)
                .map(|chunk| ClickBatch {
                    id: ids.next(),
                    adds: chunk
                        .iter()
                        .map(|row| ClickAdd {
                            code: row.entry.code().to_owned(),
                            day: t.day,
                            clicks: row.clicks.clicks,
                            bot_clicks: row.clicks.bot_clicks,
                        })
                        .collect(),
                })
                .collect();
            let clicks = rows.iter().map(|r| r.clicks.clicks + r.clicks.bot_clicks).sum::<u64>();
            (batches, rows.len(), clicks)
        };
        let started = Instant::now();
        let shipped = sink.ship(&batches).await;
        metrics.click_write_seconds.inc_by(started.elapsed().as_secs_f64());
        metrics.click_rows_written.inc_by(rows as u64);
        metrics.click_batches_written.inc_by(batches.len() as u64);
        match shipped {
            Ok(()) => metrics.clicks_flushed.inc_by(clicks),
            Err(e) => {
                metrics.click_batches_failed.inc_by(batches.len() as u64);
                tracing::warn!(error = %rebound_core::Causes(&e), clicks, "click batches not shipped; their clicks are lost");
            }
        }
        let finished = {
            let mut s = u.lock();
            let finished = match s.takes.iter_mut().find(|t| t.id == id) {
                Some(t) => {
                    t.done = t.writing;
                    t.done == t.rows.len()
                }
                None => true,
            };
            if finished {
                s.takes.retain(|t| t.id != id);
                // The shipper may be asleep: the gauges say what is left now.
                s.report(metrics, Instant::now());
            }
            finished
        };
        u.written.notify_waiters();
        if finished {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::{clock_at, entry, from_de, metrics, pacing, Recorded, Shipper};
    use crate::visitor::Visitor;
    use rebound_core::ManualClock;
    use rebound_store::MemoryStore;
    use std::sync::Mutex;

    /// `code`'s clicks by country on `day` in `store`, as (value, clicks).
    async fn countries_of(store: &MemoryStore, code: &str, day: Day) -> Vec<(String, u64)> {
        use rebound_store::{BreakdownStore, Dimension};
        let values = store.read_breakdown(code, Dimension::Country, day, day).await.unwrap();
        values.into_iter().map(|v| (v.value, v.clicks)).collect()
    }

    /// Ships what `q` holds at shutdown (the interval never passes).
    async fn run_until_stopped(q: Arc<ClickQueue>, sink: Arc<dyn ClickSink>) {
        let runtime = tokio::runtime::Handle::current();
        Shipper::start(&q, sink, runtime, Duration::from_secs(3600))
            .stop()
            .await;
    }

    #[tokio::test]
    async fn shipped_clicks_land_in_the_rollups_aggregated() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(10_000, metrics.clone(), clock_at(5 * 86_400_000 + 1)));
        let entries: Vec<_> = (0..150).map(|i| entry(&format!("c{i:02}"))).collect();
        for i in 0..300 {
            q.record(&entries[i % 150], Visitor::Person);
        }
        let store = Arc::new(MemoryStore::new());
        run_until_stopped(q, Arc::new(StoreClickSink(store.clone()))).await;
        assert_eq!(metrics.clicks_flushed.get(), 300);
        assert_eq!(
            store.read_clicks("c07", Day(5), Day(5)).await.unwrap(),
            vec![(Day(5), rebound_store::Clicks::people(2))]
        );
    }

    #[tokio::test]
    async fn breakdowns_are_written_after_the_rows_and_a_full_queue_drops_only_them() {
        use rebound_core::dimensions::{cdn_country, AgentFamilies, DeviceClass, Dimensions, Family, Referrer};
        use rebound_store::{BreakdownStore, Dimension};
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(16, metrics.clone(), clock_at(5 * 86_400_000 + 1)));
        let (a, b) = (entry("aaa"), entry("bbb"));
        let agent = AgentFamilies {
            device: DeviceClass::Mobile,
            browser: Family::truncated("Safari"),
            os: Family::truncated("iOS"),
        };
        let dims = |country: &[u8; 2], referrer: Referrer| Dimensions {
            country: Some(cdn_country(country)),
            referrer: Some(referrer),
            agent: Some(agent),
            campaign: None,
            rule: None,
        };
        let news = Referrer::Host(rebound_core::dimensions::Label::truncated("news.example"));
        q.record_with(&a, dims(b"DE", news));
        q.record_with(&a, dims(b"DE", Referrer::Direct));
        q.record_with(&a, dims(b"JP", Referrer::Direct));
        q.record_with(&b, dims(b"FR", Referrer::Direct));
        // The breakdowns' queue (a quarter of 16) is full: the fifth click counts in the
        // totals only.
        q.record_with(&b, dims(b"FR", Referrer::Direct));
        assert_eq!(metrics.breakdown_clicks_dropped.get(), 1);
        let store = Arc::new(MemoryStore::new());
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: None,
            sink: Arc::new(StoreClickSink(store.clone())),
            breakdowns: StoreBreakdownSink::of(store.clone()),
        };
        Shipper::writing(&q, writer, pacing(3_600_000, 1_000_000, 3_600_000))
            .stop()
            .await;
        assert_eq!(
            store.read_clicks("bbb", Day(5), Day(5)).await.unwrap(),
            vec![(Day(5), rebound_store::Clicks::people(2))],
            "the totals count every click"
        );
        let read = |code: &'static str, d: Dimension| {
            let store = store.clone();
            async move {
                store
                    .read_breakdown(code, d, Day(5), Day(5))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|v| (v.value, v.clicks))
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            read("aaa", Dimension::Country).await,
            vec![("DE".to_owned(), 2), ("JP".to_owned(), 1)]
        );
        assert_eq!(
            read("aaa", Dimension::Referrer).await,
            vec![("direct".to_owned(), 2), ("news.example".to_owned(), 1)]
        );
        assert_eq!(read("aaa", Dimension::Os).await, vec![("iOS".to_owned(), 3)]);
        assert_eq!(read("bbb", Dimension::Device).await, vec![("mobile".to_owned(), 1)]);
    }

    /// A breakdowns' sink that keeps each call's batches, and ships them on to a store.
    struct Calls(Mutex<Vec<Vec<DimensionBatch>>>, StoreBreakdownSink);

    #[async_trait]
    impl BreakdownSink for Calls {
        async fn ship_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError> {
            self.0.lock().unwrap().push(batches.to_vec());
            self.1.ship_breakdowns(batches).await
        }
    }

    #[tokio::test]
    async fn a_takes_breakdowns_are_written_a_group_of_codes_at_a_time() {
        use rebound_core::dimensions::{cdn_country, Dimensions, Referrer};
        use rebound_store::{BreakdownStore, Dimension};
        // 3,000 codes, each with a country and a referrer of its own and a second country
        // on every third: 7,000 adds of the links, more than one call's ten batches of 500.
        let codes = 3_000;
        let q = Arc::new(ClickQueue::new(16_384, metrics(), clock_at(5 * 86_400_000 + 1)));
        let countries = [b"DE", b"FR"];
        let entries: Vec<_> = (0..codes).map(|i| entry(&format!("c{i:05}"))).collect();
        for (i, e) in entries.iter().enumerate() {
            for country in &countries[..1 + usize::from(i % 3 == 0)] {
                let dims = Dimensions {
                    country: Some(cdn_country(*country)),
                    referrer: Some(Referrer::Host(rebound_core::dimensions::Label::truncated(&format!(
                        "r{i}.example"
                    )))),
                    ..Dimensions::default()
                };
                q.record_with(e, dims);
            }
        }
        let store = Arc::new(MemoryStore::new());
        let calls = Arc::new(Calls(Mutex::default(), StoreBreakdownSink(store.clone())));
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: None,
            sink: Arc::new(StoreClickSink(store.clone())),
            breakdowns: Some(calls.clone()),
        };
        Shipper::writing(&q, writer, pacing(3_600_000, 1_000_000, 3_600_000))
            .stop()
            .await;
        let calls = calls.0.lock().unwrap().clone();
        let links: Vec<Vec<&DimensionAdd>> = calls
            .iter()
            .map(|call| call.iter().flat_map(|b| &b.adds).filter(|a| a.code != "*").collect())
            .filter(|adds: &Vec<_>| !adds.is_empty())
            .collect();
        assert_eq!(links.iter().map(Vec::len).sum::<usize>(), 7_000);
        assert!(links.len() >= 2, "{} calls", links.len());
        for (n, call) in calls.iter().enumerate() {
            assert!(call.len() <= SHIP_GROUP, "call {n}: {} batches", call.len());
            assert!(call.iter().all(|b| b.adds.len() <= BREAKDOWN_BATCH_ADDS));
        }
        // A code's adds are never split between two calls.
        for pair in links.windows(2) {
            let (last, first) = (pair[0].last().unwrap(), pair[1][0]);
            assert_ne!(last.code, first.code);
        }
        let day = Day(5);
        let read = |code: String, d: Dimension| {
            let store = store.clone();
            async move {
                let values = store.read_breakdown(&code, d, day, day).await.unwrap();
                values.into_iter().map(|v| (v.value, v.clicks)).collect::<Vec<_>>()
            }
        };
        assert_eq!(
            read("c00003".into(), Dimension::Country).await,
            vec![("DE".to_owned(), 1), ("FR".to_owned(), 1)]
        );
        assert_eq!(
            read("c02999".into(), Dimension::Referrer).await,
            vec![("r2999.example".to_owned(), 1)]
        );
        // The default domain's summary: every link (its first 1,000 by code, the rest as
        // `(other)`), every country.
        let links = read("*".into(), Dimension::Link).await;
        assert_eq!(links.len(), rebound_store::breakdowns::LINKS_PER_SCOPE_DAY + 1);
        assert_eq!(links.iter().map(|l| l.1).sum::<u64>(), 4_000);
        assert_eq!(
            read("*".into(), Dimension::Country).await,
            vec![("DE".to_owned(), 3_000), ("FR".to_owned(), 1_000)]
        );
    }

    #[tokio::test]
    async fn breakdowns_counted_with_no_row_pending_are_written_by_a_take_of_their_own() {
        let q = Arc::new(ClickQueue::new(100, metrics(), clock_at(5 * 86_400_000 + 1)));
        let store = Arc::new(MemoryStore::new());
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: None,
            sink: Arc::new(StoreClickSink(store.clone())),
            breakdowns: StoreBreakdownSink::of(store.clone()),
        };
        let shipper = Shipper::writing(&q, writer, pacing(20, 1_000_000, 3_600_000));
        // Breakdowns' clicks whose rows are not pending (as when their counter lagged the
        // take that wrote the rows): queued on the breakdowns' queue alone.
        for _ in 0..2 {
            assert!(q.breakdowns.push((entry("aaa"), from_de())).is_ok());
        }
        let countries = || countries_of(&store, "aaa", Day(5));
        let waited = async {
            while countries().await.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), waited)
            .await
            .expect("the breakdowns written once counted");
        assert_eq!(countries().await, vec![("DE".to_owned(), 2)]);
        assert_eq!(
            store.read_clicks("aaa", Day(5), Day(5)).await.unwrap(),
            vec![],
            "no row"
        );
        shipper.stop().await;
    }

    #[tokio::test]
    async fn the_last_write_at_shutdown_does_not_wait_for_the_writer_runtime() {
        // A writer runtime that never gets to run anything, as an idle-class thread on a
        // machine kept busy.
        let stalled = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let q = Arc::new(ClickQueue::new(100, metrics(), clock_at(0)));
        q.record(&entry("abc"), Visitor::Person);
        let sink = Arc::new(Recorded::default());
        let shipper = Shipper::start(&q, sink.clone(), stalled.handle().clone(), Duration::from_secs(3600));
        tokio::time::timeout(Duration::from_secs(5), shipper.stop())
            .await
            .expect("the shipper stopped without the writer runtime");
        assert_eq!(sink.adds(), vec![("abc".to_owned(), Day(0), 1)]);
        tokio::task::spawn_blocking(move || drop(stalled)).await.unwrap();
    }

    #[tokio::test]
    async fn counts_are_written_in_code_order_one_add_per_code() {
        let q = Arc::new(ClickQueue::new(100, metrics(), clock_at(0)));
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
            q.record(&e, Visitor::Person);
        }
        q.record(&bbb_again, Visitor::Person);
        let sink = Arc::new(Recorded::default());
        run_until_stopped(q, sink.clone()).await;
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
        let clock = ManualClock::at(2 * 86_400_000 - 1_000);
        let q = Arc::new(ClickQueue::new(100, metrics.clone(), Arc::new(clock.clone())));
        let sink = Arc::new(Recorded::default());
        let runtime = tokio::runtime::Handle::current();
        // A long flush interval: only the day change may ship before the stop.
        let shipper = Shipper::start(&q, sink.clone(), runtime, Duration::from_secs(3600));
        let e = entry("abc");
        for _ in 0..3 {
            q.record(&e, Visitor::Person);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(2_000); // past midnight
        tokio::time::sleep(Duration::from_millis(50)).await;
        for _ in 0..2 {
            q.record(&e, Visitor::Person);
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
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
            self.permits.acquire().await.unwrap().forget();
            self.kept.ship(batches).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn light_load_ships_every_interval_and_one_write_at_a_time() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(100, metrics.clone(), clock_at(86_400_000)));
        let sink = Arc::new(Gated {
            permits: tokio::sync::Semaphore::new(1),
            kept: Recorded::default(),
        });
        let runtime = tokio::runtime::Handle::current();
        let _shipper = Shipper::start(&q, sink.clone(), runtime, Duration::from_secs(1));
        let e = entry("abc");
        q.record(&e, Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(
            sink.kept.adds(),
            vec![("abc".to_owned(), Day(1), 1)],
            "shipped within the interval"
        );
        // The next write blocks in the sink.
        q.record(&e, Visitor::Person);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(metrics.clicks_queued.get(), 1, "not taken before the interval");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(metrics.clicks_queued.get(), 2, "taken after the interval");
        // While that write waits, new clicks stay counted on the entry: no second take.
        for _ in 0..3 {
            q.record(&e, Visitor::Person);
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

    /// A sink whose every ship takes `took` (of paused time).
    struct Slow {
        took: Duration,
        kept: Recorded,
    }

    #[async_trait]
    impl ClickSink for Slow {
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
            tokio::time::sleep(self.took).await;
            self.kept.ship(batches).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn slow_writes_stretch_the_window_to_keep_writing_within_its_share_of_the_time() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(1_000, metrics.clone(), clock_at(86_400_000)));
        let sink = Arc::new(Slow {
            took: Duration::from_millis(500),
            kept: Recorded::default(),
        });
        let runtime = tokio::runtime::Handle::current();
        // Every second by the interval and the rows, but a 500 ms write at 10 % of the
        // time lets the next one start only 5 s after it began.
        let pacing = ClickPacing {
            write_share: 0.1,
            ..pacing(1_000, 1_000_000, 60_000)
        };
        let shipper = Shipper::paced(&q, sink.clone(), runtime, pacing);
        let e = entry("abc");
        q.record(&e, Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(sink.kept.adds().len(), 1, "the first write, after the interval");
        let first = Instant::now() - Duration::from_millis(600); // when it began, about
        for _ in 0..4 {
            q.record(&e, Visitor::Person);
        }
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert_eq!(sink.kept.adds().len(), 1, "the interval passed, the time budget not");
        assert_eq!(metrics.click_pending_codes.get(), 1);
        // Due 5 s after the first began, written 500 ms later.
        let until = first + Duration::from_millis(5_600);
        tokio::time::sleep_until(until).await;
        assert_eq!(
            sink.kept.adds(),
            vec![("abc".to_owned(), Day(1), 1), ("abc".to_owned(), Day(1), 4)],
            "the clicks that waited were merged into one row"
        );
        // Writing took 1 s of about 6.1 s: within 10 % plus the write in progress.
        assert!(metrics.click_write_seconds.get() <= 1.0 + 1e-9);
        shipper.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn breakdowns_left_out_of_a_take_wait_no_longer_than_the_longest_hold() {
        let q = Arc::new(ClickQueue::new(1_000, metrics(), clock_at(86_400_000)));
        let store = Arc::new(MemoryStore::new());
        // A 500 ms write at 1 % of the time: the next one is due 50 s after it began by the
        // time budget, and the longest hold is 2 s.
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: None,
            sink: Arc::new(Slow {
                took: Duration::from_millis(500),
                kept: Recorded::default(),
            }),
            breakdowns: StoreBreakdownSink::of(store.clone()),
        };
        let pacing = ClickPacing {
            write_share: 0.01,
            ..pacing(1_000, 1_000_000, 2_000)
        };
        let shipper = Shipper::writing(&q, writer, pacing);
        let e = entry("abc");
        q.record_with(&e, from_de());
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let countries = || countries_of(&store, "abc", Day(1));
        assert_eq!(countries().await, vec![("DE".to_owned(), 1)], "the first write's");
        // A click its counter counted after the take that wrote its row (its row is gone:
        // on the breakdowns' queue alone), as when the counter lags the take.
        assert!(q.breakdowns.push((e.clone(), from_de())).is_ok());
        q.wake_if_idle();
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        assert_eq!(countries().await, vec![("DE".to_owned(), 1)], "held");
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            countries().await,
            vec![("DE".to_owned(), 2)],
            "written within the longest hold, 48 s before the time budget"
        );
        shipper.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waited_without_working_does_not_hold_the_next_off() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(1_000, metrics.clone(), clock_at(86_400_000)));
        // 500 ms a write, asleep (as a write waiting for the CPU is): at 1 % of the time
        // by its wall time the next would wait 50 s; by its threads' CPU time, the interval.
        let sink = Arc::new(Slow {
            took: Duration::from_millis(500),
            kept: Recorded::default(),
        });
        let cpu = ThreadsCpu::default();
        cpu.enter();
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: Some(cpu),
            sink: sink.clone(),
            breakdowns: None,
        };
        let pacing = ClickPacing {
            write_share: 0.01,
            ..pacing(1_000, 1_000_000, 60_000)
        };
        let shipper = Shipper::writing(&q, writer, pacing);
        let e = entry("abc");
        q.record(&e, Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(sink.kept.adds().len(), 1, "the first write, after the interval");
        q.record(&e, Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(sink.kept.adds().len(), 2, "the next, an interval after the first began");
        shipper.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn with_nothing_counted_the_shipper_sleeps_until_a_click_is_queued() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(1_000, metrics.clone(), clock_at(86_400_000)));
        let sink = Arc::new(Recorded::default());
        let shipper = Shipper::paced(
            &q,
            sink.clone(),
            tokio::runtime::Handle::current(),
            pacing(1_000, 1_000, 60_000),
        );
        // A minute with no click: it woke once at start, found nothing, and slept.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let idle = metrics.click_shipper_wakeups.get();
        assert!(idle <= 2, "{idle} wake-ups in an idle minute");
        // A click wakes it at once, and is written at once: the last take was long ago.
        q.record(&entry("abc"), Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(sink.adds(), vec![("abc".to_owned(), Day(1), 1)]);
        assert_eq!(metrics.click_shipper_wakeups.get(), idle + 1);
        // The next one waits until due (1 s after that take), the queue drained at most every
        // 100 ms meanwhile; then it sleeps again.
        q.record(&entry("abd"), Visitor::Person);
        tokio::time::sleep(Duration::from_millis(1_150)).await;
        assert_eq!(sink.adds().len(), 2);
        let busy = metrics.click_shipper_wakeups.get() - idle;
        assert!((10..=14).contains(&busy), "{busy} wake-ups for a click held 1 s");
        assert_eq!(metrics.click_pending_codes.get(), 0);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(metrics.click_shipper_wakeups.get() - idle - busy <= 1);
        shipper.stop().await;
    }

    #[test]
    fn the_queue_is_drained_before_a_quarter_of_it_fills_and_before_the_counts_are_due() {
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        // (capacity, entries moved by the last drain, since it, counts due in, next drain in)
        let table = [
            (65_536, 0, ms(100), s(1), ms(100)),      // nothing came: the longest
            (65_536, 300, ms(100), s(1), ms(100)),    // 3,000 new codes/s: a quarter in 5 s
            (65_536, 16_384, ms(100), s(1), ms(100)), // a quarter in 100 ms
            (65_536, 65_536, ms(100), s(1), ms(25)),  // 655,360/s: a quarter in 25 ms
            (65_536, 65_536, ms(10), s(1), ms(10)),   // never under 10 ms
            (65_536, 10, ms(100), ms(40), ms(40)),    // the counts are due first
            (65_536, 10, ms(100), Duration::ZERO, ms(10)),
            (4, 10, ms(100), s(1), ms(10)),
        ];
        for (capacity, moved, since, due_in, want) in table {
            assert_eq!(
                next_drain_in(capacity, moved, since, due_in),
                want,
                "{capacity} {moved} {since:?} {due_in:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rows_wait_for_the_row_budget_but_never_longer_than_the_longest_hold() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(1_000, metrics.clone(), clock_at(86_400_000)));
        let entries: Vec<_> = (0..50).map(|i| entry(&format!("c{i:02}"))).collect();
        let sink = Arc::new(Recorded::default());
        let runtime = tokio::runtime::Handle::current();
        // 50 rows at 10 a second: due 5 s after the last take.
        let shipper = Shipper::paced(&q, sink.clone(), runtime.clone(), pacing(1_000, 10, 60_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        entries.iter().for_each(|e| q.record(e, Visitor::Person));
        tokio::time::sleep(Duration::from_millis(4_800)).await;
        assert!(sink.adds().is_empty(), "50 rows at 10 per second wait 5 s");
        assert_eq!(metrics.click_pending_codes.get(), 50);
        assert!(metrics.click_persist_lag.get() >= 4.5);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(sink.adds().len(), 50);
        assert_eq!(metrics.click_rows_written.get(), 50);
        assert_eq!(metrics.click_pending_codes.get(), 0);
        assert_eq!(metrics.click_persist_lag.get(), 0.0);
        shipper.stop().await;

        // The same with a 2 s longest hold: written after 2 s although the budget says 5.
        let sink = Arc::new(Recorded::default());
        let shipper = Shipper::paced(&q, sink.clone(), runtime, pacing(1_000, 10, 2_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        entries.iter().for_each(|e| q.record(e, Visitor::Person));
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        assert!(sink.adds().is_empty());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(sink.adds().len(), 50, "no click waits longer than the longest hold");
        shipper.stop().await;
    }
}
