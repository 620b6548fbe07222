//! `rebound takedown CODE --reason … [--domain …]`: an operator takes a link down, with a
//! reason for the audit log.

use super::client::{api_path, Client};
use super::links::on;
use super::output::{as_json, fields, Printed};
use super::CliError;
use rebound_api_types::{LinkView, TakedownRequest};
use reqwest::Method;

/// Takes `code` (on `domain`, else the default domain) down for `reason`.
pub(super) async fn run(
    client: &Client,
    code: String,
    reason: String,
    domain: Option<&str>,
) -> Result<Printed, CliError> {
    let path = api_path(&["api", "v1", "links", &code, "takedown"], &on(domain))?;
    let down: LinkView = client
        .send(Method::POST, &path, Some(&TakedownRequest { reason }), &[])
        .await?;
    let v = as_json(&down);
    let text = fields(
        &v,
        &[
            "code",
            "domain",
            "is_active",
            "version",
            "deleted_at",
            "deleted_by",
            "delete_reason",
        ],
    );
    Ok(Printed::Table { json: v, text })
}
