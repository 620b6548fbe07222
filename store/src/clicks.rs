//! Where a data plane ships the click batches it aggregated: the rollups of the embedded
//! store (the all-in-one), or the click queue (SQS, `rebound-sqs`) that the control
//! plane's consumer drains.

use crate::{ClickBatch, StoreError};
use async_trait::async_trait;

/// Where aggregated clicks go.
#[async_trait]
pub trait ClickSink: Send + Sync {
    /// Ships the batches of one flush; an error means none of them is known to be kept.
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError>;
}
