//! `rebound abuse …`: the threat lists in force, the abuse reports, a report of a link, and
//! the reinstatement of a link a threat list took down.

use super::client::{api_path, Client, NO_BODY};
use super::links::on;
use super::output::{as_json, fields, table, Printed, LINK_FIELDS};
use super::{AbuseCommand, CliError};
use rebound_api_types::{LinkView, ReportList, ReportRequest, ThreatListsView};
use reqwest::Method;
use serde_json::json;

pub(super) async fn run(client: &Client, command: AbuseCommand) -> Result<Printed, CliError> {
    let (json, text) = match command {
        AbuseCommand::Lists => {
            let lists: ThreatListsView = client.send(Method::GET, "/api/v1/threat-lists", NO_BODY, &[]).await?;
            let mut rows = vec![vec![
                "LIST".into(),
                "FORMAT".into(),
                "ENTRIES".into(),
                "LOADED".into(),
                "LAST LOAD".into(),
                "SOURCE".into(),
            ]];
            for l in &lists.lists {
                rows.push(vec![
                    l.name.clone(),
                    l.format.clone(),
                    l.entries.to_string(),
                    l.loaded_at.clone().unwrap_or_else(|| "never".into()),
                    l.error.as_ref().map_or_else(|| "ok".into(), |e| format!("failed: {e}")),
                    l.source.clone(),
                ]);
            }
            let mut text = table(&rows);
            if let (Some(at), Some(read), Some(down)) = (
                &lists.last_rescan_at,
                lists.last_rescan_scanned,
                lists.last_rescan_taken_down,
            ) {
                text.push_str(&format!(
                    "last check of the links: {at}, {read} read, {down} taken down\n"
                ));
            }
            (as_json(&lists), text)
        }
        AbuseCommand::Reports => {
            let list: ReportList = client.send(Method::GET, "/api/v1/abuse-reports", NO_BODY, &[]).await?;
            let mut rows = vec![vec!["TIME".into(), "LINK".into(), "REPORTER".into(), "REASON".into()]];
            for r in &list.reports {
                rows.push(vec![
                    r.at.clone(),
                    r.short_url.clone(),
                    r.reporter.clone(),
                    r.reason.clone(),
                ]);
            }
            (as_json(&list), table(&rows))
        }
        AbuseCommand::Report { link, reason } => {
            let body = ReportRequest {
                link: link.clone(),
                reason,
            };
            client
                .send_text(Method::POST, "/api/v1/abuse-reports", Some(&body), &[])
                .await?;
            (json!({"reported": link}), format!("reported {link}\n"))
        }
        AbuseCommand::Reinstate { code, domain } => {
            let path = api_path(&["api", "v1", "links", &code, "reinstate"], &on(domain.as_deref()))?;
            let link: LinkView = client.send(Method::POST, &path, NO_BODY, &[]).await?;
            let v = as_json(&link);
            let text = fields(&v, LINK_FIELDS);
            (v, text)
        }
    };
    Ok(Printed::Table { json, text })
}
