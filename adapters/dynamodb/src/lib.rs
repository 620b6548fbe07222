//! The distributed store on DynamoDB (or any DynamoDB-API endpoint, through the standard
//! AWS configuration). Every expression names its attributes through `#placeholders`, so
//! reserved words such as `day` and `name` never reach the parser.
//!
//! Tables (all named `<prefix><table>`; `provision` creates them):
//!
//! | table | key | what |
//! | --- | --- | --- |
//! | `links` | `code` | links; GSIs `by_owner` (`created_by`, `sort`), `by_time` (`list`, `sort`) and the sparse `pending` (`prop_shard`, `prop_until`: propagations pending); TTL `purge_at` |
//! | `idempotency` | `pk` = scope + key | first answers of creates; TTL `purge_at` |
//! | `keys` | `pk` = `hash#…` or `id#…` | API keys by hash (strongly consistent reads) and an id → hash pointer |
//! | `counters` | `name` | the KGS counter (`ADD`; its value is the high-water mark) and settings |
//! | `aliases` | `code` | the alias index: every custom alias, recorded before its link |
//! | `rollups` | `code`, `day` | clicks per day (`ADD`) |
//! | `batches` | `id` | click batches already applied; TTL `purge_at` |
//! | `audit` | `code`, `seq` | audit events |

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, Put, ScalarAttributeType, TimeToLiveSpecification, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use rebound_core::link::Deletion;
use rebound_core::RedirectKind;
use rebound_core::{Day, Link, UnixMillis};
use rebound_store::*;
use std::collections::HashMap;
use std::ops::Range;

type Item = HashMap<String, AttributeValue>;

/// The partition of the `by_time` index: every link, newest first.
const LIST_PARTITION: &str = "links";
/// The partition of the sparse `pending` index: only links with a propagation pending
/// carry it.
const PENDING_PARTITION: &str = "pending";
/// How long an applied batch id is remembered (redelivery after that is not expected).
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

/// The DynamoDB adapter.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    prefix: String,
}

fn unavailable<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

use rebound_store::sdk_error as sdk_err;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &Item, k: &str) -> Result<String, StoreError> {
    match item.get(k) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(StoreError::Corrupt(format!("attribute {k} missing or not a string"))),
    }
}

fn opt_s(item: &Item, k: &str) -> Option<String> {
    match item.get(k) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

fn get_n<T: std::str::FromStr>(item: &Item, k: &str) -> Result<T, StoreError> {
    opt_n(item, k)?.ok_or_else(|| StoreError::Corrupt(format!("attribute {k} missing")))
}

fn opt_n<T: std::str::FromStr>(item: &Item, k: &str) -> Result<Option<T>, StoreError> {
    match item.get(k) {
        Some(AttributeValue::N(v)) => v
            .parse()
            .map(Some)
            .map_err(|_| StoreError::Corrupt(format!("attribute {k} is not a number"))),
        None | Some(AttributeValue::Null(_)) => Ok(None),
        _ => Err(StoreError::Corrupt(format!("attribute {k} is not a number"))),
    }
}

fn get_bool(item: &Item, k: &str) -> Result<bool, StoreError> {
    match item.get(k) {
        Some(AttributeValue::Bool(b)) => Ok(*b),
        _ => Err(StoreError::Corrupt(format!("attribute {k} missing or not a boolean"))),
    }
}

/// Sort key of the listing indexes: newest first when read backwards.
fn sort_key(created_at: UnixMillis, code: &str) -> String {
    format!("{:015}#{}", created_at.max(0), code)
}

fn link_item(link: &Link) -> Item {
    let mut item = HashMap::from([
        ("code".to_owned(), s(&link.code)),
        ("long_url".to_owned(), s(&link.long_url)),
        ("redirect".to_owned(), n(link.redirect.status())),
        ("forward_query".to_owned(), AttributeValue::Bool(link.forward_query)),
        ("created_at".to_owned(), n(link.created_at)),
        ("created_by".to_owned(), s(&link.created_by)),
        ("is_active".to_owned(), AttributeValue::Bool(link.is_active)),
        ("version".to_owned(), n(link.version)),
        ("list".to_owned(), s(LIST_PARTITION)),
        ("sort".to_owned(), s(sort_key(link.created_at, &link.code))),
    ]);
    let mut opt = |k: &str, v: Option<AttributeValue>| {
        if let Some(v) = v {
            item.insert(k.to_owned(), v);
        }
    };
    opt("expires_at", link.expires_at.map(n));
    opt("deleted_at", link.deleted_at.map(n));
    opt("deleted_by", link.deleted_by.as_ref().map(s));
    opt("delete_reason", link.delete_reason.as_ref().map(s));
    // DynamoDB's TTL reads epoch seconds.
    opt("purge_at", link.purge_at.map(|p| n(p / 1000)));
    opt("purge_at_ms", link.purge_at.map(n));
    item
}

fn link_from_item(item: &Item) -> Result<Link, StoreError> {
    let redirect: u16 = get_n(item, "redirect")?;
    Ok(Link {
        code: get_s(item, "code")?,
        long_url: get_s(item, "long_url")?,
        redirect: RedirectKind::from_status(redirect)
            .ok_or_else(|| StoreError::Corrupt(format!("redirect {redirect}")))?,
        forward_query: get_bool(item, "forward_query")?,
        created_at: get_n(item, "created_at")?,
        created_by: get_s(item, "created_by")?,
        is_active: get_bool(item, "is_active")?,
        version: get_n(item, "version")?,
        expires_at: opt_n(item, "expires_at")?,
        deleted_at: opt_n(item, "deleted_at")?,
        deleted_by: opt_s(item, "deleted_by"),
        delete_reason: opt_s(item, "delete_reason"),
        purge_at: opt_n(item, "purge_at_ms")?,
    })
}

fn key_item(key: &ApiKeyRecord) -> Item {
    let mut item = HashMap::from([
        ("pk".to_owned(), s(format!("hash#{}", key.key_hash))),
        ("id".to_owned(), s(&key.id)),
        ("name".to_owned(), s(&key.name)),
        ("role".to_owned(), s(key.role.as_str())),
        ("key_hash".to_owned(), s(&key.key_hash)),
        ("created_at".to_owned(), n(key.created_at)),
    ]);
    if let Some(r) = key.revoked_at {
        item.insert("revoked_at".to_owned(), n(r));
    }
    item
}

fn key_from_item(item: &Item) -> Result<ApiKeyRecord, StoreError> {
    let role = get_s(item, "role")?;
    Ok(ApiKeyRecord {
        id: get_s(item, "id")?,
        name: get_s(item, "name")?,
        role: Role::parse(&role).ok_or_else(|| StoreError::Corrupt(format!("role {role}")))?,
        key_hash: get_s(item, "key_hash")?,
        created_at: get_n(item, "created_at")?,
        revoked_at: opt_n(item, "revoked_at")?,
    })
}

fn idempotency_pk(scope: &str, key: &str) -> String {
    // Scopes never contain a newline; keys are visible ASCII.
    format!("{scope}\n{key}")
}

/// A failed `UpdateItem`: `ConditionFailed` when its condition did not hold.
fn update_refused<R: std::fmt::Debug + Send + Sync + 'static>(
    e: aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError, R>,
) -> StoreError {
    match e.as_service_error() {
        Some(s) if s.is_conditional_check_failed_exception() => StoreError::ConditionFailed,
        _ => sdk_err(e),
    }
}

/// Which items of a cancelled transaction failed their condition.
fn cancelled_conditions<R>(
    e: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        R,
    >,
) -> Option<Vec<bool>> {
    match e.as_service_error()? {
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => {
            Some(
                c.cancellation_reasons()
                    .iter()
                    .map(|r| r.code() == Some("ConditionalCheckFailed"))
                    .collect(),
            )
        }
        _ => None,
    }
}

impl DynamoStore {
    /// A store on `client`, with tables named `<prefix><table>`.
    pub fn new(client: Client, prefix: impl Into<String>) -> DynamoStore {
        DynamoStore {
            client,
            prefix: prefix.into(),
        }
    }

    /// A client from the standard AWS configuration (environment, profile, credential
    /// chain, `AWS_ENDPOINT_URL`), with short timeouts: the redirect path budgets 1 s.
    pub async fn client_from_env() -> Client {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(std::time::Duration::from_millis(500))
            .operation_attempt_timeout(std::time::Duration::from_secs(2))
            .build();
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(timeouts)
            .load()
            .await;
        Client::new(&conf)
    }

    fn table(&self, name: &str) -> String {
        format!("{}{}", self.prefix, name)
    }

    /// Creates every table (with TTL where it applies) that does not exist yet. Idempotent.
    /// Returns the tables it created.
    pub async fn provision(&self) -> Result<Vec<String>, StoreError> {
        self.create_tables(true).await
    }

    /// Creates the tables, with or without enabling TTL (for engines that lack it).
    pub async fn create_tables(&self, with_ttl: bool) -> Result<Vec<String>, StoreError> {
        use ScalarAttributeType::{N, S};
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(unavailable)
        };
        let attr = |name: &str, t: ScalarAttributeType| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(t)
                .build()
                .map_err(unavailable)
        };
        let gsi = |name: &str, hash: &str, range: &str| -> Result<GlobalSecondaryIndex, StoreError> {
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .key_schema(key(hash, KeyType::Hash)?)
                .key_schema(key(range, KeyType::Range)?)
                .projection(Projection::builder().projection_type(ProjectionType::All).build())
                .build()
                .map_err(unavailable)
        };
        struct Table {
            name: &'static str,
            keys: Vec<(&'static str, KeyType, ScalarAttributeType)>,
            extra_attrs: Vec<(&'static str, ScalarAttributeType)>,
            indexes: Vec<(&'static str, &'static str, &'static str)>,
            ttl: bool,
        }
        let tables = [
            Table {
                name: "links",
                keys: vec![("code", KeyType::Hash, S)],
                extra_attrs: vec![
                    ("created_by", S),
                    ("sort", S),
                    ("list", S),
                    ("prop_shard", S),
                    ("prop_until", N),
                ],
                indexes: vec![
                    ("by_owner", "created_by", "sort"),
                    ("by_time", "list", "sort"),
                    ("pending", "prop_shard", "prop_until"),
                ],
                ttl: true,
            },
            Table {
                name: "aliases",
                keys: vec![("code", KeyType::Hash, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: false,
            },
            Table {
                name: "idempotency",
                keys: vec![("pk", KeyType::Hash, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: true,
            },
            Table {
                name: "keys",
                keys: vec![("pk", KeyType::Hash, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: false,
            },
            Table {
                name: "counters",
                keys: vec![("name", KeyType::Hash, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: false,
            },
            Table {
                name: "rollups",
                keys: vec![("code", KeyType::Hash, S), ("day", KeyType::Range, N)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: false,
            },
            Table {
                name: "batches",
                keys: vec![("id", KeyType::Hash, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: true,
            },
            Table {
                name: "audit",
                keys: vec![("code", KeyType::Hash, S), ("seq", KeyType::Range, S)],
                extra_attrs: vec![],
                indexes: vec![],
                ttl: false,
            },
        ];
        let existing = self.existing_tables().await?;
        let mut created = Vec::new();
        for t in tables {
            let name = self.table(t.name);
            if existing.contains(&name) {
                // A table made before one of its indexes gets it (the links' `pending`).
                for (index, hash, range) in &t.indexes {
                    let defs = t
                        .extra_attrs
                        .iter()
                        .filter(|(a, _)| a == hash || a == range)
                        .map(|(a, ty)| attr(a, ty.clone()))
                        .collect::<Result<Vec<_>, _>>()?;
                    if self.add_index(&name, gsi(index, hash, range)?, defs).await? {
                        created.push(format!("{name}/{index}"));
                    }
                }
                continue;
            }
            let mut req = self
                .client
                .create_table()
                .table_name(&name)
                .billing_mode(BillingMode::PayPerRequest);
            for (k, kind, ty) in &t.keys {
                req = req
                    .key_schema(key(k, kind.clone())?)
                    .attribute_definitions(attr(k, ty.clone())?);
            }
            for (k, ty) in &t.extra_attrs {
                req = req.attribute_definitions(attr(k, ty.clone())?);
            }
            for (index, hash, range) in &t.indexes {
                req = req.global_secondary_indexes(gsi(index, hash, range)?);
            }
            match req.send().await {
                Ok(_) => {}
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => continue,
                Err(e) => return Err(sdk_err(e)),
            }
            if t.ttl && with_ttl {
                let spec = TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name("purge_at")
                    .build()
                    .map_err(unavailable)?;
                self.client
                    .update_time_to_live()
                    .table_name(&name)
                    .time_to_live_specification(spec)
                    .send()
                    .await
                    .map_err(sdk_err)?;
            }
            created.push(name);
        }
        for name in &created {
            self.wait_active(name.split('/').next().unwrap_or(name)).await?;
        }
        Ok(created)
    }

    /// Adds `index` to the existing table `name` unless it has it; whether it was added.
    async fn add_index(
        &self,
        name: &str,
        index: GlobalSecondaryIndex,
        defs: Vec<AttributeDefinition>,
    ) -> Result<bool, StoreError> {
        use aws_sdk_dynamodb::types::{CreateGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
        let out = self
            .client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(sdk_err)?;
        let has = out.table().is_some_and(|t| {
            t.global_secondary_indexes()
                .iter()
                .any(|i| i.index_name() == Some(index.index_name()))
        });
        if has {
            return Ok(false);
        }
        let action = CreateGlobalSecondaryIndexAction::builder()
            .index_name(index.index_name())
            .set_key_schema(Some(index.key_schema().to_vec()))
            .set_projection(index.projection().cloned())
            .build()
            .map_err(unavailable)?;
        self.client
            .update_table()
            .table_name(name)
            .set_attribute_definitions(Some(defs))
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().create(action).build())
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(true)
    }

    /// Waits until a new table and its indexes are ACTIVE (DynamoDB creates them
    /// asynchronously; writes before that fail).
    async fn wait_active(&self, name: &str) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{IndexStatus, TableStatus};
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let out = self
                .client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(sdk_err)?;
            if let Some(t) = out.table() {
                let indexes_ready = t
                    .global_secondary_indexes()
                    .iter()
                    .all(|i| i.index_status() == Some(&IndexStatus::Active) || i.index_status().is_none());
                if t.table_status() == Some(&TableStatus::Active) && indexes_ready {
                    return Ok(());
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(StoreError::Unavailable(format!("table {name} did not become active")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    async fn existing_tables(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .list_tables()
                .set_exclusive_start_table_name(start)
                .send()
                .await
                .map_err(sdk_err)?;
            names.extend(out.table_names().iter().cloned());
            match out.last_evaluated_table_name() {
                Some(last) => start = Some(last.to_owned()),
                None => return Ok(names),
            }
        }
    }

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
            .map_err(unavailable)?;
        let Some(rec) = idempotency else {
            return match self
                .client
                .put_item()
                .table_name(self.table("links"))
                .set_item(Some(link_item(link)))
                .condition_expression("attribute_not_exists(#code)")
                .expression_attribute_names("#code", "code")
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
                {
                    Err(StoreError::AlreadyExists)
                }
                Err(e) => Err(sdk_err(e)),
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
            .map_err(unavailable)?;
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
            .client
            .update_item()
            .table_name(self.table("links"))
            .key("code", s(code))
            .condition_expression("attribute_exists(#code) AND #version = :expected AND #active = :true")
            .expression_attribute_names("#code", "code")
            .expression_attribute_names("#active", "is_active")
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#dat", "deleted_at")
            .expression_attribute_names("#dby", "deleted_by")
            .expression_attribute_names("#purge", "purge_at")
            .expression_attribute_names("#purgems", "purge_at_ms")
            .expression_attribute_names("#pshard", "prop_shard")
            .expression_attribute_names("#pver", "prop_version")
            .expression_attribute_names("#powner", "prop_owner")
            .expression_attribute_names("#puntil", "prop_until")
            .expression_attribute_values(":purgems", n(next.purge_at.unwrap_or(deletion.at)))
            .expression_attribute_values(":false", AttributeValue::Bool(false))
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .expression_attribute_values(":next", n(next.version))
            .expression_attribute_values(":expected", n(expected_version))
            .expression_attribute_values(":dat", n(deletion.at))
            .expression_attribute_values(":dby", s(&deletion.by))
            .expression_attribute_values(":purge", n(next.purge_at.unwrap_or(deletion.at) / 1000))
            .expression_attribute_values(":pshard", s(PENDING_PARTITION))
            .expression_attribute_values(":powner", s(&lease.owner))
            .expression_attribute_values(":puntil", n(lease.until));
        if let Some(reason) = &deletion.reason {
            update.push_str(", #reason = :reason");
            req = req
                .expression_attribute_names("#reason", "delete_reason")
                .expression_attribute_values(":reason", s(reason));
        }
        match req.update_expression(update).send().await {
            Ok(_) => Ok(next),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                match self.get_link(code).await? {
                    None => Err(StoreError::NotFound),
                    Some(_) => Err(StoreError::ConditionFailed),
                }
            }
            Err(e) => Err(sdk_err(e)),
        }
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
        link_from_item(out.map_err(update_refused)?.attributes().ok_or(StoreError::NotFound)?)
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
        out.map(|_| ()).map_err(update_refused)
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
                .map_err(unavailable)
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
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::NotFound)
            }
            Err(e) => Err(sdk_err(e)),
        }
    }
}

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
        match put {
            Ok(_) => return Ok(candidate.to_owned()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) => {}
            Err(e) => return Err(sdk_err(e)),
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
            .map_err(unavailable)?;
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
                .map_err(unavailable)?;
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

#[async_trait]
impl AuditLog for DynamoStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut req = self
            .client
            .put_item()
            .table_name(self.table("audit"))
            .item("code", s(event.code.clone().unwrap_or_else(|| "-".into())))
            .item("seq", s(format!("{:015}#{:x}", event.at.max(0), unique)))
            .item("at", n(event.at))
            .item("actor", s(&event.actor))
            .item("action", s(&event.action))
            .item("outcome", s(&event.outcome));
        if let Some(r) = &event.reason {
            req = req.item("reason", s(r));
        }
        req.send().await.map_err(sdk_err)?;
        Ok(())
    }

    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(self.table("audit"))
            .key_condition_expression("#code = :code")
            .expression_attribute_names("#code", "code")
            .expression_attribute_values(":code", s(code))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.items()
            .iter()
            .map(|i| {
                Ok(AuditEvent {
                    at: get_n(i, "at")?,
                    actor: get_s(i, "actor")?,
                    action: get_s(i, "action")?,
                    code: opt_s(i, "code").filter(|c| c != "-"),
                    reason: opt_s(i, "reason"),
                    outcome: get_s(i, "outcome")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DynamoDB-API endpoint the test scripts started (moto), or none.
    fn endpoint() -> String {
        rebound_store::testing::endpoint("REBOUND_TEST_DYNAMODB_URL")
    }

    async fn fresh_store() -> DynamoStore {
        let conf = rebound_store::testing::local_aws_config(&endpoint()).await;
        let prefix = format!(
            "t{}_",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let store = DynamoStore::new(Client::new(&conf), prefix);
        let created = store.provision().await.unwrap();
        assert_eq!(created.len(), 8);
        assert!(
            store.provision().await.unwrap().is_empty(),
            "provisioning twice changes nothing"
        );
        store
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn provisioning_tables_made_before_the_alias_index_adds_only_it() {
        let store = fresh_store().await;
        // The tables as an older `rebound provision` left them: all but the alias index.
        let aliases = store.table("aliases");
        store.client.delete_table().table_name(&aliases).send().await.unwrap();
        assert_eq!(store.provision().await.unwrap(), vec![aliases]);
        store.record_alias("after-upgrade").await.unwrap();
        assert_eq!(store.list_aliases(None, 10).await.unwrap(), ["after-upgrade"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn provisioning_a_links_table_made_before_the_pending_index_adds_it() {
        use aws_sdk_dynamodb::types::{DeleteGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
        let store = fresh_store().await;
        let links = store.table("links");
        let drop_index = DeleteGlobalSecondaryIndexAction::builder()
            .index_name("pending")
            .build()
            .unwrap();
        store
            .client
            .update_table()
            .table_name(&links)
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().delete(drop_index).build())
            .send()
            .await
            .unwrap();
        assert!(store.pending_propagations(0, 10).await.is_err(), "no index: no listing");
        assert_eq!(store.provision().await.unwrap(), vec![format!("{links}/pending")]);
        assert!(store.provision().await.unwrap().is_empty());
        assert_eq!(store.pending_propagations(0, 10).await.unwrap(), vec![]);
    }

    /// dynalite parses expressions like real DynamoDB (reserved words included), but has
    /// neither transactions nor TTL: it runs the rest of the contract.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNALITE_URL (the test services): scripts/test starts them and runs it"]
    async fn expressions_pass_a_strict_dynamodb_engine() {
        let conf =
            rebound_store::testing::local_aws_config(&rebound_store::testing::endpoint("REBOUND_TEST_DYNALITE_URL"))
                .await;
        let prefix = format!(
            "s{}_",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let store = DynamoStore::new(Client::new(&conf), prefix);
        assert_eq!(store.create_tables(false).await.unwrap().len(), 8);
        rebound_store::conformance::run_without_transactions(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn dynamodb_store_passes_the_contract() {
        let store = fresh_store().await;
        rebound_store::conformance::run_all(&store).await;
    }
}
