//! `rebound stats`: the operators' summary of a domain's links, or of every domain's
//! (docs/analytics.md, "The summary"): clicks per day, then the links, countries and
//! referrers most clicked, a table each.

use super::client::{api_path, given, Client, NO_BODY};
use super::output::{as_json, table, Printed};
use super::{CliError, SummaryArgs};
use rebound_api_types::{StatsSummary, ValueClicks};
use reqwest::Method;

/// Runs `rebound stats`.
pub(super) async fn run(client: &Client, args: SummaryArgs) -> Result<Printed, CliError> {
    let top = args.top.map(|n| n.to_string());
    let query = given(&[
        ("domain", args.domain.as_deref()),
        ("from", args.from.as_deref()),
        ("to", args.to.as_deref()),
        ("top", top.as_deref()),
    ]);
    let path = api_path(&["api", "v1", "stats"], &query)?;
    let summary: StatsSummary = client.send(Method::GET, &path, NO_BODY, &[]).await?;
    Ok(Printed::Table {
        json: as_json(&summary),
        text: render(&summary),
    })
}

/// The summary as tables: the days with clicks and the totals (as `links stats` prints a
/// link's), then each top list.
fn render(s: &StatsSummary) -> String {
    let mut days = vec![vec!["DAY".into(), "CLICKS".into(), "BOT CLICKS".into()]];
    for d in s.days.iter().filter(|d| d.clicks != 0 || d.bot_clicks != 0) {
        days.push(vec![d.day.clone(), d.clicks.to_string(), d.bot_clicks.to_string()]);
    }
    days.push(vec!["total".into(), s.total.to_string(), s.bot_total.to_string()]);
    let mut links = vec![vec!["LINK".into(), "DOMAIN".into(), "CLICKS".into()]];
    for l in &s.top_links {
        links.push(vec![l.code.clone(), l.domain.clone(), l.clicks.to_string()]);
    }
    let values = |head: &str, values: &[ValueClicks]| {
        let mut rows = vec![vec![head.to_owned(), "CLICKS".into()]];
        rows.extend(values.iter().map(|v| vec![v.value.clone(), v.clicks.to_string()]));
        table(&rows)
    };
    format!(
        "domains: {}, {} to {}\n\n{}\n{}\n{}\n{}",
        s.domains.join(", "),
        s.from,
        s.to,
        table(&days),
        table(&links),
        values("COUNTRY", &s.top_countries),
        values("REFERRER", &s.top_referrers),
    )
}
