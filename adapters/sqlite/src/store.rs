//! [`SqliteStore`]: the two files, their connections (one writer each, a few readers with
//! the clicks file attached) and the blocking pool every call runs on, and how SQLite's
//! errors are classified.

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

/// Classifies a SQLite error once: what the database or the machine could not do (busy or
/// locked past the timeout, I/O, a full disk, a file that cannot be opened or is damaged) is
/// an outage; everything else (constraint or statement errors, a column read as the wrong
/// type, misuse) is a bug in this file.
pub(crate) fn sql_err(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    let outage = match &e {
        rusqlite::Error::SqliteFailure(f, _) => matches!(
            f.code,
            C::DatabaseBusy
                | C::DatabaseLocked
                | C::SystemIoFailure
                | C::DiskFull
                | C::CannotOpen
                | C::OutOfMemory
                | C::FileLockingProtocolFailed
                | C::ReadOnly
                | C::DatabaseCorrupt
                | C::NotADatabase
                | C::PermissionDenied
                | C::OperationInterrupted
        ),
        _ => false,
    };
    if outage {
        StoreError::unavailable("SQLite", e)
    } else {
        StoreError::Internal(e.to_string())
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
        tokio::task::spawn_blocking(move || {
            let start = inner.next_reader.fetch_add(1, Ordering::Relaxed);
            // Take the first idle reader, else wait for the one whose turn it is.
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
    use rebound_store::{CounterStore, LinkReads, LinkStore};

    #[test]
    fn sqlite_errors_are_an_outage_only_when_the_database_or_machine_failed() {
        let failure = |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let outage = |e: rusqlite::Error| matches!(sql_err(e), StoreError::Unavailable { .. });
        assert!(outage(failure(rusqlite::ffi::SQLITE_BUSY)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_IOERR)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_FULL)));
        // An outage keeps SQLite's error whole, for whoever looks at its code.
        let busy = sql_err(failure(rusqlite::ffi::SQLITE_BUSY));
        let kept = std::error::Error::source(&busy).and_then(|s| s.downcast_ref::<rusqlite::Error>());
        assert_eq!(
            kept.and_then(rusqlite::Error::sqlite_error_code),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(!outage(failure(rusqlite::ffi::SQLITE_CONSTRAINT)));
        assert!(!outage(failure(rusqlite::ffi::SQLITE_MISUSE)));
        assert!(!outage(rusqlite::Error::InvalidColumnType(
            0,
            "x".into(),
            rusqlite::types::Type::Null
        )));
        // A real statement error: a bug, not an outage.
        let conn = Connection::open_in_memory().unwrap();
        let e = conn.execute("INSERT INTO no_such_table VALUES (1)", []).unwrap_err();
        assert!(matches!(sql_err(e), StoreError::Internal(_)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_passes_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("rebound.db")).unwrap();
        rebound_store::conformance::run_all(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_store_keeps_the_certificates_contract_also_on_a_file_made_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        drop(SqliteStore::open(&path).unwrap());
        // A file of a version before the certificates' tables.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE acme_account; DROP TABLE certificates; DROP TABLE certificate_leases; DROP TABLE acme_challenges;",
        )
            .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        rebound_store::certs::contract(&store).await;
        rebound_store::domains::contract(&store).await;
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
}
