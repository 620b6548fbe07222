//! The domains ([`DomainStore`]): one row per domain, its record as JSON (the record grows
//! fields without a schema change; a row is read whole anyway).

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_core::domain::Domain;
use rebound_store::domains::DomainStore;
use rebound_store::StoreError;
use rusqlite::OptionalExtension;

fn encode(domain: &Domain) -> Result<String, StoreError> {
    serde_json::to_string(domain).map_err(|e| StoreError::Internal(format!("encoding a domain: {e}")))
}

fn decode(text: &str) -> Result<Domain, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("a domain record: {e}")))
}

#[async_trait]
impl DomainStore for SqliteStore {
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        let (name, record) = (domain.name.clone(), encode(domain)?);
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO domains (name, record) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                    [name, record],
                )
                .map_err(sql_err)?;
            match n {
                0 => Err(StoreError::AlreadyExists),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        let name = name.to_owned();
        let text: Option<String> = self
            .read(move |conn| {
                conn.query_row("SELECT record FROM domains WHERE name = ?1", [name], |r| r.get(0))
                    .optional()
                    .map_err(sql_err)
            })
            .await?;
        text.as_deref().map(decode).transpose()
    }

    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
        let texts: Vec<String> = self
            .read(|conn| {
                let mut stmt = conn
                    .prepare("SELECT record FROM domains ORDER BY name")
                    .map_err(sql_err)?;
                let rows = stmt.query_map([], |r| r.get(0)).map_err(sql_err)?;
                rows.collect::<Result<_, _>>().map_err(sql_err)
            })
            .await?;
        texts.iter().map(|t| decode(t)).collect()
    }

    async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        let (name, record) = (domain.name.clone(), encode(domain)?);
        self.write(move |conn| {
            let n = conn
                .execute("UPDATE domains SET record = ?2 WHERE name = ?1", [name, record])
                .map_err(sql_err)?;
            match n {
                0 => Err(StoreError::NotFound),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
        let name = name.to_owned();
        self.write(move |conn| {
            let n = conn
                .execute("DELETE FROM domains WHERE name = ?1", [name])
                .map_err(sql_err)?;
            match n {
                0 => Err(StoreError::NotFound),
                _ => Ok(()),
            }
        })
        .await
    }
}
