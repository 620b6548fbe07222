//! Stats reads that add the clicks still pending in this process, exactly: a read never
//! counts a click twice or misses one taken off the queue. `RollupsWithPending` is the
//! all-in-one's rollups with those reads.

use super::queue::ClickQueue;
use async_trait::async_trait;
use rebound_core::Day;
use rebound_store::{BatchOutcome, ClickBatch, Clicks, RollupStore, StoreError};
use std::sync::Arc;

impl ClickQueue {
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
    ) -> Result<Vec<(Day, Clicks)>, StoreError> {
        let u = &self.unpersisted;
        let hash = u.hasher.hash_one(code);
        loop {
            let written = u.written.notified();
            tokio::pin!(written);
            let snapshot = {
                let mut s = u.lock();
                // What the request path queued since the shipper's last drain counts too; a
                // shipper asleep with nothing pending must now write it.
                if self.drain_into(&mut s) > 0 {
                    self.wake_if_idle();
                }
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
fn add_days(mut a: Vec<(Day, Clicks)>, b: &[(Day, Clicks)]) -> Vec<(Day, Clicks)> {
    for &(day, n) in b {
        match a.iter_mut().find(|(d, _)| *d == day) {
            Some((_, total)) => *total += n,
            None => a.push((day, n)),
        }
    }
    a.retain(|(_, n)| !n.is_zero());
    a.sort_unstable_by_key(|(d, _)| *d);
    a
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

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, Clicks)>, StoreError> {
        self.clicks.read_with_pending(self.store.as_ref(), code, from, to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::{clock_at, entry, metrics, pacing, Shipper};
    use crate::clicks::{ClickSink, StoreClickSink};
    use crate::visitor::Visitor;
    use rebound_store::MemoryStore;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

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
            q.record(&a, Visitor::Person);
        }
        q.record(&b, Visitor::Person);
        // Bots' clicks, counted apart, read alike.
        q.record(&a, Visitor::Bot);
        q.record(&b, Visitor::Bot);
        q.record(&a, Visitor::Bot);
        let read = |code: &'static str| {
            let (q, store) = (q.clone(), store.clone());
            tokio::spawn(async move { q.read_with_pending(store.as_ref(), code, Day(4), Day(4)).await.unwrap() })
        };
        // Counted, not yet taken: the read adds the live counts.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(read("aaa").await.unwrap(), vec![(Day(4), Clicks::new(3, 2))]);
        assert_eq!(read("ccc").await.unwrap(), vec![]);
        // Taken and being written (the sink waits): a read of aaa waits for the write.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        q.record(&a, Visitor::Person); // a new click, live on the entry again
        q.record(&a, Visitor::Bot); // and a bot's, pending beside it
        tokio::time::sleep(Duration::from_millis(50)).await;
        let waiting = read("aaa");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiting.is_finished(),
            "the read waits while aaa's row is being written"
        );
        assert!(store.read_clicks("aaa", Day(4), Day(4)).await.unwrap().is_empty());
        sink.permits.add_permits(1);
        assert_eq!(
            waiting.await.unwrap(),
            vec![(Day(4), Clicks::new(4, 3))],
            "3 and 2 in the rollups, 1 and 1 live"
        );
        assert_eq!(
            store.read_clicks("aaa", Day(4), Day(4)).await.unwrap(),
            vec![(Day(4), Clicks::new(3, 2))]
        );
        assert_eq!(read("bbb").await.unwrap(), vec![(Day(4), Clicks::new(1, 1))]);
        // Outside the range: nothing.
        let q2 = q.clone();
        let other = q2
            .read_with_pending(store.as_ref(), "aaa", Day(5), Day(9))
            .await
            .unwrap();
        assert_eq!(other, vec![]);
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
                        q.record(e, Visitor::Person);
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
            let n = got.first().map_or(0, |(_, n)| n.clicks);
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
        assert_eq!(got, vec![(Day(1), Clicks::people(40))]);
        assert_eq!(
            store.read_clicks("c2500", Day(1), Day(1)).await.unwrap(),
            vec![(Day(1), Clicks::people(40))]
        );
        assert!(reads > 10, "{reads} reads");
    }
}
