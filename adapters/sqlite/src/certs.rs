//! What ACME gave the fleet ([`CertificateStore`]): the account, each domain's certificate
//! and the lease on ordering one.

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
use rebound_core::UnixMillis;
use rebound_store::certs::{CertificateStore, StoredCertificate, CERTIFICATES_CHANGED_COUNTER};
use rebound_store::LinkReads;
use rebound_store::StoreError;
use rusqlite::{params, OptionalExtension};

fn certificate_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredCertificate> {
    Ok(StoredCertificate {
        domain: row.get(0)?,
        chain_pem: row.get(1)?,
        key_pem: row.get(2)?,
        not_after: row.get(3)?,
    })
}

#[async_trait]
impl CertificateStore for SqliteStore {
    async fn get_account(&self) -> Result<Option<String>, StoreError> {
        self.read(|conn| {
            conn.query_row("SELECT credentials FROM acme_account WHERE id = 1", [], |row| {
                row.get(0)
            })
            .optional()
            .map_err(sql_err)
        })
        .await
    }

    async fn put_account(&self, credentials: &str) -> Result<(), StoreError> {
        let credentials = credentials.to_owned();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO acme_account (id, credentials) VALUES (1, ?1) ON CONFLICT DO NOTHING",
                    [credentials],
                )
                .map_err(sql_err)?;
            match n {
                0 => Err(StoreError::AlreadyExists),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn get_certificate(&self, domain: &str) -> Result<Option<StoredCertificate>, StoreError> {
        let domain = domain.to_owned();
        self.read(move |conn| {
            conn.query_row(
                "SELECT domain, chain_pem, key_pem, not_after FROM certificates WHERE domain = ?1",
                [domain],
                certificate_from_row,
            )
            .optional()
            .map_err(sql_err)
        })
        .await
    }

    async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError> {
        let c = certificate.clone();
        self.write(move |conn| {
            // The certificate and the change it makes, in one transaction.
            let tx = conn.transaction().map_err(sql_err)?;
            tx.execute(
                "INSERT INTO certificates (domain, chain_pem, key_pem, not_after) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (domain) DO UPDATE SET chain_pem = ?2, key_pem = ?3, not_after = ?4",
                params![c.domain, c.chain_pem, c.key_pem, c.not_after],
            )
            .map_err(sql_err)?;
            tx.execute(
                "INSERT INTO counters (name, value) VALUES (?1, 1) ON CONFLICT (name) DO UPDATE SET value = value + 1",
                [CERTIFICATES_CHANGED_COUNTER],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn certificates_changed(&self) -> Result<u64, StoreError> {
        self.high_water(CERTIFICATES_CHANGED_COUNTER).await
    }

    async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT domain, chain_pem, key_pem, not_after FROM certificates ORDER BY domain")
                .map_err(sql_err)?;
            let rows = stmt.query_map([], certificate_from_row).map_err(sql_err)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
        })
        .await
    }

    async fn try_lease(
        &self,
        domain: &str,
        owner: &str,
        until: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let (domain, owner) = (domain.to_owned(), owner.to_owned());
        self.write(move |conn| {
            // One statement: taken when free, expired, or already this owner's.
            let n = conn
                .execute(
                    "INSERT INTO certificate_leases (domain, owner, until) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (domain) DO UPDATE SET owner = ?2, until = ?3 \
                     WHERE certificate_leases.owner = ?2 OR certificate_leases.until <= ?4",
                    params![domain, owner, until, now],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError> {
        let (domain, owner) = (domain.to_owned(), owner.to_owned());
        self.write(move |conn| {
            conn.execute(
                "DELETE FROM certificate_leases WHERE domain = ?1 AND owner = ?2",
                params![domain, owner],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }
    async fn put_challenge(&self, token: &str, key_authorization: &str, until: UnixMillis) -> Result<(), StoreError> {
        let (token, key_authorization) = (token.to_owned(), key_authorization.to_owned());
        self.write(move |conn| {
            conn.execute(
                "INSERT INTO acme_challenges (token, key_authorization, until) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (token) DO UPDATE SET key_authorization = ?2, until = ?3",
                params![token, key_authorization, until],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError> {
        let token = token.to_owned();
        self.read(move |conn| {
            conn.query_row(
                "SELECT key_authorization FROM acme_challenges WHERE token = ?1 AND until > ?2",
                params![token, now],
                |row| row.get(0),
            )
            .optional()
            .map_err(sql_err)
        })
        .await
    }

    async fn delete_challenge(&self, token: &str) -> Result<(), StoreError> {
        let token = token.to_owned();
        self.write(move |conn| {
            conn.execute("DELETE FROM acme_challenges WHERE token = ?1", [token])
                .map_err(sql_err)?;
            Ok(())
        })
        .await
    }
}
