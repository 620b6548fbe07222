//! Clicks leave the request path as a count on the L1 entry that answered. The first click
//! since the counts were last taken pushes the entry onto a bounded lock-free queue (a
//! full queue drops that entry's clicks and counts them); later clicks of the same code
//! only add to its count, so the request path never waits, allocates or hashes for a
//! click. The shipper empties the queue every few milliseconds into [`Unpersisted`], takes
//! the counts when they are due (one rollup row per code and day) and a writer hands them
//! to a [`ClickSink`] in batches, on the runtime the caller chose (the all-in-one gives it
//! a low-priority thread, so rollup writes only use CPU the redirects leave idle).
//!
//! The cost bounds ([`ClickPacing`]): rows are written at most `rows_per_sec` on average,
//! and writing takes at most `write_share` of the time (a write that took 50 ms, at 1 %,
//! lets the next one start 5 s after it began) — counts wait, and merge with later clicks
//! of the same codes, until both budgets allow the next write — but no click waits longer
//! than `max_hold` (what a SIGKILL can lose), and a new UTC day or a shutdown writes at
//! once. The time share makes the cost follow the work, not the clock: a machine slowed
//! down (or one whose writes are slow) writes less often, instead of spending more of its
//! time on clicks. In distributed mode
//! a row is one add in an SQS message of up to 99, so messages per second follow the same
//! bound. The stats stay fresh anyway: in the all-in-one they add what is pending here
//! ([`RollupsWithPending`]), exactly — a read never counts a click twice or misses one that
//! was taken off the queue.

use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use async_trait::async_trait;
use crossbeam_queue::ArrayQueue;
use rebound_core::{Clock, Day};
pub use rebound_store::ClickSink;
use rebound_store::{BatchOutcome, ClickAdd, ClickBatch, RollupStore, StoreError, MAX_BATCH_ADDS};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Batches handed to the sink at once (10 is also SQS's limit per call).
const SHIP_GROUP: usize = 10;
/// How often the shipper empties the queue: short enough that a full queue means more
/// distinct codes clicked in this time than it has slots.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// The bounded queue between the request path and the shipper (entries with clicks counted
/// since the last take), and what the shipper has taken off it and not yet written.
pub struct ClickQueue {
    queue: ArrayQueue<L1Entry>,
    unpersisted: Unpersisted,
    metrics: ProxyMetrics,
    /// Tells the UTC day a click counts for.
    clock: Arc<dyn Clock>,
}

impl ClickQueue {
    pub fn new(capacity: usize, metrics: ProxyMetrics, clock: Arc<dyn Clock>) -> ClickQueue {
        ClickQueue {
            queue: ArrayQueue::new(capacity),
            unpersisted: Unpersisted::default(),
            metrics,
            clock,
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

    /// Moves the queued entries into the pending set; while it is empty, the pending set
    /// is for today.
    fn drain_into(&self, pending: &mut Pending) {
        if pending.dirty.is_empty() {
            pending.day = Day::of_millis(self.clock.now_millis());
        }
        while let Some(entry) = self.queue.pop() {
            pending.add_dirty(&self.unpersisted.hasher, entry);
        }
        if !pending.dirty.is_empty() && pending.oldest.is_none() {
            pending.oldest = Some(Instant::now());
        }
    }

    /// The daily clicks of `code` from `from` through `to` in `rollups`, plus those counted
    /// here and not yet written. Exact: if a write of this code's row starts while the
    /// rollups are read, the read is done again (and a read waits while that row is being
    /// written, since it cannot tell whether the write is visible yet).
    pub async fn read_with_pending(
        &self,
        rollups: &dyn RollupStore,
        code: &str,
        from: Day,
        to: Day,
    ) -> Result<Vec<(Day, u64)>, StoreError> {
        let u = &self.unpersisted;
        let hash = u.hasher.hash_one(code);
        loop {
            let written = u.written.notified();
            tokio::pin!(written);
            let snapshot = {
                let mut s = u.lock();
                // What the request path queued since the shipper's last drain counts too.
                self.drain_into(&mut s);
                if s.is_being_written(code) {
                    written.as_mut().enable();
                    None
                } else {
                    Some(s.snapshot(code, hash, from, to))
                }
            };
            let Some(snapshot) = snapshot else {
                written.await;
                continue;
            };
            let stored = rollups.read_clicks(code, from, to).await?;
            if u.lock().untouched_since(&snapshot) {
                return Ok(add_days(stored, &snapshot.counts));
            }
        }
    }
}

/// Adds two lists of daily counts, in day order, without zeros.
fn add_days(mut a: Vec<(Day, u64)>, b: &[(Day, u64)]) -> Vec<(Day, u64)> {
    for &(day, n) in b {
        match a.iter_mut().find(|(d, _)| *d == day) {
            Some((_, total)) => *total += n,
            None => a.push((day, n)),
        }
    }
    a.retain(|(_, n)| *n > 0);
    a.sort_unstable_by_key(|(d, _)| *d);
    a
}

/// The counts taken off the queue and not yet written: the dirty entries (counts still
/// live on them) and the takes being written. Behind one lock, held briefly: the shipper
/// drains into it every few milliseconds, a writer marks its progress per group of rows, a
/// stats read looks one code up.
#[derive(Default)]
pub struct Unpersisted {
    state: Mutex<Pending>,
    hasher: ahash::RandomState,
    /// Woken when a group of rows has been written.
    written: Notify,
}

impl Unpersisted {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Pending {
    /// Entries with clicks counted since the last take. A code can have two (each fill of a
    /// code is a new entry, and the old one may still hold clicks).
    dirty: DirtyEntries,
    /// The UTC day the dirty counts are for.
    day: Day,
    /// When the oldest dirty count came off the queue.
    oldest: Option<Instant>,
    /// Taken counts not yet written, oldest first.
    takes: VecDeque<Take>,
    next_take: u64,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            dirty: DirtyEntries::default(),
            day: Day(0),
            oldest: None,
            takes: VecDeque::new(),
            next_take: 0,
        }
    }
}

/// The dirty entries, in the order they came off the queue, each with a byte of its code's
/// hash: a stats read compares that byte and looks into an entry only when it matches
/// (1 in 256), so a million pending codes are scanned in well under a millisecond. Nine
/// bytes a pending code, where a hash table of the handles took 9 bytes a bucket at a load
/// between 7/16 and 7/8 (18.9 bytes a code at a million); a take hands the list over whole,
/// so a burst's memory goes with it.
#[derive(Default)]
struct DirtyEntries {
    entries: Vec<L1Entry>,
    tags: Vec<u8>,
}

impl DirtyEntries {
    fn tag(hash: u64) -> u8 {
        (hash >> 56) as u8
    }

    fn push(&mut self, hash: u64, entry: L1Entry) {
        self.entries.push(entry);
        self.tags.push(Self::tag(hash));
    }

    /// The entries of `code` (whose hash is `hash`).
    fn of_code<'a>(&'a self, hash: u64, code: &'a str) -> impl Iterator<Item = &'a L1Entry> + 'a {
        let tag = Self::tag(hash);
        self.tags
            .iter()
            .zip(&self.entries)
            .filter(move |(t, e)| **t == tag && e.code() == code)
            .map(|(_, e)| e)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn into_entries(self) -> impl Iterator<Item = L1Entry> {
        self.entries.into_iter()
    }
}

/// Counts taken at once, all for one day: one row per code, in code order.
struct Take {
    id: u64,
    day: Day,
    /// When its oldest count came off the queue.
    oldest: Instant,
    rows: Vec<(L1Entry, u64)>,
    /// `rows[..done]` are written (or failed); `rows[done..writing]` are being written.
    done: usize,
    writing: usize,
}

impl Take {
    fn row_of(&self, code: &str) -> Option<usize> {
        self.rows
            .binary_search_by(|(e, _)| e.code_bytes().cmp(code.as_bytes()))
            .ok()
    }
}

/// What a stats read saw pending for one code before it read the rollups.
struct Snapshot {
    counts: Vec<(Day, u64)>,
    /// The rows of the code not yet being written then: (take, row).
    unwritten: Vec<(u64, usize)>,
    next_take: u64,
}

impl Pending {
    fn add_dirty(&mut self, hasher: &ahash::RandomState, entry: L1Entry) {
        self.dirty.push(hasher.hash_one(entry.code()), entry);
    }

    fn is_being_written(&self, code: &str) -> bool {
        self.takes
            .iter()
            .any(|t| t.row_of(code).is_some_and(|i| (t.done..t.writing).contains(&i)))
    }

    fn snapshot(&self, code: &str, hash: u64, from: Day, to: Day) -> Snapshot {
        let in_range = |d: Day| from <= d && d <= to;
        let mut counts = Vec::new();
        if in_range(self.day) {
            let live: u64 = self.dirty.of_code(hash, code).map(|e| e.clicks()).sum();
            counts.push((self.day, live));
        }
        let mut unwritten = Vec::new();
        for t in &self.takes {
            if let Some(i) = t.row_of(code).filter(|&i| i >= t.writing) {
                unwritten.push((t.id, i));
                if in_range(t.day) {
                    counts.push((t.day, t.rows[i].1));
                }
            }
        }
        Snapshot {
            counts,
            unwritten,
            next_take: self.next_take,
        }
    }

    /// True when no row the snapshot counted as pending has been written since, and no
    /// take has happened (its rows could have been written meanwhile).
    fn untouched_since(&self, snapshot: &Snapshot) -> bool {
        self.next_take == snapshot.next_take
            && snapshot
                .unwritten
                .iter()
                .all(|&(id, i)| self.takes.iter().find(|t| t.id == id).is_some_and(|t| t.writing <= i))
    }

    /// Takes the counts of the dirty entries (each at most once: an entry is queued again
    /// only after its count was taken), one row per code in code order.
    fn take(&mut self, metrics: &ProxyMetrics, now: Instant) -> Option<u64> {
        let mut clicks = 0;
        let mut rows: Vec<(L1Entry, u64)> = std::mem::take(&mut self.dirty)
            .into_entries()
            .filter_map(|e| {
                let n = e.take_clicks();
                clicks += n;
                (n > 0).then_some((e, n))
            })
            .collect();
        let oldest = self.oldest.take().unwrap_or(now);
        metrics.clicks_queued.inc_by(clicks);
        if rows.is_empty() {
            return None;
        }
        // Code order: in SQLite each transaction then touches a few neighbouring B-tree
        // pages instead of a page per row (measured: a million rows in under 2 s instead
        // of about 16). One row per code: a DynamoDB transaction refuses two operations
        // on one item.
        rows.sort_unstable_by(|(a, _), (b, _)| a.code_bytes().cmp(b.code_bytes()));
        rows.dedup_by(|(later, n), (kept, total)| {
            let same = later.code_bytes() == kept.code_bytes();
            if same {
                *total += *n;
            }
            same
        });
        let id = self.next_take;
        self.next_take += 1;
        self.takes.push_back(Take {
            id,
            day: self.day,
            oldest,
            rows,
            done: 0,
            writing: 0,
        });
        Some(id)
    }

    /// Sets the gauges: codes pending and the age of the oldest pending click.
    fn report(&self, metrics: &ProxyMetrics, now: Instant) {
        let taken: usize = self.takes.iter().map(|t| t.rows.len() - t.done).sum();
        metrics.click_pending_codes.set((self.dirty.len() + taken) as i64);
        let oldest = self.takes.iter().map(|t| t.oldest).chain(self.oldest).min();
        metrics
            .click_persist_lag
            .set(oldest.map_or(0.0, |o| (now - o).as_secs_f64()));
    }
}

/// How click persistence is paced (see the module's documentation).
#[derive(Debug, Clone, Copy)]
pub struct ClickPacing {
    /// Under light load counts are written this often.
    pub every: Duration,
    /// Rows written per second, on average.
    pub rows_per_sec: u64,
    /// The most of the time spent writing: the next write starts no sooner than the
    /// last one's duration divided by this after the last one began.
    pub write_share: f64,
    /// The longest a click waits in memory.
    pub max_hold: Duration,
}

impl ClickPacing {
    /// Whether the counts of `codes` pending codes are due, `since_take` after the last
    /// take, whose write took `last_write`, their oldest click having waited `held`.
    fn due(&self, codes: usize, since_take: Duration, last_write: Duration, held: Duration) -> bool {
        let rows = Duration::from_secs_f64(codes as f64 / self.rows_per_sec.max(1) as f64);
        let time = last_write.div_f64(self.write_share.clamp(f64::MIN_POSITIVE, 1.0));
        since_take >= self.every.max(rows).max(time) || held >= self.max_hold
    }
}

/// Embedded mode: adds batches to the store's rollups.
pub struct StoreClickSink(pub Arc<dyn RollupStore>);

#[async_trait]
impl ClickSink for StoreClickSink {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.0.apply_click_batches(batches).await.map(|_| ())
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
    pub sink: Arc<dyn ClickSink>,
}

/// Empties the queue every few milliseconds; takes the counts and has them written when
/// `pacing` says they are due, once the previous write is done; and at once when the UTC
/// day changes (so clicks count for the day they happened, give or take a drain) and when
/// `shutdown` flips (that last write runs on the caller's runtime), after which it waits
/// for any write still in flight.
pub async fn run_click_shipper(
    queue: Arc<ClickQueue>,
    writer: ClickWriter,
    pacing: ClickPacing,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let ids = Arc::new(BatchIds::new());
    let mut tick = tokio::time::interval(DRAIN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_take = Instant::now();
    let mut writing: Option<JoinHandle<()>> = None;
    // How long the last take's write took, in nanoseconds (its task records it).
    let last_write = Arc::new(AtomicU64::new(0));
    loop {
        let stopping = tokio::select! {
            _ = tick.tick() => false,
            _ = shutdown.changed() => true,
        } || *shutdown.borrow();
        let now = Instant::now();
        let today = Day::of_millis(queue.clock.now_millis());
        let writer_idle = writing.as_ref().is_none_or(|w| w.is_finished());
        let taken = {
            let mut s = queue.unpersisted.lock();
            queue.drain_into(&mut s);
            let held = s.oldest.map_or(Duration::ZERO, |o| now - o);
            let wrote = Duration::from_nanos(last_write.load(Ordering::Relaxed));
            let due = writer_idle && pacing.due(s.dirty.len(), now - last_take, wrote, held);
            let taken = if !s.dirty.is_empty() && (stopping || today != s.day || due) {
                last_take = now;
                s.take(&queue.metrics, now)
            } else {
                None
            };
            s.report(&queue.metrics, now);
            taken
        };
        if let Some(take) = taken {
            if stopping {
                // The last counts are written here, at this runtime's priority: the writer's
                // may get no CPU at all on a busy machine. Adds commute, so this write need
                // not wait for one still in flight.
                write(&queue, writer.sink.as_ref(), &ids, take).await;
            } else {
                let (previous, queue, sink, ids) = (writing.take(), queue.clone(), writer.sink.clone(), ids.clone());
                let took = last_write.clone();
                writing = Some(writer.runtime.spawn(async move {
                    // One write at a time, in order.
                    if let Some(previous) = previous {
                        let _ = previous.await;
                    }
                    let started = Instant::now();
                    write(&queue, sink.as_ref(), &ids, take).await;
                    took.store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }));
            }
        }
        if stopping {
            if let Some(in_flight) = writing {
                let _ = in_flight.await;
            }
            queue.unpersisted.lock().report(&queue.metrics, Instant::now());
            return;
        }
    }
}

/// Hands the rows of take `id` to the sink, `SHIP_GROUP` batches at a time, marking each
/// group as being written, then written, so that stats reads stay exact.
async fn write(queue: &ClickQueue, sink: &dyn ClickSink, ids: &BatchIds, id: u64) {
    let (u, metrics) = (&queue.unpersisted, &queue.metrics);
    loop {
        let (batches, rows, clicks) = {
            let mut s = u.lock();
            let Some(t) = s.takes.iter_mut().find(|t| t.id == id) else {
                return;
            };
            let group = t.done..(t.done + MAX_BATCH_ADDS * SHIP_GROUP).min(t.rows.len());
            t.writing = group.end;
            let rows = &t.rows[group];
            let batches: Vec<ClickBatch> = rows
                .chunks(MAX_BATCH_ADDS)
                .map(|chunk| ClickBatch {
                    id: ids.next(),
                    adds: chunk
                        .iter()
                        .map(|(entry, clicks)| ClickAdd {
                            code: entry.code().to_owned(),
                            day: t.day,
                            clicks: *clicks,
                        })
                        .collect(),
                })
                .collect();
            (batches, rows.len(), rows.iter().map(|(_, n)| n).sum::<u64>())
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
                tracing::warn!(error = %e, clicks, "click batches not shipped; their clicks are lost");
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
            }
            finished
        };
        u.written.notify_waiters();
        if finished {
            return;
        }
    }
}

/// The rollups of a store, whose reads add the clicks still pending in this process: the
/// all-in-one's stats are then fresh however lazily the counts are written.
pub struct RollupsWithPending {
    pub store: Arc<dyn RollupStore>,
    pub clicks: Arc<ClickQueue>,
}

#[async_trait]
impl RollupStore for RollupsWithPending {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        self.store.apply_clicks(batch).await
    }

    async fn apply_click_batches(&self, batches: &[ClickBatch]) -> Result<Vec<BatchOutcome>, StoreError> {
        self.store.apply_click_batches(batches).await
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, u64)>, StoreError> {
        self.clicks.read_with_pending(self.store.as_ref(), code, from, to).await
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

    fn clock_at(millis: i64) -> Arc<dyn Clock> {
        Arc::new(ManualClock::at(millis))
    }

    fn metrics() -> ProxyMetrics {
        ProxyMetrics::register(&prometheus::Registry::new()).unwrap()
    }

    /// A sink that keeps what it is given.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<ClickBatch>>);

    #[async_trait]
    impl ClickSink for Recorded {
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
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
    fn counts_are_due_when_their_rows_fit_the_budget_or_have_waited_the_longest_hold() {
        let pacing = ClickPacing {
            every: Duration::from_secs(1),
            rows_per_sec: 500,
            write_share: 0.01,
            max_hold: Duration::from_secs(60),
        };
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        // (codes pending, since the last take, its write took, oldest held, due)
        let table = [
            (10, s(0), ms(1), s(0), false),
            (10, ms(999), ms(1), s(0), false),
            (10, s(1), ms(1), s(0), true),     // light load: every second
            (5_000, s(9), ms(1), s(9), false), // 5,000 rows need 10 s of row budget
            (5_000, s(10), ms(1), s(10), true),
            (10, s(1), ms(50), s(1), false), // a 50 ms write at 1 %: 5 s of time budget
            (10, ms(4_999), ms(50), s(4), false),
            (10, s(5), ms(50), s(5), true),
            (5_000, s(10), s(1), s(10), false), // rows fit, time does not (100 s) ...
            (5_000, s(59), s(1), s(59), false),
            (5_000, s(20), s(1), s(60), true), // ... but no click waits over a minute
            (1_000_000, s(59), ms(1), s(59), false), // 2,000 s of row budget ...
            (1_000_000, s(10), ms(1), s(60), true), // ... and the same longest hold
        ];
        for (codes, since, wrote, held, want) in table {
            assert_eq!(
                pacing.due(codes, since, wrote, held),
                want,
                "{codes} codes, {since:?} after a take whose write took {wrote:?}, {held:?}"
            );
        }
    }

    #[test]
    fn an_entry_is_queued_once_per_take_and_a_full_queue_drops_its_clicks() {
        let metrics = metrics();
        let q = ClickQueue::new(2, metrics.clone(), clock_at(0));
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
        let mut pending = Pending {
            day: Day(3),
            ..Pending::default()
        };
        q.drain_into(&mut pending);
        pending.take(&metrics, Instant::now());
        let rows = &pending.takes[0].rows;
        let counts: Vec<_> = rows.iter().map(|(e, n)| (e.code(), *n)).collect();
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
        fn paced(
            q: &Arc<ClickQueue>,
            sink: Arc<dyn ClickSink>,
            runtime: tokio::runtime::Handle,
            pacing: ClickPacing,
        ) -> Shipper {
            let (stop, rx) = tokio::sync::watch::channel(false);
            let writer = ClickWriter { runtime, sink };
            let task = tokio::spawn(run_click_shipper(q.clone(), writer, pacing, rx));
            Shipper { stop, task }
        }

        /// Flips shutdown and waits for the shipper to return.
        async fn stop(self) {
            self.stop.send(true).unwrap();
            self.task.await.unwrap();
        }
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
            q.record(&entries[i % 150]);
        }
        let store = Arc::new(MemoryStore::new());
        run_until_stopped(q, Arc::new(StoreClickSink(store.clone()))).await;
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
        let q = Arc::new(ClickQueue::new(100, metrics(), clock_at(0)));
        q.record(&entry("abc"));
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
            q.record(&e);
        }
        q.record(&bbb_again);
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

    fn pacing(every_ms: u64, rows_per_sec: u64, max_hold_ms: u64) -> ClickPacing {
        ClickPacing {
            every: Duration::from_millis(every_ms),
            rows_per_sec,
            write_share: 1.0,
            max_hold: Duration::from_millis(max_hold_ms),
        }
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
        q.record(&e);
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(sink.kept.adds().len(), 1, "the first write, after the interval");
        let first = Instant::now() - Duration::from_millis(600); // when it began, about
        for _ in 0..4 {
            q.record(&e);
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
    async fn rows_wait_for_the_row_budget_but_never_longer_than_the_longest_hold() {
        let metrics = metrics();
        let q = Arc::new(ClickQueue::new(1_000, metrics.clone(), clock_at(86_400_000)));
        let entries: Vec<_> = (0..50).map(|i| entry(&format!("c{i:02}"))).collect();
        let sink = Arc::new(Recorded::default());
        let runtime = tokio::runtime::Handle::current();
        // 50 rows at 10 a second: due 5 s after the last take.
        let shipper = Shipper::paced(&q, sink.clone(), runtime.clone(), pacing(1_000, 10, 60_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        entries.iter().for_each(|e| q.record(e));
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
        entries.iter().for_each(|e| q.record(e));
        tokio::time::sleep(Duration::from_millis(1_800)).await;
        assert!(sink.adds().is_empty());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(sink.adds().len(), 50, "no click waits longer than the longest hold");
        shipper.stop().await;
    }

    /// A sink that waits for a permit, then adds the batches to a store's rollups.
    struct GatedRollups {
        permits: tokio::sync::Semaphore,
        store: Arc<MemoryStore>,
    }

    #[async_trait]
    impl ClickSink for GatedRollups {
        async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
            self.permits.acquire().await.unwrap().forget();
            StoreClickSink(self.store.clone()).ship(batches).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stats_reads_add_the_pending_clicks_and_wait_while_their_row_is_written() {
        let q = Arc::new(ClickQueue::new(1_000, metrics(), clock_at(4 * 86_400_000)));
        let store = Arc::new(MemoryStore::new());
        let sink = Arc::new(GatedRollups {
            permits: tokio::sync::Semaphore::new(0),
            store: store.clone(),
        });
        let runtime = tokio::runtime::Handle::current();
        let _shipper = Shipper::paced(&q, sink.clone(), runtime, pacing(1_000, 1_000, 60_000));
        let (a, b) = (entry("aaa"), entry("bbb"));
        for _ in 0..3 {
            q.record(&a);
        }
        q.record(&b);
        let read = |code: &'static str| {
            let (q, store) = (q.clone(), store.clone());
            tokio::spawn(async move { q.read_with_pending(store.as_ref(), code, Day(4), Day(4)).await.unwrap() })
        };
        // Counted, not yet taken: the read adds the live counts.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(read("aaa").await.unwrap(), vec![(Day(4), 3)]);
        assert_eq!(read("ccc").await.unwrap(), vec![]);
        // Taken and being written (the sink waits): a read of aaa waits for the write.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        q.record(&a); // a new click, live on the entry again
        tokio::time::sleep(Duration::from_millis(50)).await;
        let waiting = read("aaa");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiting.is_finished(),
            "the read waits while aaa's row is being written"
        );
        assert!(store.read_clicks("aaa", Day(4), Day(4)).await.unwrap().is_empty());
        sink.permits.add_permits(1);
        assert_eq!(waiting.await.unwrap(), vec![(Day(4), 4)], "3 in the rollups, 1 live");
        assert_eq!(
            store.read_clicks("aaa", Day(4), Day(4)).await.unwrap(),
            vec![(Day(4), 3)]
        );
        assert_eq!(read("bbb").await.unwrap(), vec![(Day(4), 1)]);
        // Outside the range: nothing.
        let q2 = q.clone();
        let other = q2
            .read_with_pending(store.as_ref(), "aaa", Day(5), Day(9))
            .await
            .unwrap();
        assert_eq!(other, vec![]);
    }

    #[test]
    fn a_code_is_found_among_the_dirty_entries_by_its_tag_then_its_code() {
        let mut dirty = DirtyEntries::default();
        let h = 0xab00_0000_0000_0001;
        let (first, other, refilled) = (entry("aaa"), entry("bbb"), entry("aaa"));
        first.count_click();
        refilled.count_click();
        refilled.count_click();
        dirty.push(h, first);
        dirty.push(h, other); // the same tag: a byte of another code's hash can match
        dirty.push(h, refilled); // a later fill of aaa, while the first still has a click
        let of = |hash: u64, code: &str| dirty.of_code(hash, code).map(|e| e.clicks()).collect::<Vec<_>>();
        assert_eq!(of(h, "aaa"), vec![1, 2], "both entries of aaa, not bbb's");
        assert_eq!(of(h, "bbb"), vec![0]);
        assert_eq!(
            of(0xcd00_0000_0000_0001, "aaa"),
            Vec::<u64>::new(),
            "another tag is not looked into"
        );
        assert_eq!(dirty.len(), 3);
        assert_eq!(dirty.into_entries().count(), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_stats_reads_never_count_a_click_twice_or_go_backwards() {
        // Many codes, so that a take is written in several groups; reads of one code run
        // while its rows move from the entries to the takes to the rollups.
        let q = Arc::new(ClickQueue::new(100_000, metrics(), clock_at(86_400_000)));
        let store = Arc::new(MemoryStore::new());
        let entries: Vec<_> = (0..5_000).map(|i| entry(&format!("c{i:04}"))).collect();
        let runtime = tokio::runtime::Handle::current();
        let shipper = Shipper::paced(
            &q,
            Arc::new(StoreClickSink(store.clone())),
            runtime,
            pacing(20, 1_000_000, 60_000),
        );
        let clicked = Arc::new(AtomicU64::new(0));
        let clicker = {
            let (q, entries, clicked) = (q.clone(), entries.clone(), clicked.clone());
            tokio::task::spawn_blocking(move || {
                for round in 0..40 {
                    for e in &entries {
                        q.record(e);
                    }
                    clicked.store(round + 1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let mut last = 0;
        let mut reads = 0;
        while !clicker.is_finished() {
            let before = clicked.load(Ordering::SeqCst);
            let got = q
                .read_with_pending(store.as_ref(), "c2500", Day(1), Day(1))
                .await
                .unwrap();
            let n = got.first().map_or(0, |(_, n)| *n);
            let after = clicked.load(Ordering::SeqCst);
            assert!(n >= last, "went backwards: {n} after {last}");
            assert!(
                n <= after + 1,
                "counted twice: {n} with at most {} clicks made",
                after + 1
            );
            assert!(n >= before, "missed clicks: {n} with {before} made before the read");
            last = n;
            reads += 1;
        }
        clicker.await.unwrap();
        shipper.stop().await;
        let got = q
            .read_with_pending(store.as_ref(), "c2500", Day(1), Day(1))
            .await
            .unwrap();
        assert_eq!(got, vec![(Day(1), 40)]);
        assert_eq!(
            store.read_clicks("c2500", Day(1), Day(1)).await.unwrap(),
            vec![(Day(1), 40)]
        );
        assert!(reads > 10, "{reads} reads");
    }
}
