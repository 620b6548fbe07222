//! What the data plane is configured with: plain data and its defaults, the one place
//! they are written. The binary reads it from its file and variables and checks it.

use rebound_core::cache::CachePolicy;
use rebound_store::Dimension;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the redirect path.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `max-age` of redirect responses, capped at expiry.
    pub cache_max_age_secs: u64,
    /// How many links L1 holds.
    pub l1_capacity: usize,
    /// How long without its own keepalive before a proxy counts its channel as broken.
    pub invalidation_timeout_ms: u64,
    /// Longest life of an L1 entry while the invalidation channel is broken.
    pub l1_ttl_ms: u64,
    /// Budget of one Redis read.
    pub l2_budget_ms: u64,
    /// Budget of one store read.
    pub store_budget_ms: u64,
    /// How long a cached active record is fresh (at most 24 h).
    pub cache_fresh_ms: u64,
    /// How long past freshness a record may be served while the store fails.
    pub stale_grace_ms: u64,
    /// Clicks held between the request path and the shipper; more are dropped and counted.
    pub click_queue_capacity: usize,
    /// How often aggregated clicks are shipped under light load (few distinct codes).
    pub click_flush_ms: u64,
    /// The cost bound of click persistence: rollup rows (one per code and day) written per
    /// second, on average; counts wait and merge until their rows fit it, up to
    /// `click_max_hold_ms`.
    pub click_rows_per_sec: u64,
    /// The other cost bound: the most of the time click persistence spends writing (0 to
    /// 1); after a write, the next starts no sooner than its duration divided by this
    /// after it began, counts merging meanwhile, up to `click_max_hold_ms`.
    pub click_write_share: f64,
    /// The longest a click waits in memory before it is written (or sent to SQS): what a
    /// SIGKILL can lose. `None`: [`Config::CLICK_MAX_HOLD_MS`] or, for `rebound proxy`,
    /// [`Config::CLICK_MAX_HOLD_DISTRIBUTED_MS`].
    pub click_max_hold_ms: Option<u64>,
    /// Worker threads of the redirect server; 0 means one per core.
    pub threads: usize,
    /// Where a 404 redirects (a URL a link could point to); none: the built-in page.
    pub not_found_url: Option<String>,
    /// Where a 410 (expired link) redirects; none: the built-in page.
    pub expired_url: Option<String>,
    /// Where `GET /` redirects; none: the 404 answer.
    pub root_url: Option<String>,
    /// Serve a request for a host that is no domain of the fleet as the default domain's,
    /// rather than 404 (docs/spec.md §11).
    pub serve_unknown_hosts: bool,
    /// The dimensions a person's click is broken down by (docs/spec.md §13), where clicks
    /// are written to a store that keeps breakdowns; empty: none, and the redirect path
    /// costs what it did before them.
    pub breakdowns: Vec<Dimension>,
    /// The country database (the MaxMind DB format: GeoLite2-Country, DB-IP Lite, the CC0
    /// databases), read at start and again when the file changes.
    pub geoip_database: Option<PathBuf>,
    /// The CDN header that names the visitor's country, believed from the trusted networks
    /// only; it wins over the database.
    pub country_header: CountryHeader,
}

/// The header a CDN in front names the visitor's country in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountryHeader {
    None,
    /// Amazon CloudFront's `CloudFront-Viewer-Country`.
    CloudFront,
    /// Cloudflare's `CF-IPCountry`.
    Cloudflare,
}

impl CountryHeader {
    /// Its name, if it is one.
    pub fn name(self) -> Option<http::HeaderName> {
        match self {
            CountryHeader::None => None,
            CountryHeader::CloudFront => Some(http::HeaderName::from_static("cloudfront-viewer-country")),
            CountryHeader::Cloudflare => Some(http::HeaderName::from_static("cf-ipcountry")),
        }
    }
}

impl Config {
    /// The longest a click waits in memory by default in the all-in-one, whose stats add
    /// what is pending.
    pub const CLICK_MAX_HOLD_MS: u64 = 60_000;
    /// … and in a proxy alone, whose control plane's stats are only as fresh as this.
    pub const CLICK_MAX_HOLD_DISTRIBUTED_MS: u64 = 20_000;

    /// The longest a click waits in memory: `click_max_hold_ms`, or the mode's default.
    pub fn click_max_hold(&self, distributed: bool) -> Duration {
        let default = match distributed {
            true => Self::CLICK_MAX_HOLD_DISTRIBUTED_MS,
            false => Self::CLICK_MAX_HOLD_MS,
        };
        Duration::from_millis(self.click_max_hold_ms.unwrap_or(default))
    }

    /// The lifetimes of cached records.
    pub fn cache_policy(&self) -> CachePolicy {
        CachePolicy {
            fresh_millis: self.cache_fresh_ms as i64,
            stale_grace_millis: self.stale_grace_ms as i64,
            ..CachePolicy::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        let cache = CachePolicy::default();
        Config {
            cache_max_age_secs: 5,
            l1_capacity: 1_200_000,
            invalidation_timeout_ms: 2_000,
            l1_ttl_ms: 1_000,
            l2_budget_ms: 150,
            store_budget_ms: 1_000,
            cache_fresh_ms: cache.fresh_millis as u64,
            stale_grace_ms: cache.stale_grace_millis as u64,
            click_queue_capacity: 65_536,
            click_flush_ms: 1_000,
            click_rows_per_sec: 500,
            click_write_share: 0.01,
            click_max_hold_ms: None,
            threads: 0,
            not_found_url: None,
            expired_url: None,
            root_url: None,
            serve_unknown_hosts: false,
            breakdowns: Dimension::ALL.to_vec(),
            geoip_database: None,
            country_header: CountryHeader::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_keep_the_core_cache_policy() {
        assert_eq!(Config::default().cache_policy(), CachePolicy::default());
    }

    #[test]
    fn an_unset_click_hold_is_the_mode_default() {
        let c = Config::default();
        assert_eq!(c.click_max_hold(false), Duration::from_secs(60));
        assert_eq!(c.click_max_hold(true), Duration::from_secs(20));
        let c = Config {
            click_max_hold_ms: Some(5),
            ..c
        };
        assert_eq!(c.click_max_hold(true), Duration::from_millis(5));
    }
}
