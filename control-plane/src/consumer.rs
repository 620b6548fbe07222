//! The click consumer (distributed mode): long-polls the SQS click queue, adds each batch to
//! the rollups, and deletes a message only after its adds succeeded. A batch is applied at
//! most once (its id is recorded in the same transaction as the adds), so a redelivered
//! message is not counted twice. A message that keeps failing is left alone and moves to
//! the dead-letter queue after three receives.

use rebound_sqs::{decode_batch, SqsClickQueue};
use rebound_store::{BatchOutcome, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Consumes until `shutdown` flips; a batch in progress is finished first.
pub async fn run_click_consumer(
    queue: SqsClickQueue,
    store: Arc<dyn Store>,
    visibility: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let received = tokio::select! {
            r = queue.receive(Duration::from_secs(1), visibility) => r,
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
        for m in messages {
            let batch = match decode_batch(&m.body) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, receives = m.receives, "unreadable click message; left for the dead-letter queue");
                    continue;
                }
            };
            match store.apply_clicks(&batch).await {
                Ok(outcome) => {
                    if outcome == BatchOutcome::AlreadyApplied {
                        tracing::debug!(batch = %batch.id, "click batch redelivered; already counted");
                    }
                    if let Err(e) = queue.delete(&m.receipt).await {
                        // Redelivery is harmless: the batch id makes the adds apply once.
                        tracing::warn!(error = %e, "applied click message not deleted; it will be redelivered");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, receives = m.receives, "click batch not applied; it will be retried")
                }
            }
        }
    }
}
