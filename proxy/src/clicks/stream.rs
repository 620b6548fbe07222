//! The click stream off the redirect path (docs/analytics.md, "The click stream"): each
//! click, a person's or a bot's, goes with its dimensions into a bounded queue without
//! waiting (full: dropped and counted), and a task puts them to a [`ClickStreamSink`] in
//! batches of up to [`BATCH`], or fewer once the oldest has waited the linger. With nothing
//! queued the task sleeps until a push wakes it: no ticking while idle.

use super::ClickQueue;
use crate::capture::Click;
use crate::domains::DomainRoutes;
use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use crate::visitor::Visitor;
use crossbeam_queue::ArrayQueue;
use rebound_core::dimensions::Dimensions;
use rebound_core::domain::split_key;
use rebound_core::UnixMillis;
use rebound_store::click_stream::{ClickEvent, ClickStreamSink};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// The most events put at once: Kinesis's `PutRecords` limit.
pub const BATCH: usize = 500;
/// Puts in flight at once: one call takes tens of milliseconds, so one at a time would
/// bound a proxy to some 10,000 events a second whatever the stream takes.
pub const PUTS_IN_FLIGHT: usize = 4;
/// While fewer than [`BATCH`] events wait, the queue is looked at this often (only then:
/// idle, the task sleeps until a push).
const FILL_POLL: Duration = Duration::from_millis(20);

/// A click as queued: the entry that answered (its code, domain and version read off the
/// request path), when, whose, and its dimensions.
struct Queued {
    entry: L1Entry,
    at: UnixMillis,
    bot: bool,
    dimensions: Dimensions,
}

/// The queue between the redirect path and the stream's task.
pub struct ClickStream {
    queue: ArrayQueue<Queued>,
    /// Whether a person's dimensions also go to the breakdowns (the store keeps them).
    breakdowns: bool,
    metrics: ProxyMetrics,
    /// Set by the task before it sleeps with nothing queued or held; the first push after
    /// that wakes it (as the click queue's shipper is woken).
    idle: AtomicBool,
    wake: Notify,
}

impl ClickStream {
    /// A queue of `capacity` events; `breakdowns` when people's clicks are also broken
    /// down ([`ClickQueue::record_with`]).
    pub fn new(capacity: usize, breakdowns: bool, metrics: ProxyMetrics) -> ClickStream {
        ClickStream {
            queue: ArrayQueue::new(capacity.max(1)),
            breakdowns,
            metrics,
            idle: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    /// Counts `click` on `entry` in `clicks` (with its dimensions in the breakdowns when
    /// they are on, a person's only) and queues it as an event at `at`; a full queue drops
    /// the event and counts it. Never waits.
    #[inline]
    pub fn record(&self, clicks: &ClickQueue, entry: &L1Entry, click: Click, at: UnixMillis) {
        // What the capture knew of the request (`known`: its address) is never streamed.
        let Click {
            visitor, dimensions, ..
        } = click;
        let dimensions = match (visitor, dimensions) {
            (Visitor::Person, Some(dimensions)) if self.breakdowns => {
                clicks.record_with(entry, dimensions.clone());
                dimensions
            }
            (visitor, dimensions) => {
                clicks.record(entry, visitor);
                dimensions.unwrap_or_default()
            }
        };
        let queued = Queued {
            entry: entry.clone(),
            at,
            bot: visitor == Visitor::Bot,
            dimensions,
        };
        match self.queue.push(queued) {
            Ok(()) => {
                if self.idle.load(Ordering::SeqCst) {
                    self.wake_task();
                }
            }
            Err(_) => self.metrics.click_events_dropped.inc(),
        }
    }

    #[cold]
    fn wake_task(&self) {
        if self.idle.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// True when the task may sleep until a push (`idle` is then set); false when something
    /// was queued meanwhile. `SeqCst` with the push's load: either the task sees the push,
    /// or the push sees the task asleep.
    fn sleep_if_idle(&self) -> bool {
        self.idle.store(true, Ordering::SeqCst);
        if self.queue.is_empty() {
            return true;
        }
        self.idle.store(false, Ordering::SeqCst);
        false
    }
}

/// Takes events off `stream` and puts them to `sink`, [`BATCH`] at a time, or fewer once
/// the oldest has waited `linger`, up to [`PUTS_IN_FLIGHT`] puts at a time, until `stop`;
/// then puts what is queued, waits for the puts in flight and returns. Each put is made
/// once: what it does not deliver is counted lost.
pub async fn run_click_stream(
    stream: Arc<ClickStream>,
    sink: Arc<dyn ClickStreamSink>,
    routes: Arc<DomainRoutes>,
    linger: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut held: Vec<Queued> = Vec::with_capacity(BATCH);
    let mut oldest: Option<Instant> = None;
    let mut stopping = false;
    let mut in_flight = tokio::task::JoinSet::new();
    loop {
        while in_flight.try_join_next().is_some() {}
        while held.len() < BATCH {
            match stream.queue.pop() {
                Some(event) => held.push(event),
                None => break,
            }
        }
        if !held.is_empty() && oldest.is_none() {
            oldest = Some(Instant::now());
        }
        let due = oldest.is_some_and(|t| t.elapsed() >= linger);
        if held.len() >= BATCH || (!held.is_empty() && (due || stopping)) {
            if in_flight.len() >= PUTS_IN_FLIGHT {
                in_flight.join_next().await;
            }
            let events = events_of(&routes, &mut held);
            in_flight.spawn(put(stream.clone(), sink.clone(), events));
            oldest = None;
            continue;
        }
        if stopping {
            // Nothing held, nothing queued: the last puts finish.
            while in_flight.join_next().await.is_some() {}
            return;
        }
        let wait = match oldest {
            // Nothing held: sleep until a push, unless one came meanwhile.
            None if stream.sleep_if_idle() => None,
            None => continue,
            Some(t) => Some(FILL_POLL.min(linger.saturating_sub(t.elapsed()))),
        };
        tokio::select! {
            _ = stream.wake.notified(), if wait.is_none() => {}
            _ = tokio::time::sleep(wait.unwrap_or_default()), if wait.is_some() => {}
            changed = stop.changed() => stopping = changed.is_err() || *stop.borrow(),
        }
    }
}

/// The events of `held`, which is emptied: each named by its code and its domain's host.
fn events_of(routes: &DomainRoutes, held: &mut Vec<Queued>) -> Vec<ClickEvent> {
    let hosts = routes.hosts_by_id();
    held.drain(..)
        .map(|q| {
            let (code, id) = split_key(q.entry.code());
            let domain = match id {
                None => routes.default_host(),
                // A domain removed since its link answered: its id stands for it.
                Some(id) => hosts.get(id).map_or(id, |h| &**h),
            };
            ClickEvent {
                at: q.at,
                code: code.to_owned(),
                domain: domain.to_owned(),
                version: q.entry.version(),
                bot: q.bot,
                dimensions: q.dimensions,
            }
        })
        .collect()
}

/// Puts `events` to `sink` once and counts what it did.
async fn put(stream: Arc<ClickStream>, sink: Arc<dyn ClickStreamSink>, events: Vec<ClickEvent>) {
    let m = &stream.metrics;
    match sink.put(&events).await {
        Ok(done) => {
            m.click_events_sent.inc_by(done.sent);
            m.click_events_lost.inc_by(done.lost);
        }
        Err(e) => {
            m.click_events_lost.inc_by(events.len() as u64);
            tracing::warn!(error = %rebound_core::Causes(&e), events = events.len(), "click events lost: the click stream refused a put");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::{clock_at, entry, metrics};
    use crate::domains::UnknownHost;
    use crate::targeting::Known;
    use rebound_core::dimensions::{Country, Referrer};
    use rebound_store::click_stream::MemoryClickStream;

    fn person(country: &[u8]) -> Click {
        Click {
            visitor: Visitor::Person,
            dimensions: Some(Dimensions {
                country: Some(Country::from_code(country)),
                referrer: Some(Referrer::Direct),
                ..Dimensions::default()
            }),
            // The address a capture learned stays with the request: the event has no
            // field for it.
            known: Known {
                agent_digest: Some(7),
                agent: None,
                client: Some((Some([203, 0, 113, 9].into()), false)),
            },
        }
    }

    fn routes() -> Arc<DomainRoutes> {
        Arc::new(DomainRoutes::new("sho.rt", UnknownHost::NotFound))
    }

    #[test]
    fn a_click_is_counted_as_before_and_queued_as_an_event_or_dropped_when_full() {
        let metrics = metrics();
        let clicks = ClickQueue::new(16, metrics.clone(), clock_at(0));
        let stream = ClickStream::new(2, true, metrics.clone());
        let a = entry("aaa");
        stream.record(&clicks, &a, person(b"FR"), 10);
        stream.record(&clicks, &a, Click::of(Visitor::Bot), 11);
        // Full: the event is dropped and counted, the click still counted.
        stream.record(&clicks, &a, person(b"DE"), 12);
        assert_eq!(metrics.click_events_dropped.get(), 1);
        assert_eq!(a.clicks(), 2, "both people's clicks counted on the entry");
        assert_eq!(clicks.breakdowns.len(), 2, "people's dimensions go to the breakdowns");
        assert_eq!(clicks.bots.len(), 1);
        let queued: Vec<_> = std::iter::from_fn(|| stream.queue.pop())
            .map(|q| (q.at, q.bot, q.dimensions.country))
            .collect();
        assert_eq!(
            queued,
            vec![(10, false, Some(Country::from_code(b"FR"))), (11, true, None)]
        );
        // Without breakdowns, a person's dimensions go to the stream alone.
        let clicks = ClickQueue::new(16, metrics.clone(), clock_at(0));
        let stream = ClickStream::new(2, false, metrics.clone());
        stream.record(&clicks, &a, person(b"FR"), 13);
        assert!(clicks.breakdowns.is_empty());
        assert_eq!(
            stream.queue.pop().unwrap().dimensions.country,
            Some(Country::from_code(b"FR"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn events_are_put_by_the_batch_or_after_the_linger_and_the_task_sleeps_when_idle() {
        let metrics = metrics();
        let clicks = ClickQueue::new(10_000, metrics.clone(), clock_at(0));
        let stream = Arc::new(ClickStream::new(10_000, true, metrics.clone()));
        let sink = Arc::new(MemoryClickStream::default());
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(run_click_stream(
            stream.clone(),
            sink.clone(),
            routes(),
            Duration::from_secs(1),
            stop,
        ));
        let (a, b) = (entry("aaa"), entry("bbb.x1"));
        for i in 0..1_203 {
            stream.record(&clicks, if i % 2 == 0 { &a } else { &b }, person(b"FR"), i);
        }
        // Two full batches go at once; the 203 left wait for the linger.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*sink.puts.lock().unwrap(), vec![500, 500]);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(*sink.puts.lock().unwrap(), vec![500, 500, 203]);
        assert_eq!(metrics.click_events_sent.get(), 1_203);
        {
            let events = sink.events.lock().unwrap();
            assert_eq!((events[0].code.as_str(), events[0].domain.as_str()), ("aaa", "sho.rt"));
            // A domain no route names (removed, or not routed yet): its id.
            assert_eq!((events[1].code.as_str(), events[1].domain.as_str()), ("bbb", "x1"));
            assert_eq!(events[1].at, 1);
        }
        // Idle: the task sleeps until a push, however long.
        assert!(stream.idle.load(Ordering::SeqCst), "asleep with nothing queued");
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(sink.puts.lock().unwrap().len(), 3);
        // A put that fails loses its events, counted; the next one is made.
        sink.fail.store(true, Ordering::SeqCst);
        stream.record(&clicks, &a, person(b"FR"), 5);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(metrics.click_events_lost.get(), 1);
        sink.fail.store(false, Ordering::SeqCst);
        // Stopping puts what is queued at once.
        stream.record(&clicks, &a, person(b"FR"), 6);
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(metrics.click_events_sent.get(), 1_204);
        assert_eq!(*sink.puts.lock().unwrap(), vec![500, 500, 203, 1, 1]);
    }

    /// A sink whose puts take 50 ms, and that remembers how many were in flight at most.
    #[derive(Default)]
    struct Slow {
        now: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
        events: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ClickStreamSink for Slow {
        async fn put(
            &self,
            events: &[ClickEvent],
        ) -> Result<rebound_store::click_stream::StreamPut, rebound_store::StoreError> {
            let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.events.fetch_add(events.len(), Ordering::SeqCst);
            Ok(rebound_store::click_stream::StreamPut {
                sent: events.len() as u64,
                lost: 0,
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn puts_overlap_up_to_the_bound_and_stopping_waits_for_them() {
        let metrics = metrics();
        let clicks = ClickQueue::new(100_000, metrics.clone(), clock_at(0));
        let stream = Arc::new(ClickStream::new(100_000, false, metrics.clone()));
        let sink = Arc::new(Slow::default());
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(run_click_stream(
            stream.clone(),
            sink.clone(),
            routes(),
            Duration::from_secs(1),
            stop,
        ));
        let a = entry("aaa");
        for i in 0..5_000 {
            stream.record(&clicks, &a, Click::of(Visitor::Person), i);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(sink.most.load(Ordering::SeqCst), PUTS_IN_FLIGHT);
        assert_eq!(
            sink.events.load(Ordering::SeqCst),
            5_000,
            "every put finished before the task returned"
        );
        assert_eq!(metrics.click_events_sent.get(), 5_000);
    }
}
