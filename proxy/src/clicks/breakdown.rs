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

/// Counts by value (its bytes), one map per dimension (in [`Dimension::ALL`]'s order).
type ByValue = [HashMap<Box<[u8]>, u64>; Dimension::ALL.len()];

/// People's clicks by code, dimension and value since the last take.
#[derive(Debug, Default)]
pub(super) struct BreakdownCounts {
    counts: HashMap<Box<str>, ByValue>,
    /// Clicks added (a click adds to one count per dimension it has).
    clicks: u64,
}

impl BreakdownCounts {
    /// Adds one click of `code`. Looked up by reference at each level: most clicks repeat
    /// a code and values already counted, and allocate nothing.
    pub(super) fn add(&mut self, code: &str, dimensions: &Dimensions, counted: &[bool; Dimension::ALL.len()]) {
        self.clicks += 1;
        let by_value = match self.counts.get_mut(code) {
            Some(by_value) => by_value,
            None => self.counts.entry(code.into()).or_default(),
        };
        each_bytes(dimensions, |dimension, value| {
            if !counted[dimension as usize] {
                return;
            }
            let values = &mut by_value[dimension as usize];
            if let Some(n) = values.get_mut(value) {
                *n += 1;
                return;
            }
            // Bounded as the store bounds a link's day: a code's values beyond those it
            // keeps would count under `(other)` there anyway, and memory stays bounded
            // however many values (hosts, campaigns) a take sees.
            let value = match values.len() >= dimension.values_per_day() {
                true => OTHER.as_bytes(),
                false => value,
            };
            match values.get_mut(value) {
                Some(n) => *n += 1,
                None => {
                    values.insert(value.into(), 1);
                }
            }
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.clicks == 0
    }

    /// The adds of `day`, in (code, dimension, value) order, and the clicks they count.
    pub(super) fn take(&mut self, day: rebound_core::Day) -> (Vec<DimensionAdd>, u64) {
        let clicks = std::mem::take(&mut self.clicks);
        let mut adds = Vec::new();
        for (code, by_value) in std::mem::take(&mut self.counts) {
            for (dimension, values) in Dimension::ALL.into_iter().zip(by_value) {
                adds.extend(values.into_iter().map(|(value, clicks)| DimensionAdd {
                    code: code.clone().into(),
                    day,
                    dimension,
                    value: String::from_utf8_lossy(&value).into_owned(),
                    clicks,
                }));
            }
        }
        adds.sort_unstable_by(|a, b| (&a.code, a.dimension, &a.value).cmp(&(&b.code, b.dimension, &b.value)));
        (adds, clicks)
    }
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
}
