//! `rebound links …`: create, get, list, delete, the QR code and the daily clicks of links
//! (`import` has a file of its own).

use super::client::{encode_segment, Client, NO_BODY};
use super::output::{as_json, fields, table, Printed, LINK_FIELDS};
use super::{import, CliError, LinksCommand};
use rebound_api_types::{CreateLinkRequest, LinkCreated, LinkList, LinkStats, LinkView};
use reqwest::Method;
use serde_json::json;

/// Runs a `links` command; `json_out` is `--json`, for the import to gather its results.
pub(super) async fn run(client: &Client, command: LinksCommand, json_out: bool) -> Result<Printed, CliError> {
    let (value, text) = match command {
        LinksCommand::Create {
            long_url,
            alias,
            ttl,
            expires_at,
            redirect,
            forward_query,
            idempotency_key,
        } => {
            let body = CreateLinkRequest {
                domain: None,
                long_url,
                custom_alias: alias,
                expires_at,
                ttl_seconds: ttl,
                redirect,
                forward_query: forward_query.then_some(true),
            };
            let headers: Vec<(&str, &str)> = idempotency_key
                .as_deref()
                .map(|k| vec![("idempotency-key", k)])
                .unwrap_or_default();
            let created: LinkCreated = client
                .send(Method::POST, "/api/v1/links", Some(&body), &headers)
                .await?;
            let v = as_json(&created);
            let text = fields(
                &v,
                &[
                    "code",
                    "short_url",
                    "long_url",
                    "redirect",
                    "forward_query",
                    "expires_at",
                    "created_at",
                ],
            );
            (v, text)
        }
        LinksCommand::Import { file, format, batch } => {
            import::run(client, &file, format.as_deref(), batch, json_out).await?
        }
        LinksCommand::Get { code } => {
            let link: LinkView = client
                .send(
                    Method::GET,
                    &format!("/api/v1/links/{}", encode_segment(&code)),
                    NO_BODY,
                    &[],
                )
                .await?;
            let v = as_json(&link);
            let text = fields(&v, LINK_FIELDS);
            (v, text)
        }
        LinksCommand::List { limit, cursor } => {
            let mut query = Vec::new();
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            if let Some(c) = cursor {
                query.push(format!("cursor={}", encode_segment(&c)));
            }
            let path = if query.is_empty() {
                "/api/v1/links".to_owned()
            } else {
                format!("/api/v1/links?{}", query.join("&"))
            };
            let list: LinkList = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec![
                "CODE".into(),
                "STATE".into(),
                "CREATED".into(),
                "EXPIRES".into(),
                "TARGET".into(),
            ]];
            for l in &list.links {
                let state = if l.is_active { "active" } else { "deleted" };
                rows.push(vec![
                    l.code.clone(),
                    state.into(),
                    l.created_at.clone(),
                    l.expires_at.clone().unwrap_or_else(|| "-".into()),
                    l.long_url.clone(),
                ]);
            }
            let mut text = table(&rows);
            if let Some(c) = &list.next_cursor {
                text.push_str(&format!("more: --cursor {c}\n"));
            }
            (as_json(&list), text)
        }
        LinksCommand::Delete { code } => {
            client
                .send_text(
                    Method::DELETE,
                    &format!("/api/v1/links/{}", encode_segment(&code)),
                    NO_BODY,
                    &[],
                )
                .await?;
            (json!({"deleted": code}), format!("deleted {code}\n"))
        }
        LinksCommand::Qr { code } => {
            let path = format!("/api/v1/links/{}/qr.svg", encode_segment(&code));
            // The SVG itself, also with --json: it is what the command is for.
            return client
                .send_text(Method::GET, &path, NO_BODY, &[])
                .await
                .map(Printed::Raw);
        }
        LinksCommand::Stats { code, from, to } => {
            let mut query = Vec::new();
            if let Some(f) = from {
                query.push(format!("from={}", encode_segment(&f)));
            }
            if let Some(t) = to {
                query.push(format!("to={}", encode_segment(&t)));
            }
            let path = format!("/api/v1/links/{}/stats?{}", encode_segment(&code), query.join("&"));
            let stats: LinkStats = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec!["DAY".into(), "CLICKS".into()]];
            for d in stats.days.iter().filter(|d| d.clicks != 0) {
                rows.push(vec![d.day.clone(), d.clicks.to_string()]);
            }
            rows.push(vec!["total".into(), stats.total.to_string()]);
            let text = table(&rows);
            (as_json(&stats), text)
        }
    };
    Ok(Printed::Table { json: value, text })
}
