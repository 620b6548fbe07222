//! The stats resource: a link's daily clicks, people's and bots' apart, and people's
//! clicks by value of one dimension (a breakdown, docs/spec.md §13); and an operator's
//! summary of a domain's links or every domain's, read from the domains' scope codes
//! (`rebound_store::breakdowns::scope_code`). The handlers are `http::stats`.

use crate::auth::Principal;
use crate::error::ApiError;
use crate::links::LinkService;
use crate::names::{DomainNames, DomainRef};
use futures_util::StreamExt;
use rebound_api_types::{Breakdown, DayClicks, LinkClicks, LinkStats, StatsSummary, ValueClicks};
use rebound_core::{Clock, Day};
use rebound_store::breakdowns::scope_code;
use rebound_store::{BreakdownStore, Clicks, Dimension, RollupStore};
use std::collections::HashMap;
use std::sync::Arc;

const MAX_STATS_DAYS: i32 = 366;
const DEFAULT_STATS_DAYS: i32 = 30;
/// Entries of each list of a summary, unless `top` says otherwise; and the most `top` may say.
pub(crate) const DEFAULT_TOP: usize = 10;
pub(crate) const MAX_TOP: usize = 1_000;
/// Domains whose summaries are read at once.
const SCOPES_AT_ONCE: usize = 8;

/// Why a read needs breakdowns this deployment's store does not keep.
const BREAKDOWNS_UNAVAILABLE: ApiError = ApiError::Conflict {
    code: "breakdowns_unavailable",
    message: "this deployment's store keeps no breakdowns (docs/analytics.md)",
};

/// The stats service.
pub(crate) struct StatsService {
    /// Which links the caller may see.
    pub(crate) links: Arc<LinkService>,
    /// The domains a summary may sum.
    pub(crate) names: Arc<DomainNames>,
    /// Where daily clicks are read: the store's rollups, or (all-in-one) the rollups plus
    /// the clicks still pending in the process.
    pub(crate) click_counts: Arc<dyn RollupStore>,
    /// Where breakdowns are read, when the store keeps them.
    pub(crate) breakdowns: Option<Arc<dyn BreakdownStore>>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl StatsService {
    /// A link's daily clicks over `from..=to` (UTC days; defaults: the 30 days to today),
    /// every day of the range, from the rollups (and, all-in-one, what is still pending):
    /// people's (`clicks`) and bots' (`bot_clicks`: link unfurlers, crawlers, `HEAD`); with
    /// `by`, people's clicks over the range by value of that dimension too.
    pub(crate) async fn daily_clicks(
        &self,
        principal: &Principal,
        code: &str,
        from: Option<String>,
        to: Option<String>,
        by: Option<Dimension>,
    ) -> Result<LinkStats, ApiError> {
        let breakdowns = match (by, &self.breakdowns) {
            (Some(_), None) => return Err(BREAKDOWNS_UNAVAILABLE),
            (Some(by), Some(store)) => Some((by, store)),
            (None, _) => None,
        };
        let (from, to) = self.range(from, to)?;
        let link = self.links.visible_link(principal, code).await?;
        let counts = self.click_counts.read_clicks(&link.code, from, to).await?;
        let days = every_day(from, to, counts);
        let breakdown = match breakdowns {
            None => None,
            Some((by, store)) => {
                let values: Vec<ValueClicks> = store
                    .read_breakdown(&link.code, by, from, to)
                    .await?
                    .into_iter()
                    .map(|v| ValueClicks {
                        value: v.value,
                        clicks: v.clicks,
                    })
                    .collect();
                Some(Breakdown {
                    by: by.as_str().to_owned(),
                    counted: values.iter().map(|v| v.clicks).sum(),
                    values,
                })
            }
        };
        Ok(LinkStats {
            code: rebound_core::domain::split_key(&link.code).0.to_owned(),
            total: days.iter().map(|d| d.clicks).sum(),
            bot_total: days.iter().map(|d| d.bot_clicks).sum(),
            days,
            breakdown,
        })
    }

    /// The UTC days `from..=to` names (defaults: the 30 days to today): 400 `invalid_date`
    /// for a date that is none, outside 0000-01-01 to 9999-12-31, `from` after `to`, or more
    /// than 366 days.
    fn range(&self, from: Option<String>, to: Option<String>) -> Result<(Day, Day), ApiError> {
        let parse = |name: &str, value: &Option<String>| -> Result<Option<Day>, ApiError> {
            value
                .as_ref()
                .map(|s| {
                    Day::parse(s).ok_or_else(|| {
                        ApiError::bad_request("invalid_date", format!("{name} must be a date YYYY-MM-DD"))
                    })
                })
                .transpose()
        };
        let (from, to) = (parse("from", &from)?, parse("to", &to)?);
        let today = Day::of_millis(self.clock.now_millis());
        let to = to.unwrap_or(today);
        let from = from.unwrap_or(to.plus(1 - DEFAULT_STATS_DAYS));
        // A defaulted `from` can fall before the first day `YYYY-MM-DD` can name.
        if !from.is_supported() || !to.is_supported() {
            return Err(ApiError::bad_request(
                "invalid_date",
                "dates must be from 0000-01-01 to 9999-12-31",
            ));
        }
        if from > to {
            return Err(ApiError::bad_request("invalid_date", "from must not be after to"));
        }
        if to.0 - from.0 + 1 > MAX_STATS_DAYS {
            return Err(ApiError::bad_request(
                "invalid_date",
                "the range may cover at most 366 days",
            ));
        }
        Ok((from, to))
    }

    /// An operator's summary over `from..=to` (as [`StatsService::daily_clicks`] reads the
    /// range) of the links on `domain`, or with none of every domain `principal` may use:
    /// daily clicks, and the `top` links, countries and referrers most clicked. Read from
    /// each domain's scope code: four reads a domain, whatever its links.
    pub(crate) async fn summary(
        &self,
        principal: &crate::auth::Principal,
        domain: Option<&str>,
        from: Option<String>,
        to: Option<String>,
        top: usize,
    ) -> Result<StatsSummary, ApiError> {
        principal.require_operator()?;
        let store = self.breakdowns.as_ref().ok_or(BREAKDOWNS_UNAVAILABLE)?;
        let (from, to) = self.range(from, to)?;
        let domains: Vec<DomainRef> = match domain {
            Some(name) => {
                let domain = self.names.resolve(name).await.map_err(|e| match e {
                    // Not a domain of this service (400 where a link is created on it).
                    ApiError::BadRequest { .. } => ApiError::NotFound("no such domain"),
                    e => e,
                })?;
                principal.require_domain(&domain.name)?;
                vec![domain]
            }
            None => self
                .names
                .all()
                .await?
                .into_iter()
                .filter(|d| principal.may_use_domain(&d.name))
                .collect(),
        };
        // Each domain's four reads at once, a few domains at a time: on DynamoDB each is a
        // query, and every domain's summary is a round trip, not four.
        let read = |d: &DomainRef| {
            let (scope, name) = (scope_code(d.id.as_deref()), d.name.clone());
            async move {
                let (days, links, countries, referrers) = tokio::try_join!(
                    self.click_counts.read_clicks(&scope, from, to),
                    store.read_breakdown(&scope, Dimension::Link, from, to),
                    store.read_breakdown(&scope, Dimension::Country, from, to),
                    store.read_breakdown(&scope, Dimension::Referrer, from, to),
                )?;
                Ok::<_, rebound_store::StoreError>((name, days, links, countries, referrers))
            }
        };
        let read: Vec<_> = futures_util::stream::iter(domains.iter().map(read))
            .buffered(SCOPES_AT_ONCE)
            .collect()
            .await;
        let mut counts: HashMap<Day, Clicks> = HashMap::new();
        let mut links = Vec::new();
        let (mut countries, mut referrers) = (HashMap::new(), HashMap::new());
        for scope in read {
            let (domain, days, scope_links, scope_countries, scope_referrers) = scope?;
            for (day, n) in days {
                *counts.entry(day).or_default() += n;
            }
            links.extend(scope_links.into_iter().map(|v| LinkClicks {
                code: v.value,
                domain: domain.clone(),
                clicks: v.clicks,
            }));
            for (values, sums) in [(scope_countries, &mut countries), (scope_referrers, &mut referrers)] {
                for v in values {
                    *sums.entry(v.value).or_insert(0u64) += v.clicks;
                }
            }
        }
        // Most clicked first, then by domain and code: a stable answer.
        links.sort_by(|a, b| {
            b.clicks
                .cmp(&a.clicks)
                .then_with(|| (&a.domain, &a.code).cmp(&(&b.domain, &b.code)))
        });
        links.truncate(top);
        let top_of = |sums: HashMap<String, u64>| -> Vec<ValueClicks> {
            rebound_store::breakdowns::ranked(sums)
                .into_iter()
                .take(top)
                .map(|v| ValueClicks {
                    value: v.value,
                    clicks: v.clicks,
                })
                .collect()
        };
        let days = every_day(from, to, counts);
        Ok(StatsSummary {
            domains: domains.into_iter().map(|d| d.name).collect(),
            from: from.to_iso(),
            to: to.to_iso(),
            total: days.iter().map(|d| d.clicks).sum(),
            bot_total: days.iter().map(|d| d.bot_clicks).sum(),
            days,
            top_links: links,
            top_countries: top_of(countries),
            top_referrers: top_of(referrers),
        })
    }
}

/// Every day of `from..=to` with its `counts` (none: zero), in order.
fn every_day(from: Day, to: Day, counts: impl IntoIterator<Item = (Day, Clicks)>) -> Vec<DayClicks> {
    let counts: HashMap<Day, Clicks> = counts.into_iter().collect();
    (from.0..=to.0)
        .map(|d| {
            let counts = counts.get(&Day(d)).copied().unwrap_or_default();
            DayClicks {
                day: Day(d).to_iso(),
                clicks: counts.clicks,
                bot_clicks: counts.bot_clicks,
            }
        })
        .collect()
}
