//! The API keys ([`KeyStore`]).

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_core::UnixMillis;
use rebound_store::{ApiKeyRecord, KeyStore, Role, StoreError};
use rusqlite::{params, OptionalExtension};

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
        domains: row
            .get::<_, Option<String>>(6)?
            .map(|d| d.split(',').map(str::to_owned).collect()),
    }))
}

#[async_trait]
impl KeyStore for SqliteStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let key = key.clone();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO api_keys (id, name, role, key_hash, created_at, revoked_at, domains) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT DO NOTHING",
                    params![
                        key.id,
                        key.name,
                        key.role.as_str(),
                        key.key_hash,
                        key.created_at,
                        key.revoked_at,
                        // Domain names have no commas.
                        key.domains.as_ref().map(|d| d.join(","))
                    ],
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
                "SELECT id, name, role, key_hash, created_at, revoked_at, domains FROM api_keys WHERE key_hash = ?1",
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
                "SELECT id, name, role, key_hash, created_at, revoked_at, domains FROM api_keys WHERE id = ?1",
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
