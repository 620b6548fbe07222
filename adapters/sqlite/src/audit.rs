//! The audit log ([`AuditLog`]).

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_store::{AuditEvent, AuditLog, StoreError};
use rusqlite::params;

#[async_trait]
impl AuditLog for SqliteStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        let e = event.clone();
        self.write(move |conn| {
            conn.execute(
                "INSERT INTO audit (at, actor, action, code, reason, outcome, detail) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![e.at, e.actor, e.action, e.code, e.reason, e.outcome, e.detail],
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
                    "SELECT at, actor, action, code, reason, outcome, detail FROM audit WHERE code = ?1 \
                     ORDER BY seq",
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
                        detail: r.get(6)?,
                    })
                })
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
        })
        .await
    }
}
