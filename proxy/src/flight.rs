//! Single-flight: concurrent callers for one key share one execution of the work.
//! If the caller doing the work is cancelled, a waiting caller takes over.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// Shares one in-flight computation per key.
pub struct SingleFlight<V> {
    flights: Mutex<HashMap<Box<str>, Arc<OnceCell<V>>>>,
}

impl<V> Default for SingleFlight<V> {
    fn default() -> Self {
        SingleFlight {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone> SingleFlight<V> {
    /// Runs `work` for `key` unless a run is already in flight, whose result is then shared.
    /// Returns the value and whether this caller waited on another's run.
    pub async fn run<F, Fut>(&self, key: &str, work: F) -> (V, bool)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let (cell, joined) = {
            let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
            match flights.get(key) {
                Some(cell) => (cell.clone(), true),
                None => {
                    let cell = Arc::new(OnceCell::new());
                    flights.insert(key.into(), cell.clone());
                    (cell, false)
                }
            }
        };
        // The entry goes when the work is done, or when the last caller gives up (a
        // cancelled lone leader), however this future ends: in a guard, as Pingora's
        // read-through cache does.
        let guard = Forget {
            flights: self,
            key,
            cell,
        };
        let value = guard.cell.get_or_init(work).await.clone();
        (value, joined)
    }
}

impl<V> SingleFlight<V> {
    fn forget(&self, key: &str, cell: &Arc<OnceCell<V>>) {
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = flights.get(key) {
            // The map's reference and this caller's: nobody else waits on it.
            let alone = Arc::strong_count(c) <= 2;
            if Arc::ptr_eq(c, cell) && (cell.initialized() || alone) {
                flights.remove(key);
            }
        }
    }

    /// Keys in flight now.
    pub fn in_flight(&self) -> usize {
        self.flights.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Removes a flight's entry when its caller is done or gone.
struct Forget<'a, V> {
    flights: &'a SingleFlight<V>,
    key: &'a str,
    cell: Arc<OnceCell<V>>,
}

impl<V> Drop for Forget<'_, V> {
    fn drop(&mut self) {
        self.flights.forget(self.key, &self.cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    // Paused time: the sleeps are virtual, so the calls overlap by construction, not by
    // how fast this machine runs them.
    #[tokio::test(start_paused = true)]
    async fn concurrent_calls_share_one_execution() {
        let flights = Arc::new(SingleFlight::<u32>::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (flights, calls) = (flights.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                flights
                    .run("k", || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        7
                    })
                    .await
            }));
        }
        let mut joined = 0;
        for t in tasks {
            let (v, j) = t.await.unwrap();
            assert_eq!(v, 7);
            joined += usize::from(j);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one lookup for three concurrent gets");
        assert_eq!(joined, 2);
        assert_eq!(flights.in_flight(), 0, "the flight is forgotten afterwards");
        // A later call runs again.
        let (v, j) = flights.run("k", || async { 8 }).await;
        assert_eq!((v, j), (8, false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_leader_hands_over() {
        let flights = Arc::new(SingleFlight::<u32>::default());
        let f2 = flights.clone();
        let leader = tokio::spawn(async move {
            f2.run("k", || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                1
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.abort();
        let _ = leader.await;
        assert_eq!(flights.in_flight(), 0, "a cancelled lone leader leaves no entry behind");
        let (v, _) = tokio::time::timeout(Duration::from_secs(5), flights.run("k", || async { 2 }))
            .await
            .unwrap();
        assert_eq!(v, 2);
    }
}
