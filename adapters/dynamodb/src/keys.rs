//! The API keys ([`KeyStore`]): an item by hash (read strongly consistent) and an id → hash
//! pointer, written in one transaction.

use crate::item::{get_s, key_from_item, key_item, n, s, Item};
use crate::store::{cancelled_conditions, condition_refused, sdk_err, unbuilt};
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use rebound_core::UnixMillis;
use rebound_store::{ApiKeyRecord, KeyStore, StoreError};
use std::collections::HashMap;

#[async_trait]
impl KeyStore for DynamoStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let pointer = HashMap::from([
            ("pk".to_owned(), s(format!("id#{}", key.id))),
            ("key_hash".to_owned(), s(&key.key_hash)),
        ]);
        let put = |item: Item| {
            Put::builder()
                .table_name(self.table("keys"))
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", "pk")
                .build()
                .map_err(unbuilt)
        };
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put(pointer)?).build())
            .transact_items(TransactWriteItem::builder().put(put(key_item(key))?).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match cancelled_conditions(&e) {
                Some(failed) if failed.iter().any(|f| *f) => Err(StoreError::AlreadyExists),
                _ => Err(sdk_err(e)),
            },
        }
    }

    async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("hash#{key_hash}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.item().map(key_from_item).transpose()
    }

    async fn revoke_key(&self, id: &str, at: UnixMillis) -> Result<ApiKeyRecord, StoreError> {
        let pointer = self
            .client
            .get_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("id#{id}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        let hash = pointer
            .item()
            .map(|i| get_s(i, "key_hash"))
            .transpose()?
            .ok_or(StoreError::NotFound)?;
        let out = self
            .client
            .update_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("hash#{hash}")))
            .update_expression("SET #revoked = if_not_exists(#revoked, :at)")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#revoked", "revoked_at")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_values(":at", n(at))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await;
        match out {
            Ok(o) => o
                .attributes()
                .map(key_from_item)
                .transpose()?
                .ok_or(StoreError::NotFound),
            Err(e) => match condition_refused(e) {
                StoreError::ConditionFailed => Err(StoreError::NotFound),
                e => Err(e),
            },
        }
    }
}
