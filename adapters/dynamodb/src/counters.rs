//! The KGS counters (`ADD`) and the settings stored once ([`CounterStore`]), both in the
//! `counters` table.

use crate::item::{get_n, get_s, n, s};
use crate::store::{condition_refused, sdk_err};
use crate::DynamoStore;
use async_trait::async_trait;
use rebound_store::{CounterStore, StoreError};
use std::ops::Range;

#[async_trait]
impl CounterStore for DynamoStore {
    async fn lease_block(&self, counter: &str, size: u64) -> Result<Range<u64>, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table("counters"))
            .key("name", s(format!("counter#{counter}")))
            .update_expression("ADD #value :size")
            .expression_attribute_names("#value", "value")
            .expression_attribute_values(":size", n(size))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(sdk_err)?;
        let end: u64 = out
            .attributes()
            .map(|a| get_n(a, "value"))
            .transpose()?
            .ok_or_else(|| StoreError::Corrupt("counter returned no value".into()))?;
        end.checked_sub(size)
            .map(|start| start..end)
            .ok_or(StoreError::Corrupt("counter went backwards".into()))
    }

    async fn get_or_init_setting(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        let pk = format!("setting#{name}");
        let put = self
            .client
            .put_item()
            .table_name(self.table("counters"))
            .item("name", s(&pk))
            .item("text", s(candidate))
            .condition_expression("attribute_not_exists(#name)")
            .expression_attribute_names("#name", "name")
            .send()
            .await;
        match put.map_err(condition_refused) {
            Ok(_) => return Ok(candidate.to_owned()),
            Err(StoreError::ConditionFailed) => {}
            Err(e) => return Err(e),
        }
        let out = self
            .client
            .get_item()
            .table_name(self.table("counters"))
            .key("name", s(pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.item()
            .map(|i| get_s(i, "text"))
            .transpose()?
            .ok_or_else(|| StoreError::Corrupt(format!("setting {name} vanished")))
    }
}
