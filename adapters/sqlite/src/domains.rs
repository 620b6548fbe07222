//! The domains ([`DomainStore`]): one row per domain, its record as JSON (the record grows
//! fields without a schema change; a row is read whole anyway), its app links in columns of
//! their own beside it (written apart from the record); the default domain's app links in
//! a table of one row.

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_core::app_links::AppLinks;
use rebound_core::domain::Domain;
use rebound_store::domains::DomainStore;
use rebound_store::StoreError;
use rusqlite::{params, OptionalExtension, Row};

/// The columns a domain is read from.
const COLUMNS: &str = "record, apple_app_site_association, assetlinks";

fn encode(domain: &Domain) -> Result<String, StoreError> {
    serde_json::to_string(domain).map_err(|e| StoreError::Internal(format!("encoding a domain: {e}")))
}

/// A row of [`COLUMNS`]: the record's text and its app links.
fn row_of(r: &Row<'_>) -> rusqlite::Result<(String, AppLinks)> {
    Ok((
        r.get(0)?,
        AppLinks {
            apple_app_site_association: r.get(1)?,
            assetlinks: r.get(2)?,
        },
    ))
}

fn decode((text, app_links): (String, AppLinks)) -> Result<Domain, StoreError> {
    let domain: Domain =
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("a domain record: {e}")))?;
    Ok(Domain { app_links, ..domain })
}

#[async_trait]
impl DomainStore for SqliteStore {
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        let (name, record, links) = (domain.name.clone(), encode(domain)?, domain.app_links.clone());
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO domains (name, record, apple_app_site_association, assetlinks) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
                    params![name, record, links.apple_app_site_association, links.assetlinks],
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
        let row = self
            .read(move |conn| {
                conn.query_row(
                    &format!("SELECT {COLUMNS} FROM domains WHERE name = ?1"),
                    [name],
                    row_of,
                )
                .optional()
                .map_err(sql_err)
            })
            .await?;
        row.map(decode).transpose()
    }

    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
        let rows: Vec<(String, AppLinks)> = self
            .read(|conn| {
                let mut stmt = conn
                    .prepare(&format!("SELECT {COLUMNS} FROM domains ORDER BY name"))
                    .map_err(sql_err)?;
                let rows = stmt.query_map([], row_of).map_err(sql_err)?;
                rows.collect::<Result<_, _>>().map_err(sql_err)
            })
            .await?;
        rows.into_iter().map(decode).collect()
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

    async fn set_app_links(&self, name: &str, app_links: &AppLinks) -> Result<(), StoreError> {
        let (name, links) = (name.to_owned(), app_links.clone());
        self.write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE domains SET apple_app_site_association = ?2, assetlinks = ?3 WHERE name = ?1",
                    params![name, links.apple_app_site_association, links.assetlinks],
                )
                .map_err(sql_err)?;
            match n {
                0 => Err(StoreError::NotFound),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn default_app_links(&self) -> Result<AppLinks, StoreError> {
        let links = self
            .read(|conn| {
                conn.query_row(
                    "SELECT apple_app_site_association, assetlinks FROM default_app_links WHERE id = 1",
                    [],
                    |r| {
                        Ok(AppLinks {
                            apple_app_site_association: r.get(0)?,
                            assetlinks: r.get(1)?,
                        })
                    },
                )
                .optional()
                .map_err(sql_err)
            })
            .await?;
        Ok(links.unwrap_or_default())
    }

    async fn set_default_app_links(&self, app_links: &AppLinks) -> Result<(), StoreError> {
        let links = app_links.clone();
        self.write(move |conn| {
            conn.execute(
                "INSERT INTO default_app_links (id, apple_app_site_association, assetlinks) VALUES (1, ?1, ?2) \
                 ON CONFLICT (id) DO UPDATE SET apple_app_site_association = ?1, assetlinks = ?2",
                params![links.apple_app_site_association, links.assetlinks],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }
}
