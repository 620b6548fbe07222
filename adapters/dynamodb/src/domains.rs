//! The domains ([`DomainStore`]), in the `keys` table beside the API keys and the
//! certificates: one item `domain#<name>` each, its record as JSON in `record` (a record
//! grows fields without a table change), each write one conditional request.

use crate::item::{get_s, s, Item};
use crate::store::condition_refused;
use crate::DynamoStore;
use async_trait::async_trait;
use rebound_core::domain::Domain;
use rebound_store::domains::DomainStore;
use rebound_store::StoreError;

const DOMAIN: &str = "domain#";

fn encode(domain: &Domain) -> Result<String, StoreError> {
    serde_json::to_string(domain).map_err(|e| StoreError::Internal(format!("encoding a domain: {e}")))
}

fn domain_from_item(item: &Item) -> Result<Domain, StoreError> {
    let record = get_s(item, "record")?;
    serde_json::from_str(&record).map_err(|e| StoreError::Corrupt(format!("a domain record: {e}")))
}

impl DynamoStore {
    /// Puts `domain`'s item on `condition` (on `#pk`): a refusal is `refused`.
    async fn put_domain(&self, domain: &Domain, condition: &str, refused: StoreError) -> Result<(), StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(format!("{DOMAIN}{}", domain.name)))
            .item("record", s(encode(domain)?))
            .condition_expression(condition)
            .expression_attribute_names("#pk", "pk")
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(refused),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl DomainStore for DynamoStore {
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.put_domain(domain, "attribute_not_exists(#pk)", StoreError::AlreadyExists)
            .await
    }

    async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        self.keys_item(format!("{DOMAIN}{name}"))
            .await?
            .map(|i| domain_from_item(&i))
            .transpose()
    }

    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
        let mut domains = self
            .keys_items(DOMAIN)
            .await?
            .iter()
            .map(domain_from_item)
            .collect::<Result<Vec<_>, _>>()?;
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(domains)
    }

    async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.put_domain(domain, "attribute_exists(#pk)", StoreError::NotFound)
            .await
    }

    async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{DOMAIN}{name}")))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(StoreError::NotFound),
            Err(e) => Err(e),
        }
    }
}
