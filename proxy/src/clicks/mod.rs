//! Clicks off the redirect path: counted on the L1 entry that answered, queued without
//! waiting, taken and written to a [`ClickSink`] at a paced rate, and added to stats reads
//! while pending. How and why: docs/architecture.md, "The click path".
//!
//! - `queue`: the bounded lock-free queue the request path pushes to.
//! - `breakdown`: a person's click by its dimensions, and their counts between takes.
//! - `pending`: the counts taken off the queue and not yet written.
//! - `pacing`: when the pending counts are due.
//! - `shipper`: the task that drains, takes and writes them; the store's sink.
//! - `stats`: stats reads that add the pending counts.
//! - `summary`: what a take adds to the summaries of the domains it clicked.
//! - `stream`: each click as an event, queued and put to the click stream (Kinesis).
//! - `low_priority`: the `SCHED_IDLE` runtime the all-in-one writes on.

pub mod breakdown;
mod low_priority;
mod pacing;
mod pending;
mod queue;
mod shipper;
mod stats;
mod stream;
mod summary;
#[cfg(test)]
mod test_util;

pub use low_priority::{low_priority_runtime, LowPriority, ThreadsCpu};
pub use pacing::ClickPacing;
pub use pending::Unpersisted;
pub use queue::ClickQueue;
pub use rebound_store::ClickSink;
pub use shipper::{run_click_shipper, ClickWriter, StoreBreakdownSink, StoreClickSink};
pub use stats::RollupsWithPending;
pub use stream::{run_click_stream, ClickStream};
