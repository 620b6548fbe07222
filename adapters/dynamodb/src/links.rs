//! The links ([`LinkReads`], [`LinkStore`]): the links table and its listing indexes, the
//! idempotency records, the alias index, and the propagations pending, which are attributes
//! of the link item found through the sparse `pending` index.

use crate::item::{
    get_n, get_s, idempotency_pk, index_attributes, link_from_item, link_item, n, s, sort_key, INDEXED,
    INDEX_ATTRIBUTES, LIST_PARTITION,
};
use crate::store::{cancelled_conditions, condition_refused, sdk_err, unbuilt};
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use rebound_core::link::Deletion;
use rebound_core::{Link, LinkEdit, UnixMillis};
use rebound_store::{
    IdempotencyRecord, IndexCursor, LinkPage, LinkReads, LinkStore, ListCursor, Propagation, PropagationLease,
    StoreError,
};
use std::collections::HashMap;

/// The partition of the sparse `pending` index: only links with a propagation pending
/// carry it.
const PENDING_PARTITION: &str = "pending";

impl DynamoStore {
    async fn query_links(
        &self,
        owner: Option<&str>,
        limit: usize,
        before: Option<&ListCursor>,
    ) -> Result<LinkPage, StoreError> {
        let (index, pk_attr, pk_value) = match owner {
            Some(o) => ("by_owner", "created_by", o.to_owned()),
            None => ("by_time", "list", LIST_PARTITION.to_owned()),
        };
        let mut condition = "#pk = :pk".to_owned();
        let mut req = self
            .client
            .query()
            .table_name(self.table("links"))
            .index_name(index)
            .expression_attribute_names("#pk", pk_attr)
            .expression_attribute_values(":pk", s(pk_value))
            .scan_index_forward(false)
            .limit((limit + 1).min(10_000) as i32);
        if let Some(c) = before {
            condition.push_str(" AND #sort < :sort");
            req = req
                .expression_attribute_names("#sort", "sort")
                .expression_attribute_values(":sort", s(sort_key(c.created_at, &c.code)));
        }
        let out = req.key_condition_expression(condition).send().await.map_err(sdk_err)?;
        let links = out.items().iter().map(link_from_item).collect::<Result<Vec<_>, _>>()?;
        Ok(LinkPage::from_overfetch(links, limit))
    }

    /// A conditional update of the link `code` at `expected_version`, active as
    /// `was_active` says, to `next`, with the names and values of the condition, the new
    /// version (`:next`) and the pending propagation leased to `lease` (`#active`,
    /// `#pshard`, `#pver`, `#powner`, `#puntil`); the caller adds its own fields and the
    /// update expression.
    fn pending_update(
        &self,
        code: &str,
        expected_version: u64,
        was_active: bool,
        next: &Link,
        lease: &PropagationLease,
    ) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .condition_expression("attribute_exists(#code) AND #version = :expected AND #active = :was")
            .expression_attribute_names("#code", "code")
            .expression_attribute_names("#active", "is_active")
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#pshard", "prop_shard")
            .expression_attribute_names("#pver", "prop_version")
            .expression_attribute_names("#powner", "prop_owner")
            .expression_attribute_names("#puntil", "prop_until")
            .expression_attribute_values(":was", AttributeValue::Bool(was_active))
            .expression_attribute_values(":next", n(next.version))
            .expression_attribute_values(":expected", n(expected_version))
            .expression_attribute_values(":pshard", s(PENDING_PARTITION))
            .expression_attribute_values(":powner", s(&lease.owner))
            .expression_attribute_values(":puntil", n(lease.until))
    }

    /// Adds to an update of a link to `next` its index attributes (set as `next` has them,
    /// removed otherwise) and the mark that it is indexed.
    fn index_update(
        req: UpdateItemFluentBuilder,
        set: &mut String,
        remove: &mut Vec<String>,
        next: &Link,
    ) -> UpdateItemFluentBuilder {
        let attrs = index_attributes(next);
        let mut req = req
            .expression_attribute_names("#indexed", INDEXED)
            .expression_attribute_values(":indexed", n(1));
        set.push_str(", #indexed = :indexed");
        for name in INDEX_ATTRIBUTES {
            req = req.expression_attribute_names(format!("#{name}"), name);
            match attrs.iter().find(|(k, _)| *k == name) {
                Some((_, v)) => {
                    set.push_str(&format!(", #{name} = :{name}"));
                    req = req.expression_attribute_values(format!(":{name}"), v.clone());
                }
                None => remove.push(format!("#{name}")),
            }
        }
        req
    }

    /// Sends a [`DynamoStore::pending_update`]: `next` when written; `NotFound` or
    /// `ConditionFailed` when its condition failed.
    async fn send_pending_update(
        &self,
        code: &str,
        req: UpdateItemFluentBuilder,
        next: Link,
    ) -> Result<Link, StoreError> {
        match req.send().await.map_err(condition_refused) {
            Ok(_) => Ok(next),
            Err(StoreError::ConditionFailed) => match self.get_link(code).await? {
                None => Err(StoreError::NotFound),
                Some(_) => Err(StoreError::ConditionFailed),
            },
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl LinkReads for DynamoStore {
    async fn get_link(&self, code: &str) -> Result<Option<Link>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.item().map(link_from_item).transpose()
    }

    async fn high_water(&self, counter: &str) -> Result<u64, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("counters"))
            .key("name", s(format!("counter#{counter}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(out.item().map(|i| get_n(i, "value")).transpose()?.unwrap_or(0))
    }

    async fn list_aliases(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, StoreError> {
        // A scan of the alias index alone, never of the links.
        let out = self
            .client
            .scan()
            .table_name(self.table("aliases"))
            .consistent_read(true)
            .set_exclusive_start_key(after.map(|a| HashMap::from([("code".to_owned(), s(a))])))
            .limit(limit.min(i32::MAX as usize) as i32)
            .send()
            .await
            .map_err(sdk_err)?;
        out.items().iter().map(|i| get_s(i, "code")).collect()
    }

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("counters"))
            .key("name", s(format!("setting#{name}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.item().map(|i| get_s(i, "text")).transpose()
    }
}

#[async_trait]
impl LinkStore for DynamoStore {
    async fn insert_link(&self, link: &Link, idempotency: Option<&IdempotencyRecord>) -> Result<(), StoreError> {
        let put_link = Put::builder()
            .table_name(self.table("links"))
            .set_item(Some(link_item(link)))
            .condition_expression("attribute_not_exists(#code)")
            .expression_attribute_names("#code", "code")
            .build()
            .map_err(unbuilt)?;
        let Some(rec) = idempotency else {
            // The SDK retries an attempt whose answer did not come in time
            // (`operation_attempt_timeout`): when the first attempt had landed, the retry
            // finds the code taken by this very write. Each insert carries a token of its
            // own, so that a failed condition tells this write from a rival's (a rival may
            // build an equal link: one alias, one target, the same millisecond).
            let token = insert_token();
            let mut item = link_item(link);
            item.insert(INSERT_TOKEN.to_owned(), n(token));
            return match self
                .client
                .put_item()
                .table_name(self.table("links"))
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#code)")
                .expression_attribute_names("#code", "code")
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e) => match condition_refused(e) {
                    StoreError::ConditionFailed => match self.inserted_by(&link.code, token).await? {
                        true => Ok(()),
                        false => Err(StoreError::AlreadyExists),
                    },
                    e => Err(e),
                },
            };
        };
        let idem_item = HashMap::from([
            ("pk".to_owned(), s(idempotency_pk(&rec.scope, &rec.key))),
            ("scope".to_owned(), s(&rec.scope)),
            ("key".to_owned(), s(&rec.key)),
            ("request_hash".to_owned(), s(&rec.request_hash)),
            ("status".to_owned(), n(rec.status)),
            ("body".to_owned(), s(&rec.body)),
            ("created_at".to_owned(), n(rec.created_at)),
            ("expires_at".to_owned(), n(rec.expires_at)),
            ("purge_at".to_owned(), n(rec.expires_at / 1000 + 1)),
        ]);
        let put_idem = Put::builder()
            .table_name(self.table("idempotency"))
            .set_item(Some(idem_item))
            .condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#exp", "expires_at")
            .expression_attribute_values(":now", n(rec.created_at))
            .build()
            .map_err(unbuilt)?;
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put_link).build())
            .transact_items(TransactWriteItem::builder().put(put_idem).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match cancelled_conditions(&e) {
                Some(failed) if failed.get(1) == Some(&true) => Err(StoreError::IdempotencyKeyExists),
                Some(failed) if failed.first() == Some(&true) => Err(StoreError::AlreadyExists),
                _ => Err(sdk_err(e)),
            },
        }
    }

    async fn record_alias(&self, alias: &str) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(self.table("aliases"))
            .item("code", s(alias))
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(())
    }

    async fn insert_links(&self, links: &[Link]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        // DynamoDB's batch writes cannot be conditional: conditional puts, 16 at a time.
        use futures_util::StreamExt;
        let this = self.clone();
        let outcomes: Vec<Result<(), StoreError>> = futures_util::stream::iter(links.to_vec())
            .map(move |link| {
                let this = this.clone();
                async move { this.insert_link(&link, None).await }
            })
            .buffered(16)
            .collect()
            .await;
        Ok(outcomes)
    }

    // The pending record is attributes of the link item, set by the same conditional
    // UpdateItem, and found through the sparse `pending` index: one write (plus the index's)
    // per delete, where a TransactWriteItems of the update and a second item would cost
    // twice the write units of each, and it needs no transaction (dynalite has none).
    async fn deactivate_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        let current = self.get_link(code).await?.ok_or(StoreError::NotFound)?;
        if current.version != expected_version || !current.is_active {
            return Err(StoreError::ConditionFailed);
        }
        let next = current.deactivated(deletion);
        let mut update = "SET #active = :false, #version = :next, #dat = :dat, #dby = :dby, #purge = :purge, \
             #purgems = :purgems, #pshard = :pshard, #pver = :next, #powner = :powner, #puntil = :puntil"
            .to_owned();
        let mut req = self
            .pending_update(code, expected_version, true, &next, lease)
            .expression_attribute_names("#dat", "deleted_at")
            .expression_attribute_names("#dby", "deleted_by")
            .expression_attribute_names("#purge", "purge_at")
            .expression_attribute_names("#purgems", "purge_at_ms")
            .expression_attribute_values(":purgems", n(next.purge_at.unwrap_or(deletion.at)))
            .expression_attribute_values(":false", AttributeValue::Bool(false))
            .expression_attribute_values(":dat", n(deletion.at))
            .expression_attribute_values(":dby", s(&deletion.by))
            .expression_attribute_values(":purge", n(next.purge_at.unwrap_or(deletion.at) / 1000));
        if let Some(reason) = &deletion.reason {
            update.push_str(", #reason = :reason");
            req = req
                .expression_attribute_names("#reason", "delete_reason")
                .expression_attribute_values(":reason", s(reason));
        }
        let mut remove = Vec::new();
        let req = Self::index_update(req, &mut update, &mut remove, &next);
        let update = format!("{update} REMOVE {}", remove.join(", "));
        self.send_pending_update(code, req.update_expression(update), next)
            .await
    }

    async fn edit_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        edit: &LinkEdit,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        let current = self.get_link(code).await?.ok_or(StoreError::NotFound)?;
        if current.version != expected_version || !current.is_active {
            return Err(StoreError::ConditionFailed);
        }
        let next = current.edited(edit);
        let mut set = "SET #version = :next, #url = :url, #redirect = :redirect, #fq = :fq, \
             #pshard = :pshard, #pver = :next, #powner = :powner, #puntil = :puntil"
            .to_owned();
        let mut req = self
            .pending_update(code, expected_version, true, &next, lease)
            .expression_attribute_names("#url", "long_url")
            .expression_attribute_names("#redirect", "redirect")
            .expression_attribute_names("#fq", "forward_query")
            .expression_attribute_names("#exp", "expires_at")
            .expression_attribute_names("#purge", "purge_at")
            .expression_attribute_names("#purgems", "purge_at_ms")
            .expression_attribute_names("#pw", "password_hash")
            .expression_attribute_names("#rules", "rules")
            .expression_attribute_values(":url", s(&next.long_url))
            .expression_attribute_values(":redirect", n(next.redirect.status()))
            .expression_attribute_values(":fq", AttributeValue::Bool(next.forward_query));
        // The expiry (with the purge time) and the password follow the edit: set, or
        // removed with it.
        let mut remove: Vec<String> = Vec::new();
        match next.expires_at {
            Some(at) => {
                set.push_str(", #exp = :exp, #purge = :purge, #purgems = :exp");
                req = req
                    .expression_attribute_values(":exp", n(at))
                    .expression_attribute_values(":purge", n(at / 1000));
            }
            None => remove.extend(["#exp", "#purge", "#purgems"].map(String::from)),
        }
        match &next.password_hash {
            Some(hash) => {
                set.push_str(", #pw = :pw");
                req = req.expression_attribute_values(":pw", s(hash));
            }
            None => remove.push("#pw".into()),
        }
        match rebound_core::rules::stored_json(&next.rules) {
            Some(json) => {
                set.push_str(", #rules = :rules");
                req = req.expression_attribute_values(":rules", s(json));
            }
            None => remove.push("#rules".into()),
        }
        let req = Self::index_update(req, &mut set, &mut remove, &next);
        let update = match remove.is_empty() {
            true => set,
            false => format!("{set} REMOVE {}", remove.join(", ")),
        };
        self.send_pending_update(code, req.update_expression(update), next)
            .await
    }

    async fn restore_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        let current = self.get_link(code).await?.ok_or(StoreError::NotFound)?;
        if current.version != expected_version || current.is_active {
            return Err(StoreError::ConditionFailed);
        }
        let next = current.restored();
        let mut set = "SET #active = :true, #version = :next, #pshard = :pshard, #pver = :next, #powner = :powner, \
             #puntil = :puntil"
            .to_owned();
        let mut remove: Vec<String> = ["#dat", "#dby", "#reason"].map(String::from).to_vec();
        let mut req = self
            .pending_update(code, expected_version, false, &next, lease)
            .expression_attribute_names("#dat", "deleted_at")
            .expression_attribute_names("#dby", "deleted_by")
            .expression_attribute_names("#reason", "delete_reason")
            .expression_attribute_names("#purge", "purge_at")
            .expression_attribute_names("#purgems", "purge_at_ms")
            .expression_attribute_values(":true", AttributeValue::Bool(true));
        // Purged at its expiry as an active link is, or never.
        match next.purge_at {
            Some(at) => {
                req = req
                    .expression_attribute_values(":purge", n(at / 1000))
                    .expression_attribute_values(":purgems", n(at));
                set.push_str(", #purge = :purge, #purgems = :purgems");
            }
            None => remove.extend(["#purge", "#purgems"].map(String::from)),
        }
        let req = Self::index_update(req, &mut set, &mut remove, &next);
        let update = format!("{set} REMOVE {}", remove.join(", "));
        self.send_pending_update(code, req.update_expression(update), next)
            .await
    }

    async fn pending_propagations(&self, now: UnixMillis, limit: usize) -> Result<Vec<Propagation>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(self.table("links"))
            .index_name("pending")
            .key_condition_expression("#pshard = :pshard AND #puntil <= :now")
            .expression_attribute_names("#pshard", "prop_shard")
            .expression_attribute_names("#puntil", "prop_until")
            .expression_attribute_values(":pshard", s(PENDING_PARTITION))
            .expression_attribute_values(":now", n(now))
            .scan_index_forward(true)
            .limit(limit.clamp(1, 1_000) as i32)
            .send()
            .await
            .map_err(sdk_err)?;
        out.items()
            .iter()
            .take(limit)
            .map(|i| {
                Ok(Propagation {
                    code: get_s(i, "code")?,
                    version: get_n(i, "prop_version")?,
                    lease_owner: get_s(i, "prop_owner")?,
                    lease_until: get_n(i, "prop_until")?,
                })
            })
            .collect()
    }

    async fn lease_propagation(
        &self,
        code: &str,
        version: u64,
        lease: &PropagationLease,
        now: UnixMillis,
    ) -> Result<Link, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .update_expression("SET #powner = :owner, #puntil = :until")
            .condition_expression("#pver = :version AND (#puntil <= :now OR #powner = :owner)")
            .expression_attribute_names("#pver", "prop_version")
            .expression_attribute_names("#powner", "prop_owner")
            .expression_attribute_names("#puntil", "prop_until")
            .expression_attribute_values(":owner", s(&lease.owner))
            .expression_attribute_values(":until", n(lease.until))
            .expression_attribute_values(":version", n(version))
            .expression_attribute_values(":now", n(now))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await;
        link_from_item(
            out.map_err(condition_refused)?
                .attributes()
                .ok_or(StoreError::NotFound)?,
        )
    }

    async fn finish_propagation(&self, code: &str, version: u64) -> Result<(), StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .update_expression("REMOVE #pshard, #pver, #powner, #puntil")
            .condition_expression("#pver = :version")
            .expression_attribute_names("#pshard", "prop_shard")
            .expression_attribute_names("#pver", "prop_version")
            .expression_attribute_names("#powner", "prop_owner")
            .expression_attribute_names("#puntil", "prop_until")
            .expression_attribute_values(":version", n(version))
            .send()
            .await;
        out.map(|_| ()).map_err(condition_refused)
    }

    async fn list_links(
        &self,
        owner: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let before = cursor.map(ListCursor::decode).transpose()?;
        self.query_links(owner, limit, before.as_ref()).await
    }

    async fn links_by_target_host(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        // Every key under `prefix` is in its zone (the index's partition).
        let Some(zone) = rebound_core::threat::host_key_zone(prefix) else {
            return Ok(LinkPage {
                links: Vec::new(),
                next_cursor: None,
            });
        };
        let mut req = self
            .client
            .query()
            .table_name(self.table("links"))
            .index_name("by_target_host")
            .key_condition_expression("#zone = :zone AND begins_with(#key, :prefix)")
            .expression_attribute_names("#zone", "host_zone")
            .expression_attribute_names("#key", "host_key")
            .expression_attribute_values(":zone", s(zone))
            .expression_attribute_values(":prefix", s(prefix))
            .limit((limit + 1).min(10_000) as i32);
        if let Some(c) = &after {
            let zone = rebound_core::threat::host_key_zone(&c.key).ok_or(StoreError::BadCursor)?;
            req = req
                .exclusive_start_key("code", s(&c.code))
                .exclusive_start_key("host_zone", s(zone))
                .exclusive_start_key("host_key", s(&c.key));
        }
        let out = req.send().await.map_err(sdk_err)?;
        let links = out.items().iter().map(link_from_item).collect::<Result<Vec<_>, _>>()?;
        Ok(IndexCursor::page(links, limit, |l| {
            rebound_core::threat::host_key(&l.long_url).unwrap_or_default()
        }))
    }

    async fn links_with_rules(&self, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        // The cursor names a partition (`r0`…) and the last code read there; a page is of
        // one partition, and the last page of one points to the start of the next.
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let shard: u32 = match &after {
            Some(c) => c
                .key
                .strip_prefix('r')
                .and_then(|n| n.parse().ok())
                .filter(|n| *n < crate::item::RULES_SHARDS)
                .ok_or(StoreError::BadCursor)?,
            None => 0,
        };
        let key = format!("r{shard}");
        let mut req = self
            .client
            .query()
            .table_name(self.table("links"))
            .index_name("by_rules")
            .key_condition_expression("#shard = :shard")
            .expression_attribute_names("#shard", "rules_shard")
            .expression_attribute_values(":shard", s(&key))
            .limit((limit + 1).min(10_000) as i32);
        if let Some(c) = after.as_ref().filter(|c| !c.code.is_empty()) {
            req = req
                .exclusive_start_key("code", s(&c.code))
                .exclusive_start_key("rules_shard", s(&key));
        }
        let out = req.send().await.map_err(sdk_err)?;
        let links = out.items().iter().map(link_from_item).collect::<Result<Vec<_>, _>>()?;
        let mut page = IndexCursor::page(links, limit, |_| key.clone());
        if page.next_cursor.is_none() && shard + 1 < crate::item::RULES_SHARDS {
            page.next_cursor = Some(
                IndexCursor {
                    key: format!("r{}", shard + 1),
                    code: String::new(),
                }
                .encode(),
            );
        }
        Ok(page)
    }

    async fn links_on_domain(&self, id: &str, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let mut req = self
            .client
            .query()
            .table_name(self.table("links"))
            .index_name("by_domain")
            .key_condition_expression("#domain = :domain")
            .expression_attribute_names("#domain", "domain_id")
            .expression_attribute_values(":domain", s(id))
            .limit((limit + 1).min(10_000) as i32);
        if let Some(c) = &after {
            req = req
                .exclusive_start_key("code", s(&c.code))
                .exclusive_start_key("domain_id", s(id));
        }
        let out = req.send().await.map_err(sdk_err)?;
        let links = out.items().iter().map(link_from_item).collect::<Result<Vec<_>, _>>()?;
        Ok(IndexCursor::page(links, limit, |_| id.to_owned()))
    }

    // A read of every link item, once (a table written before the indexes); each one not
    // marked indexed gets its attributes with a write conditional on its version, so a
    // change made meanwhile (which writes them itself) is never undone.
    async fn index_older_links(&self, cursor: Option<&str>, limit: usize) -> Result<Option<String>, StoreError> {
        let mut req = self
            .client
            .scan()
            .table_name(self.table("links"))
            .filter_expression("attribute_not_exists(#indexed)")
            .expression_attribute_names("#indexed", INDEXED)
            .limit(limit.clamp(1, 1_000) as i32);
        if let Some(code) = cursor {
            req = req.exclusive_start_key("code", s(code));
        }
        let out = req.send().await.map_err(sdk_err)?;
        for item in out.items() {
            let link = link_from_item(item)?;
            let mut set = "SET #indexed = :indexed".to_owned();
            let mut req = self
                .client
                .update_item()
                .table_name(self.table("links"))
                .key("code", s(&link.code))
                .condition_expression("#version = :version")
                .expression_attribute_names("#version", "version")
                .expression_attribute_names("#indexed", INDEXED)
                .expression_attribute_values(":version", n(link.version))
                .expression_attribute_values(":indexed", n(1));
            for (name, value) in index_attributes(&link) {
                set.push_str(&format!(", #{name} = :{name}"));
                req = req
                    .expression_attribute_names(format!("#{name}"), name)
                    .expression_attribute_values(format!(":{name}"), value);
            }
            match req.update_expression(set).send().await.map_err(condition_refused) {
                Ok(_) | Err(StoreError::ConditionFailed) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(match out.last_evaluated_key() {
            Some(key) => Some(get_s(key, "code")?),
            None => None,
        })
    }

    async fn get_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: UnixMillis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("idempotency"))
            .key("pk", s(idempotency_pk(scope, key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        let Some(item) = out.item() else { return Ok(None) };
        let rec = IdempotencyRecord {
            scope: get_s(item, "scope")?,
            key: get_s(item, "key")?,
            request_hash: get_s(item, "request_hash")?,
            status: get_n(item, "status")?,
            body: get_s(item, "body")?,
            created_at: get_n(item, "created_at")?,
            expires_at: get_n(item, "expires_at")?,
        };
        Ok((rec.expires_at > now).then_some(rec))
    }
}

/// The attribute a link item keeps the token of the insert that wrote it in.
const INSERT_TOKEN: &str = "insert_token";

/// A token of one insert: this process's random hash keys over a counter (two inserts, of
/// this process or another, share one with odds of 2^-64).
fn insert_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = KEYS.get_or_init(Default::default).build_hasher();
    hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

impl DynamoStore {
    /// Whether the link stored under `code` was written by the insert given `token`
    /// (a consistent read).
    async fn inserted_by(&self, code: &str, token: u64) -> Result<bool, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .projection_expression("#token")
            .expression_attribute_names("#token", INSERT_TOKEN)
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(out
            .item()
            .and_then(|item| item.get(INSERT_TOKEN))
            .is_some_and(|held| *held == n(token)))
    }
}
