//! `rebound takedown CODE --reason …`: an operator takes a link down, with a reason for
//! the audit log.

use super::client::{encode_segment, Client};
use super::output::{as_json, fields, Printed};
use super::CliError;
use rebound_api_types::{LinkView, TakedownRequest};
use reqwest::Method;

/// Takes `code` down for `reason`.
pub(super) async fn run(client: &Client, code: String, reason: String) -> Result<Printed, CliError> {
    let path = format!("/api/v1/links/{}/takedown", encode_segment(&code));
    let down: LinkView = client
        .send(Method::POST, &path, Some(&TakedownRequest { reason }), &[])
        .await?;
    let v = as_json(&down);
    let text = fields(
        &v,
        &[
            "code",
            "is_active",
            "version",
            "deleted_at",
            "deleted_by",
            "delete_reason",
        ],
    );
    Ok(Printed::Table { json: v, text })
}
