//! The links ([`LinkReads`], [`LinkStore`]): the links table with its idempotency records,
//! the alias index, and the propagations pending that a delete writes in its transaction.

use crate::error::sql_err;
use crate::schema::{domain_id, target_host};
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_core::link::Deletion;
use rebound_core::rules::stored_json;
use rebound_core::RedirectKind;
use rebound_core::{Link, LinkEdit, UnixMillis};
use rebound_store::{
    IdempotencyRecord, IndexCursor, LinkPage, LinkReads, LinkStore, ListCursor, Propagation, PropagationLease,
    StoreError,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

const LINK_COLUMNS: &str = "code, long_url, redirect, forward_query, created_at, created_by, is_active, \
     version, expires_at, deleted_at, deleted_by, delete_reason, purge_at, password_hash, rules";

fn link_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Link, StoreError>> {
    let redirect: u16 = row.get(2)?;
    let version: i64 = row.get(7)?;
    let Some(redirect) = RedirectKind::from_status(redirect) else {
        return Ok(Err(StoreError::Corrupt(format!("redirect {redirect}"))));
    };
    let rules = match row.get::<_, Option<String>>(14)? {
        None => Vec::new(),
        Some(json) => match serde_json::from_str(&json) {
            Ok(rules) => rules,
            Err(e) => return Ok(Err(StoreError::Corrupt(format!("rules: {e}")))),
        },
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
        password_hash: row.get(13)?,
        rules,
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

/// Records the propagation of `link` (at its new version) pending, leased to `lease`: one
/// per link, a newer version replacing an older one.
fn record_pending(conn: &Connection, link: &Link, lease: &PropagationLease) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO propagations (code, version, lease_owner, lease_until) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (code) DO UPDATE SET version = excluded.version, \
         lease_owner = excluded.lease_owner, lease_until = excluded.lease_until",
        params![link.code, link.version as i64, lease.owner, lease.until],
    )
    .map_err(sql_err)?;
    Ok(())
}

/// Inserts a link unless its code is taken; true when inserted.
fn insert_link_in(conn: &Connection, link: &Link) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(&format!(
            "INSERT INTO links ({LINK_COLUMNS}, target_host, domain_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) \
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
            link.password_hash,
            stored_json(&link.rules),
            target_host(&link.long_url),
            domain_id(&link.code),
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

impl SqliteStore {
    /// The versioned update every change of a link is (a delete, an edit, a restore): if
    /// `code` is at `expected_version` and active as `was_active` says, it becomes
    /// `change(current)`, and its propagation is recorded pending, leased to `lease`, in the
    /// same transaction. `ConditionFailed` or `NotFound` otherwise, with nothing written.
    async fn change_link(
        &self,
        code: &str,
        expected_version: u64,
        was_active: bool,
        lease: &PropagationLease,
        change: impl FnOnce(&Link) -> Link + Send + 'static,
    ) -> Result<Link, StoreError> {
        let code = code.to_owned();
        let lease = lease.clone();
        self.write(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let current = get_link_in(&tx, &code)?.ok_or(StoreError::NotFound)?;
            if current.version != expected_version || current.is_active != was_active {
                return Err(StoreError::ConditionFailed);
            }
            let next = change(&current);
            let changed = tx
                .execute(
                    "UPDATE links SET long_url = ?1, redirect = ?2, forward_query = ?3, expires_at = ?4, \
                     is_active = ?5, version = ?6, deleted_at = ?7, deleted_by = ?8, delete_reason = ?9, \
                     purge_at = ?10, password_hash = ?11, target_host = ?15, rules = ?16 \
                     WHERE code = ?12 AND version = ?13 AND is_active = ?14",
                    params![
                        next.long_url,
                        next.redirect.status(),
                        next.forward_query,
                        next.expires_at,
                        next.is_active,
                        next.version as i64,
                        next.deleted_at,
                        next.deleted_by,
                        next.delete_reason,
                        next.purge_at,
                        next.password_hash,
                        code,
                        expected_version as i64,
                        was_active,
                        target_host(&next.long_url),
                        stored_json(&next.rules),
                    ],
                )
                .map_err(sql_err)?;
            if changed != 1 {
                return Err(StoreError::ConditionFailed);
            }
            record_pending(&tx, &next, &lease)?;
            tx.commit().map_err(sql_err)?;
            Ok(next)
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
        let deletion = deletion.clone();
        self.change_link(code, expected_version, true, lease, move |l| l.deactivated(&deletion))
            .await
    }

    async fn edit_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        edit: &LinkEdit,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        let edit = edit.clone();
        self.change_link(code, expected_version, true, lease, move |l| l.edited(&edit))
            .await
    }

    async fn restore_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.change_link(code, expected_version, false, lease, Link::restored)
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

    async fn links_by_target_host(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let (start, end) = (prefix.to_owned(), rebound_core::threat::host_key_prefix_end(prefix));
        self.read(move |conn| {
            // A range of the partial index: (host, code) after the cursor, below the end.
            let (after_key, after_code) = match &after {
                Some(c) => (c.key.clone(), c.code.clone()),
                None => (start, String::new()),
            };
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {LINK_COLUMNS}, target_host FROM links INDEXED BY links_by_target_host \
                     WHERE is_active = 1 AND (target_host, code) > (?1, ?2) AND target_host < ?3 \
                     ORDER BY target_host, code LIMIT ?4"
                ))
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![after_key, after_code, end, (limit + 1) as i64], |row| {
                    Ok((link_from_row(row)?, row.get::<_, String>(15)?))
                })
                .map_err(sql_err)?;
            let mut keys = std::collections::HashMap::new();
            let mut links = Vec::new();
            for row in rows {
                let (link, key) = row.map_err(sql_err)?;
                let link = link?;
                keys.insert(link.code.clone(), key);
                links.push(link);
            }
            Ok(IndexCursor::page(links, limit, |l| {
                keys.get(&l.code).cloned().unwrap_or_default()
            }))
        })
        .await
    }

    async fn links_with_rules(&self, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        let after = cursor
            .map(IndexCursor::decode)
            .transpose()?
            .map(|c| c.code)
            .unwrap_or_default();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {LINK_COLUMNS} FROM links INDEXED BY links_with_rules \
                     WHERE is_active = 1 AND rules IS NOT NULL AND code > ?1 ORDER BY code LIMIT ?2"
                ))
                .map_err(sql_err)?;
            let links = stmt
                .query_map(params![after, (limit + 1) as i64], link_from_row)
                .map_err(sql_err)?
                .map(|row| row.map_err(sql_err)?)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(IndexCursor::page(links, limit, |_| String::new()))
        })
        .await
    }

    async fn links_on_domain(&self, id: &str, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        let after = cursor
            .map(IndexCursor::decode)
            .transpose()?
            .map(|c| c.code)
            .unwrap_or_default();
        let id = id.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {LINK_COLUMNS} FROM links INDEXED BY links_by_domain \
                     WHERE is_active = 1 AND domain_id = ?1 AND code > ?2 ORDER BY code LIMIT ?3"
                ))
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![id, after, (limit + 1) as i64], link_from_row)
                .map_err(sql_err)?;
            let links = rows.map(|r| r.map_err(sql_err)?).collect::<Result<Vec<_>, _>>()?;
            Ok(IndexCursor::page(links, limit, |_| id.clone()))
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
