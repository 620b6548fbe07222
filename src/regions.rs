//! A control plane's other regions (docs/regions.md): the Redis of each peer region, which
//! its link events reach as this region's do (`FanOutLinkEvents`).

use crate::backends::{redis_ca, redis_cache};
use crate::config::PEER_REDIS_URLS;
use crate::settings::Settings;
use rebound_redis::RedisCache;
use rebound_store::Causes;
use std::sync::Arc;

/// Opens the Redis of every peer region (`peer_redis_urls`, under this region's prefix and
/// certificate authorities). A wrong URL, refused credentials or an untrusted certificate
/// stop the start naming the setting and the URL's position; an unreachable one does not.
pub async fn open_peers(settings: &Settings) -> anyhow::Result<Vec<Arc<RedisCache>>> {
    let setting = PEER_REDIS_URLS.var.unwrap_or(PEER_REDIS_URLS.key);
    if settings.peer_redis_urls.is_empty() {
        return Ok(Vec::new());
    }
    let ca = redis_ca(settings)?;
    let mut peers = Vec::new();
    for (n, url) in settings.peer_redis_urls.iter().enumerate() {
        let named = |e| {
            anyhow::Error::new(e).context(format!(
                "{setting}, URL {} of {}",
                n + 1,
                settings.peer_redis_urls.len()
            ))
        };
        // With `redis_cluster`, each entry is one seed node of that region's cluster.
        let cache = redis_cache(settings, url, ca.clone()).map_err(named)?;
        match cache.check_settings().await.map_err(named)? {
            None => tracing::info!(region = n + 1, "connected to a peer region's Redis"),
            Some(why) => {
                tracing::warn!(region = n + 1, error = %Causes(&why), "a peer region's Redis is not reachable yet; its deletes answer 503 until it is")
            }
        }
        peers.push(Arc::new(cache));
    }
    Ok(peers)
}
