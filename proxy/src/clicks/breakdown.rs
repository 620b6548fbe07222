//! A person's click as the breakdowns see it (docs/spec.md §13), and the counts of those
//! clicks by link, dimension and value between two takes.
//!
//! The redirect path hands each person's click with its [`ClickDimensions`] to a bounded
//! queue of its own ([`super::ClickQueue::record_with`]); the shipper adds them up here when
//! it drains, and a take hands the sums to the breakdown store after the take's click rows.
//! The values are shared, not copied: a thread keeps the parsed agent and the referrer's host
//! of the last agents and referrers it saw, and a click holds a reference to them.

use rebound_store::breakdowns::MAX_VALUE_BYTES;
use rebound_store::{Dimension, DimensionAdd};
use std::collections::HashMap;
use std::sync::Arc;

/// A country as a click carries it: two upper-case letters, or [`UNKNOWN_COUNTRY`].
pub type CountryCode = [u8; 2];

/// The country of a visitor no database or header placed.
pub const UNKNOWN_COUNTRY: CountryCode = *b"??";

/// How an unknown country is named in the breakdowns.
pub const UNKNOWN_COUNTRY_NAME: &str = "unknown";

/// What an agent (one `User-Agent`) is, as far as the breakdowns go; `None` for a
/// dimension that is off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentFamilies {
    pub device: Option<&'static str>,
    pub browser: Option<Box<str>>,
    pub os: Option<Box<str>>,
}

/// The campaign of a request's query: its `utm_source`, `utm_medium` and `utm_campaign`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Campaign {
    pub source: Option<Box<str>>,
    pub medium: Option<Box<str>>,
    pub campaign: Option<Box<str>>,
}

/// A person's click, by every dimension that is on: `None` for a dimension that is off
/// (and for a campaign the query does not name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClickDimensions {
    pub country: Option<CountryCode>,
    pub referrer: Option<Arc<str>>,
    pub agent: Option<Arc<AgentFamilies>>,
    pub campaign: Option<Arc<Campaign>>,
}

impl ClickDimensions {
    /// Calls `each` with every dimension this click has a value of, and the value.
    pub fn each(&self, mut each: impl FnMut(Dimension, &str)) {
        if let Some(country) = &self.country {
            match std::str::from_utf8(country) {
                Ok(code) if *country != UNKNOWN_COUNTRY => each(Dimension::Country, code),
                _ => each(Dimension::Country, UNKNOWN_COUNTRY_NAME),
            }
        }
        if let Some(referrer) = &self.referrer {
            each(Dimension::Referrer, referrer);
        }
        if let Some(agent) = &self.agent {
            if let Some(device) = agent.device {
                each(Dimension::Device, device);
            }
            if let Some(browser) = &agent.browser {
                each(Dimension::Browser, browser);
            }
            if let Some(os) = &agent.os {
                each(Dimension::Os, os);
            }
        }
        if let Some(campaign) = &self.campaign {
            for (dimension, value) in [
                (Dimension::UtmSource, &campaign.source),
                (Dimension::UtmMedium, &campaign.medium),
                (Dimension::UtmCampaign, &campaign.campaign),
            ] {
                if let Some(value) = value {
                    each(dimension, value);
                }
            }
        }
    }
}

/// Counts by value, one map per dimension (in [`Dimension::ALL`]'s order).
type ByValue = [HashMap<Box<str>, u64>; Dimension::ALL.len()];

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
    pub(super) fn add(&mut self, code: &str, dimensions: &ClickDimensions) {
        self.clicks += 1;
        let by_value = match self.counts.get_mut(code) {
            Some(by_value) => by_value,
            None => self.counts.entry(code.into()).or_default(),
        };
        dimensions.each(|dimension, value| {
            let values = &mut by_value[dimension as usize];
            let value = cut(value, MAX_VALUE_BYTES);
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
                    value: value.into(),
                    clicks,
                }));
            }
        }
        adds.sort_unstable_by(|a, b| (&a.code, a.dimension, &a.value).cmp(&(&b.code, b.dimension, &b.value)));
        (adds, clicks)
    }
}

/// `value` cut to at most `max` bytes, on a character boundary.
fn cut(value: &str, max: usize) -> &str {
    if value.len() <= max {
        return value;
    }
    let mut end = max;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click(country: Option<CountryCode>, referrer: &str, browser: &str) -> ClickDimensions {
        ClickDimensions {
            country,
            referrer: Some(referrer.into()),
            agent: Some(Arc::new(AgentFamilies {
                device: Some("mobile"),
                browser: Some(browser.into()),
                os: None,
            })),
            campaign: None,
        }
    }

    #[test]
    fn a_click_names_each_dimension_it_has() {
        let mut seen = Vec::new();
        let c = ClickDimensions {
            campaign: Some(Arc::new(Campaign {
                source: Some("news".into()),
                medium: None,
                campaign: Some("spring".into()),
            })),
            ..click(Some(*b"DE"), "direct", "Safari")
        };
        c.each(|d, v| seen.push((d, v.to_owned())));
        let want = [
            (Dimension::Country, "DE"),
            (Dimension::Referrer, "direct"),
            (Dimension::Device, "mobile"),
            (Dimension::Browser, "Safari"),
            (Dimension::UtmSource, "news"),
            (Dimension::UtmCampaign, "spring"),
        ];
        assert_eq!(seen, want.map(|(d, v)| (d, v.to_owned())));
        let mut unknown = Vec::new();
        click(Some(UNKNOWN_COUNTRY), "x", "y").each(|d, v| unknown.push((d, v.to_owned())));
        assert_eq!(unknown[0], (Dimension::Country, "unknown".to_owned()));
        let mut none = Vec::new();
        ClickDimensions::default().each(|d, _| none.push(d));
        assert!(none.is_empty(), "every dimension off: nothing counted");
    }

    #[test]
    fn counts_add_up_per_code_dimension_and_value_and_a_take_empties_them() {
        let mut counts = BreakdownCounts::default();
        for (code, country) in [("abc", *b"DE"), ("abc", *b"DE"), ("abc", *b"JP"), ("xyz", *b"DE")] {
            counts.add(code, &click(Some(country), "news.example", "Chrome"));
        }
        let long = "é".repeat(100); // 200 bytes: cut to 128, on a character boundary
        counts.add("xyz", &click(None, &long, "Chrome"));
        let (adds, clicks) = counts.take(rebound_core::Day(9));
        assert_eq!(clicks, 5);
        assert!(counts.is_empty());
        let got: Vec<(&str, Dimension, &str, u64)> = adds
            .iter()
            .map(|a| (a.code.as_str(), a.dimension, a.value.as_str(), a.clicks))
            .collect();
        let cut_long = "é".repeat(64);
        assert_eq!(
            got,
            vec![
                ("abc", Dimension::Country, "DE", 2),
                ("abc", Dimension::Country, "JP", 1),
                ("abc", Dimension::Referrer, "news.example", 3),
                ("abc", Dimension::Device, "mobile", 3),
                ("abc", Dimension::Browser, "Chrome", 3),
                ("xyz", Dimension::Country, "DE", 1),
                ("xyz", Dimension::Referrer, "news.example", 1),
                ("xyz", Dimension::Referrer, cut_long.as_str(), 1),
                ("xyz", Dimension::Device, "mobile", 2),
                ("xyz", Dimension::Browser, "Chrome", 2),
            ]
        );
        assert!(adds.iter().all(|a| a.day == rebound_core::Day(9)));
    }
}
