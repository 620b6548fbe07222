//! [`SqliteStore`]: the two files, their connections (one writer each, a few readers with
//! the clicks file attached) and the blocking pool every call runs on.

use crate::error::sql_err;
use crate::schema::{
    add_missing_columns, index_older_links, move_rollups_out_of_the_main_file, CLICKS_ADDED_COLUMNS, CLICKS_SCHEMA,
    MAIN_ADDED_COLUMNS, MAIN_INDEXES, SCHEMA,
};
use rebound_store::StoreError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const READERS: usize = 4;

struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    /// Writes the click rollups (the clicks file).
    clicks_writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    /// One per reader: a read waits for one here, off the blocking pool, so that the pool
    /// runs at most [`READERS`] reads. Waiting for a reader on the pool instead, a cold
    /// fill of 100,000 codes under 64 connections held up to 150 threads, each with its
    /// stack and allocator cache.
    reads: Arc<tokio::sync::Semaphore>,
}

/// The SQLite adapter.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.path).finish()
    }
}

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(sql_err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql_err)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(sql_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql_err)?;
    Ok(conn)
}

/// The file beside `path` holding the click rollups: `rebound.db` → `rebound-clicks.db`.
pub fn clicks_file(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "rebound".into(), |s| s.to_string_lossy());
    let name = match path.extension() {
        Some(ext) => format!("{stem}-clicks.{}", ext.to_string_lossy()),
        None => format!("{stem}-clicks"),
    };
    path.with_file_name(name)
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and its schema.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::unavailable("the database's directory", e))?;
        }
        let mut writer = open_conn(&path)?;
        writer.execute_batch(SCHEMA).map_err(sql_err)?;
        add_missing_columns(&writer, MAIN_ADDED_COLUMNS)?;
        index_older_links(&mut writer)?;
        writer.execute_batch(MAIN_INDEXES).map_err(sql_err)?;
        let clicks_path = clicks_file(&path);
        let clicks_writer = open_conn(&clicks_path)?;
        clicks_writer.execute_batch(CLICKS_SCHEMA).map_err(sql_err)?;
        add_missing_columns(&clicks_writer, CLICKS_ADDED_COLUMNS)?;
        let clicks_name = clicks_path
            .to_str()
            .ok_or_else(|| StoreError::unavailable("SQLite", format!("{}: not UTF-8", clicks_path.display())))?;
        move_rollups_out_of_the_main_file(&mut writer, clicks_name)?;
        let readers = (0..READERS)
            .map(|_| {
                let conn = open_conn(&path)?;
                conn.execute("ATTACH DATABASE ?1 AS clicks", [clicks_name])
                    .map_err(sql_err)?;
                // A reader looks links up by key: the B-tree's interior pages of a million
                // links (about 300 KiB) fit in 1 MiB, and the leaves it reads are random
                // (the OS keeps the file). SQLite's default, 2 MiB a file, cost the proxy
                // up to 16 MiB of RSS across the readers.
                conn.execute_batch("PRAGMA main.cache_size = -1024; PRAGMA clicks.cache_size = -512;")
                    .map_err(sql_err)?;
                Ok(Mutex::new(conn))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                writer: Mutex::new(writer),
                clicks_writer: Mutex::new(clicks_writer),
                readers,
                next_reader: AtomicUsize::new(0),
                reads: Arc::new(tokio::sync::Semaphore::new(READERS)),
            }),
        })
    }

    /// The database file (the click rollups are in [`clicks_file`] of it).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_with(|inner| &inner.writer, f).await
    }

    /// [`SqliteStore::write`] on the clicks file.
    pub(crate) async fn write_clicks<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_with(|inner| &inner.clicks_writer, f).await
    }

    /// Runs `f` on the blocking pool with the writer connection `writer` picks.
    async fn write_with<T, F>(&self, writer: fn(&Inner) -> &Mutex<Connection>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = writer(&inner).lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Internal(format!("store task failed: {e}")))?
    }

    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        let permit = inner
            .reads
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::Internal(format!("store readers closed: {e}")))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let start = inner.next_reader.fetch_add(1, Ordering::Relaxed);
            // Take the first idle reader (with a permit, one is), else wait for the one whose
            // turn it is.
            for i in 0..inner.readers.len() {
                if let Ok(conn) = inner.readers[(start + i) % inner.readers.len()].try_lock() {
                    return f(&conn);
                }
            }
            let conn = inner.readers[start % inner.readers.len()]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            f(&conn)
        })
        .await
        .map_err(|e| StoreError::Internal(format!("store task failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::{Link, RedirectKind};
    use rebound_store::{BatchOutcome, ClickAdd, ClickBatch, CounterStore, LinkReads, LinkStore, RollupStore};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_passes_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("rebound.db")).unwrap();
        rebound_store::conformance::run_all(&store).await;
        rebound_store::conformance::breakdowns_apply_once_and_stay_bounded(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_wait_for_a_reader_off_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("rebound.db")).unwrap();
        // The threads the reads ran on: the pool starts one for each read it is handed while
        // none is idle, so reads that waited for a reader on the pool ran on about as many
        // threads as there were reads (64).
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let reads = (0..64).map(|_| {
            let (store, threads) = (store.clone(), threads.clone());
            tokio::spawn(async move {
                store
                    .read(move |conn| {
                        threads.lock().unwrap().insert(std::thread::current().id());
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)).map_err(sql_err)
                    })
                    .await
            })
        });
        for read in reads.collect::<Vec<_>>() {
            assert_eq!(read.await.unwrap().unwrap(), 1);
        }
        let threads = threads.lock().unwrap().len();
        assert!(threads <= 4 * READERS, "64 reads ran on {threads} threads");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_keeps_the_certificates_contract_also_on_a_file_made_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        drop(SqliteStore::open(&path).unwrap());
        // A file of a version before the certificates' tables, and before app links (a
        // domain already in it).
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE acme_account; DROP TABLE certificates; DROP TABLE certificate_leases; DROP TABLE acme_challenges;
             DROP TABLE domains; DROP TABLE default_app_links;
             CREATE TABLE domains (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
             INSERT INTO domains VALUES ('old.example', '{\"name\":\"old.example\",\"id\":\"1\",\"created_at\":1,\"created_by\":\"op\"}');",
        )
            .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        use rebound_store::domains::DomainStore;
        let old = store.get_domain("old.example").await.unwrap().unwrap();
        assert_eq!((old.id.as_str(), old.app_links.is_empty()), ("1", true));
        assert!(store.default_app_links().await.unwrap().is_empty());
        rebound_store::certs::contract(&store).await;
        rebound_store::domains::contract(&store).await;
        assert_eq!(store.get_domain("old.example").await.unwrap(), Some(old));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn data_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/rebound.db");
        {
            let store = SqliteStore::open(&path).unwrap();
            let link = Link::new_active(
                "keep1".into(),
                "https://e.com/".into(),
                RedirectKind::Found,
                false,
                1,
                "k".into(),
                None,
            );
            store.insert_link(&link, None).await.unwrap();
            assert_eq!(store.lease_block("codes", 10).await.unwrap(), 0..10);
        }
        let store = SqliteStore::open(&path).unwrap();
        assert!(store.get_link("keep1").await.unwrap().is_some());
        assert_eq!(store.lease_block("codes", 10).await.unwrap(), 10..20);
    }

    #[test]
    fn the_clicks_file_sits_beside_the_database() {
        assert_eq!(
            clicks_file(Path::new("/d/rebound.db")),
            Path::new("/d/rebound-clicks.db")
        );
        assert_eq!(clicks_file(Path::new("data/links")), Path::new("data/links-clicks"));
    }

    // Files of older versions, migrated at open (crate::schema).
    use crate::schema::LINKS_INDEXED;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn links_of_a_file_from_before_the_indexes_are_put_in_them_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        {
            // The links table as it was before `target_host` and `domain_id`.
            let old = Connection::open(&path).unwrap();
            old.execute_batch(
                "CREATE TABLE links (code TEXT PRIMARY KEY, long_url TEXT NOT NULL, redirect INTEGER NOT NULL,
                    forward_query INTEGER NOT NULL, created_at INTEGER NOT NULL, created_by TEXT NOT NULL,
                    is_active INTEGER NOT NULL, version INTEGER NOT NULL, expires_at INTEGER, deleted_at INTEGER,
                    deleted_by TEXT, delete_reason TEXT, purge_at INTEGER, password_hash TEXT) WITHOUT ROWID;",
            )
            .unwrap();
            old.execute_batch(
                "INSERT INTO links (code, long_url, redirect, forward_query, created_at, created_by, is_active, version)
                 VALUES ('old1', 'https://a.w.example/x', 302, 0, 1, 'o', 1, 1),
                        ('old2.d7', 'https://w.example/y', 302, 0, 2, 'o', 1, 1),
                        ('old3', 'https://w.example/z', 302, 0, 3, 'o', 0, 2),
                        ('old4', 'https://notw.example/', 302, 0, 4, 'o', 1, 1);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let page = store.links_by_target_host("example.w.", 10, None).await.unwrap();
        let codes: Vec<_> = page.links.iter().map(|l| l.code.as_str()).collect();
        assert_eq!(
            codes,
            ["old2.d7", "old1"],
            "active ones alone, the host before its subdomain"
        );
        let page = store.links_on_domain("d7", 10, None).await.unwrap();
        assert_eq!(page.links.len(), 1);
        // Opened again: recorded as indexed, nothing read; the indexes answer the same.
        drop(store);
        let indexed: String = Connection::open(&path)
            .unwrap()
            .query_row("SELECT value FROM settings WHERE name = ?1", [LINKS_INDEXED], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(indexed, "1");
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(index_older_links(&mut conn).unwrap(), 0);
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        let page = store.links_by_target_host("example.w.", 10, None).await.unwrap();
        assert_eq!(page.links.len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rollups_in_the_main_file_move_to_the_clicks_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        {
            // A data directory from before the split.
            let old = Connection::open(&path).unwrap();
            old.execute_batch(
                "CREATE TABLE rollups (code TEXT NOT NULL, day INTEGER NOT NULL, clicks INTEGER NOT NULL,
                    PRIMARY KEY (code, day)) WITHOUT ROWID;
                 CREATE TABLE applied_batches (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL);
                 INSERT INTO rollups VALUES ('old1', 3, 7), ('old1', 4, 2);
                 INSERT INTO applied_batches VALUES ('batch-a', 1);",
            )
            .unwrap();
        }
        let day = rebound_core::Day;
        for _ in 0..2 {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(
                store.read_clicks("old1", day(1), day(9)).await.unwrap(),
                vec![
                    (day(3), rebound_store::Clicks::people(7)),
                    (day(4), rebound_store::Clicks::people(2))
                ],
                "the history is kept, and moved once"
            );
        }
        let store = SqliteStore::open(&path).unwrap();
        let replay = ClickBatch {
            id: "batch-a".into(),
            adds: vec![ClickAdd {
                code: "old1".into(),
                day: day(3),
                clicks: 5,
                bot_clicks: 0,
            }],
        };
        assert_eq!(store.apply_clicks(&replay).await.unwrap(), BatchOutcome::AlreadyApplied);
        let main = Connection::open(&path).unwrap();
        let left: i64 = main
            .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'rollups'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(left, 0, "the main file no longer has rollups");
    }
}
