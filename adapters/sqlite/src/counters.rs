//! The KGS counters and the settings stored once ([`CounterStore`]).

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_store::{CounterStore, StoreError};
use rusqlite::params;
use std::ops::Range;

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
