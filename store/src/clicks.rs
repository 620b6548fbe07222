//! Clicks between the planes. A data plane ships the click batches it aggregated to a
//! [`ClickSink`], and its breakdowns' batches to a [`BreakdownSink`]: the rollups and
//! breakdowns of the embedded store (the all-in-one), or the click queue (SQS,
//! `rebound-sqs`). In distributed mode the control plane's consumer drains that queue
//! through a [`ClickInbox`].

use crate::{ClickBatch, DimensionBatch, StoreError, UnixMillis};
use async_trait::async_trait;
use std::time::Duration;

/// Where aggregated clicks go.
#[async_trait]
pub trait ClickSink: Send + Sync {
    /// Ships the batches of one flush; an error means none of them is known to be kept.
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError>;
}

/// Where the breakdowns' batches go (docs/spec.md §13).
#[async_trait]
pub trait BreakdownSink: Send + Sync {
    /// Ships the batches of one take; an error means none of them is known to be kept.
    async fn ship_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError>;
}

/// What a message of the click queue carries: a batch of click rows, or of breakdowns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueuedBatch {
    Clicks(ClickBatch),
    Breakdowns(DimensionBatch),
}

impl QueuedBatch {
    /// Its id, unique among every batch of either kind.
    pub fn id(&self) -> &str {
        match self {
            QueuedBatch::Clicks(b) => &b.id,
            QueuedBatch::Breakdowns(b) => &b.id,
        }
    }
}

impl From<ClickBatch> for QueuedBatch {
    fn from(batch: ClickBatch) -> QueuedBatch {
        QueuedBatch::Clicks(batch)
    }
}

impl From<DimensionBatch> for QueuedBatch {
    fn from(batch: DimensionBatch) -> QueuedBatch {
        QueuedBatch::Breakdowns(batch)
    }
}

/// A message taken from the click queue. It stays hidden for the visibility given to
/// [`ClickInbox::receive`], then is delivered again unless deleted; after the queue's
/// last allowed receive it moves to the dead-letter queue instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxMessage {
    /// What deletes it.
    pub receipt: String,
    /// Its batch, or why it cannot be read (the adapter owns the wire format).
    pub batch: Result<QueuedBatch, String>,
    /// How many times it has been received, this time included.
    pub receives: u32,
    /// Whether this is its last receive before the dead-letter queue.
    pub last_try: bool,
    /// When it was first sent.
    pub sent_at: Option<UnixMillis>,
}

/// The message counts a queue reports (approximate, as SQS says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

/// The receiving end of a click queue (and of its dead-letter queue, for its depth).
#[async_trait]
pub trait ClickInbox: Send + Sync {
    /// Waits up to `wait` for a few messages, hiding them for `visibility`.
    async fn receive(&self, wait: Duration, visibility: Duration) -> Result<Vec<InboxMessage>, StoreError>;
    /// Deletes a message whose batch was applied.
    async fn delete(&self, receipt: &str) -> Result<(), StoreError>;
    /// The queue's message counts.
    async fn depth(&self) -> Result<QueueDepth, StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use fake::MemoryInbox;

#[cfg(any(test, feature = "test-util"))]
mod fake {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// An in-memory click queue: messages are delivered in order, a received one stays
    /// in flight until deleted or [`MemoryInbox::redeliver`]ed, and every call can be
    /// made to fail.
    #[derive(Default)]
    pub struct MemoryInbox {
        state: Mutex<State>,
    }

    #[derive(Default)]
    struct State {
        waiting: VecDeque<InboxMessage>,
        in_flight: Vec<InboxMessage>,
        deleted: Vec<String>,
        next_receipt: u64,
        failing: bool,
        max_receives: u32,
    }

    impl MemoryInbox {
        /// A queue whose messages move to the dead-letter queue after `max_receives`.
        pub fn new(max_receives: u32) -> MemoryInbox {
            let inbox = MemoryInbox::default();
            inbox.lock().max_receives = max_receives;
            inbox
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Queues a message carrying `batch` (or an unreadable one).
        pub fn push(&self, batch: Result<QueuedBatch, String>) {
            let mut s = self.lock();
            s.next_receipt += 1;
            let receipt = format!("receipt-{}", s.next_receipt);
            s.waiting.push_back(InboxMessage {
                receipt,
                batch,
                receives: 0,
                last_try: false,
                sent_at: None,
            });
        }

        /// Makes every call fail (or succeed again).
        pub fn set_failing(&self, failing: bool) {
            self.lock().failing = failing;
        }

        /// Puts the messages in flight back in the queue, as an expired visibility does;
        /// those past their last receive are dropped (to the dead-letter queue).
        pub fn redeliver(&self) {
            let mut s = self.lock();
            let back: Vec<InboxMessage> = s.in_flight.drain(..).filter(|m| !m.last_try).collect();
            s.waiting.extend(back);
        }

        /// Receipts deleted so far, in order.
        pub fn deleted(&self) -> Vec<String> {
            self.lock().deleted.clone()
        }

        /// Messages neither deleted nor dead-lettered.
        pub fn pending(&self) -> usize {
            let s = self.lock();
            s.waiting.len() + s.in_flight.len()
        }
    }

    #[async_trait]
    impl ClickInbox for MemoryInbox {
        async fn receive(&self, wait: Duration, _visibility: Duration) -> Result<Vec<InboxMessage>, StoreError> {
            {
                let mut s = self.lock();
                if s.failing {
                    return Err(StoreError::unavailable("the memory inbox", "failing"));
                }
                if !s.waiting.is_empty() {
                    let max = s.max_receives.max(1);
                    let n = s.waiting.len().min(10);
                    let mut out = Vec::with_capacity(n);
                    for mut m in s.waiting.drain(..n).collect::<Vec<_>>() {
                        m.receives += 1;
                        m.last_try = m.receives >= max;
                        s.in_flight.push(m.clone());
                        out.push(m);
                    }
                    return Ok(out);
                }
            }
            // Long polling an empty queue.
            tokio::time::sleep(wait).await;
            Ok(Vec::new())
        }

        async fn delete(&self, receipt: &str) -> Result<(), StoreError> {
            let mut s = self.lock();
            if s.failing {
                return Err(StoreError::unavailable("the memory inbox", "failing"));
            }
            s.in_flight.retain(|m| m.receipt != receipt);
            s.deleted.push(receipt.to_owned());
            Ok(())
        }

        async fn depth(&self) -> Result<QueueDepth, StoreError> {
            let s = self.lock();
            if s.failing {
                return Err(StoreError::unavailable("the memory inbox", "failing"));
            }
            Ok(QueueDepth {
                visible: s.waiting.len() as u64,
                in_flight: s.in_flight.len() as u64,
                delayed: 0,
            })
        }
    }
}
