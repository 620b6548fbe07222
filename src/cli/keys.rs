//! `rebound keys …`: an operator creates and revokes API keys.

use super::client::{encode_segment, Client, NO_BODY};
use super::output::{as_json, fields, Printed};
use super::{CliError, KeysCommand};
use rebound_api_types::{CreateKeyRequest, KeyCreated};
use reqwest::Method;
use serde_json::json;

/// Runs a `keys` command.
pub(super) async fn run(client: &Client, command: KeysCommand) -> Result<Printed, CliError> {
    let (value, text) = match command {
        KeysCommand::Create { name, role } => {
            let key: KeyCreated = client
                .send(
                    Method::POST,
                    "/api/v1/keys",
                    Some(&CreateKeyRequest {
                        name,
                        role,
                        domains: None,
                    }),
                    &[],
                )
                .await?;
            let v = as_json(&key);
            let mut text = fields(&v, &["id", "name", "role", "key"]);
            text.push_str("The key is shown only once; store it now.\n");
            (v, text)
        }
        KeysCommand::Revoke { id } => {
            client
                .send_text(
                    Method::DELETE,
                    &format!("/api/v1/keys/{}", encode_segment(&id)),
                    NO_BODY,
                    &[],
                )
                .await?;
            (json!({"revoked": id}), format!("revoked key {id}\n"))
        }
    };
    Ok(Printed::Table { json: value, text })
}
