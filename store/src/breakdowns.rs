//! Clicks broken down by who clicked (docs/spec.md §13): per link, UTC day and value of one
//! dimension (a country, a referrer's host, a device class, …), people's clicks only.
//! Bounded: a link's day keeps at most [`Dimension::values_per_day`] values of each
//! dimension, the first to arrive; the clicks of any value after those count under
//! [`OTHER`]. The totals (people and bots) stay in the click rollups, exact; a breakdown is
//! exact too, except for what its bounded queue dropped (counted as dropped clicks are).
//!
//! A domain's summary is kept the same way, under its scope code ([`scope_code`]): its
//! daily totals in the rollups, its countries and referrers, and its links' clicks by
//! code ([`Dimension::Link`]), all added at each take by the data plane.

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
    /// Which of a link's rules chose the target (docs/spec.md §14): `default`, `N` or
    /// `N/V` (variant V of rule N's split); only links with rules have it.
    Rule,
    /// A domain's people's clicks by link code: kept for scope codes only ([`scope_code`]),
    /// never a click's dimension (not in [`Dimension::ALL`], not a `by=` of a link).
    Link,
}

impl Dimension {
    /// A click's dimensions, in declaration order (what a data plane captures and a link's
    /// breakdown reads).
    pub const ALL: [Dimension; 9] = [
        Dimension::Country,
        Dimension::Referrer,
        Dimension::Device,
        Dimension::Browser,
        Dimension::Os,
        Dimension::UtmSource,
        Dimension::UtmMedium,
        Dimension::UtmCampaign,
        Dimension::Rule,
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
            Dimension::Rule => "rule",
            Dimension::Link => "link",
        }
    }

    /// The dimension named `name`, exactly as [`Dimension::as_str`] writes it, [`Dimension::Link`]
    /// included (a stored or shipped add may carry it); a click's dimension is
    /// [`Dimension::of_click`].
    pub fn parse(name: &str) -> Option<Dimension> {
        Dimension::ALL
            .into_iter()
            .chain([Dimension::Link])
            .find(|d| d.as_str() == name)
    }

    /// The click's dimension named `name` (one of [`Dimension::ALL`]): what settings and a
    /// link's `by=` may name.
    pub fn of_click(name: &str) -> Option<Dimension> {
        Dimension::parse(name).filter(|d| *d != Dimension::Link)
    }

    /// Values of this dimension one code's day keeps, at most; later ones count under
    /// [`OTHER`]: [`VALUES_PER_LINK_DAY`] for a click's dimensions, [`LINKS_PER_SCOPE_DAY`]
    /// for a domain's links.
    pub const fn values_per_day(self) -> usize {
        match self {
            Dimension::Link => LINKS_PER_SCOPE_DAY,
            _ => VALUES_PER_LINK_DAY,
        }
    }
}

/// Values of one of a click's dimensions a link's day keeps, at most; later ones count
/// under [`OTHER`].
pub const VALUES_PER_LINK_DAY: usize = 50;

/// Links a domain's day keeps in its summary ([`Dimension::Link`]), at most: the first
/// clicked that day; the clicks of later ones count under [`OTHER`].
pub const LINKS_PER_SCOPE_DAY: usize = 1_000;

/// The first character of every scope code: not a code character, so no link's key (a
/// code, or a code, `.` and a domain id) can be one.
pub const SCOPE_MARK: char = '*';

/// The code a domain's summary is kept under, in the rollups and the breakdowns: `*` for
/// the default domain, `*<id>` for another (`id`, its [`rebound_core::domain::domain_id`]).
/// Keyed by id, as its links' keys are: a data plane names it from a clicked link's key
/// alone, and a domain removed and added again starts a new summary, as its links do.
pub fn scope_code(domain_id: Option<&str>) -> String {
    match domain_id {
        None => SCOPE_MARK.to_string(),
        Some(id) => format!("{SCOPE_MARK}{id}"),
    }
}

/// The scope code of the domain the link `key` is on ([`scope_code`]).
pub fn scope_of_key(key: &str) -> String {
    scope_code(rebound_core::domain::split_key(key).1)
}

/// Whether `code` is a scope code (as [`scope_code`] writes them).
pub fn is_scope_code(code: &str) -> bool {
    code.starts_with(SCOPE_MARK)
}

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
    /// Adds every count of the batch, at most once per batch id, each code's day bounded
    /// to [`Dimension::values_per_day`] values of a dimension (the rest under [`OTHER`]).
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

/// The value an add of `dimension` counts under in a code's day that holds `held` values of
/// it already, `known` telling whether the add's own value is one of them.
pub fn bounded_value(dimension: Dimension, value: &str, known: bool, held: usize) -> &str {
    match known || held < dimension.values_per_day() {
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
            assert_eq!(Dimension::of_click(d.as_str()), Some(d));
        }
        for (i, d) in Dimension::ALL.into_iter().enumerate() {
            assert_eq!(d as usize, i, "ALL is in declaration order: {d:?}");
        }
        for name in ["Country", "", "utm", "country ", "utm-source", "Link"] {
            assert_eq!(Dimension::parse(name), None, "{name:?}");
        }
        // A domain's links: stored and shipped by name, never a click's dimension.
        assert_eq!(Dimension::parse("link"), Some(Dimension::Link));
        assert_eq!(Dimension::of_click("link"), None);
        assert!(!Dimension::ALL.contains(&Dimension::Link));
    }

    #[test]
    fn a_value_beyond_its_dimensions_bound_counts_as_other() {
        let (v, l) = (VALUES_PER_LINK_DAY, LINKS_PER_SCOPE_DAY);
        let cases = [
            (Dimension::Country, false, 0, "DE"),
            (Dimension::Country, false, v - 1, "DE"),
            (Dimension::Country, false, v, OTHER),
            (Dimension::Country, true, v, "DE"),
            (Dimension::Country, true, v + 7, "DE"),
            (Dimension::UtmCampaign, false, v, OTHER),
            // A domain's links: a thousand a day.
            (Dimension::Link, false, v, "DE"),
            (Dimension::Link, false, l - 1, "DE"),
            (Dimension::Link, false, l, OTHER),
            (Dimension::Link, true, l + 3, "DE"),
        ];
        for (dimension, known, held, want) in cases {
            assert_eq!(
                bounded_value(dimension, "DE", known, held),
                want,
                "{dimension:?}, known {known}, held {held}"
            );
        }
    }

    #[test]
    fn a_scope_code_is_no_links_key() {
        assert_eq!(scope_code(None), "*");
        assert_eq!(scope_code(Some("1A")), "*1A");
        assert_eq!(scope_of_key("abc"), "*");
        assert_eq!(scope_of_key("abc.1A"), "*1A");
        for id in [None, Some("1"), Some("zzzzzzzz")] {
            let scope = scope_code(id);
            assert!(is_scope_code(&scope));
            assert!(!rebound_core::domain::is_valid_key(&scope), "{scope}");
            assert!(rebound_core::code::check_code(&scope).is_err(), "{scope}");
        }
        assert!(!is_scope_code("abc") && !is_scope_code("abc.1A"));
    }

    #[test]
    fn reads_rank_by_clicks_then_value() {
        let got = ranked([("b".into(), 2), ("a".into(), 2), ("c".into(), 9), ("z".into(), 0)]);
        let order: Vec<(&str, u64)> = got.iter().map(|v| (v.value.as_str(), v.clicks)).collect();
        assert_eq!(order, vec![("c", 9), ("a", 2), ("b", 2)]);
    }
}
