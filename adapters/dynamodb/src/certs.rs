//! What ACME gave the fleet ([`CertificateStore`]), in the `keys` table beside the API keys
//! (key material, a handful of items): `acme#account`, `cert#<domain>` and
//! `certlease#<domain>` and `acmechallenge#<token>` (HTTP-01 answers in flight), each written with one conditional request where it must be.

use crate::item::{get_n, get_s, n, s, Item};
use crate::store::{condition_refused, sdk_err};
use crate::DynamoStore;
use async_trait::async_trait;
use rebound_core::UnixMillis;
use rebound_store::certs::{CertificateStore, StoredCertificate, CERTIFICATES_CHANGED_COUNTER};
use rebound_store::StoreError;
use rebound_store::{CounterStore, LinkReads};

const ACCOUNT: &str = "acme#account";
const CERT: &str = "cert#";
const LEASE: &str = "certlease#";
const CHALLENGE: &str = "acmechallenge#";

fn certificate_from_item(item: &Item) -> Result<StoredCertificate, StoreError> {
    let pk = get_s(item, "pk")?;
    Ok(StoredCertificate {
        domain: pk
            .strip_prefix(CERT)
            .ok_or_else(|| StoreError::Corrupt(format!("certificate item {pk}")))?
            .to_owned(),
        chain_pem: get_s(item, "chain_pem")?,
        key_pem: get_s(item, "key_pem")?,
        not_after: get_n(item, "not_after")?,
    })
}

impl DynamoStore {
    /// The item `pk` of the `keys` table, read strongly consistent.
    pub(crate) async fn keys_item(&self, pk: String) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(self.table("keys"))
            .key("pk", s(pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(out.item)
    }

    /// Every item of the `keys` table whose `pk` starts with `prefix`, read strongly
    /// consistent (a scan: the table holds the keys, the certificates and the domains).
    pub(crate) async fn keys_items(&self, prefix: &str) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(self.table("keys"))
                .filter_expression("begins_with(#pk, :prefix)")
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_values(":prefix", s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk_err)?;
            items.extend(out.items().iter().cloned());
            match out.last_evaluated_key() {
                Some(key) => start = Some(key.clone()),
                None => return Ok(items),
            }
        }
    }
}

#[async_trait]
impl CertificateStore for DynamoStore {
    async fn get_account(&self) -> Result<Option<String>, StoreError> {
        self.keys_item(ACCOUNT.to_owned())
            .await?
            .map(|i| get_s(&i, "credentials"))
            .transpose()
    }

    async fn put_account(&self, credentials: &str) -> Result<(), StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(ACCOUNT))
            .item("credentials", s(credentials))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed) => Err(StoreError::AlreadyExists),
            Err(e) => Err(e),
        }
    }

    async fn get_certificate(&self, domain: &str) -> Result<Option<StoredCertificate>, StoreError> {
        self.keys_item(format!("{CERT}{domain}"))
            .await?
            .map(|i| certificate_from_item(&i))
            .transpose()
    }

    async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(format!("{CERT}{}", certificate.domain)))
            .item("chain_pem", s(&certificate.chain_pem))
            .item("key_pem", s(&certificate.key_pem))
            .item("not_after", n(certificate.not_after))
            .send()
            .await
            .map_err(sdk_err)?;
        // After the certificate: a process that reads the new number lists it. A crash in
        // between leaves the others to their periodic full listing.
        self.lease_block(CERTIFICATES_CHANGED_COUNTER, 1).await?;
        Ok(())
    }

    async fn certificates_changed(&self) -> Result<u64, StoreError> {
        self.high_water(CERTIFICATES_CHANGED_COUNTER).await
    }

    async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError> {
        let mut certificates = self
            .keys_items(CERT)
            .await?
            .iter()
            .map(certificate_from_item)
            .collect::<Result<Vec<_>, _>>()?;
        certificates.sort_by(|a, b| a.domain.cmp(&b.domain));
        Ok(certificates)
    }

    async fn try_lease(
        &self,
        domain: &str,
        owner: &str,
        until: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{LEASE}{domain}")))
            .update_expression("SET #owner = :owner, #until = :until")
            .condition_expression("attribute_not_exists(#pk) OR #owner = :owner OR #until <= :now")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#until", "until")
            .expression_attribute_values(":owner", s(owner))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        match result.map_err(condition_refused) {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{LEASE}{domain}")))
            .condition_expression("#owner = :owner")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_values(":owner", s(owner))
            .send()
            .await;
        match result.map_err(condition_refused) {
            // Another owner's, or none: nothing to give back.
            Ok(_) | Err(StoreError::ConditionFailed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn put_challenge(&self, token: &str, key_authorization: &str, until: UnixMillis) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(self.table("keys"))
            .item("pk", s(format!("{CHALLENGE}{token}")))
            .item("key_authorization", s(key_authorization))
            .item("until", n(until))
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(())
    }

    async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError> {
        let Some(item) = self.keys_item(format!("{CHALLENGE}{token}")).await? else {
            return Ok(None);
        };
        let until: UnixMillis = get_n(&item, "until")?;
        match until > now {
            true => Ok(Some(get_s(&item, "key_authorization")?)),
            false => Ok(None),
        }
    }

    async fn delete_challenge(&self, token: &str) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(self.table("keys"))
            .key("pk", s(format!("{CHALLENGE}{token}")))
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(())
    }
}
