//! The metrics of the Redis connection itself, read from the cache at scrape time.

use crate::RedisCache;

/// The cache's own state, read at scrape time: `rebound_redis_breaker_open` (1 while Redis
/// calls fail fast after a connection failure) and `rebound_redis_identity_changes_total`.
pub struct RedisBreakerState {
    cache: std::sync::Arc<RedisCache>,
    gauge: prometheus::IntGauge,
    identity_changes: prometheus::IntCounter,
}

impl RedisBreakerState {
    /// Declares the metrics of `cache` in `registry`.
    pub fn register(registry: &prometheus::Registry, cache: std::sync::Arc<RedisCache>) -> prometheus::Result<()> {
        let gauge = prometheus::IntGauge::new(
            "rebound_redis_breaker_open",
            "1 while the Redis breaker is open (calls fail at once after a connection failure), else 0.",
        )?;
        let identity_changes = prometheus::IntCounter::new(
            "rebound_redis_identity_changes_total",
            "Times Redis was seen to change identity (a failover to a replica, a restart): live records written before are confirmed by the store before use.",
        )?;
        registry.register(Box::new(RedisBreakerState {
            cache,
            gauge,
            identity_changes,
        }))
    }
}

impl prometheus::core::Collector for RedisBreakerState {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        let mut descs = self.gauge.desc();
        descs.extend(self.identity_changes.desc());
        descs
    }
    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.gauge.set(i64::from(self.cache.breaker_open()));
        let seen = self.cache.identity_changes();
        self.identity_changes
            .inc_by(seen.saturating_sub(self.identity_changes.get()));
        let mut families = self.gauge.collect();
        families.extend(self.identity_changes.collect());
        families
    }
}
