//! The click consumer (distributed mode): long-polls the SQS click queue, adds each batch to
//! the rollups, and deletes a message only after its adds succeeded. A batch is applied at
//! most once (its id is recorded in the same transaction as the adds), so a redelivered
//! message is not counted twice. A message that keeps failing is left alone and moves to
//! the dead-letter queue after three receives. Every step is counted (`metrics`), and the
//! queues' depths are read from their SQS attributes periodically.

use crate::metrics::ConsumerMetrics;
use rebound_sqs::{decode_batch, SqsClickQueue, MAX_RECEIVES};
use rebound_store::call_metrics::{AdapterMetrics, OperationMetrics};
use rebound_store::{BatchOutcome, Store};
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
    queue: SqsClickQueue,
    store: Arc<dyn Store>,
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
                tracing::warn!(error = %e, "cannot receive click messages; retrying");
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
            let last_try = m.receives >= MAX_RECEIVES;
            let batch = match decode_batch(&m.body) {
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
            match store.apply_clicks(&batch).await {
                Ok(outcome) => {
                    match outcome {
                        BatchOutcome::Applied => metrics.applied.inc(),
                        BatchOutcome::AlreadyApplied => {
                            metrics.redeliveries_skipped.inc();
                            tracing::debug!(batch = %batch.id, "click batch redelivered; already counted");
                        }
                    }
                    if let Err(e) = calls.delete.store_call(queue.delete(&m.receipt)).await {
                        // Redelivery is harmless: the batch id makes the adds apply once.
                        tracing::warn!(error = %e, "applied click message not deleted; it will be redelivered");
                    }
                }
                Err(e) => {
                    metrics.apply_failed.inc();
                    if last_try {
                        metrics.dead_lettered.inc();
                    }
                    tracing::warn!(error = %e, receives = m.receives, "click batch not applied; it will be retried")
                }
            }
        }
    }
}

/// Reads the depth of the click queue and of its dead-letter queue every `every` into
/// `rebound_click_queue_messages`, until `shutdown` flips.
pub async fn watch_queue_depths(
    queues: [(&'static str, SqsClickQueue); 2],
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
                Err(e) => tracing::warn!(error = %e, queue = name, "cannot read the queue's depth"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
