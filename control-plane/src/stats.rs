//! The stats resource: a link's daily clicks, people's and bots' apart, and people's
//! clicks by value of one dimension (a breakdown, docs/spec.md §13). The handler is
//! `http::stats`.

use crate::auth::Principal;
use crate::error::ApiError;
use crate::links::LinkService;
use rebound_api_types::{Breakdown, DayClicks, LinkStats, ValueClicks};
use rebound_core::{Clock, Day};
use rebound_store::{BreakdownStore, Dimension, RollupStore};
use std::sync::Arc;

const MAX_STATS_DAYS: i32 = 366;
const DEFAULT_STATS_DAYS: i32 = 30;

/// The stats service.
pub(crate) struct StatsService {
    /// Which links the caller may see.
    pub(crate) links: Arc<LinkService>,
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
            (Some(_), None) => {
                return Err(ApiError::Conflict {
                    code: "breakdowns_unavailable",
                    message: "this deployment's store keeps no breakdowns (docs/analytics.md)",
                })
            }
            (Some(by), Some(store)) => Some((by, store)),
            (None, _) => None,
        };
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
        let link = self.links.visible_link(principal, code).await?;
        let counts: std::collections::HashMap<Day, rebound_store::Clicks> = self
            .click_counts
            .read_clicks(&link.code, from, to)
            .await?
            .into_iter()
            .collect();
        let days: Vec<DayClicks> = (from.0..=to.0)
            .map(|d| {
                let counts = counts.get(&Day(d)).copied().unwrap_or_default();
                DayClicks {
                    day: Day(d).to_iso(),
                    clicks: counts.clicks,
                    bot_clicks: counts.bot_clicks,
                }
            })
            .collect();
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
}
