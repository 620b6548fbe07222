//! The domains ([`DomainStore`]), in the `keys` table beside the API keys and the
//! certificates: one item `domain#<name>` each, its record as JSON in `record` (a record
//! grows fields without a table change) and its app links in attributes of their own beside
//! it (`apple_app_site_association`, `assetlinks`: each document's compact JSON, absent when
//! none), each write one conditional request that changes either the record or the app
//! links, never both. The default domain's app links are the item `default_app_links`.

use crate::item::{get_s, opt_s, s, Item};
use crate::store::condition_refused;
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use rebound_core::app_links::AppLinks;
use rebound_core::domain::Domain;
use rebound_store::domains::DomainStore;
use rebound_store::StoreError;

const DOMAIN: &str = "domain#";
/// The item of the default domain's app links (no `domain#`: in no listing).
const DEFAULT_APP_LINKS: &str = "default_app_links";
const AASA: &str = "apple_app_site_association";
const ASSETLINKS: &str = "assetlinks";

fn encode(domain: &Domain) -> Result<String, StoreError> {
    serde_json::to_string(domain).map_err(|e| StoreError::Internal(format!("encoding a domain: {e}")))
}

fn app_links_of(item: &Item) -> AppLinks {
    AppLinks {
        apple_app_site_association: opt_s(item, AASA),
        assetlinks: opt_s(item, ASSETLINKS),
    }
}

/// The attributes of `links` that are set.
fn app_link_attributes(links: &AppLinks) -> impl Iterator<Item = (&'static str, AttributeValue)> + '_ {
    [
        (AASA, &links.apple_app_site_association),
        (ASSETLINKS, &links.assetlinks),
    ]
    .into_iter()
    .filter_map(|(name, text)| text.as_ref().map(|t| (name, s(t))))
}

fn domain_from_item(item: &Item) -> Result<Domain, StoreError> {
    let record = get_s(item, "record")?;
    let domain: Domain =
        serde_json::from_str(&record).map_err(|e| StoreError::Corrupt(format!("a domain record: {e}")))?;
    Ok(Domain {
        app_links: app_links_of(item),
        ..domain
    })
}

#[async_trait]
impl DomainStore for DynamoStore {
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        let mut put = self
            .client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(format!("{DOMAIN}{}", domain.name)))
            .item("record", s(encode(domain)?));
        for (name, value) in app_link_attributes(&domain.app_links) {
            put = put.item(name, value);
        }
        let result = put
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(StoreError::AlreadyExists),
            Err(e) => Err(e),
        }
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
        // The record alone: the app links beside it stay.
        let result = self
            .client
            .update_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{DOMAIN}{}", domain.name)))
            .update_expression("SET #record = :record")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#record", "record")
            .expression_attribute_values(":record", s(encode(domain)?))
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(StoreError::NotFound),
            Err(e) => Err(e),
        }
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

    async fn set_app_links(&self, name: &str, app_links: &AppLinks) -> Result<(), StoreError> {
        // Each document set, or removed when none: `SET #a = :a REMOVE #b`.
        let (mut set, mut remove) = (Vec::new(), Vec::new());
        let mut update = self
            .client
            .update_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{DOMAIN}{name}")))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk");
        for (i, (attribute, text)) in [
            (AASA, &app_links.apple_app_site_association),
            (ASSETLINKS, &app_links.assetlinks),
        ]
        .into_iter()
        .enumerate()
        {
            update = update.expression_attribute_names(format!("#d{i}"), attribute);
            match text {
                Some(text) => {
                    set.push(format!("#d{i} = :d{i}"));
                    update = update.expression_attribute_values(format!(":d{i}"), s(text));
                }
                None => remove.push(format!("#d{i}")),
            }
        }
        let mut expression = String::new();
        if !set.is_empty() {
            expression.push_str(&format!("SET {}", set.join(", ")));
        }
        if !remove.is_empty() {
            expression.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let result = update.update_expression(expression.trim_start()).send().await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(StoreError::NotFound),
            Err(e) => Err(e),
        }
    }

    async fn default_app_links(&self) -> Result<AppLinks, StoreError> {
        Ok(self
            .keys_item(DEFAULT_APP_LINKS.to_owned())
            .await?
            .map(|item| app_links_of(&item))
            .unwrap_or_default())
    }

    async fn set_default_app_links(&self, app_links: &AppLinks) -> Result<(), StoreError> {
        let mut put = self
            .client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(DEFAULT_APP_LINKS));
        for (name, value) in app_link_attributes(app_links) {
            put = put.item(name, value);
        }
        put.send().await.map_err(crate::store::sdk_err)?;
        Ok(())
    }
}
