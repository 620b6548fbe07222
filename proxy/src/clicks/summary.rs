//! A domain's summary (docs/analytics.md, "The summary"), added at each take from what
//! the take already holds: per domain clicked, its people's and bots' clicks of the day
//! under its scope code (`rebound_store::breakdowns::scope_code`), its people's clicks by
//! link code, and its countries and referrers summed over its links. Nothing on the
//! redirect path: one pass over the take's rows and one over its breakdown adds.

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use rebound_core::domain::split_key;
use rebound_core::Day;
use rebound_store::breakdowns::scope_code;
use rebound_store::{ClickAdd, Clicks, Dimension, DimensionAdd};
use std::hash::BuildHasher;

/// The breakdowns a domain's summary sums over its links (the others stay per link).
const SUMMED: [Dimension; 2] = [Dimension::Country, Dimension::Referrer];

/// What a take adds to the summaries of the domains it clicked, made as its write goes: the
/// domains' totals from the take's rows at the start, the links' adds a group of rows at a
/// time ([`link_adds`]), the countries and referrers summed over each group of breakdown
/// adds written ([`Summary::observe`]). Nothing of a take is held whole as adds: made at
/// once, the adds of a take of 1,000,000 codes held hundreds of MiB
/// (`benches/results/2026-12-07i-breakdown-take-memory.md`).
#[derive(Debug, Default)]
pub(super) struct Summary {
    /// One per domain clicked: its people's and bots' clicks of the day.
    totals: Vec<ClickAdd>,
    /// The domains' countries and referrers so far, each (domain, day, dimension, value)
    /// once.
    summed: HashTable<Summed>,
    hasher: DefaultHashBuilder,
}

#[derive(Debug)]
struct Summed {
    /// The domain's id; `None`, the default domain.
    id: Option<Box<str>>,
    day: Day,
    dimension: Dimension,
    value: Box<str>,
    clicks: u64,
}

impl Summary {
    /// The summary of a take of `day` whose rows are `rows`, (link key, clicks), one per
    /// key: the domains' totals.
    pub(super) fn new<'a>(day: Day, rows: impl IntoIterator<Item = (&'a str, Clicks)>) -> Summary {
        // By domain id (None: the default domain); a take clicks few domains.
        let mut totals: HashMap<Option<&str>, Clicks> = HashMap::new();
        for (key, clicks) in rows {
            *totals.entry(split_key(key).1).or_default() += clicks;
        }
        let mut totals: Vec<ClickAdd> = totals
            .into_iter()
            .map(|(id, n)| ClickAdd {
                code: scope_code(id),
                day,
                clicks: n.clicks,
                bot_clicks: n.bot_clicks,
            })
            .collect();
        totals.sort_unstable_by(|a, b| a.code.cmp(&b.code));
        Summary {
            totals,
            ..Summary::default()
        }
    }

    /// The domains' daily totals, one add per domain clicked.
    pub(super) fn totals(&self) -> &[ClickAdd] {
        &self.totals
    }

    /// Sums the countries and referrers of links' breakdown adds into their domains', each
    /// add of its own day (a take's breakdowns can span midnight).
    pub(super) fn observe(&mut self, breakdown: &[DimensionAdd]) {
        let (summed, hasher) = (&mut self.summed, &self.hasher);
        for add in breakdown.iter().filter(|a| SUMMED.contains(&a.dimension)) {
            let id = split_key(&add.code).1;
            let hash = hasher.hash_one((id, add.day, add.dimension, add.value.as_str()));
            let same = |s: &Summed| {
                s.id.as_deref() == id && s.day == add.day && s.dimension == add.dimension && *s.value == *add.value
            };
            match summed.find_mut(hash, same) {
                Some(s) => s.clicks += add.clicks,
                None => {
                    summed.insert_unique(
                        hash,
                        Summed {
                            id: id.map(Into::into),
                            day: add.day,
                            dimension: add.dimension,
                            value: add.value.as_str().into(),
                            clicks: add.clicks,
                        },
                        |s| hasher.hash_one((s.id.as_deref(), s.day, s.dimension, &*s.value)),
                    );
                }
            }
        }
    }

    /// The domains' countries and referrers summed, in (scope, day, dimension, value) order.
    pub(super) fn into_summed(self) -> Vec<DimensionAdd> {
        let mut adds: Vec<DimensionAdd> = self
            .summed
            .into_iter()
            .map(|s| DimensionAdd {
                code: scope_code(s.id.as_deref()),
                day: s.day,
                dimension: s.dimension,
                value: s.value.into(),
                clicks: s.clicks,
            })
            .collect();
        adds.sort_unstable_by(|a, b| {
            (&a.code, a.day, a.dimension, &a.value).cmp(&(&b.code, b.day, b.dimension, &b.value))
        });
        adds
    }
}

/// The adds of `rows` (link key, people's clicks) of a take of `day` to their domains'
/// people's clicks by link code, in (scope, value) order; none for a row without people's
/// clicks (bots' count in no link).
pub(super) fn link_adds<'a>(day: Day, rows: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<DimensionAdd> {
    let mut adds: Vec<DimensionAdd> = rows
        .into_iter()
        .filter(|&(_, clicks)| clicks > 0)
        .map(|(key, clicks)| {
            let (code, id) = split_key(key);
            DimensionAdd {
                code: scope_code(id),
                day,
                dimension: Dimension::Link,
                value: code.to_owned(),
                clicks,
            }
        })
        .collect();
    adds.sort_unstable_by(|a, b| (&a.code, &a.value).cmp(&(&b.code, &b.value)));
    adds
}

/// Every summary add of a take at once, in (scope, day, dimension, value) order: the tests'
/// view of what [`Summary`] and [`link_adds`] make.
#[cfg(test)]
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SummaryAdds {
    totals: Vec<ClickAdd>,
    adds: Vec<DimensionAdd>,
}

#[cfg(test)]
fn summary_adds<'a>(
    day: Day,
    rows: impl IntoIterator<Item = (&'a str, Clicks)> + Clone,
    breakdown: &[DimensionAdd],
) -> SummaryAdds {
    let mut summary = Summary::new(day, rows.clone());
    summary.observe(breakdown);
    let totals = summary.totals().to_vec();
    let mut adds = link_adds(day, rows.into_iter().map(|(key, clicks)| (key, clicks.clicks)));
    adds.extend(summary.into_summed());
    adds.sort_unstable_by(|a, b| (&a.code, a.day, a.dimension, &a.value).cmp(&(&b.code, b.day, b.dimension, &b.value)));
    SummaryAdds { totals, adds }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(code: &str, dimension: Dimension, value: &str, clicks: u64) -> DimensionAdd {
        DimensionAdd {
            code: code.into(),
            day: Day(4),
            dimension,
            value: value.into(),
            clicks,
        }
    }

    fn total(code: &str, clicks: u64, bot_clicks: u64) -> ClickAdd {
        ClickAdd {
            code: code.into(),
            day: Day(4),
            clicks,
            bot_clicks,
        }
    }

    #[test]
    fn a_take_adds_to_each_clicked_domains_summary() {
        use Dimension::*;
        let rows = [
            ("abc", Clicks::new(3, 1)),
            ("bots", Clicks::new(0, 5)),
            ("abc.1A", Clicks::new(2, 0)),
            ("xyz", Clicks::new(1, 0)),
            ("xyz.1A", Clicks::new(4, 2)),
        ];
        let breakdown = [
            add("abc", Country, "DE", 2),
            add("abc", Country, "JP", 1),
            add("abc", Referrer, "direct", 3),
            add("abc", Browser, "Safari", 3),
            add("abc.1A", Country, "DE", 2),
            add("abc.1A", UtmSource, "news", 2),
            add("xyz", Country, "DE", 1),
            add("xyz", Referrer, "news.example", 1),
            add("xyz.1A", Country, "FR", 4),
        ];
        let got = summary_adds(Day(4), rows, &breakdown);
        assert_eq!(
            got.totals,
            vec![total("*", 4, 6), total("*1A", 6, 2)],
            "people's and bots' clicks per domain"
        );
        assert_eq!(
            got.adds,
            vec![
                // The default domain: its links by code (bots' clicks count in no link), its
                // countries and referrers summed over its links.
                add("*", Country, "DE", 3),
                add("*", Country, "JP", 1),
                add("*", Referrer, "direct", 3),
                add("*", Referrer, "news.example", 1),
                add("*", Link, "abc", 3),
                add("*", Link, "xyz", 1),
                // Domain 1A: its links by code, without the domain's id.
                add("*1A", Country, "DE", 2),
                add("*1A", Country, "FR", 4),
                add("*1A", Link, "abc", 2),
                add("*1A", Link, "xyz", 4),
            ],
            "browser and campaign stay per link"
        );
    }

    #[test]
    fn breakdown_adds_of_two_days_sum_into_each_days_summary() {
        use Dimension::*;
        // The breakdowns a take's write hands over were counted across midnight.
        let breakdown = [
            add("abc", Country, "DE", 2),
            DimensionAdd {
                day: Day(5),
                ..add("abc", Country, "DE", 1)
            },
            DimensionAdd {
                day: Day(5),
                ..add("xyz", Country, "DE", 4)
            },
        ];
        let got = summary_adds(Day(5), [("abc", Clicks::people(1))], &breakdown);
        let countries: Vec<_> = got
            .adds
            .iter()
            .filter(|a| a.dimension == Country)
            .map(|a| (a.day, a.clicks))
            .collect();
        assert_eq!(countries, vec![(Day(4), 2), (Day(5), 5)]);
    }

    #[tokio::test]
    async fn the_shipper_keeps_each_domains_summary_where_breakdowns_are_kept() {
        use crate::clicks::test_util::{clock_at, entry, metrics, pacing, Recorded, Shipper};
        use crate::clicks::{ClickQueue, ClickWriter, StoreClickSink};
        use crate::visitor::Visitor;
        use rebound_core::dimensions::{cdn_country, Dimensions, Referrer};
        use rebound_store::{BreakdownStore, MemoryStore, RollupStore};
        use std::sync::Arc;
        let q = Arc::new(ClickQueue::new(64, metrics(), clock_at(4 * 86_400_000 + 1)));
        let (a, b, c) = (entry("abc"), entry("xyz"), entry("abc.1A"));
        let from = |country: &[u8; 2]| Dimensions {
            country: Some(cdn_country(country)),
            referrer: Some(Referrer::Direct),
            ..Dimensions::default()
        };
        q.record_with(&a, from(b"DE"));
        q.record_with(&a, from(b"JP"));
        q.record_with(&b, from(b"DE"));
        q.record(&b, Visitor::Bot);
        q.record_with(&c, from(b"FR"));
        let store = Arc::new(MemoryStore::new());
        let writer = ClickWriter {
            runtime: tokio::runtime::Handle::current(),
            cpu: None,
            sink: Arc::new(StoreClickSink(store.clone())),
            breakdowns: crate::clicks::StoreBreakdownSink::of(store.clone()),
        };
        Shipper::writing(&q, writer, pacing(3_600_000, 1_000_000, 3_600_000))
            .stop()
            .await;
        let day = Day(4);
        assert_eq!(
            store.read_clicks("*", day, day).await.unwrap(),
            vec![(day, Clicks::new(3, 1))]
        );
        assert_eq!(
            store.read_clicks("*1A", day, day).await.unwrap(),
            vec![(day, Clicks::new(1, 0))]
        );
        let read = |scope: &'static str, d: Dimension| {
            let store = store.clone();
            async move {
                let values = store.read_breakdown(scope, d, day, day).await.unwrap();
                values.into_iter().map(|v| (v.value, v.clicks)).collect::<Vec<_>>()
            }
        };
        let pairs = |want: &[(&str, u64)]| want.iter().map(|(v, n)| (v.to_string(), *n)).collect::<Vec<_>>();
        assert_eq!(read("*", Dimension::Link).await, pairs(&[("abc", 2), ("xyz", 1)]));
        assert_eq!(read("*", Dimension::Country).await, pairs(&[("DE", 2), ("JP", 1)]));
        assert_eq!(read("*", Dimension::Referrer).await, pairs(&[("direct", 3)]));
        assert_eq!(read("*1A", Dimension::Link).await, pairs(&[("abc", 1)]));
        assert_eq!(read("*1A", Dimension::Country).await, pairs(&[("FR", 1)]));

        // Where no breakdowns are kept, no summary either: the sink gets the links' rows only.
        let q = Arc::new(ClickQueue::new(64, metrics(), clock_at(4 * 86_400_000 + 1)));
        q.record(&entry("abc"), Visitor::Person);
        let sink = Arc::new(Recorded::default());
        Shipper::start(
            &q,
            sink.clone(),
            tokio::runtime::Handle::current(),
            std::time::Duration::from_secs(3600),
        )
        .stop()
        .await;
        assert_eq!(sink.adds(), vec![("abc".to_owned(), day, 1)]);
    }

    #[test]
    fn an_empty_take_adds_nothing_and_bots_alone_add_only_totals() {
        assert_eq!(summary_adds(Day(4), [], &[]), SummaryAdds::default());
        let got = summary_adds(Day(4), [("abc", Clicks::new(0, 2))], &[]);
        assert_eq!(got.totals, vec![total("*", 0, 2)]);
        assert!(got.adds.is_empty());
    }
}
