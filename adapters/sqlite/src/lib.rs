//! The embedded store: one SQLite file in WAL mode, and a second beside it for the click
//! rollups. One writer connection per file serialises its writes (SQLite allows one writer
//! per file anyway); a few reader connections, with the clicks file attached, serve point
//! reads concurrently. Every call runs on tokio's blocking pool of the calling runtime.

use async_trait::async_trait;
use rebound_core::link::Deletion;
use rebound_core::RedirectKind;
use rebound_core::{Day, Link, UnixMillis};
use rebound_store::*;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const READERS: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS links (
    code TEXT PRIMARY KEY,
    long_url TEXT NOT NULL,
    redirect INTEGER NOT NULL,
    forward_query INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL,
    is_active INTEGER NOT NULL,
    version INTEGER NOT NULL,
    expires_at INTEGER,
    deleted_at INTEGER,
    deleted_by TEXT,
    delete_reason TEXT,
    purge_at INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_by_owner ON links (created_by, created_at DESC, code DESC);
CREATE INDEX IF NOT EXISTS links_by_time ON links (created_at DESC, code DESC);
CREATE TABLE IF NOT EXISTS idempotency (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The alias index: every custom alias (recorded before its link), so a data plane learns
-- which codes are aliases without reading the links.
CREATE TABLE IF NOT EXISTS aliases (code TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    code TEXT,
    reason TEXT,
    outcome TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_code ON audit (code, seq);
-- Propagations pending: a version of a link durable here that the caches may not know yet,
-- written in the transaction that made it, deleted once propagated; read by lease expiry.
CREATE TABLE IF NOT EXISTS propagations (
    code TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    lease_owner TEXT NOT NULL,
    lease_until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS propagations_by_lease ON propagations (lease_until, code);
";

/// The click rollups live in a second file beside the first, with its own writer: SQLite
/// allows one writer per file, so a long rollup write never holds up link creation.
const CLICKS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rollups (
    code TEXT NOT NULL,
    day INTEGER NOT NULL,
    clicks INTEGER NOT NULL,
    PRIMARY KEY (code, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS applied_batches (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS applied_batches_by_time ON applied_batches (applied_at);
";

/// How long an applied batch id is remembered, as in the DynamoDB adapter: a redelivery
/// after that is not expected, and the table would otherwise grow by every batch ever
/// written (about 5 a second at the default click pacing).
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

const LINK_COLUMNS: &str = "code, long_url, redirect, forward_query, created_at, created_by, is_active, \
     version, expires_at, deleted_at, deleted_by, delete_reason, purge_at";

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
fn sql_err(e: rusqlite::Error) -> StoreError {
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
        StoreError::Unavailable(e.to_string())
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

/// Data directories written before the rollups had a file of their own keep them in the
/// main file: move them over once, at open, before anything else writes clicks. Replacing
/// (not adding) makes a retry after a crash between the two files' commits harmless.
fn move_rollups_out_of_the_main_file(main: &mut Connection, clicks_file: &str) -> Result<(), StoreError> {
    let has_old: i64 = main
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('rollups', 'applied_batches')",
            [],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    if has_old == 0 {
        return Ok(());
    }
    main.execute("ATTACH DATABASE ?1 AS clicks", [clicks_file])
        .map_err(sql_err)?;
    let moved = (|| {
        let tx = main.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if has_old == 2 {
            tx.execute_batch(
                "INSERT OR REPLACE INTO clicks.rollups (code, day, clicks) SELECT code, day, clicks FROM main.rollups;
                 INSERT OR IGNORE INTO clicks.applied_batches (id, applied_at) SELECT id, applied_at FROM main.applied_batches;",
            )?;
        }
        tx.execute_batch("DROP TABLE IF EXISTS main.rollups; DROP TABLE IF EXISTS main.applied_batches;")?;
        tx.commit()
    })();
    main.execute("DETACH DATABASE clicks", []).map_err(sql_err)?;
    moved.map_err(sql_err)
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and its schema.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Unavailable(format!("{}: {e}", dir.display())))?;
        }
        let mut writer = open_conn(&path)?;
        writer.execute_batch(SCHEMA).map_err(sql_err)?;
        let clicks_path = clicks_file(&path);
        let clicks_writer = open_conn(&clicks_path)?;
        clicks_writer.execute_batch(CLICKS_SCHEMA).map_err(sql_err)?;
        let clicks_name = clicks_path
            .to_str()
            .ok_or_else(|| StoreError::Unavailable(format!("{}: not UTF-8", clicks_path.display())))?;
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

    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.write_with(|inner| &inner.writer, f).await
    }

    /// [`SqliteStore::write`] on the clicks file.
    async fn write_clicks<T, F>(&self, f: F) -> Result<T, StoreError>
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

    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
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

fn link_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Link, StoreError>> {
    let redirect: u16 = row.get(2)?;
    let version: i64 = row.get(7)?;
    let Some(redirect) = RedirectKind::from_status(redirect) else {
        return Ok(Err(StoreError::Corrupt(format!("redirect {redirect}"))));
    };
    Ok(Ok(Link {
        code: row.get(0)?,
        long_url: row.get(1)?,
        redirect,
        forward_query: row.get(3)?,
        created_at: row.get(4)?,
        created_by: row.get(5)?,
        is_active: row.get(6)?,
        version: version as u64,
        expires_at: row.get(8)?,
        deleted_at: row.get(9)?,
        deleted_by: row.get(10)?,
        delete_reason: row.get(11)?,
        purge_at: row.get(12)?,
    }))
}

fn key_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<ApiKeyRecord, StoreError>> {
    let role: String = row.get(2)?;
    let Some(role) = Role::parse(&role) else {
        return Ok(Err(StoreError::Corrupt(format!("role {role}"))));
    };
    Ok(Ok(ApiKeyRecord {
        id: row.get(0)?,
        name: row.get(1)?,
        role,
        key_hash: row.get(3)?,
        created_at: row.get(4)?,
        revoked_at: row.get(5)?,
    }))
}

fn get_link_in(conn: &Connection, code: &str) -> Result<Option<Link>, StoreError> {
    conn.prepare_cached(&format!("SELECT {LINK_COLUMNS} FROM links WHERE code = ?1"))
        .map_err(sql_err)?
        .query_row([code], link_from_row)
        .optional()
        .map_err(sql_err)?
        .transpose()
}

/// Inserts a link unless its code is taken; true when inserted.
fn insert_link_in(conn: &Connection, link: &Link) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(&format!(
            "INSERT INTO links ({LINK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
             ON CONFLICT (code) DO NOTHING"
        ))
        .map_err(sql_err)?
        .execute(params![
            link.code,
            link.long_url,
            link.redirect.status(),
            link.forward_query,
            link.created_at,
            link.created_by,
            link.is_active,
            link.version as i64,
            link.expires_at,
            link.deleted_at,
            link.deleted_by,
            link.delete_reason,
            link.purge_at,
        ])
        .map_err(sql_err)?;
    Ok(n == 1)
}

#[async_trait]
impl LinkReads for SqliteStore {
    async fn get_link(&self, code: &str) -> Result<Option<Link>, StoreError> {
        let code = code.to_owned();
        self.read(move |conn| get_link_in(conn, &code)).await
    }

    async fn high_water(&self, counter: &str) -> Result<u64, StoreError> {
        let counter = counter.to_owned();
        self.read(move |conn| {
            let value: Option<i64> = conn
                .query_row("SELECT value FROM counters WHERE name = ?1", [counter], |r| r.get(0))
                .optional()
                .map_err(sql_err)?;
            Ok(value.unwrap_or(0) as u64)
        })
        .await
    }

    async fn list_aliases(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, StoreError> {
        let after = after.unwrap_or("").to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT code FROM aliases WHERE code > ?1 ORDER BY code LIMIT ?2")
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![after, limit as i64], |r| r.get::<_, String>(0))
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
        })
        .await
    }

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        let name = name.to_owned();
        self.read(move |conn| {
            conn.query_row("SELECT value FROM settings WHERE name = ?1", [name], |r| r.get(0))
                .optional()
                .map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl LinkStore for SqliteStore {
    async fn insert_link(&self, link: &Link, idempotency: Option<&IdempotencyRecord>) -> Result<(), StoreError> {
        let link = link.clone();
        let idem = idempotency.cloned();
        self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            if let Some(rec) = &idem {
                let taken: Option<i64> = tx
                    .query_row(
                        "SELECT 1 FROM idempotency WHERE scope = ?1 AND key = ?2 AND expires_at > ?3",
                        params![rec.scope, rec.key, rec.created_at],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(sql_err)?;
                if taken.is_some() {
                    return Err(StoreError::IdempotencyKeyExists);
                }
            }
            let inserted = insert_link_in(&tx, &link)?;
            if !inserted {
                return Err(StoreError::AlreadyExists);
            }
            if let Some(rec) = &idem {
                tx.execute(
                    "INSERT OR REPLACE INTO idempotency (scope, key, request_hash, status, body, created_at, expires_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![rec.scope, rec.key, rec.request_hash, rec.status, rec.body, rec.created_at, rec.expires_at],
                )
                .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn record_alias(&self, alias: &str) -> Result<(), StoreError> {
        let alias = alias.to_owned();
        self.write(move |conn| {
            conn.execute("INSERT INTO aliases (code) VALUES (?1) ON CONFLICT DO NOTHING", [alias])
                .map(|_| ())
                .map_err(sql_err)
        })
        .await
    }

    async fn insert_links(&self, links: &[Link]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let links = links.to_vec();
        self.write(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let mut outcomes = Vec::with_capacity(links.len());
            for link in &links {
                outcomes.push(match insert_link_in(&tx, link)? {
                    true => Ok(()),
                    false => Err(StoreError::AlreadyExists),
                });
            }
            tx.commit().map_err(sql_err)?;
            Ok(outcomes)
        })
        .await
    }

    async fn deactivate_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        let code = code.to_owned();
        let deletion = deletion.clone();
        let lease = lease.clone();
        self.write(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let current = get_link_in(&tx, &code)?.ok_or(StoreError::NotFound)?;
            if current.version != expected_version || !current.is_active {
                return Err(StoreError::ConditionFailed);
            }
            let next = current.deactivated(&deletion);
            let changed = tx
                .execute(
                    "UPDATE links SET is_active = 0, version = ?1, deleted_at = ?2, deleted_by = ?3, \
                     delete_reason = ?4, purge_at = ?5 WHERE code = ?6 AND version = ?7 AND is_active = 1",
                    params![
                        next.version as i64,
                        next.deleted_at,
                        next.deleted_by,
                        next.delete_reason,
                        next.purge_at,
                        code,
                        expected_version as i64
                    ],
                )
                .map_err(sql_err)?;
            if changed != 1 {
                return Err(StoreError::ConditionFailed);
            }
            tx.execute(
                "INSERT INTO propagations (code, version, lease_owner, lease_until) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (code) DO UPDATE SET version = excluded.version, \
                 lease_owner = excluded.lease_owner, lease_until = excluded.lease_until",
                params![code, next.version as i64, lease.owner, lease.until],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(next)
        })
        .await
    }

    async fn pending_propagations(&self, now: UnixMillis, limit: usize) -> Result<Vec<Propagation>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT code, version, lease_owner, lease_until FROM propagations \
                     WHERE lease_until <= ?1 ORDER BY lease_until, code LIMIT ?2",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![now, limit.min(i64::MAX as usize) as i64], |row| {
                    Ok(Propagation {
                        code: row.get(0)?,
                        version: row.get::<_, i64>(1)? as u64,
                        lease_owner: row.get(2)?,
                        lease_until: row.get(3)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
        })
        .await
    }

    async fn lease_propagation(
        &self,
        code: &str,
        version: u64,
        lease: &PropagationLease,
        now: UnixMillis,
    ) -> Result<Link, StoreError> {
        let code = code.to_owned();
        let lease = lease.clone();
        self.write(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let changed = tx
                .execute(
                    "UPDATE propagations SET lease_owner = ?1, lease_until = ?2 \
                     WHERE code = ?3 AND version = ?4 AND (lease_until <= ?5 OR lease_owner = ?1)",
                    params![lease.owner, lease.until, code, version as i64, now],
                )
                .map_err(sql_err)?;
            if changed != 1 {
                return Err(StoreError::ConditionFailed);
            }
            let link = get_link_in(&tx, &code)?.ok_or(StoreError::NotFound)?;
            tx.commit().map_err(sql_err)?;
            Ok(link)
        })
        .await
    }

    async fn finish_propagation(&self, code: &str, version: u64) -> Result<(), StoreError> {
        let code = code.to_owned();
        self.write(move |conn| {
            let deleted = conn
                .execute(
                    "DELETE FROM propagations WHERE code = ?1 AND version = ?2",
                    params![code, version as i64],
                )
                .map_err(sql_err)?;
            match deleted {
                1 => Ok(()),
                _ => Err(StoreError::ConditionFailed),
            }
        })
        .await
    }

    async fn list_links(
        &self,
        owner: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let after = cursor.map(ListCursor::decode).transpose()?;
        let owner = owner.map(str::to_owned);
        self.read(move |conn| {
            let (at, code) = after.map_or((i64::MAX, String::new()), |c| (c.created_at, c.code));
            // Without a cursor every row qualifies: (created_at, code) < (MAX, '') holds for all.
            let mut sql =
                format!("SELECT {LINK_COLUMNS} FROM links WHERE (created_at < ?1 OR (created_at = ?1 AND code < ?2))");
            if owner.is_some() {
                sql.push_str(" AND created_by = ?4");
            }
            sql.push_str(" ORDER BY created_at DESC, code DESC LIMIT ?3");
            let mut stmt = conn.prepare_cached(&sql).map_err(sql_err)?;
            let fetch = (limit + 1) as i64;
            let rows: Vec<rusqlite::Result<Result<Link, StoreError>>> = match &owner {
                Some(o) => stmt
                    .query_map(params![at, code, fetch, o], link_from_row)
                    .map_err(sql_err)?
                    .collect(),
                None => stmt
                    .query_map(params![at, code, fetch], link_from_row)
                    .map_err(sql_err)?
                    .collect(),
            };
            let links = rows
                .into_iter()
                .map(|r| r.map_err(sql_err)?)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(LinkPage::from_overfetch(links, limit))
        })
        .await
    }

    async fn get_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: UnixMillis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.read(move |conn| {
            conn.query_row(
                "SELECT scope, key, request_hash, status, body, created_at, expires_at FROM idempotency \
                 WHERE scope = ?1 AND key = ?2 AND expires_at > ?3",
                params![scope, key, now],
                |r| {
                    Ok(IdempotencyRecord {
                        scope: r.get(0)?,
                        key: r.get(1)?,
                        request_hash: r.get(2)?,
                        status: r.get(3)?,
                        body: r.get(4)?,
                        created_at: r.get(5)?,
                        expires_at: r.get(6)?,
                    })
                },
            )
            .optional()
            .map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl KeyStore for SqliteStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let key = key.clone();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO api_keys (id, name, role, key_hash, created_at, revoked_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                     ON CONFLICT DO NOTHING",
                    params![key.id, key.name, key.role.as_str(), key.key_hash, key.created_at, key.revoked_at],
                )
                .map_err(sql_err)?;
            if n == 0 {
                return Err(StoreError::AlreadyExists);
            }
            Ok(())
        })
        .await
    }

    async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let key_hash = key_hash.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT id, name, role, key_hash, created_at, revoked_at FROM api_keys WHERE key_hash = ?1",
            )
            .map_err(sql_err)?
            .query_row([key_hash], key_from_row)
            .optional()
            .map_err(sql_err)?
            .transpose()
        })
        .await
    }

    async fn revoke_key(&self, id: &str, at: UnixMillis) -> Result<ApiKeyRecord, StoreError> {
        let id = id.to_owned();
        self.write(move |conn| {
            conn.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2",
                params![at, id],
            )
            .map_err(sql_err)?;
            conn.query_row(
                "SELECT id, name, role, key_hash, created_at, revoked_at FROM api_keys WHERE id = ?1",
                [id],
                key_from_row,
            )
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)?
        })
        .await
    }
}

#[async_trait]
impl CounterStore for SqliteStore {
    async fn lease_block(&self, counter: &str, size: u64) -> Result<Range<u64>, StoreError> {
        let counter = counter.to_owned();
        let size_i = i64::try_from(size).map_err(|_| StoreError::Exhausted)?;
        self.write(move |conn| {
            let end: i64 = conn
                .query_row(
                    "INSERT INTO counters (name, value) VALUES (?1, ?2) \
                     ON CONFLICT (name) DO UPDATE SET value = value + excluded.value RETURNING value",
                    params![counter, size_i],
                    |r| r.get(0),
                )
                .map_err(|e| match e {
                    rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                        StoreError::Exhausted
                    }
                    other => sql_err(other),
                })?;
            let end = end as u64;
            Ok(end - size..end)
        })
        .await
    }

    async fn get_or_init_setting(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        let (name, candidate) = (name.to_owned(), candidate.to_owned());
        self.write(move |conn| {
            conn.execute(
                "INSERT INTO settings (name, value) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![name, candidate],
            )
            .map_err(sql_err)?;
            conn.query_row("SELECT value FROM settings WHERE name = ?1", [name], |r| r.get(0))
                .map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl RollupStore for SqliteStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        let outcomes = self.apply_click_batches(std::slice::from_ref(batch)).await?;
        outcomes
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Corrupt("no outcome".into()))
    }

    async fn apply_click_batches(&self, batches: &[ClickBatch]) -> Result<Vec<BatchOutcome>, StoreError> {
        let batches = batches.to_vec();
        self.write_clicks(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let mut outcomes = Vec::with_capacity(batches.len());
            {
                let mut mark = tx
                    .prepare_cached(
                        "INSERT INTO applied_batches (id, applied_at) VALUES (?1, strftime('%s','now')) ON CONFLICT DO NOTHING",
                    )
                    .map_err(sql_err)?;
                for batch in &batches {
                    if mark.execute([&batch.id]).map_err(sql_err)? == 0 {
                        outcomes.push(BatchOutcome::AlreadyApplied);
                        continue;
                    }
                    // One statement per batch: far cheaper than a statement per row.
                    let rows = vec!["(?, ?, ?)"; batch.adds.len()].join(", ");
                    let mut add = tx
                        .prepare_cached(&format!(
                            "INSERT INTO rollups (code, day, clicks) VALUES {rows} \
                             ON CONFLICT (code, day) DO UPDATE SET clicks = clicks + excluded.clicks"
                        ))
                        .map_err(sql_err)?;
                    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(batch.adds.len() * 3);
                    let clicks: Vec<i64> = batch.adds.iter().map(|a| a.clicks as i64).collect();
                    for (a, n) in batch.adds.iter().zip(&clicks) {
                        values.push(&a.code);
                        values.push(&a.day.0);
                        values.push(n);
                    }
                    if !batch.adds.is_empty() {
                        add.execute(values.as_slice()).map_err(sql_err)?;
                    }
                    outcomes.push(BatchOutcome::Applied);
                }
            }
            // Forget the ids past their retention (an index probe when there are none).
            tx.prepare_cached("DELETE FROM applied_batches WHERE applied_at < strftime('%s','now') - ?1")
                .and_then(|mut forget| forget.execute([BATCH_RETENTION_SECS]))
                .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(outcomes)
        })
        .await
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, u64)>, StoreError> {
        let code = code.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT day, clicks FROM clicks.rollups WHERE code = ?1 AND day BETWEEN ?2 AND ?3 AND clicks > 0 ORDER BY day")
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![code, from.0, to.0], |r| Ok((Day(r.get(0)?), r.get::<_, i64>(1)? as u64)))
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        let e = event.clone();
        self.write(move |conn| {
            conn.execute(
                "INSERT INTO audit (at, actor, action, code, reason, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![e.at, e.actor, e.action, e.code, e.reason, e.outcome],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let code = code.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT at, actor, action, code, reason, outcome FROM audit WHERE code = ?1 ORDER BY seq",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map([code], |r| {
                    Ok(AuditEvent {
                        at: r.get(0)?,
                        actor: r.get(1)?,
                        action: r.get(2)?,
                        code: r.get(3)?,
                        reason: r.get(4)?,
                        outcome: r.get(5)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn applied_batch_ids_are_forgotten_after_their_retention() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("rebound.db")).unwrap();
        let batch = |id: &str| ClickBatch {
            id: id.into(),
            adds: vec![rebound_store::ClickAdd {
                code: "abc".into(),
                day: Day(3),
                clicks: 1,
            }],
        };
        store.apply_clicks(&batch("old")).await.unwrap();
        // Age "old" past the retention; "recent" stays within it.
        store
            .write_clicks(|conn| {
                conn.execute(
                    "UPDATE applied_batches SET applied_at = strftime('%s','now') - ?1 - 1 WHERE id = 'old'",
                    [BATCH_RETENTION_SECS],
                )
                .map_err(sql_err)
            })
            .await
            .unwrap();
        store.apply_clicks(&batch("recent")).await.unwrap();
        let ids: Vec<String> = store
            .write_clicks(|conn| {
                let mut stmt = conn
                    .prepare("SELECT id FROM applied_batches ORDER BY id")
                    .map_err(sql_err)?;
                let ids = stmt.query_map([], |r| r.get(0)).map_err(sql_err)?;
                ids.collect::<rusqlite::Result<Vec<String>>>().map_err(sql_err)
            })
            .await
            .unwrap();
        assert_eq!(ids, vec!["recent".to_owned()]);
        // A redelivery within the retention still adds nothing.
        assert_eq!(
            store.apply_clicks(&batch("recent")).await.unwrap(),
            BatchOutcome::AlreadyApplied
        );
        assert_eq!(
            store.read_clicks("abc", Day(3), Day(3)).await.unwrap(),
            vec![(Day(3), 2)]
        );
    }

    #[test]
    fn sqlite_errors_are_an_outage_only_when_the_database_or_machine_failed() {
        let failure = |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let outage = |e: rusqlite::Error| matches!(sql_err(e), StoreError::Unavailable(_));
        assert!(outage(failure(rusqlite::ffi::SQLITE_BUSY)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_IOERR)));
        assert!(outage(failure(rusqlite::ffi::SQLITE_FULL)));
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
                vec![(day(3), 7), (day(4), 2)],
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

    #[test]
    fn the_clicks_file_sits_beside_the_database() {
        assert_eq!(
            clicks_file(Path::new("/d/rebound.db")),
            Path::new("/d/rebound-clicks.db")
        );
        assert_eq!(clicks_file(Path::new("data/links")), Path::new("data/links-clicks"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rollup_write_in_progress_does_not_hold_up_link_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        let store = SqliteStore::open(&path).unwrap();
        let batch = ClickBatch {
            id: "b1".into(),
            adds: vec![ClickAdd {
                code: "busy1".into(),
                day: rebound_core::Day(7),
                clicks: 4,
            }],
        };
        store.apply_clicks(&batch).await.unwrap();
        // Another writer holds the clicks file's write lock, as a long rollup write does.
        let other = Connection::open(clicks_file(&path)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let link = Link::new_active(
            "busy1".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            1,
            "k".into(),
            None,
        );
        tokio::time::timeout(std::time::Duration::from_secs(3), store.insert_link(&link, None))
            .await
            .expect("a link write does not wait for the rollups")
            .unwrap();
        assert_eq!(
            store
                .read_clicks("busy1", rebound_core::Day(7), rebound_core::Day(7))
                .await
                .unwrap(),
            vec![(rebound_core::Day(7), 4)],
            "stats read while the rollups are being written"
        );
        other.execute_batch("COMMIT").unwrap();
        drop(store);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store
                .read_clicks("busy1", rebound_core::Day(7), rebound_core::Day(7))
                .await
                .unwrap(),
            vec![(rebound_core::Day(7), 4)],
            "the rollups survive reopening"
        );
    }
}
