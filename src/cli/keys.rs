//! `rebound keys …`: an operator creates and revokes API keys.

use super::client::{api_path, Client, NO_BODY};
use super::output::{as_json, table, Printed};
use super::{CliError, KeysCommand};
use rebound_api_types::{CreateKeyRequest, KeyCreated};
use reqwest::Method;
use serde_json::json;

/// Runs a `keys` command.
pub(super) async fn run(client: &Client, command: KeysCommand) -> Result<Printed, CliError> {
    let (value, text) = match command {
        KeysCommand::Create { name, role, domains } => {
            let key: KeyCreated = client
                .send(
                    Method::POST,
                    "/api/v1/keys",
                    Some(&CreateKeyRequest {
                        name,
                        role,
                        // Not given: every domain (an empty list would be refused).
                        domains: (!domains.is_empty()).then_some(domains),
                    }),
                    &[],
                )
                .await?;
            let scope = key
                .domains
                .as_ref()
                .map_or_else(|| "every domain".to_owned(), |d| d.join(", "));
            let mut text = table(&[
                vec!["id:".into(), key.id.clone()],
                vec!["name:".into(), key.name.clone()],
                vec!["role:".into(), key.role.clone()],
                vec!["domains:".into(), scope],
                vec!["key:".into(), key.key.clone()],
            ]);
            text.push_str("The key is shown only once; store it now.\n");
            (as_json(&key), text)
        }
        KeysCommand::Revoke { id } => {
            let path = api_path(&["api", "v1", "keys", &id], &[])?;
            client.send_text(Method::DELETE, &path, NO_BODY, &[]).await?;
            (json!({"revoked": id}), format!("revoked key {id}\n"))
        }
    };
    Ok(Printed::Table { json: value, text })
}
