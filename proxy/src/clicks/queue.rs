//! The bounded lock-free queue between the request path and the shipper: a click is one
//! atomic add on the L1 entry that answered, and only the first since the last take pushes
//! the entry, so the request path never waits, allocates or hashes for a click. A bot's
//! click (a link unfurler, a crawler, a `HEAD`) pushes the entry on a queue of its own
//! each time: rarer, and kept off the entry's one word of counts.

use super::breakdown::{BreakdownAdds, Tally};
use super::pending::{Pending, Unpersisted};
use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use crate::visitor::Visitor;
use crossbeam_queue::ArrayQueue;
use rebound_core::dimensions::Dimensions;
use rebound_core::{Clock, Day};
use rebound_store::Dimension;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Clicks the breakdowns' counter counts between two yields of its thread (about 0.1 ms
/// of work). Counted in one stretch (a drain's worth, up to 100 ms of clicks: 5 ms at
/// 90,000 a second), a redirect thread on a busy machine waited up to a scheduler tick (4 ms)
/// for the CPU, which doubled the all-in-one's p99
/// (`benches/results/2026-12-07a-side-breakdowns.md`).
const COUNT_CHUNK: usize = 256;

/// The bounded queue between the request path and the shipper (entries with clicks counted
/// since the last take), and what the shipper has taken off it and not yet written. Its
/// stats read, [`ClickQueue::read_with_pending`], is in `stats.rs`.
pub struct ClickQueue {
    pub(super) queue: ArrayQueue<L1Entry>,
    /// An entry per bot's click; a quarter of the people's capacity (drained every few
    /// milliseconds, and bots are the fewer).
    pub(super) bots: ArrayQueue<L1Entry>,
    /// Each person's click with its dimensions, when breakdowns are on
    /// ([`ClickQueue::record_with`]): one push a click, counted into `tally` apart from the
    /// rest ([`ClickQueue::count_breakdowns`]). A quarter of the people's capacity: a slot is
    /// 160 bytes (the values are inline); one slot when no dimension is counted.
    pub(super) breakdowns: ArrayQueue<(L1Entry, Dimensions)>,
    /// The breakdowns' counts not yet handed to a write. Locked by their counter and by the
    /// writes, never by the shipper (it tries it before it sleeps) or a stats read.
    pub(super) tally: Mutex<Tally>,
    /// The people's clicks counted in `tally`, for the shipper to see without its lock.
    pub(super) tallied: AtomicU64,
    /// Wakes the breakdowns' counter: the shipper found clicks on their queue.
    pub(super) count_wake: Notify,
    /// The dimensions counted, by [`rebound_store::Dimension`] (a click's values of the
    /// others are left out).
    pub(super) counted: [bool; Dimension::ALL.len()],
    pub(super) unpersisted: Unpersisted,
    pub(super) metrics: ProxyMetrics,
    /// Tells the UTC day a click counts for.
    pub(super) clock: Arc<dyn Clock>,
    /// Set by the shipper before it sleeps with nothing counted and nothing pending; the
    /// first push after that wakes it (`wake`). Read on every push: one load, no store.
    pub(super) idle: AtomicBool,
    pub(super) wake: Notify,
}

impl ClickQueue {
    pub fn new(capacity: usize, metrics: ProxyMetrics, clock: Arc<dyn Clock>) -> ClickQueue {
        ClickQueue {
            queue: ArrayQueue::new(capacity),
            bots: ArrayQueue::new((capacity / 4).max(1)),
            breakdowns: ArrayQueue::new((capacity / 4).max(1)),
            tally: Mutex::default(),
            tallied: AtomicU64::new(0),
            count_wake: Notify::new(),
            counted: [true; Dimension::ALL.len()],
            unpersisted: Unpersisted::default(),
            metrics,
            clock,
            idle: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    /// Counts only `dimensions` in the breakdowns (every one by default); with none, their
    /// queue holds one slot (its 16,384 slots by default are 2.6 MB, all touched when made).
    pub fn breaking_down(mut self, dimensions: &[Dimension]) -> ClickQueue {
        self.counted = Dimension::ALL.map(|d| dimensions.contains(&d));
        if dimensions.is_empty() {
            self.breakdowns = ArrayQueue::new(1);
        }
        self
    }

    /// Counts a click on `entry`; the first one since the last take queues the entry, or,
    /// when the queue is full, drops the clicks counted on it and counts them as dropped.
    /// Never waits.
    #[inline]
    pub fn record(&self, entry: &L1Entry, visitor: Visitor) {
        match visitor {
            Visitor::Person => {
                if entry.count_click() {
                    match self.queue.push(entry.clone()) {
                        Ok(()) => self.wake_if_idle(),
                        Err(entry) => self.metrics.clicks_dropped.inc_by(entry.take_clicks()),
                    }
                }
            }
            Visitor::Bot => self.record_bot(entry),
        }
    }

    /// A person's click on `entry` counted as [`ClickQueue::record`] counts it, and queued
    /// with its `dimensions` for the breakdowns; when their queue is full the breakdowns
    /// miss it (counted in `rebound_breakdown_clicks_dropped_total`), the totals do not.
    #[inline]
    pub fn record_with(&self, entry: &L1Entry, dimensions: Dimensions) {
        self.record(entry, Visitor::Person);
        // This push wakes the shipper too: the first push's wake may have run it, and it
        // may have written its take and gone to sleep before this one (the browser test's
        // last click then stayed out of the breakdowns until the next one came).
        match self.breakdowns.push((entry.clone(), dimensions)) {
            Ok(()) => self.wake_if_idle(),
            Err(_) => self.metrics.breakdown_clicks_dropped.inc(),
        }
    }

    #[cold]
    fn record_bot(&self, entry: &L1Entry) {
        match self.bots.push(entry.clone()) {
            Ok(()) => self.wake_if_idle(),
            Err(_) => self.metrics.clicks_dropped.inc(),
        }
    }

    /// After a push: wakes the shipper if it sleeps with nothing to do. `SeqCst` here and
    /// in [`ClickQueue::sleep_if_idle`] (with the queue's own `SeqCst` push and emptiness
    /// check): either the shipper sees this push, or this sees the shipper asleep.
    #[inline]
    pub(super) fn wake_if_idle(&self) {
        if self.idle.load(Ordering::SeqCst) {
            self.wake_shipper();
        }
    }

    #[cold]
    fn wake_shipper(&self) {
        if self.idle.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// The shipper, with nothing counted and nothing pending, may sleep until a push wakes
    /// it: true when it may (`idle` is then set), false when something was queued meanwhile
    /// or the breakdowns hold clicks not yet written.
    pub(super) fn sleep_if_idle(&self) -> bool {
        self.idle.store(true, Ordering::SeqCst);
        // Under the tally's lock: the counter pops clicks off their queue and adds them to
        // `tallied` under it, and between the two neither shows them. Held by the counter
        // or a write, it is taken for pending: never waited for, as a write at the lowest
        // CPU priority may hold it while it waits for the CPU (the stats reads would then
        // wait on this one's lock in turn).
        let breakdowns = match self.tally.try_lock() {
            Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => self.breakdowns_pending(),
            Err(std::sync::TryLockError::WouldBlock) => true,
        };
        if self.queue.is_empty() && self.bots.is_empty() && !breakdowns {
            return true;
        }
        self.idle.store(false, Ordering::SeqCst);
        false
    }

    /// Whether the breakdowns hold people's clicks not yet handed to a write: queued or
    /// counted.
    pub(super) fn breakdowns_pending(&self) -> bool {
        !self.breakdowns.is_empty() || self.tallied.load(Ordering::SeqCst) > 0
    }

    /// Counts the clicks queued for the breakdowns into the tally, each for today's UTC day,
    /// [`COUNT_CHUNK`] at a time, yielding between chunks both the thread (to a redirect
    /// thread waiting for the CPU) and the runtime (to its other tasks); how many. The
    /// breakdowns' counter runs it.
    pub(super) async fn count_breakdowns(&self) -> usize {
        let mut counted = 0;
        loop {
            let n = {
                let mut tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
                self.count_into(&mut tally, COUNT_CHUNK)
            };
            counted += n;
            if n < COUNT_CHUNK {
                return counted;
            }
            std::thread::yield_now();
            tokio::task::yield_now().await;
        }
    }

    /// Counts at most `limit` of the clicks queued for the breakdowns into `tally` (those a
    /// full tally cannot hold are counted as the breakdowns' drops).
    fn count_into(&self, tally: &mut Tally, limit: usize) -> usize {
        let today = Day::of_millis(self.clock.now_millis());
        let (mut counted, mut full): (usize, u64) = (0, 0);
        while counted < limit {
            let Some((entry, dimensions)) = self.breakdowns.pop() else {
                break;
            };
            if !tally.add(today, entry, &dimensions, &self.counted) {
                full += 1;
            }
            counted += 1;
        }
        if full > 0 {
            self.metrics.breakdown_clicks_dropped.inc_by(full);
        }
        self.tallied.fetch_add(counted as u64 - full, Ordering::SeqCst);
        counted
    }

    /// The breakdowns counted so far, every day's, as adds to be made a group at a time;
    /// with `count_queue`, the clicks still queued for them are counted first (the last
    /// write, at shutdown).
    pub(super) fn take_breakdowns(&self, count_queue: bool) -> BreakdownAdds {
        let taken = {
            let mut tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
            if count_queue {
                self.count_into(&mut tally, usize::MAX);
            }
            self.tallied.store(0, Ordering::SeqCst);
            tally.take()
        };
        taken.into_adds()
    }

    /// Moves the queued entries into the pending set; while it is empty, the pending set
    /// is for today. How many entries it moved (the breakdowns' clicks are left to their
    /// counter).
    pub(super) fn drain_into(&self, pending: &mut Pending) -> usize {
        if pending.is_clean() {
            pending.day = Day::of_millis(self.clock.now_millis());
        }
        let mut moved = 0;
        while let Some(entry) = self.queue.pop() {
            pending.add_dirty(&self.unpersisted.hasher, entry);
            moved += 1;
        }
        while let Some(entry) = self.bots.pop() {
            pending.add_bot(entry);
            moved += 1;
        }
        if !pending.is_clean() && pending.oldest.is_none() {
            pending.oldest = Some(Instant::now());
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::{clock_at, entry, from_de, metrics};
    use crate::visitor::Visitor;
    use rebound_store::Clicks;

    #[test]
    fn an_entry_is_queued_once_per_take_and_a_full_queue_drops_its_clicks() {
        let metrics = metrics();
        let q = ClickQueue::new(2, metrics.clone(), clock_at(0));
        let (a, b, c) = (entry("aaa"), entry("bbb"), entry("ccc"));
        for _ in 0..5 {
            q.record(&a, Visitor::Person);
        }
        q.record(&b, Visitor::Person);
        // The queue is full: c's clicks are dropped and counted, each time.
        q.record(&c, Visitor::Person);
        q.record(&c, Visitor::Person);
        assert_eq!(q.queue.len(), 2, "a once, b once");
        assert_eq!(metrics.clicks_dropped.get(), 2);
        let mut pending = Pending::default();
        pending.day = Day(3);
        q.drain_into(&mut pending);
        pending.take(&metrics, Instant::now(), false);
        let rows = &pending.takes[0].rows;
        let counts: Vec<_> = rows.iter().map(|r| (r.entry.code(), r.clicks.clicks)).collect();
        assert_eq!(counts, vec![("aaa", 5), ("bbb", 1)]);
        assert_eq!(metrics.clicks_queued.get(), 6);
        // Room again: c is queued with only its new click.
        q.record(&c, Visitor::Person);
        assert_eq!(q.queue.len(), 1);
        assert_eq!(c.take_clicks(), 1);
    }

    #[tokio::test]
    async fn a_drain_leaves_the_breakdowns_to_their_counter() {
        let q = ClickQueue::new(100, metrics(), clock_at(0));
        let a = entry("aaa");
        q.record_with(&a, from_de());
        q.record_with(&a, from_de());
        let mut pending = Pending::default();
        assert_eq!(q.drain_into(&mut pending), 1, "the entry, once");
        assert_eq!(q.breakdowns.len(), 2, "the drain counted no breakdown");
        assert!(q.breakdowns_pending());
        assert_eq!(q.count_breakdowns().await, 2);
        assert!(q.breakdowns.is_empty());
        assert!(q.breakdowns_pending(), "counted, not yet written");
        let (adds, clicks) = q.take_breakdowns(false).all();
        assert_eq!((adds.len(), clicks), (1, 2));
        assert!(!q.breakdowns_pending());
    }

    #[tokio::test]
    async fn a_click_queued_for_the_breakdowns_wakes_a_sleeping_shipper() {
        let q = ClickQueue::new(100, metrics(), clock_at(0));
        let a = entry("aaa");
        // Another redirect thread's click on `a`, counted and not yet pushed: this one
        // pushes only for the breakdowns. The shipper sleeps with nothing queued.
        assert!(a.count_click());
        assert!(q.sleep_if_idle());
        q.record_with(&a, from_de());
        assert!(q.queue.is_empty(), "the entry was counted already");
        assert!(!q.idle.load(Ordering::SeqCst), "woken");
        let woken = tokio::time::timeout(std::time::Duration::ZERO, q.wake.notified()).await;
        assert!(woken.is_ok(), "the shipper's wake-up is pending");
    }

    #[test]
    fn the_shipper_does_not_sleep_on_clicks_popped_and_not_yet_counted() {
        let q = ClickQueue::new(100, metrics(), clock_at(0));
        assert!(q.breakdowns.push((entry("aaa"), from_de())).is_ok());
        // The counter, between its pop off the queue and its count in `tallied`.
        let mut tally = q.tally.lock().unwrap();
        let (entry, dimensions) = q.breakdowns.pop().unwrap();
        assert!(!q.sleep_if_idle(), "a click popped and not yet counted keeps it awake");
        assert!(tally.add(Day(0), entry, &dimensions, &q.counted));
        q.tallied.fetch_add(1, Ordering::SeqCst);
        drop(tally);
        assert!(!q.sleep_if_idle(), "a click counted and not written keeps it awake");
        q.take_breakdowns(false);
        assert!(q.sleep_if_idle(), "nothing left");
    }

    #[test]
    fn the_breakdowns_queue_takes_memory_only_when_a_dimension_is_counted() {
        let q = |dimensions: &[Dimension]| ClickQueue::new(65_536, metrics(), clock_at(0)).breaking_down(dimensions);
        assert_eq!(q(&[]).breakdowns.capacity(), 1);
        assert_eq!(q(&[Dimension::Referrer]).breakdowns.capacity(), 16_384);
        assert_eq!(q(&Dimension::ALL).breakdowns.capacity(), 16_384);
    }

    #[tokio::test]
    async fn clicks_a_full_tally_cannot_hold_are_counted_as_the_breakdowns_drops() {
        use rebound_core::dimensions::cdn_country;
        let metrics = metrics();
        let q = ClickQueue::new(100, metrics.clone(), clock_at(0));
        *q.tally.lock().unwrap() = Tally::limited(2);
        let from = |c: &[u8]| Dimensions {
            country: Some(cdn_country(c)),
            ..Dimensions::default()
        };
        let (a, b, c) = (entry("aaa"), entry("bbb"), entry("ccc"));
        q.record_with(&a, from(b"DE"));
        q.record_with(&b, from(b"DE"));
        q.record_with(&c, from(b"DE"));
        q.record_with(&a, from(b"DE"));
        q.record_with(&a, from(b"JP"));
        assert_eq!(q.count_breakdowns().await, 5);
        assert_eq!(
            metrics.breakdown_clicks_dropped.get(),
            2,
            "ccc, and aaa's second profile"
        );
        let (adds, clicks) = q.take_breakdowns(false).all();
        assert_eq!(clicks, 3);
        let got: Vec<_> = adds
            .iter()
            .map(|a| (a.code.as_str(), a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(got, vec![("aaa", "DE", 2), ("bbb", "DE", 1)]);
        // The take leaves the tally as limited as it was, and empty.
        q.record_with(&c, from(b"DE"));
        assert_eq!(q.count_breakdowns().await, 1);
        assert_eq!(q.take_breakdowns(false).clicks(), 1);
    }

    #[test]
    fn bots_clicks_are_counted_apart_merged_per_code_and_dropped_when_full() {
        let metrics = metrics();
        // Room for 4 bots' clicks (a quarter of 16).
        let q = ClickQueue::new(16, metrics.clone(), clock_at(0));
        let (a, b, a2) = (entry("aaa"), entry("bbb"), entry("aaa"));
        q.record(&a, Visitor::Person);
        q.record(&a, Visitor::Bot);
        q.record(&a, Visitor::Bot);
        q.record(&b, Visitor::Bot);
        // Another fill of aaa: a row of its own until the take merges it.
        q.record(&a2, Visitor::Bot);
        // Full: this one is dropped and counted.
        q.record(&b, Visitor::Bot);
        assert_eq!(metrics.clicks_dropped.get(), 1);
        assert_eq!(a.clicks(), 1, "bots are not counted on the entry");
        let mut pending = Pending::default();
        q.drain_into(&mut pending);
        assert_eq!(pending.bots.len(), 3, "aaa's run in one row, bbb, the other aaa");
        assert_eq!(pending.dirty_codes(), 4);
        pending.take(&metrics, Instant::now(), false);
        assert!(pending.is_clean());
        let rows: Vec<_> = pending.takes[0]
            .rows
            .iter()
            .map(|r| (r.entry.code(), r.clicks))
            .collect();
        assert_eq!(rows, vec![("aaa", Clicks::new(1, 3)), ("bbb", Clicks::new(0, 1))]);
        assert_eq!(metrics.clicks_queued.get(), 1);
        assert_eq!(metrics.bot_clicks_queued.get(), 4);
    }
}
