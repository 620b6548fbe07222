//! The audit log ([`AuditLog`]): events by code, in time order.

use crate::item::{get_n, get_s, n, opt_s, s};
use crate::store::sdk_err;
use crate::DynamoStore;
use async_trait::async_trait;
use rebound_store::{AuditEvent, AuditLog, StoreError};

#[async_trait]
impl AuditLog for DynamoStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut req = self
            .client
            .put_item()
            .table_name(self.table("audit"))
            .item("code", s(event.code.clone().unwrap_or_else(|| "-".into())))
            .item("seq", s(format!("{:015}#{:x}", event.at.max(0), unique)))
            .item("at", n(event.at))
            .item("actor", s(&event.actor))
            .item("action", s(&event.action))
            .item("outcome", s(&event.outcome));
        if let Some(r) = &event.reason {
            req = req.item("reason", s(r));
        }
        if let Some(d) = &event.detail {
            req = req.item("detail", s(d));
        }
        req.send().await.map_err(sdk_err)?;
        Ok(())
    }

    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(self.table("audit"))
            .key_condition_expression("#code = :code")
            .expression_attribute_names("#code", "code")
            .expression_attribute_values(":code", s(code))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err)?;
        out.items()
            .iter()
            .map(|i| {
                Ok(AuditEvent {
                    at: get_n(i, "at")?,
                    actor: get_s(i, "actor")?,
                    action: get_s(i, "action")?,
                    code: opt_s(i, "code").filter(|c| c != "-"),
                    reason: opt_s(i, "reason"),
                    outcome: get_s(i, "outcome")?,
                    detail: opt_s(i, "detail"),
                })
            })
            .collect()
    }
}
