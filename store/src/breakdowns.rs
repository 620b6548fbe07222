//! Clicks broken down by who clicked (docs/spec.md §13): per link, UTC day and value of one
//! dimension (a country, a referrer's host, a device class, …), people's clicks only.
//! Bounded: a link's day keeps at most [`VALUES_PER_LINK_DAY`] values of each dimension,
//! the first to arrive; the clicks of any value after those count under [`OTHER`]. The
//! totals (people and bots) stay in the click rollups, exact; a breakdown is exact too,
//! except for what its bounded queue dropped (counted as dropped clicks are).

use crate::{BatchOutcome, Store, StoreError};
use async_trait::async_trait;
use rebound_core::Day;
use std::sync::Arc;

/// What a click is broken down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    /// The visitor's country: ISO 3166-1 alpha-2, or `unknown`.
    Country,
    /// The host of `Referer`, or `direct`.
    Referrer,
    /// `desktop`, `mobile`, `tablet` or `other`.
    Device,
    /// The browser's family (`Chrome`, `Safari`, …).
    Browser,
    /// The operating system's family (`Windows`, `iOS`, …).
    Os,
    UtmSource,
    UtmMedium,
    UtmCampaign,
}

impl Dimension {
    pub const ALL: [Dimension; 8] = [
        Dimension::Country,
        Dimension::Referrer,
        Dimension::Device,
        Dimension::Browser,
        Dimension::Os,
        Dimension::UtmSource,
        Dimension::UtmMedium,
        Dimension::UtmCampaign,
    ];

    /// Its name in the API (`by=`), the stores and the settings.
    pub const fn as_str(self) -> &'static str {
        match self {
            Dimension::Country => "country",
            Dimension::Referrer => "referrer",
            Dimension::Device => "device",
            Dimension::Browser => "browser",
            Dimension::Os => "os",
            Dimension::UtmSource => "utm_source",
            Dimension::UtmMedium => "utm_medium",
            Dimension::UtmCampaign => "utm_campaign",
        }
    }

    /// The dimension named `name`, exactly as [`Dimension::as_str`] writes it.
    pub fn parse(name: &str) -> Option<Dimension> {
        Dimension::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

/// Values of one dimension a link's day keeps, at most; later ones count under [`OTHER`].
pub const VALUES_PER_LINK_DAY: usize = 50;

/// The value the clicks of a link's day beyond its first [`VALUES_PER_LINK_DAY`] values
/// count under. Parenthesised: no country, host, family or campaign value is written so.
pub const OTHER: &str = "(other)";

/// Clicks to add to one link's day for one value of one dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimensionAdd {
    pub code: String,
    pub day: Day,
    pub dimension: Dimension,
    pub value: String,
    pub clicks: u64,
}

/// A batch of breakdown adds, applied at most once per `id` (ids are shared with the
/// click batches: one namespace of applied ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimensionBatch {
    pub id: String,
    pub adds: Vec<DimensionAdd>,
}

/// One value of a breakdown read, with its clicks over the days read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueClicks {
    pub value: String,
    pub clicks: u64,
}

/// Where breakdowns are kept.
#[async_trait]
pub trait BreakdownStore: Send + Sync {
    /// Adds every count of the batch, at most once per batch id, each link's day bounded
    /// to [`VALUES_PER_LINK_DAY`] values of a dimension (the rest under [`OTHER`]).
    async fn apply_dimensions(&self, batch: &DimensionBatch) -> Result<BatchOutcome, StoreError>;
    /// The clicks of `code` by value of `dimension`, summed from `from` through `to`, most
    /// clicked first (then by value).
    async fn read_breakdown(
        &self,
        code: &str,
        dimension: Dimension,
        from: Day,
        to: Day,
    ) -> Result<Vec<ValueClicks>, StoreError>;
}

/// The breakdowns of `store`, when it keeps them ([`crate::RollupStore::breakdowns`]), as a
/// store of their own that holds it.
pub fn breakdowns_of(store: Arc<dyn Store>) -> Option<Arc<dyn BreakdownStore>> {
    store.breakdowns()?;
    Some(Arc::new(BreakdownsOf(store)))
}

struct BreakdownsOf(Arc<dyn Store>);

impl BreakdownsOf {
    fn kept(&self) -> Result<&dyn BreakdownStore, StoreError> {
        self.0
            .breakdowns()
            .ok_or_else(|| StoreError::Corrupt("the store stopped keeping breakdowns".into()))
    }
}

#[async_trait]
impl BreakdownStore for BreakdownsOf {
    async fn apply_dimensions(&self, batch: &DimensionBatch) -> Result<BatchOutcome, StoreError> {
        self.kept()?.apply_dimensions(batch).await
    }

    async fn read_breakdown(
        &self,
        code: &str,
        dimension: Dimension,
        from: Day,
        to: Day,
    ) -> Result<Vec<ValueClicks>, StoreError> {
        self.kept()?.read_breakdown(code, dimension, from, to).await
    }
}

/// The value an add counts under in a link's day that holds `held` values of its dimension
/// already, `known` telling whether the add's own value is one of them.
pub fn bounded_value(value: &str, known: bool, held: usize) -> &str {
    match known || held < VALUES_PER_LINK_DAY {
        true => value,
        false => OTHER,
    }
}

/// `totals` (value → clicks, any order) as a read answers them: most clicked first, then by
/// value.
pub fn ranked(totals: impl IntoIterator<Item = (String, u64)>) -> Vec<ValueClicks> {
    let mut values: Vec<ValueClicks> = totals
        .into_iter()
        .filter(|(_, clicks)| *clicks > 0)
        .map(|(value, clicks)| ValueClicks { value, clicks })
        .collect();
    values.sort_by(|a, b| b.clicks.cmp(&a.clicks).then_with(|| a.value.cmp(&b.value)));
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dimension_is_named_as_the_api_names_it() {
        for d in Dimension::ALL {
            assert_eq!(Dimension::parse(d.as_str()), Some(d));
        }
        for (i, d) in Dimension::ALL.into_iter().enumerate() {
            assert_eq!(d as usize, i, "ALL is in declaration order: {d:?}");
        }
        for name in ["Country", "", "utm", "country ", "utm-source"] {
            assert_eq!(Dimension::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn a_value_beyond_the_bound_counts_as_other() {
        let cases = [
            (false, 0, "DE"),
            (false, VALUES_PER_LINK_DAY - 1, "DE"),
            (false, VALUES_PER_LINK_DAY, OTHER),
            (true, VALUES_PER_LINK_DAY, "DE"),
            (true, VALUES_PER_LINK_DAY + 7, "DE"),
        ];
        for (known, held, want) in cases {
            assert_eq!(bounded_value("DE", known, held), want, "known {known}, held {held}");
        }
    }

    #[test]
    fn reads_rank_by_clicks_then_value() {
        let got = ranked([("b".into(), 2), ("a".into(), 2), ("c".into(), 9), ("z".into(), 0)]);
        let order: Vec<(&str, u64)> = got.iter().map(|v| (v.value.as_str(), v.clicks)).collect();
        assert_eq!(order, vec![("c", 9), ("a", 2), ("b", 2)]);
    }
}
