//! Opening the backends the settings choose: the store (SQLite or DynamoDB, with every
//! call counted under its adapter's name, its data directory held by one process at a
//! time), Redis, the SQS click queue; and the first start's operator key.

use crate::config::{Setting, REDIS_CA, REDIS_CLUSTER, REDIS_PREFIX, REDIS_URL};
use crate::settings::{QueueChoice, Settings, StoreChoice};
use anyhow::Context;
use rebound_core::Causes;
use rebound_core::Clock;
use rebound_dynamodb::DynamoStore;
use rebound_metering::{AdapterMetrics, MeteredClickStream, MeteredStore};
use rebound_redis::{RedisCache, RedisSettingError};
use rebound_sqlite::SqliteStore;
use rebound_sqs::SqsClickQueue;
use rebound_store::click_stream::ClickStreamSink;
use rebound_store::{ClickInbox, LinkReads, Store};
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The embedded store's file inside the data directory.
pub const DB_FILE: &str = "rebound.db";
/// The file whose advisory lock holds the data directory; the holder's pid is written in it.
pub const LOCK_FILE: &str = "rebound.lock";

/// The data directory, held by this process until it is dropped or the process exits: two
/// processes on one embedded store would each keep serving from its caches what the other
/// deleted, and never see the other's new aliases.
#[derive(Debug)]
pub struct DataDirLock {
    file: Arc<File>,
}

impl DataDirLock {
    /// Holds `dir` (created if missing), or fails at once naming it and the holder's pid.
    pub fn hold(dir: &Path) -> anyhow::Result<DataDirLock> {
        let (path, file) = open_lock_file(dir)?;
        match file.try_lock() {
            Ok(()) => {
                write_pid(&file, &path)?;
                Ok(DataDirLock { file: Arc::new(file) })
            }
            Err(TryLockError::WouldBlock) => anyhow::bail!(
                "the data directory {} is in use by another rebound (pid {}, holding {}): stop it first, \
                 or start this one with --upgrade to take over from it",
                dir.display(),
                holder(&file),
                path.display()
            ),
            Err(TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
        }
    }

    /// Holds `dir` for a process taking over from the one holding it (`--upgrade`): that one
    /// drains while this one starts, so the directory is held once it exits (waited for on a
    /// thread of its own), or at once when nobody holds it.
    pub fn take_over(dir: &Path) -> anyhow::Result<DataDirLock> {
        let (path, file) = open_lock_file(dir)?;
        match file.try_lock() {
            Ok(()) => write_pid(&file, &path)?,
            Err(TryLockError::WouldBlock) => {
                let file = Arc::new(file);
                let waiting = file.clone();
                tracing::info!(dir = %dir.display(), holder = %holder(&file), "taking over the data directory once its holder exits");
                std::thread::Builder::new()
                    .name("rebound-data-dir".into())
                    .spawn(move || match waiting.lock() {
                        Ok(()) => match write_pid(&waiting, &path) {
                            Ok(()) => tracing::info!("the previous process exited; this one holds the data directory"),
                            Err(e) => tracing::warn!(error = %format!("{e:#}"), "holding the data directory without its pid written"),
                        },
                        Err(e) => tracing::error!(error = %e, path = %path.display(), "cannot lock the data directory"),
                    })
                    .context("starting the thread that waits for the data directory")?;
                return Ok(DataDirLock { file });
            }
            Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
        Ok(DataDirLock { file: Arc::new(file) })
    }

    /// Whether this process holds the directory now (a take-over may still be waiting).
    pub fn is_held(&self) -> bool {
        holder(&self.file) == std::process::id().to_string()
    }
}

fn open_lock_file(dir: &Path) -> anyhow::Result<(PathBuf, File)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating the data directory {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((path, file))
}

fn write_pid(mut file: &File, path: &Path) -> anyhow::Result<()> {
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("writing this process's pid into {}", path.display()))
}

/// The pid written in the lock file, as written ("unknown" when it cannot be read).
fn holder(mut file: &File) -> String {
    let mut text = String::new();
    match file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
    {
        Ok(_) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => "unknown".to_owned(),
    }
}

/// Where the settings' store is, for an error: the data directory or the DynamoDB tables.
pub fn store_place(settings: &Settings) -> String {
    match &settings.store {
        StoreChoice::Sqlite => format!("the data directory {}", settings.data_dir.display()),
        StoreChoice::DynamoDb { table_prefix } => format!("the DynamoDB tables prefixed {table_prefix:?}"),
    }
}

/// Opens the configured store.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match &settings.store {
        StoreChoice::Sqlite => {
            let path = settings.data_dir.join(DB_FILE);
            let store = SqliteStore::open(&path)
                .with_context(|| format!("opening the embedded store at {}", path.display()))?;
            Ok(Arc::new(store))
        }
        // Each region adds clicks to its own rollup items (docs/regions.md).
        StoreChoice::DynamoDb { table_prefix } => Ok(Arc::new(
            DynamoStore::new(DynamoStore::client_from_env().await, table_prefix.clone())
                .with_rollup_slot(settings.api.region_slot),
        )),
    }
}

/// The home region's replica of the store, for a proxy outside the home region
/// (`home_store_region`), its calls counted under `dynamodb_home`.
pub async fn open_home_store(settings: &Settings, adapters: &AdapterMetrics) -> Option<Arc<dyn LinkReads>> {
    let (home, StoreChoice::DynamoDb { table_prefix }) = (settings.home_store.as_ref()?, &settings.store) else {
        return None;
    };
    let client = DynamoStore::client_for(&home.region, home.endpoint.as_deref()).await;
    let store: Arc<dyn Store> = Arc::new(DynamoStore::new(client, table_prefix.clone()));
    tracing::info!(region = %home.region, "misses are read from the home region's replica before a 404");
    Some(Arc::new(MeteredStore::new(store, adapters, "dynamodb_home")))
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
    let cache = redis_cache(settings, url, redis_ca(settings)?).map_err(named)?;
    match cache.check_settings().await.map_err(named)? {
        None => tracing::info!("connected to Redis"),
        Some(why) => tracing::warn!(error = %Causes(&why), "Redis is not reachable yet; connecting when it is"),
    }
    Ok(Some(Arc::new(cache)))
}

/// The certificate authorities of Redis's certificate (`redis_ca`), when set.
pub fn redis_ca(settings: &Settings) -> anyhow::Result<Option<Vec<u8>>> {
    match &settings.redis_ca {
        Some(path) => {
            Ok(Some(std::fs::read(path).with_context(|| {
                format!("{}: reading {}", var(&REDIS_CA), path.display())
            })?))
        }
        None => Ok(None),
    }
}

/// A cache on `url` (with `redis_cluster`, a comma-separated list of seed nodes), under the
/// deployment's prefix, trusting `ca`.
pub fn redis_cache(settings: &Settings, url: &str, ca: Option<Vec<u8>>) -> Result<RedisCache, RedisSettingError> {
    match (settings.redis_cluster, ca) {
        (true, ca) => {
            let seeds: Vec<&str> = url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
            RedisCache::cluster(&seeds, &settings.redis_prefix, ca)
        }
        (false, Some(pem)) => RedisCache::with_ca(url, &settings.redis_prefix, pem),
        (false, None) => RedisCache::new(url, &settings.redis_prefix),
    }
}

/// A setting's variable, as an error names it.
fn var<T>(setting: &Setting<T>) -> &'static str {
    setting.var.unwrap_or(setting.key)
}

/// A wrong Redis setting, under the name of the setting to fix: the adapter tells what is
/// wrong with the values it was given, only the binary knows where they were set.
fn named(e: RedisSettingError) -> anyhow::Error {
    let setting = match &e {
        RedisSettingError::Url(_) | RedisSettingError::Credentials(_) => var(&REDIS_URL).to_owned(),
        RedisSettingError::Ca(_) => var(&REDIS_CA).to_owned(),
        RedisSettingError::CaWithoutTls => format!("{} with {}", var(&REDIS_CA), var(&REDIS_URL)),
        RedisSettingError::Seeds(_) => format!("{} with {}", var(&REDIS_URL), var(&REDIS_CLUSTER)),
        RedisSettingError::PrefixWithBrace => format!("{} with {}", var(&REDIS_PREFIX), var(&REDIS_CLUSTER)),
        RedisSettingError::Certificate(_) => format!(
            "{} (the authorities that sign Redis's certificate), or the host in {}",
            var(&REDIS_CA),
            var(&REDIS_URL)
        ),
    };
    anyhow::Error::new(e).context(setting)
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

/// The click stream's Kinesis stream, when `clicks.kinesis_stream` is set: opened on its
/// first put (a data plane starts while Kinesis is unreachable), its puts counted and timed.
pub async fn open_click_stream(settings: &Settings, adapters: &AdapterMetrics) -> Option<Arc<dyn ClickStreamSink>> {
    let stream = &settings.click_stream.as_ref()?.stream;
    let client = rebound_kinesis::client_from_env().await;
    Some(Arc::new(MeteredClickStream::new(
        Arc::new(rebound_kinesis::LazyClickStream::new(client, stream.clone())),
        adapters,
        "kinesis",
        "put_records",
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    // An advisory lock belongs to an open file, so two opens in one process contend as two
    // processes would.
    #[test]
    fn a_held_directory_is_refused_naming_it_and_the_holder_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = DataDirLock::hold(&data).unwrap();
        assert!(first.is_held());
        let refused = DataDirLock::hold(&data).unwrap_err().to_string();
        assert!(refused.contains(&data.display().to_string()), "{refused}");
        assert!(refused.contains(&format!("pid {}", std::process::id())), "{refused}");
        assert!(refused.contains("--upgrade"), "{refused}");
        drop(first);
        let again = DataDirLock::hold(&data).unwrap();
        assert!(again.is_held());
    }

    #[test]
    fn a_take_over_starts_beside_the_holder_and_holds_the_directory_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::hold(dir.path()).unwrap();
        // Pretend the holder is another process: the pid it wrote is not ours.
        std::fs::write(dir.path().join(LOCK_FILE), "4194305\n").unwrap();
        let second = DataDirLock::take_over(dir.path()).unwrap();
        assert!(!second.is_held(), "still the holder's");
        let refused = DataDirLock::hold(dir.path()).unwrap_err().to_string();
        assert!(refused.contains("pid 4194305"), "{refused}");
        drop(first);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !second.is_held() {
            assert!(std::time::Instant::now() < deadline, "never held after the release");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(DataDirLock::hold(dir.path()).is_err());
        // Nobody holding it: held at once.
        drop(second);
        assert!(DataDirLock::take_over(dir.path()).unwrap().is_held());
    }
}
