//! The click stream (docs/analytics.md, "The click stream"): each click as one event, for a
//! warehouse. A data plane sends them to a [`ClickStreamSink`] (Amazon Kinesis Data
//! Streams, `rebound-kinesis`) at most once: what a call does not put is lost and counted.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::dimensions::Dimensions;
use rebound_core::UnixMillis;

/// One click as the stream carries it. Nothing in it identifies a person: no address, no
/// User-Agent, no referrer path or query, only the [`Dimensions`] derived from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickEvent {
    /// When the redirect was answered.
    pub at: UnixMillis,
    /// The link's code (without its domain).
    pub code: String,
    /// The host of the link's domain.
    pub domain: String,
    /// The version of the link that answered (it changes with each edit).
    pub version: u64,
    /// A bot's click (a link unfurler, a crawler, a `HEAD`); a person's otherwise.
    pub bot: bool,
    /// The click's dimensions, those switched on (none when all are off).
    pub dimensions: Dimensions,
}

/// What one put did: events the stream took, and events it refused or never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamPut {
    pub sent: u64,
    pub lost: u64,
}

/// Where click events go, at most once.
#[async_trait]
pub trait ClickStreamSink: Send + Sync {
    /// Puts `events` without retrying a call or a record: the events a call did not take
    /// are counted in [`StreamPut::lost`]. An error means none of them is known to be
    /// taken (all are lost).
    async fn put(&self, events: &[ClickEvent]) -> Result<StreamPut, StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use fake::MemoryClickStream;

#[cfg(any(test, feature = "test-util"))]
mod fake {
    use super::*;
    use std::sync::Mutex;

    /// Events kept in memory, for tests; `fail` makes each put an error.
    #[derive(Debug, Default)]
    pub struct MemoryClickStream {
        pub events: Mutex<Vec<ClickEvent>>,
        /// The sizes of the puts, in order.
        pub puts: Mutex<Vec<usize>>,
        pub fail: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl ClickStreamSink for MemoryClickStream {
        async fn put(&self, events: &[ClickEvent]) -> Result<StreamPut, StoreError> {
            self.puts.lock().unwrap().push(events.len());
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::unavailable("memory stream", "failing, as told"));
            }
            self.events.lock().unwrap().extend_from_slice(events);
            Ok(StreamPut {
                sent: events.len() as u64,
                lost: 0,
            })
        }
    }
}
