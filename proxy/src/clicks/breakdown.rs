//! People's clicks by link, dimension and value between two takes (docs/spec.md §13).
//!
//! The redirect path hands each person's click with its [`Dimensions`] (inline values, no
//! allocation: core's `dimensions`) to a bounded queue of its own
//! ([`super::ClickQueue::record_with`]); the shipper adds them up here when it drains, and
//! a take hands the sums to the breakdown store after the take's click rows.

/// foldhash (hashbrown's default): std's SipHash made the counting about 1,500
/// instructions a click under callgrind (benches/results/2026-12-06e-callgrind-breakdowns.md).
use hashbrown::HashMap;
use rebound_core::dimensions::{Dimensions, Referrer};
use rebound_store::breakdowns::OTHER;
use rebound_store::{Dimension, DimensionAdd};

/// Calls `each` with every dimension `click` has a value of, and the value as the
/// breakdowns name it, as bytes: no UTF-8 check of each value on each click (the values
/// are built from text, and read back as text once per take).
fn each_bytes(click: &Dimensions, mut each: impl FnMut(Dimension, &[u8])) {
    if let Some(country) = &click.country {
        each(Dimension::Country, country.as_str().as_bytes());
    }
    match &click.referrer {
        Some(Referrer::Host(host)) => each(Dimension::Referrer, host.as_bytes()),
        Some(other) => each(Dimension::Referrer, other.as_str().as_bytes()),
        None => {}
    }
    if let Some(agent) = &click.agent {
        each(Dimension::Device, agent.device.as_str().as_bytes());
        each(Dimension::Browser, agent.browser.as_bytes());
        each(Dimension::Os, agent.os.as_bytes());
    }
    if let Some(campaign) = &click.campaign {
        for (dimension, value) in [
            (Dimension::UtmSource, &campaign.source),
            (Dimension::UtmMedium, &campaign.medium),
            (Dimension::UtmCampaign, &campaign.campaign),
        ] {
            if let Some(value) = value {
                each(dimension, value.as_bytes());
            }
        }
    }
    if let Some(decided) = &click.rule {
        each(Dimension::Rule, decided.label().as_bytes());
    }
}

/// One count of a code: its [`key`] (the dimension and the value) and the clicks.
#[derive(Debug, Clone, Copy)]
struct Count {
    key: u64,
    clicks: u64,
}

/// A count's key: the dimension (its index in [`Dimension::ALL`]) above the value (its index
/// in [`BreakdownCounts::values`]), so that a code's sorted counts are grouped by dimension
/// and a click finds each of its counts with one binary search.
fn key(dimension: u8, value: u32) -> u64 {
    u64::from(dimension) << 32 | u64::from(value)
}

/// People's clicks by code, dimension and value since the last take.
///
/// Each code holds its counts in one vector sorted by dimension and value, and each value's
/// bytes are held once for all codes. A map of values per dimension per code (nine maps a
/// code, up to a minute between takes) made the all-in-one's RSS 115 MB larger after 5 s of
/// wrk over 100,000 codes than with breakdowns off (`heap_bytes` and its test).
#[derive(Debug, Default)]
pub(super) struct BreakdownCounts {
    counts: HashMap<Box<str>, Vec<Count>>,
    /// The values counted since the last take, each once, by its bytes.
    values: HashMap<Box<[u8]>, u32>,
    /// The same, by index.
    by_index: Vec<Box<[u8]>>,
    /// Per dimension, the index of the value it counted last: a click's values mostly
    /// repeat the last click's (one browser, one referrer), and comparing the bytes is
    /// cheaper than hashing them (`intern`: 541 of the counter's 1,242 instructions a click
    /// under callgrind, benches/results/2026-12-07f-callgrind-breakdown-last-values.md).
    /// Only a hint: a value is reused only where its bytes are equal.
    last: [Option<u32>; Dimension::ALL.len()],
    /// Clicks added (a click adds to one count per dimension it has).
    clicks: u64,
}

impl BreakdownCounts {
    /// Adds one click of `code`. Looked up by reference: most clicks repeat a code and
    /// values already counted, and allocate nothing.
    pub(super) fn add(&mut self, code: &str, dimensions: &Dimensions, counted: &[bool; Dimension::ALL.len()]) {
        self.clicks += 1;
        let counts = match self.counts.get_mut(code) {
            Some(counts) => counts,
            None => self.counts.entry(code.into()).or_default(),
        };
        let (values, by_index, last) = (&mut self.values, &mut self.by_index, &mut self.last);
        each_bytes(dimensions, |dimension, value| {
            if !counted[dimension as usize] {
                return;
            }
            let d = dimension as u8;
            let index = match last[d as usize] {
                Some(at) if by_index.get(at as usize).is_some_and(|held| **held == *value) => at,
                _ => {
                    let at = intern(values, by_index, value);
                    last[d as usize] = Some(at);
                    at
                }
            };
            let this = key(d, index);
            if let Ok(at) = counts.binary_search_by_key(&this, |c| c.key) {
                counts[at].clicks += 1;
                return;
            }
            // Bounded as the store bounds a link's day: a code's values beyond those it
            // keeps would count under `(other)` there anyway, and memory stays bounded
            // however many values (hosts, campaigns) a take sees.
            let held =
                counts.partition_point(|c| c.key < key(d + 1, 0)) - counts.partition_point(|c| c.key < key(d, 0));
            let counted = match held >= dimension.values_per_day() {
                true => key(d, intern(values, by_index, OTHER.as_bytes())),
                false => this,
            };
            match counts.binary_search_by_key(&counted, |c| c.key) {
                Ok(at) => counts[at].clicks += 1,
                Err(at) => counts.insert(
                    at,
                    Count {
                        key: counted,
                        clicks: 1,
                    },
                ),
            }
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.clicks == 0
    }

    /// Bytes held on the heap (tables, keys, vectors), as allocated: what pending
    /// breakdowns cost between two takes.
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        let count = std::mem::size_of::<Count>();
        let table = |buckets: usize, entry: usize| buckets * (entry + 1);
        table(self.counts.capacity(), std::mem::size_of::<(Box<str>, Vec<Count>)>())
            + self
                .counts
                .iter()
                .map(|(code, counts)| code.len() + counts.capacity() * count)
                .sum::<usize>()
            + table(self.values.capacity(), std::mem::size_of::<(Box<[u8]>, u32)>())
            + self.by_index.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.by_index.iter().map(|v| 2 * v.len()).sum::<usize>()
    }

    /// The adds of `day`, in (code, dimension, value) order, and the clicks they count.
    pub(super) fn take(&mut self, day: rebound_core::Day) -> (Vec<DimensionAdd>, u64) {
        let clicks = std::mem::take(&mut self.clicks);
        let by_index = std::mem::take(&mut self.by_index);
        self.values.clear();
        self.last = Default::default();
        let mut adds = Vec::new();
        for (code, counts) in std::mem::take(&mut self.counts) {
            adds.extend(counts.into_iter().map(|c| DimensionAdd {
                code: code.clone().into(),
                day,
                dimension: Dimension::ALL[(c.key >> 32) as usize],
                value: String::from_utf8_lossy(&by_index[c.key as u32 as usize]).into_owned(),
                clicks: c.clicks,
            }));
        }
        adds.sort_unstable_by(|a, b| (&a.code, a.dimension, &a.value).cmp(&(&b.code, b.dimension, &b.value)));
        (adds, clicks)
    }
}

/// People's clicks by dimension off the breakdowns' queue, not yet handed to a write:
/// counted by their counter ([`super::ClickQueue::count_breakdowns`], on the shipper's
/// runtime) a chunk at a time, behind a lock of their own.
#[derive(Debug)]
pub(super) struct Tally {
    counts: BreakdownCounts,
    /// The UTC day `counts` are for.
    day: rebound_core::Day,
    /// Earlier days' counts, set aside whole when the day changed.
    ready: Vec<(BreakdownCounts, rebound_core::Day)>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            counts: BreakdownCounts::default(),
            day: rebound_core::Day(0),
            ready: Vec::new(),
        }
    }
}

/// A tally's counts, taken whole: made into adds once the tally's lock is let go.
pub(super) struct Taken(Vec<(BreakdownCounts, rebound_core::Day)>);

impl Taken {
    /// Every day's adds, each day's in (code, dimension, value) order, and the people's
    /// clicks they count.
    pub(super) fn into_adds(self) -> (Vec<DimensionAdd>, u64) {
        let (mut all, mut clicks) = (Vec::new(), 0);
        for (mut counts, day) in self.0 {
            let (adds, n) = counts.take(day);
            all.extend(adds);
            clicks += n;
        }
        (all, clicks)
    }
}

impl Tally {
    /// Counts one click of `code`, made on `today`: the counts of an earlier day are set
    /// aside whole first, so that each click counts for the day it was counted on.
    pub(super) fn add(
        &mut self,
        today: rebound_core::Day,
        code: &str,
        dimensions: &Dimensions,
        counted: &[bool; Dimension::ALL.len()],
    ) {
        if self.day != today {
            if !self.counts.is_empty() {
                self.ready.push((std::mem::take(&mut self.counts), self.day));
            }
            self.day = today;
        }
        self.counts.add(code, dimensions, counted);
    }

    /// Every day's counts, moved out (the tables, not their adds: a write that takes them
    /// holds the lock only that long, and the counter never waits on a write made at the
    /// lowest CPU priority); the tally is then empty.
    pub(super) fn take(&mut self) -> Taken {
        let mut days = std::mem::take(&mut self.ready);
        if !self.counts.is_empty() {
            days.push((std::mem::take(&mut self.counts), self.day));
        }
        Taken(days)
    }
}

/// The index of `value` among the values counted since the last take, added if new.
fn intern(values: &mut HashMap<Box<[u8]>, u32>, by_index: &mut Vec<Box<[u8]>>, value: &[u8]) -> u32 {
    if let Some(&index) = values.get(value) {
        return index;
    }
    let index = by_index.len() as u32;
    by_index.push(value.into());
    values.insert(value.into(), index);
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::dimensions::{
        cdn_country, AgentFamilies, Campaign, CampaignValue, Country, DeviceClass, Family, Label, Referrer,
    };

    fn click(country: &[u8], referrer: &str, browser: &str) -> Dimensions {
        Dimensions {
            country: Some(cdn_country(country)),
            referrer: Some(Referrer::Host(Label::truncated(referrer))),
            agent: Some(AgentFamilies {
                device: DeviceClass::Mobile,
                browser: Family::truncated(browser),
                os: Family::truncated("iOS"),
            }),
            campaign: None,
            rule: None,
        }
    }

    #[test]
    fn a_click_names_each_dimension_it_has() {
        let mut seen = Vec::new();
        let c = Dimensions {
            campaign: Some(Box::new(Campaign {
                source: Some(CampaignValue::truncated("news")),
                medium: None,
                campaign: Some(CampaignValue::truncated("spring")),
            })),
            referrer: Some(Referrer::Direct),
            ..click(b"DE", "x", "Safari")
        };
        each_bytes(&c, |d, v| seen.push((d, String::from_utf8(v.to_vec()).unwrap())));
        let want = [
            (Dimension::Country, "DE"),
            (Dimension::Referrer, "direct"),
            (Dimension::Device, "mobile"),
            (Dimension::Browser, "Safari"),
            (Dimension::Os, "iOS"),
            (Dimension::UtmSource, "news"),
            (Dimension::UtmCampaign, "spring"),
        ];
        assert_eq!(seen, want.map(|(d, v)| (d, v.to_owned())));
        let mut unknown = Vec::new();
        let c = Dimensions {
            country: Some(Country::UNKNOWN),
            ..Dimensions::default()
        };
        each_bytes(&c, |d, v| unknown.push((d, String::from_utf8(v.to_vec()).unwrap())));
        assert_eq!(unknown, vec![(Dimension::Country, "unknown".to_owned())]);
        let mut none = Vec::new();
        each_bytes(&Dimensions::default(), |d, _| none.push(d));
        assert!(none.is_empty(), "every dimension off: nothing counted");
    }

    #[test]
    fn a_tally_counts_each_click_for_the_day_it_was_counted_on() {
        use rebound_core::Day;
        let every = [true; Dimension::ALL.len()];
        let mut tally = Tally::default();
        tally.add(Day(7), "abc", &click(b"DE", "x.example", "Safari"), &every);
        tally.add(Day(7), "abc", &click(b"DE", "x.example", "Safari"), &every);
        // Past midnight: day 7's counts are set aside whole, day 8's start empty.
        tally.add(Day(8), "abc", &click(b"FR", "x.example", "Safari"), &every);
        let (adds, clicks) = tally.take().into_adds();
        assert_eq!(clicks, 3);
        let countries: Vec<_> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Country)
            .map(|a| (a.day, a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(countries, vec![(Day(7), "DE", 2), (Day(8), "FR", 1)]);
        assert_eq!(
            adds.iter().filter(|a| a.day == Day(7)).count(),
            5,
            "one add per dimension"
        );
        assert_eq!(tally.take().into_adds(), (Vec::new(), 0), "taken whole");
    }

    #[test]
    fn a_codes_values_beyond_the_stores_bound_count_as_other_in_memory_too() {
        let mut counts = BreakdownCounts::default();
        let bound = Dimension::Referrer.values_per_day();
        for i in 0..bound + 30 {
            counts.add(
                "abc",
                &click(b"DE", &format!("h{i}.example"), "Chrome"),
                &[true; Dimension::ALL.len()],
            );
        }
        // A value held already still counts as itself.
        counts.add(
            "abc",
            &click(b"DE", "h3.example", "Chrome"),
            &[true; Dimension::ALL.len()],
        );
        let (adds, clicks) = counts.take(rebound_core::Day(1));
        assert_eq!(clicks, bound as u64 + 31);
        let referrers: Vec<(&str, u64)> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Referrer)
            .map(|a| (a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(referrers.len(), bound + 1, "{referrers:?}");
        assert!(referrers.contains(&(OTHER, 30)));
        assert!(referrers.contains(&("h3.example", 2)));
        assert_eq!(referrers.iter().map(|(_, n)| n).sum::<u64>(), bound as u64 + 31);
    }

    #[test]
    fn pending_breakdowns_hold_little_per_code() {
        let mut counts = BreakdownCounts::default();
        let codes = 20_000;
        for i in 0..codes {
            let c = Dimensions {
                country: None,
                referrer: Some(Referrer::Direct),
                ..click(b"DE", "x", "Chrome")
            };
            counts.add(&format!("c{i:06}"), &c, &[true; Dimension::ALL.len()]);
        }
        // Four counts a code (referrer, device, browser, OS); nine maps a code held about
        // 1 KiB (288 bytes of empty maps alone).
        let per_code = counts.heap_bytes() / codes;
        assert!(per_code < 160, "{per_code} bytes a code");
        let (adds, clicks) = counts.take(rebound_core::Day(1));
        assert_eq!((adds.len(), clicks), (4 * codes, codes as u64));
        assert!(counts.heap_bytes() < 1024, "a take empties them");
    }

    #[test]
    fn counts_add_up_per_code_dimension_and_value_and_a_take_empties_them() {
        let mut counts = BreakdownCounts::default();
        for (code, country) in [("abc", b"DE"), ("abc", b"DE"), ("abc", b"JP"), ("xyz", b"DE")] {
            counts.add(
                code,
                &click(country, "news.example", "Chrome"),
                &[true; Dimension::ALL.len()],
            );
        }
        // The OS off: left out.
        let mut no_os = [true; Dimension::ALL.len()];
        no_os[Dimension::Os as usize] = false;
        counts.add("xyz", &click(b"DE", "news.example", "Chrome"), &no_os);
        let (adds, clicks) = counts.take(rebound_core::Day(9));
        assert_eq!(clicks, 5);
        assert!(counts.is_empty());
        let got: Vec<(&str, Dimension, &str, u64)> = adds
            .iter()
            .map(|a| (a.code.as_str(), a.dimension, a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(
            got,
            vec![
                ("abc", Dimension::Country, "DE", 2),
                ("abc", Dimension::Country, "JP", 1),
                ("abc", Dimension::Referrer, "news.example", 3),
                ("abc", Dimension::Device, "mobile", 3),
                ("abc", Dimension::Browser, "Chrome", 3),
                ("abc", Dimension::Os, "iOS", 3),
                ("xyz", Dimension::Country, "DE", 2),
                ("xyz", Dimension::Referrer, "news.example", 2),
                ("xyz", Dimension::Device, "mobile", 2),
                ("xyz", Dimension::Browser, "Chrome", 2),
                ("xyz", Dimension::Os, "iOS", 1),
            ]
        );
        assert!(adds.iter().all(|a| a.day == rebound_core::Day(9)));
    }

    #[test]
    fn values_counted_through_the_last_ones_add_up_as_interned_ones() {
        // Repeats, alternations and values that take another's place after a take (the last
        // values' indices then name other values or none): every count as a naive sum says.
        let every = [true; Dimension::ALL.len()];
        let referrers = [
            "a.example",
            "b.example",
            "a.example",
            "a.example",
            "c.example",
            "b.example",
        ];
        let browsers = ["Chrome", "Chrome", "Safari", "Chrome", "Firefox", "Safari"];
        let mut counts = BreakdownCounts::default();
        for round in 0..3 {
            let mut want = std::collections::BTreeMap::new();
            for i in 0..60 {
                let (code, referrer, browser) = match round {
                    // After the first take, the values come in another order.
                    1 => (["r", "s"][i % 2], referrers[(i * 5) % 6], browsers[(i + 3) % 6]),
                    _ => (["r", "s", "t"][i % 3], referrers[i % 6], browsers[(i / 2) % 6]),
                };
                counts.add(code, &click(b"DE", referrer, browser), &every);
                for (dimension, value) in [
                    (Dimension::Country, "DE"),
                    (Dimension::Referrer, referrer),
                    (Dimension::Device, "mobile"),
                    (Dimension::Browser, browser),
                    (Dimension::Os, "iOS"),
                ] {
                    *want
                        .entry((code.to_owned(), dimension, value.to_owned()))
                        .or_insert(0u64) += 1;
                }
            }
            let (adds, clicks) = counts.take(rebound_core::Day(1));
            assert_eq!(clicks, 60);
            let got: std::collections::BTreeMap<_, _> = adds
                .into_iter()
                .map(|a| ((a.code.to_string(), a.dimension, a.value), a.clicks))
                .collect();
            assert_eq!(got, want, "round {round}");
        }
    }
}
