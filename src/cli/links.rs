//! `rebound links …`: create, get, list, edit, delete, the QR code and the daily clicks of
//! links (`import` has a file of its own).

use super::client::{api_path, given, Client, NO_BODY};
use super::output::{as_json, fields, table, Printed, LINK_FIELDS};
use super::{import, CliError, LinksCommand};
use rebound_api_types::{CreateLinkRequest, EditLinkRequest, LinkCreated, LinkList, LinkRule, LinkStats, LinkView};
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
            domain,
            password,
            rules,
        } => {
            let body = CreateLinkRequest {
                domain,
                password,
                rules: rules.as_deref().map(read_rules).transpose()?,
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
                    "domain",
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
        LinksCommand::Rules { code, domain } => {
            let path = api_path(&["api", "v1", "links", &code], &on(domain.as_deref()))?;
            let link: LinkView = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec!["RULE".into(), "WHEN".into(), "THEN".into()]];
            for (at, rule) in link.rules.iter().enumerate() {
                rows.push(vec![(at + 1).to_string(), rule_when(rule), rule_then(rule)]);
            }
            rows.push(vec!["default".into(), "-".into(), link.long_url.clone()]);
            (as_json(&link.rules), table(&rows))
        }
        LinksCommand::Get { code, domain } => {
            let path = api_path(&["api", "v1", "links", &code], &on(domain.as_deref()))?;
            let link: LinkView = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let v = as_json(&link);
            let text = fields(&v, LINK_FIELDS);
            (v, text)
        }
        LinksCommand::List { limit, cursor } => {
            let limit = limit.map(|l| l.to_string());
            let query = given(&[("limit", limit.as_deref()), ("cursor", cursor.as_deref())]);
            let path = api_path(&["api", "v1", "links"], &query)?;
            let list: LinkList = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec![
                "CODE".into(),
                "DOMAIN".into(),
                "STATE".into(),
                "CREATED".into(),
                "EXPIRES".into(),
                "TARGET".into(),
            ]];
            for l in &list.links {
                let state = if l.is_active { "active" } else { "deleted" };
                rows.push(vec![
                    l.code.clone(),
                    l.domain.clone(),
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
        LinksCommand::Edit {
            code,
            long_url,
            redirect,
            forward_query,
            no_forward_query,
            ttl,
            expires_at,
            no_expiry,
            password,
            no_password,
            rules,
            no_rules,
            if_match,
            domain,
        } => {
            let path = api_path(&["api", "v1", "links", &code], &on(domain.as_deref()))?;
            let body = EditLinkRequest {
                long_url,
                redirect,
                forward_query: (forward_query || no_forward_query).then_some(forward_query),
                expires_at: match (expires_at, no_expiry) {
                    (Some(at), _) => Some(Some(at)),
                    (None, true) => Some(None),
                    (None, false) => None,
                },
                ttl_seconds: ttl,
                password: match (password, no_password) {
                    (Some(p), _) => Some(Some(p)),
                    (None, true) => Some(None),
                    (None, false) => None,
                },
                rules: match (rules, no_rules) {
                    (Some(r), _) => Some(read_rules(&r)?),
                    (None, true) => Some(Vec::new()),
                    (None, false) => None,
                },
            };
            let version = match if_match {
                Some(v) => v,
                None => {
                    let link: LinkView = client.send(Method::GET, &path, NO_BODY, &[]).await?;
                    link.version
                }
            };
            let tag = format!("\"{version}\"");
            let link: LinkView = client
                .send(Method::PATCH, &path, Some(&body), &[("if-match", tag.as_str())])
                .await?;
            let v = as_json(&link);
            let text = fields(&v, LINK_FIELDS);
            (v, text)
        }
        LinksCommand::Delete { code, domain } => {
            let path = api_path(&["api", "v1", "links", &code], &on(domain.as_deref()))?;
            client.send_text(Method::DELETE, &path, NO_BODY, &[]).await?;
            (json!({"deleted": code}), format!("deleted {code}\n"))
        }
        LinksCommand::Qr { code, domain } => {
            let path = api_path(&["api", "v1", "links", &code, "qr.svg"], &on(domain.as_deref()))?;
            // The SVG itself, also with --json: it is what the command is for.
            return client
                .send_text(Method::GET, &path, NO_BODY, &[])
                .await
                .map(Printed::Raw);
        }
        LinksCommand::Stats {
            code,
            from,
            to,
            domain,
            by,
        } => {
            let query = given(&[
                ("from", from.as_deref()),
                ("to", to.as_deref()),
                ("domain", domain.as_deref()),
                ("by", by.as_deref()),
            ]);
            let path = api_path(&["api", "v1", "links", &code, "stats"], &query)?;
            let stats: LinkStats = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            if let Some(breakdown) = &stats.breakdown {
                // One row a value, most clicked first; the people's total to compare with.
                let mut rows = vec![vec![breakdown.by.to_uppercase(), "CLICKS".into()]];
                for v in &breakdown.values {
                    rows.push(vec![v.value.clone(), v.clicks.to_string()]);
                }
                rows.push(vec!["counted".into(), breakdown.counted.to_string()]);
                rows.push(vec!["total".into(), stats.total.to_string()]);
                return Ok(Printed::Table {
                    json: as_json(&stats),
                    text: table(&rows),
                });
            }
            // People's clicks and bots' (unfurlers, crawlers, HEAD) apart.
            let mut rows = vec![vec!["DAY".into(), "CLICKS".into(), "BOT CLICKS".into()]];
            for d in stats.days.iter().filter(|d| d.clicks != 0 || d.bot_clicks != 0) {
                rows.push(vec![d.day.clone(), d.clicks.to_string(), d.bot_clicks.to_string()]);
            }
            rows.push(vec![
                "total".into(),
                stats.total.to_string(),
                stats.bot_total.to_string(),
            ]);
            let text = table(&rows);
            (as_json(&stats), text)
        }
    };
    Ok(Printed::Table { json: value, text })
}

/// The query of a call on one link: `?domain=` when given.
pub(super) fn on(domain: Option<&str>) -> Vec<(&str, &str)> {
    given(&[("domain", domain)])
}

/// `--rules`: a JSON array of rules, `@FILE` for a file holding one, `-` for standard input.
fn read_rules(arg: &str) -> Result<Vec<LinkRule>, CliError> {
    let text = match arg {
        "-" => std::io::read_to_string(std::io::stdin()).map_err(|e| CliError(format!("--rules -: {e}")))?,
        a if a.starts_with('@') => {
            std::fs::read_to_string(&a[1..]).map_err(|e| CliError(format!("--rules {a}: {e}")))?
        }
        a => a.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| CliError(format!("--rules: not a JSON array of rules: {e}")))
}

/// A rule's conditions as one line: `country DE,AT; os ios`, or `always`.
fn rule_when(rule: &LinkRule) -> String {
    let as_text = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let mut parts = Vec::new();
    if !rule.countries.is_empty() {
        parts.push(format!("country {}", rule.countries.join(",")));
    }
    if !rule.os.is_empty() {
        let os: Vec<String> = rule.os.iter().map(|o| as_text(json!(o))).collect();
        parts.push(format!("os {}", os.join(",")));
    }
    if !rule.devices.is_empty() {
        let devices: Vec<String> = rule.devices.iter().map(|d| as_text(json!(d))).collect();
        parts.push(format!("device {}", devices.join(",")));
    }
    if !rule.languages.is_empty() {
        parts.push(format!("language {}", rule.languages.join(",")));
    }
    match parts.is_empty() {
        true => "always".into(),
        false => parts.join("; "),
    }
}

/// Where a rule sends a visitor: its target, or its split as `weight target` pairs.
fn rule_then(rule: &LinkRule) -> String {
    match &rule.target {
        Some(target) => target.clone(),
        None => rule
            .split
            .iter()
            .flatten()
            .map(|v| format!("{} {}", v.weight, v.target))
            .collect::<Vec<_>>()
            .join(" | "),
    }
}
