//! The data plane's background tasks in distributed mode, over Redis: the invalidation
//! listener (pub/sub, with heartbeats that tell whether L1 may be trusted), the heartbeat
//! publisher, and the creation feed that keeps the Bloom filter current. None of them is
//! ever awaited by a request.

use crate::bloom::BloomGate;
use crate::l1::L1;
use crate::path::InvalidationTrust;
use futures_util::StreamExt;
use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Clock};
use rebound_store::redis_cache::RedisCache;
use rebound_store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often each proxy publishes a heartbeat on the channel it listens to.
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
/// Pause before reconnecting a broken subscription or feed.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// How long one creation-feed read blocks waiting for entries.
const FEED_BLOCK: Duration = Duration::from_millis(500);

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Parses an invalidation message: `"<version> <code>"`.
pub fn parse_invalidation(payload: &str) -> Option<(u64, &str)> {
    let (version, code) = payload.split_once(' ')?;
    let version = version.parse().ok()?;
    rebound_core::code::is_valid_code(code.as_bytes()).then_some((version, code))
}

/// Listens to the invalidation and heartbeat channels: every message proves the channel
/// alive; an invalidation puts the tombstone with its version into L1.
pub async fn run_invalidation_listener(
    cache: Arc<RedisCache>,
    l1: Arc<L1>,
    trust: Arc<InvalidationTrust>,
    clock: Arc<dyn Clock>,
    mut shutdown: watch::Receiver<bool>,
) {
    let policy = CachePolicy::default();
    loop {
        let session = async {
            let mut pubsub = cache.client().get_async_pubsub().await?;
            pubsub.subscribe(cache.invalidate_channel()).await?;
            pubsub.subscribe(cache.heartbeat_channel()).await?;
            let invalidate = cache.invalidate_channel();
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let now = clock.now_millis();
                trust.heard(now, &l1);
                if msg.get_channel_name() == invalidate {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    match parse_invalidation(&payload) {
                        Some((version, code)) => {
                            l1.fill(code, CacheRecord::tombstone(version, now, &policy), now);
                        }
                        None => tracing::warn!("ignoring a malformed invalidation message"),
                    }
                }
            }
            redis::RedisResult::Ok(())
        };
        tokio::select! {
            result = session => {
                if let Err(e) = result {
                    tracing::warn!(error = %e, "invalidation channel lost; L1 entries now live at most l1_ttl");
                }
            }
            _ = stopped(&mut shutdown) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_AFTER) => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Publishes heartbeats so every proxy can tell a live channel from a silent one.
pub async fn run_heartbeat(cache: Arc<RedisCache>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let _ = tokio::time::timeout(HEARTBEAT_EVERY, cache.publish_heartbeat()).await;
            }
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// Keeps the Bloom filter current: note the feed's position, load every code from the
/// store, then follow the feed from that position. Whenever the feed cannot be read the
/// filter is bypassed, and it is loaded again before it is trusted again.
pub async fn run_creation_feed(
    cache: Arc<RedisCache>,
    bloom: Arc<BloomGate>,
    store: Arc<dyn Store>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        bloom.set_current(false);
        let synced = async {
            let position = cache.feed_position().await.map_err(|e| e.to_string())?;
            let loaded = bloom.load_from(store.as_ref()).await.map_err(|e| e.to_string())?;
            tracing::info!(codes = loaded, "Bloom filter loaded; following the creation feed");
            Ok::<String, String>(position)
        };
        let position = tokio::select! {
            p = synced => p,
            _ = stopped(&mut shutdown) => return,
        };
        let mut last = match position {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sync the Bloom filter yet; it is bypassed");
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_AFTER * 4) => continue,
                    _ = stopped(&mut shutdown) => return,
                }
            }
        };
        bloom.set_current(true);
        loop {
            let read = tokio::time::timeout(FEED_BLOCK * 3, cache.read_feed(&last, FEED_BLOCK));
            let result = tokio::select! {
                r = read => r,
                _ = stopped(&mut shutdown) => return,
            };
            match result {
                Ok(Ok((id, codes))) => {
                    for code in &codes {
                        bloom.insert(code);
                    }
                    if let Some(id) = id {
                        last = id;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "creation feed lost; the Bloom filter is bypassed until it is synced again");
                    break;
                }
                Err(_) => {
                    tracing::warn!("creation feed stalled; the Bloom filter is bypassed until it is synced again");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_messages() {
        assert_eq!(parse_invalidation("3 abc"), Some((3, "abc")));
        assert_eq!(parse_invalidation("x abc"), None);
        assert_eq!(parse_invalidation("3 a/b"), None);
        assert_eq!(parse_invalidation("3"), None);
        assert_eq!(parse_invalidation(""), None);
    }
}
