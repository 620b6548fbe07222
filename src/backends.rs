//! Opening the backends the settings choose: the store (SQLite or DynamoDB, with every
//! call counted under its adapter's name), Redis, the SQS click queue; and the first
//! start's operator key.

use crate::settings::{QueueChoice, Settings, StoreChoice};
use anyhow::Context;
use rebound_core::Clock;
use rebound_dynamodb::DynamoStore;
use rebound_redis::RedisCache;
use rebound_sqlite::SqliteStore;
use rebound_sqs::SqsClickQueue;
use rebound_store::call_metrics::{AdapterMetrics, MeteredStore};
use rebound_store::{ClickInbox, Store};
use std::sync::Arc;

/// The embedded store's file inside the data directory.
pub const DB_FILE: &str = "rebound.db";

/// Opens the configured store.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match &settings.store {
        StoreChoice::Sqlite => {
            let path = settings.data_dir.join(DB_FILE);
            let store = SqliteStore::open(&path)
                .with_context(|| format!("opening the embedded store at {}", path.display()))?;
            Ok(Arc::new(store))
        }
        StoreChoice::DynamoDb { table_prefix } => Ok(Arc::new(DynamoStore::new(
            DynamoStore::client_from_env().await,
            table_prefix.clone(),
        ))),
    }
}

/// The store with every call counted and timed under its adapter's name.
pub fn metered(store: Arc<dyn Store>, settings: &Settings, adapters: &AdapterMetrics) -> Arc<dyn Store> {
    let adapter = match settings.store {
        StoreChoice::Sqlite => "sqlite",
        StoreChoice::DynamoDb { .. } => "dynamodb",
    };
    Arc::new(MeteredStore::new(store, adapters, adapter))
}

/// Opens Redis when configured, and checks its settings with one connection: refused
/// credentials or an untrusted certificate stop the start with an error naming the
/// setting; an unreachable Redis does not (the cache connects when it can).
pub async fn open_redis(settings: &Settings) -> anyhow::Result<Option<Arc<RedisCache>>> {
    let Some(url) = settings.redis_url.as_deref() else {
        return Ok(None);
    };
    let cache = match &settings.redis_ca {
        Some(path) => {
            let pem = std::fs::read(path).with_context(|| format!("REBOUND_REDIS_CA: reading {}", path.display()))?;
            RedisCache::with_ca(url, &settings.redis_prefix, pem)?
        }
        None => RedisCache::new(url, &settings.redis_prefix).context("REBOUND_REDIS_URL")?,
    };
    match cache.check_settings().await? {
        None => tracing::info!("connected to Redis"),
        Some(why) => tracing::warn!(error = %why, "Redis is not reachable yet; connecting when it is"),
    }
    Ok(Some(Arc::new(cache)))
}

/// Opens the SQS click queue and its dead-letter queue when configured.
pub async fn open_queue(settings: &Settings) -> anyhow::Result<Option<(Arc<dyn ClickInbox>, Arc<dyn ClickInbox>)>> {
    match &settings.queue {
        QueueChoice::Embedded => Ok(None),
        QueueChoice::Sqs { queue_name } => {
            let client = SqsClickQueue::client_from_env().await;
            let open = |name: String| {
                let client = client.clone();
                async move {
                    SqsClickQueue::open(client, &name)
                        .await
                        .with_context(|| format!("opening the SQS queue {name} (run `rebound provision` first)"))
                }
            };
            Ok(Some((
                Arc::new(open(queue_name.clone()).await?),
                Arc::new(open(format!("{queue_name}-dlq")).await?),
            )))
        }
    }
}

/// Prints the initial operator key once, the first time a store without a configured
/// bootstrap key starts.
pub async fn announce_initial_key(settings: &Settings, store: &dyn Store, clock: &dyn Clock) -> anyhow::Result<()> {
    if settings.bootstrap_key.is_some() {
        return Ok(());
    }
    if let Some(key) = rebound_control_plane::ensure_initial_operator_key(store, clock).await? {
        println!("rebound: initial operator API key (shown once, keep it): {key}");
        println!("rebound:   export REBOUND_API_KEY={key}");
    }
    Ok(())
}
