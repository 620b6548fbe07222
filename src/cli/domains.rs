//! `rebound domains …`: the domains links are served on (docs/spec.md §11). Operators add and
//! remove them and set their app links (§14); any key lists and shows the ones it may use.

use super::client::{api_path, Client, NO_BODY};
use super::output::{as_json, fields, table, Printed};
use super::{CliError, DomainsCommand};
use rebound_api_types::{AppLinksRequest, CreateDomainRequest, DomainList, DomainRemoved, DomainView};
use reqwest::Method;

/// The fields `add` and `show` print.
const DOMAIN_FIELDS: &[&str] = &[
    "name",
    "default",
    "certificate",
    "state",
    "certificate_expires_at",
    "certificate_error",
    "certificate_attempt_at",
    "not_found_url",
    "expired_url",
    "root_url",
    "created_at",
    "created_by",
];

/// Runs a `domains` command.
pub(super) async fn run(client: &Client, command: DomainsCommand) -> Result<Printed, CliError> {
    let (value, text) = match command {
        DomainsCommand::Add {
            name,
            certificate,
            not_found_url,
            expired_url,
            root_url,
        } => {
            let body = CreateDomainRequest {
                name,
                certificate,
                not_found_url,
                expired_url,
                root_url,
                apple_app_site_association: None,
                assetlinks: None,
            };
            let added: DomainView = client.send(Method::POST, "/api/v1/domains", Some(&body), &[]).await?;
            let v = as_json(&added);
            let mut text = fields(&v, DOMAIN_FIELDS);
            text.push_str("Every proxy routes it within seconds.\n");
            (v, text)
        }
        DomainsCommand::List => {
            let list: DomainList = client.send(Method::GET, "/api/v1/domains", NO_BODY, &[]).await?;
            let mut rows = vec![vec![
                "NAME".into(),
                "DEFAULT".into(),
                "CERTIFICATE".into(),
                "STATE".into(),
                "DETAIL".into(),
            ]];
            for d in &list.domains {
                rows.push(vec![
                    d.name.clone(),
                    if d.default { "yes" } else { "no" }.into(),
                    d.certificate.clone(),
                    d.state.clone(),
                    state_detail(d),
                ]);
            }
            (as_json(&list), table(&rows))
        }
        DomainsCommand::Show { name } => {
            let path = api_path(&["api", "v1", "domains", &name], &[])?;
            let domain: DomainView = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let v = as_json(&domain);
            (v.clone(), fields(&v, DOMAIN_FIELDS))
        }
        DomainsCommand::Remove { name, take_down } => {
            let query: &[(&str, &str)] = if take_down { &[("take_down", "true")] } else { &[] };
            let path = api_path(&["api", "v1", "domains", &name], query)?;
            let removed: DomainRemoved =
                client
                    .send(Method::DELETE, &path, NO_BODY, &[])
                    .await
                    .map_err(|CliError(e)| match e.starts_with("409 domain_has_links") {
                        true => CliError(format!("{e} (pass --take-down to take them down with it)")),
                        false => CliError(e),
                    })?;
            let text = match removed.taken_down {
                0 => format!("removed {}\n", removed.name),
                1 => format!("removed {} and took its 1 link down\n", removed.name),
                n => format!("removed {} and took its {n} links down\n", removed.name),
            };
            (as_json(&removed), text)
        }
        DomainsCommand::AppLinks {
            name,
            apple_app_site_association,
            assetlinks,
            remove_apple_app_site_association,
            remove_assetlinks,
        } => {
            let path = api_path(&["api", "v1", "domains", &name], &[])?;
            let mut domain: DomainView = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let changes = [
                (&apple_app_site_association, remove_apple_app_site_association),
                (&assetlinks, remove_assetlinks),
            ];
            if changes.iter().any(|(file, remove)| file.is_some() || *remove) {
                // The documents not named are sent back as they are.
                let document =
                    |file: &Option<String>, remove: bool, current: Option<serde_json::Value>| match (file, remove) {
                        (Some(file), _) => read_json_file(file).map(Some),
                        (None, true) => Ok(None),
                        (None, false) => Ok(current),
                    };
                let body = AppLinksRequest {
                    apple_app_site_association: document(
                        &apple_app_site_association,
                        remove_apple_app_site_association,
                        domain.apple_app_site_association.take(),
                    )?,
                    assetlinks: document(&assetlinks, remove_assetlinks, domain.assetlinks.take())?,
                };
                let path = api_path(&["api", "v1", "domains", &name, "app-links"], &[])?;
                domain = client.send(Method::PUT, &path, Some(&body), &[]).await?;
            }
            let v = as_json(&domain);
            (v.clone(), fields(&v, APP_LINKS_FIELDS))
        }
    };
    Ok(Printed::Table { json: value, text })
}

/// The fields `app-links` prints.
const APP_LINKS_FIELDS: &[&str] = &["name", "apple_app_site_association", "assetlinks"];

/// The JSON in `file` (`-`: standard input).
fn read_json_file(file: &str) -> Result<serde_json::Value, CliError> {
    let text = match file {
        "-" => std::io::read_to_string(std::io::stdin()),
        path => std::fs::read_to_string(path),
    }
    .map_err(|e| CliError(format!("cannot read {file}: {e}")))?;
    serde_json::from_str(&text).map_err(|e| CliError(format!("{file} is not JSON: {e}")))
}

/// What a list row says beside the state: why the last order failed, when the stored
/// certificate expires.
fn state_detail(d: &DomainView) -> String {
    match (&d.certificate_error, &d.certificate_expires_at) {
        (Some(error), Some(expires)) => format!("{error} (the certificate expires {expires})"),
        (Some(error), None) => error.clone(),
        (None, Some(expires)) => format!("expires {expires}"),
        (None, None) => "-".into(),
    }
}
