//! The bounded lock-free queue between the request path and the shipper: a click is one
//! atomic add on the L1 entry that answered, and only the first since the last take pushes
//! the entry, so the request path never waits, allocates or hashes for a click.

use super::pending::{Pending, Unpersisted};
use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use crossbeam_queue::ArrayQueue;
use rebound_core::{Clock, Day};
use std::sync::Arc;
use tokio::time::Instant;

/// The bounded queue between the request path and the shipper (entries with clicks counted
/// since the last take), and what the shipper has taken off it and not yet written. Its
/// stats read, [`ClickQueue::read_with_pending`], is in `stats.rs`.
pub struct ClickQueue {
    pub(super) queue: ArrayQueue<L1Entry>,
    pub(super) unpersisted: Unpersisted,
    pub(super) metrics: ProxyMetrics,
    /// Tells the UTC day a click counts for.
    pub(super) clock: Arc<dyn Clock>,
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
    pub(super) fn drain_into(&self, pending: &mut Pending) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::{clock_at, entry, metrics};

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
        let mut pending = Pending::default();
        pending.day = Day(3);
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
}
