//! The click rollups ([`RollupStore`]): each batch one transaction of its marker in
//! `batches` and an `ADD` per code and day.

use crate::item::{get_n, n, s, Item};
use crate::store::{cancelled_conditions, sdk_err, unbuilt};
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use rebound_core::Day;
use rebound_store::{BatchOutcome, ClickBatch, RollupStore, StoreError, MAX_BATCH_ADDS};

/// How long an applied batch id is remembered (redelivery after that is not expected).
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

#[async_trait]
impl RollupStore for DynamoStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        if batch.adds.len() > MAX_BATCH_ADDS {
            return Err(StoreError::Corrupt(format!(
                "a batch holds at most {MAX_BATCH_ADDS} adds"
            )));
        }
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let marker = Put::builder()
            .table_name(self.table("batches"))
            .item("id", s(&batch.id))
            .item("purge_at", n(now_secs + BATCH_RETENTION_SECS))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "id")
            .build()
            .map_err(unbuilt)?;
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(marker).build());
        for add in &batch.adds {
            let update = Update::builder()
                .table_name(self.table("rollups"))
                .key("code", s(&add.code))
                .key("day", n(add.day.0))
                .update_expression("ADD #clicks :n")
                .expression_attribute_names("#clicks", "clicks")
                .expression_attribute_values(":n", n(add.clicks))
                .build()
                .map_err(unbuilt)?;
            tx = tx.transact_items(TransactWriteItem::builder().update(update).build());
        }
        match tx.send().await {
            Ok(_) => Ok(BatchOutcome::Applied),
            Err(e) => match cancelled_conditions(&e) {
                Some(failed) if failed.first() == Some(&true) => Ok(BatchOutcome::AlreadyApplied),
                _ => Err(sdk_err(e)),
            },
        }
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, u64)>, StoreError> {
        let mut days = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table("rollups"))
                .key_condition_expression("#code = :code AND #day BETWEEN :from AND :to")
                .expression_attribute_names("#code", "code")
                .expression_attribute_names("#day", "day")
                .expression_attribute_values(":code", s(code))
                .expression_attribute_values(":from", n(from.0))
                .expression_attribute_values(":to", n(to.0))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk_err)?;
            for item in out.items() {
                let clicks: u64 = get_n(item, "clicks")?;
                if clicks > 0 {
                    days.push((Day(get_n(item, "day")?), clicks));
                }
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => return Ok(days),
            }
        }
    }
}
