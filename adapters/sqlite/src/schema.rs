//! The schemas of the two files, and the one migration: the rollups moved out of the main
//! file into a file of their own.

use crate::error::sql_err;
use rebound_store::StoreError;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

pub(crate) const SCHEMA: &str = "
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
    purge_at INTEGER,
    -- A password's Argon2id hash; added by `add_missing_columns` to an older file.
    password_hash TEXT,
    -- Its rules' JSON (docs/spec.md §14), NULL for none; added to an older file too.
    rules TEXT,
    -- The key of its target's host (rebound_core::threat::host_key; '' when it has none)
    -- and the id of its domain (NULL: the default domain), for the two indexes below;
    -- added and filled by `add_missing_columns` and `index_older_links` to an older file.
    target_host TEXT,
    domain_id TEXT
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
    revoked_at INTEGER,
    -- The domains a key is scoped to, comma-separated; NULL for every domain. Added by
    -- `add_missing_columns` to a file made before domains existed.
    domains TEXT
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
    outcome TEXT NOT NULL,
    -- An edit's old and new values (JSON); added by `add_missing_columns` to an older file.
    detail TEXT
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
-- What ACME gave the fleet (rebound-acme): the account (one row), each domain's
-- certificate, and the lease on ordering one.
CREATE TABLE IF NOT EXISTS acme_account (id INTEGER PRIMARY KEY CHECK (id = 1), credentials TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS certificates (
    domain TEXT PRIMARY KEY,
    chain_pem TEXT NOT NULL,
    key_pem TEXT NOT NULL,
    not_after INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS certificate_leases (
    domain TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    until INTEGER NOT NULL
) WITHOUT ROWID;
-- The domains besides the default one (docs/spec.md §11), each record as JSON, and beside
-- it its app links (docs/spec.md §14), each document's compact JSON or NULL; the columns
-- added by `add_missing_columns` to an older file.
CREATE TABLE IF NOT EXISTS domains (
    name TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    apple_app_site_association TEXT,
    assetlinks TEXT
) WITHOUT ROWID;
-- The default domain's app links (it has no record of its own): one row, once set.
CREATE TABLE IF NOT EXISTS default_app_links (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    apple_app_site_association TEXT,
    assetlinks TEXT
);
-- HTTP-01 answers in flight, for whichever process the CA asks.
CREATE TABLE IF NOT EXISTS acme_challenges (
    token TEXT PRIMARY KEY,
    key_authorization TEXT NOT NULL,
    until INTEGER NOT NULL
) WITHOUT ROWID;
";

/// The click rollups live in a second file beside the first, with its own writer: SQLite
/// allows one writer per file, so a long rollup write never holds up link creation.
pub(crate) const CLICKS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rollups (
    code TEXT NOT NULL,
    day INTEGER NOT NULL,
    clicks INTEGER NOT NULL,
    bot_clicks INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (code, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS applied_batches (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS applied_batches_by_time ON applied_batches (applied_at);
-- Breakdowns: a link's people's clicks of a day by value of a dimension (at most 50 values
-- of a dimension a link's day, the rest under '(other)'); and a domain's summary under its
-- scope code ('*', '*<id>'), whose 'link' dimension keeps 1,000 codes a day.
-- The rollups hold the scope codes' daily totals too.
CREATE TABLE IF NOT EXISTS breakdowns (
    code TEXT NOT NULL,
    day INTEGER NOT NULL,
    dimension TEXT NOT NULL,
    value TEXT NOT NULL,
    clicks INTEGER NOT NULL,
    PRIMARY KEY (code, day, dimension, value)
) WITHOUT ROWID;
";

/// The main file's columns added since their table was first made: (table, column, type).
pub(crate) const MAIN_ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("api_keys", "domains", "TEXT"),
    ("audit", "detail", "TEXT"),
    ("links", "password_hash", "TEXT"),
    ("links", "target_host", "TEXT"),
    ("links", "domain_id", "TEXT"),
    ("links", "rules", "TEXT"),
    ("domains", "apple_app_site_association", "TEXT"),
    ("domains", "assetlinks", "TEXT"),
];

/// The indexes on columns an older file gets from `add_missing_columns`: made after it.
/// All partial, of active links alone: a rescan of the threat lists reads the active links
/// on a host and its subdomains (a range of `target_host`) and those with rules (their
/// targets), a domain's removal its active links; none reads every link.
pub(crate) const MAIN_INDEXES: &str = "
CREATE INDEX IF NOT EXISTS links_by_target_host ON links (target_host, code) WHERE is_active = 1;
CREATE INDEX IF NOT EXISTS links_by_domain ON links (domain_id, code) WHERE is_active = 1 AND domain_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS links_with_rules ON links (code) WHERE is_active = 1 AND rules IS NOT NULL;
";

/// Links per transaction when an older file's links get their index columns.
const INDEX_BATCH: usize = 10_000;

/// The setting recorded once every link of the file has its index columns: later opens
/// skip the search for links without them (a read of the whole table).
pub(crate) const LINKS_INDEXED: &str = "sqlite:links_indexed";

/// Fills the index columns of the links an older file holds without them (`target_host`
/// NULL), in transactions of [`INDEX_BATCH`], once: the file then records
/// [`LINKS_INDEXED`], and later opens read nothing.
pub(crate) fn index_older_links(conn: &mut Connection) -> Result<u64, StoreError> {
    let recorded: Option<String> = conn
        .query_row("SELECT value FROM settings WHERE name = ?1", [LINKS_INDEXED], |r| {
            r.get(0)
        })
        .optional()
        .map_err(sql_err)?;
    if recorded.is_some() {
        return Ok(0);
    }
    let mut done = 0u64;
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        let rows: Vec<(String, String)> = {
            let mut stmt = tx
                .prepare("SELECT code, long_url FROM links WHERE target_host IS NULL LIMIT ?1")
                .map_err(sql_err)?;
            let rows = stmt
                .query_map([INDEX_BATCH as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
        };
        if rows.is_empty() {
            tx.execute(
                "INSERT INTO settings (name, value) VALUES (?1, '1') ON CONFLICT (name) DO NOTHING",
                [LINKS_INDEXED],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            return Ok(done);
        }
        for (code, long_url) in &rows {
            tx.execute(
                "UPDATE links SET target_host = ?1, domain_id = ?2 WHERE code = ?3",
                rusqlite::params![target_host(long_url), domain_id(code), code],
            )
            .map_err(sql_err)?;
        }
        tx.commit().map_err(sql_err)?;
        done += rows.len() as u64;
    }
}

/// The `target_host` column of a link to `long_url`.
pub(crate) fn target_host(long_url: &str) -> String {
    rebound_core::threat::host_key(long_url).unwrap_or_default()
}

/// The `domain_id` column of the link `key`.
pub(crate) fn domain_id(key: &str) -> Option<&str> {
    rebound_core::domain::split_key(key).1
}
/// The clicks file's: bots counted apart.
pub(crate) const CLICKS_ADDED_COLUMNS: &[(&str, &str, &str)] =
    &[("rollups", "bot_clicks", "INTEGER NOT NULL DEFAULT 0")];

/// Columns added since a table was first made: `CREATE TABLE IF NOT EXISTS` leaves an
/// older file's table as it was, so each is added here, once, at open.
pub(crate) fn add_missing_columns(conn: &Connection, added: &[(&str, &str, &str)]) -> Result<(), StoreError> {
    for (table, column, kind) in added {
        let present: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
                [table, column],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        if present == 0 {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                .map_err(sql_err)?;
        }
    }
    Ok(())
}

/// Data directories written before the rollups had a file of their own keep them in the
/// main file: move them over once, at open, before anything else writes clicks. Replacing
/// (not adding) makes a retry after a crash between the two files' commits harmless.
pub(crate) fn move_rollups_out_of_the_main_file(main: &mut Connection, clicks_file: &str) -> Result<(), StoreError> {
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
