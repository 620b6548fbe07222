//! The tables, their indexes and TTL: created by `rebound provision` when missing, and an
//! index added to a table made before it.

use crate::store::{sdk_err, unbuilt};
use crate::DynamoStore;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use rebound_store::StoreError;

impl DynamoStore {
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
                .map_err(unbuilt)
        };
        let attr = |name: &str, t: ScalarAttributeType| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(t)
                .build()
                .map_err(unbuilt)
        };
        let gsi = |name: &str, hash: &str, range: &str| -> Result<GlobalSecondaryIndex, StoreError> {
            GlobalSecondaryIndex::builder()
                .index_name(name)
                .key_schema(key(hash, KeyType::Hash)?)
                .key_schema(key(range, KeyType::Range)?)
                .projection(Projection::builder().projection_type(ProjectionType::All).build())
                .build()
                .map_err(unbuilt)
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
                    ("host_zone", S),
                    ("host_key", S),
                    ("domain_id", S),
                    ("rules_shard", S),
                ],
                indexes: vec![
                    ("by_owner", "created_by", "sort"),
                    ("by_time", "list", "sort"),
                    ("pending", "prop_shard", "prop_until"),
                    // Sparse, of active links alone: a threat list's new entries look up
                    // the links on their hosts, a domain's removal its links.
                    ("by_target_host", "host_zone", "host_key"),
                    ("by_domain", "domain_id", "code"),
                    // Sparse, of active links with rules: a rescan checks their targets.
                    ("by_rules", "rules_shard", "code"),
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
                name: "breakdowns",
                keys: vec![("code", KeyType::Hash, S), ("key", KeyType::Range, S)],
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
                        .keys
                        .iter()
                        .map(|(a, _, ty)| (a, ty))
                        .chain(t.extra_attrs.iter().map(|(a, ty)| (a, ty)))
                        .filter(|(a, _)| *a == hash || *a == range)
                        .map(|(a, ty)| attr(a, ty.clone()))
                        .collect::<Result<Vec<_>, _>>()?;
                    if self.add_index(&name, gsi(index, hash, range)?, defs).await? {
                        // DynamoDB builds one new index of a table at a time.
                        self.wait_active(&name).await?;
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
                    .map_err(unbuilt)?;
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
            .map_err(unbuilt)?;
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
                return Err(StoreError::unavailable(
                    "DynamoDB",
                    format!("table {name} did not become active"),
                ));
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
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aws_sdk_dynamodb::Client;
    use rebound_store::{LinkReads, LinkStore};

    /// The DynamoDB-API endpoint the test scripts started (moto), or none.
    pub(crate) fn endpoint() -> String {
        rebound_store::testing::endpoint("REBOUND_TEST_DYNAMODB_URL")
    }

    pub(crate) async fn fresh_store() -> DynamoStore {
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
        assert_eq!(created.len(), 9);
        assert!(
            store.provision().await.unwrap().is_empty(),
            "provisioning twice changes nothing"
        );
        store
    }

    /// Drops `index` from the links table, as a table made before it lacks it.
    async fn drop_index(store: &DynamoStore, index: &str) {
        use aws_sdk_dynamodb::types::{DeleteGlobalSecondaryIndexAction, GlobalSecondaryIndexUpdate};
        let drop = DeleteGlobalSecondaryIndexAction::builder()
            .index_name(index)
            .build()
            .unwrap();
        store
            .client
            .update_table()
            .table_name(store.table("links"))
            .global_secondary_index_updates(GlobalSecondaryIndexUpdate::builder().delete(drop).build())
            .send()
            .await
            .unwrap();
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
        let store = fresh_store().await;
        let links = store.table("links");
        drop_index(&store, "pending").await;
        assert!(store.pending_propagations(0, 10).await.is_err(), "no index: no listing");
        assert_eq!(store.provision().await.unwrap(), vec![format!("{links}/pending")]);
        assert!(store.provision().await.unwrap().is_empty());
        assert_eq!(store.pending_propagations(0, 10).await.unwrap(), vec![]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn links_written_before_the_host_and_domain_indexes_are_put_in_them() {
        use rebound_core::{Link, RedirectKind};
        use rebound_store::LinkStore;
        let store = fresh_store().await;
        let links = store.table("links");
        for index in ["by_target_host", "by_domain"] {
            drop_index(&store, index).await;
        }
        // Links as an older version wrote them: no index attributes, no mark.
        let (a, b) = ("olda", "oldb.d1");
        for code in [a, b] {
            let link = Link::new_active(
                code.into(),
                format!("https://w.example/{code}"),
                RedirectKind::Found,
                false,
                1,
                "o".into(),
                None,
            );
            store.insert_link(&link, None).await.unwrap();
            store
                .client
                .update_item()
                .table_name(&links)
                .key("code", crate::item::s(code))
                .update_expression("REMOVE #z, #k, #d, #i")
                .expression_attribute_names("#z", "host_zone")
                .expression_attribute_names("#k", "host_key")
                .expression_attribute_names("#d", "domain_id")
                .expression_attribute_names("#i", "indexed")
                .send()
                .await
                .unwrap();
        }
        assert_eq!(
            store.provision().await.unwrap(),
            vec![format!("{links}/by_target_host"), format!("{links}/by_domain")]
        );
        let found = store.links_by_target_host("example.w.", 10, None).await.unwrap();
        assert!(found.links.is_empty(), "not in the index before they are put in it");
        let mut cursor = store.index_older_links(None, 1).await.unwrap();
        while let Some(c) = cursor {
            cursor = store.index_older_links(Some(&c), 1).await.unwrap();
        }
        let found = store.links_by_target_host("example.w.", 10, None).await.unwrap();
        let mut codes: Vec<_> = found.links.iter().map(|l| l.code.as_str()).collect();
        codes.sort();
        assert_eq!(codes, [a, b]);
        let on_d1 = store.links_on_domain("d1", 10, None).await.unwrap();
        assert_eq!(on_d1.links.iter().map(|l| l.code.as_str()).collect::<Vec<_>>(), [b]);
    }
}
