//! The click consumer (distributed mode): long-polls the click queue (a [`ClickInbox`]; SQS
//! in production), adds each batch to the rollups (click rows) or to the breakdowns, and
//! deletes a message only after its adds succeeded. A batch is applied at
//! most once (its id is recorded in the same transaction as the adds), so a redelivered
//! message is not counted twice. A message that keeps failing is left alone and moves to
//! the dead-letter queue after three receives. Every step is counted (`metrics`), and the
//! queues' depths are read from their SQS attributes periodically.

use crate::metrics::ConsumerMetrics;
use rebound_metering::{AdapterMetrics, OperationMetrics};
use rebound_store::{BatchOutcome, ClickInbox, QueuedBatch, RollupStore, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the queues' depths are read.
pub const DEPTH_EVERY: Duration = Duration::from_secs(10);

/// The SQS calls of the consumer, counted as adapter `sqs`.
#[derive(Clone)]
pub struct ConsumerCalls {
    receive: OperationMetrics,
    delete: OperationMetrics,
    attributes: OperationMetrics,
}

impl ConsumerCalls {
    pub fn new(adapters: &AdapterMetrics) -> ConsumerCalls {
        ConsumerCalls {
            receive: adapters.operation("sqs", "receive_message"),
            delete: adapters.operation("sqs", "delete_message"),
            attributes: adapters.operation("sqs", "get_queue_attributes"),
        }
    }
}

/// Consumes until `shutdown` flips; a batch in progress is finished first.
pub async fn run_click_consumer(
    queue: Arc<dyn ClickInbox>,
    store: Arc<dyn RollupStore>,
    visibility: Duration,
    metrics: ConsumerMetrics,
    calls: ConsumerCalls,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let received = tokio::select! {
            r = calls.receive.store_call(queue.receive(Duration::from_secs(1), visibility)) => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let messages = match received {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %rebound_core::Causes(&e), "cannot receive click messages; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        };
        metrics.received.inc_by(messages.len() as u64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let oldest = messages.iter().filter_map(|m| m.sent_at).min();
        metrics
            .oldest_message_age
            .set(oldest.map_or(0, |sent| (now - sent).max(0) / 1000));
        for m in messages {
            let last_try = m.last_try;
            let batch = match m.batch {
                Ok(b) => b,
                Err(e) => {
                    metrics.unreadable.inc();
                    if last_try {
                        metrics.dead_lettered.inc();
                    }
                    tracing::warn!(error = %e, receives = m.receives, "unreadable click message; left for the dead-letter queue");
                    continue;
                }
            };
            match apply(store.as_ref(), &batch).await {
                Ok(outcome) => {
                    match outcome {
                        BatchOutcome::Applied => metrics.applied.inc(),
                        BatchOutcome::AlreadyApplied => {
                            metrics.redeliveries_skipped.inc();
                            tracing::debug!(batch = %batch.id(), "click batch redelivered; already counted");
                        }
                    }
                    if let Err(e) = calls.delete.store_call(queue.delete(&m.receipt)).await {
                        // Redelivery is harmless: the batch id makes the adds apply once.
                        tracing::warn!(error = %rebound_core::Causes(&e), "applied click message not deleted; it will be redelivered");
                    }
                }
                Err(e) => {
                    metrics.apply_failed.inc();
                    if last_try {
                        metrics.dead_lettered.inc();
                    }
                    tracing::warn!(error = %rebound_core::Causes(&e), receives = m.receives, "click batch not applied; it will be retried")
                }
            }
        }
    }
}

/// Adds `batch` to the rollups or to the breakdowns. A store that keeps no breakdowns
/// refuses theirs, so that the message is retried and, after its last receive, kept in the
/// dead-letter queue (every adapter in this tree keeps them).
async fn apply(store: &dyn RollupStore, batch: &QueuedBatch) -> Result<BatchOutcome, StoreError> {
    match batch {
        QueuedBatch::Clicks(clicks) => store.apply_clicks(clicks).await,
        QueuedBatch::Breakdowns(adds) => match store.breakdowns() {
            Some(breakdowns) => breakdowns.apply_dimensions(adds).await,
            None => Err(StoreError::Internal("this store keeps no breakdowns".into())),
        },
    }
}

/// Reads the depth of the click queue and of its dead-letter queue every `every` into
/// `rebound_click_queue_messages`, until `shutdown` flips.
pub async fn watch_queue_depths(
    queues: [(&'static str, Arc<dyn ClickInbox>); 2],
    metrics: ConsumerMetrics,
    calls: ConsumerCalls,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        for (name, queue) in &queues {
            match calls.attributes.store_call(queue.depth()).await {
                Ok(depth) => {
                    for (state, n) in [
                        ("visible", depth.visible),
                        ("in_flight", depth.in_flight),
                        ("delayed", depth.delayed),
                    ] {
                        metrics.queue_messages.with_label_values(&[name, state]).set(n as i64);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %rebound_core::Causes(&e), queue = name, "cannot read the queue's depth")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::Day;
    use rebound_store::{
        BreakdownStore, ClickAdd, ClickBatch, Dimension, DimensionAdd, DimensionBatch, MemoryInbox, MemoryStore,
    };

    fn batch_of(id: &str, clicks: u64) -> QueuedBatch {
        QueuedBatch::Clicks(ClickBatch {
            id: id.into(),
            adds: vec![ClickAdd {
                code: "abc".into(),
                day: Day(20_000),
                clicks,
                bot_clicks: 0,
            }],
        })
    }

    fn breakdowns_of(id: &str, country: &str, clicks: u64) -> QueuedBatch {
        QueuedBatch::Breakdowns(DimensionBatch {
            id: id.into(),
            adds: vec![DimensionAdd {
                code: "abc".into(),
                day: Day(20_000),
                dimension: Dimension::Country,
                value: country.into(),
                clicks,
            }],
        })
    }

    struct Running {
        inbox: Arc<MemoryInbox>,
        store: Arc<MemoryStore>,
        metrics: ConsumerMetrics,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    fn start(inbox: MemoryInbox) -> Running {
        let registry = prometheus::Registry::new();
        let metrics = ConsumerMetrics::register(&registry).unwrap();
        let calls = ConsumerCalls::new(&AdapterMetrics::register(&registry).unwrap());
        let (inbox, store) = (Arc::new(inbox), Arc::new(MemoryStore::new()));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run_click_consumer(
            inbox.clone(),
            store.clone(),
            Duration::from_secs(30),
            metrics.clone(),
            calls,
            stopped,
        ));
        Running {
            inbox,
            store,
            metrics,
            stop,
            task,
        }
    }

    /// Lets the consumer run (time is paused: sleeps advance it) until `done`.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the consumer never got there");
    }

    async fn total(store: &MemoryStore) -> u64 {
        let day = Day(20_000);
        store
            .read_clicks("abc", day, day)
            .await
            .unwrap()
            .iter()
            .map(|(_, n)| n.clicks)
            .sum()
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_is_applied_then_deleted_and_a_redelivered_one_counts_once() {
        let inbox = MemoryInbox::new(3);
        inbox.push(Ok(batch_of("b1", 5)));
        inbox.push(Ok(batch_of("b1", 5)));
        inbox.push(Ok(batch_of("b2", 2)));
        let r = start(inbox);
        until(|| r.inbox.deleted().len() == 3).await;
        assert_eq!(total(&r.store).await, 7, "b1 once, b2 once");
        assert_eq!(r.metrics.applied.get(), 2);
        assert_eq!(r.metrics.redeliveries_skipped.get(), 1);
        assert_eq!(r.metrics.received.get(), 3);
        assert_eq!(r.inbox.pending(), 0);
        r.stop.send(true).unwrap();
        r.task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn breakdowns_are_applied_once_beside_the_click_rows() {
        let inbox = MemoryInbox::new(3);
        inbox.push(Ok(batch_of("b1", 5)));
        inbox.push(Ok(breakdowns_of("d1", "DE", 3)));
        inbox.push(Ok(breakdowns_of("d1", "DE", 3)));
        inbox.push(Ok(breakdowns_of("d2", "JP", 2)));
        let r = start(inbox);
        until(|| r.inbox.deleted().len() == 4).await;
        assert_eq!(total(&r.store).await, 5);
        let by_country = r
            .store
            .read_breakdown("abc", Dimension::Country, Day(20_000), Day(20_000))
            .await
            .unwrap();
        let got: Vec<(&str, u64)> = by_country.iter().map(|v| (v.value.as_str(), v.clicks)).collect();
        assert_eq!(got, vec![("DE", 3), ("JP", 2)], "d1 once");
        assert_eq!(r.metrics.applied.get(), 3);
        assert_eq!(r.metrics.redeliveries_skipped.get(), 1);
        r.stop.send(true).unwrap();
        r.task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_the_store_refuses_is_kept_and_applied_when_it_comes_back() {
        let inbox = MemoryInbox::new(3);
        inbox.push(Ok(batch_of("b1", 4)));
        let r = start(inbox);
        r.store.set_unavailable(true);
        until(|| r.metrics.apply_failed.get() == 1).await;
        assert!(r.inbox.deleted().is_empty(), "not deleted while not applied");
        assert_eq!(r.inbox.pending(), 1);
        r.store.set_unavailable(false);
        r.inbox.redeliver();
        until(|| r.inbox.deleted().len() == 1).await;
        assert_eq!(total(&r.store).await, 4);
        assert_eq!(r.metrics.dead_lettered.get(), 0);
        r.stop.send(true).unwrap();
        r.task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_message_is_left_for_the_dead_letter_queue_and_counted() {
        let inbox = MemoryInbox::new(2);
        inbox.push(Err("not a click batch".into()));
        let r = start(inbox);
        until(|| r.metrics.unreadable.get() == 1).await;
        assert_eq!(r.metrics.dead_lettered.get(), 0, "not its last receive yet");
        r.inbox.redeliver();
        until(|| r.metrics.unreadable.get() == 2).await;
        assert_eq!(r.metrics.dead_lettered.get(), 1, "its last receive");
        r.inbox.redeliver();
        assert_eq!(r.inbox.pending(), 0, "moved to the dead-letter queue");
        assert!(r.inbox.deleted().is_empty(), "never deleted");
        r.stop.send(true).unwrap();
        r.task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_queue_is_retried_and_the_depths_are_read_into_the_gauge() {
        let inbox = MemoryInbox::new(3);
        inbox.set_failing(true);
        let r = start(inbox);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(r.metrics.received.get(), 0);
        r.inbox.set_failing(false);
        r.inbox.push(Ok(batch_of("b1", 1)));
        until(|| r.inbox.deleted().len() == 1).await;

        let registry = prometheus::Registry::new();
        let metrics = ConsumerMetrics::register(&registry).unwrap();
        let calls = ConsumerCalls::new(&AdapterMetrics::register(&registry).unwrap());
        let dead = Arc::new(MemoryInbox::new(3));
        dead.push(Ok(batch_of("x", 1)));
        dead.push(Ok(batch_of("y", 1)));
        let (stop, stopped) = watch::channel(false);
        let watcher = tokio::spawn(watch_queue_depths(
            [
                ("clicks", r.inbox.clone() as Arc<dyn ClickInbox>),
                ("dead_letter", dead),
            ],
            metrics.clone(),
            calls,
            DEPTH_EVERY,
            stopped,
        ));
        until(|| {
            metrics
                .queue_messages
                .with_label_values(&["dead_letter", "visible"])
                .get()
                == 2
        })
        .await;
        assert_eq!(
            metrics.queue_messages.with_label_values(&["clicks", "visible"]).get(),
            0
        );
        stop.send(true).unwrap();
        watcher.await.unwrap();
        r.stop.send(true).unwrap();
        r.task.await.unwrap();
    }
}
