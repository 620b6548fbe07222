//! The threat lists' loader (docs/spec.md §12): every configured list read from its file or URL at
//! start and every `refresh_secs`, parsed, and put in force in the control plane's index; a
//! list that fails to load keeps its entries before. When a list's content changed, the
//! links on the hosts of its new entries are checked against the lists (in the home region
//! only: its takedowns reach every region).

use crate::threats::AbuseService;
use crate::threats::ListState;
use rebound_core::threat::{parse_feed, ParsedFeed, ThreatIndex};
use rebound_core::UnixMillis;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Threat lists (docs/spec.md §12): where each is read from, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreatSettings {
    pub lists: Vec<ThreatListSource>,
    /// Seconds between two loads of every list.
    pub refresh_secs: u64,
    /// A feed larger than this is refused (its entries before stay in force).
    pub max_feed_bytes: u64,
}

/// One threat list: its name (in `threat-list:<name>`), its format and where it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreatListSource {
    pub name: String,
    pub format: rebound_core::threat::FeedFormat,
    /// An `http://` or `https://` URL, or a file's path.
    pub source: String,
}

/// Longest a feed's download may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// A list's last good content, and how its last load went.
struct Loaded {
    source: ThreatListSource,
    good: Option<Good>,
    error: Option<String>,
}

/// A list's content in force.
struct Good {
    feed: ParsedFeed,
    /// The SHA-256 of the bytes it was read from: a download with the same is not read again.
    sha: [u8; 32],
    /// When it was loaded.
    at: UnixMillis,
}

/// Loads the lists now and every `settings.refresh_secs` until `stop`; after a change,
/// when `rescan` (the home region), checks the links on the hosts of the entries new since
/// the last rescan (every entry's after a start: a read of the links on those hosts alone).
pub async fn run(abuse: Arc<AbuseService>, settings: ThreatSettings, rescan: bool, mut stop: watch::Receiver<bool>) {
    let client = match reqwest::Client::builder().timeout(FETCH_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for the threat lists; none is loaded");
            return;
        }
    };
    let mut loaded: Vec<Loaded> = settings
        .lists
        .iter()
        .map(|source| Loaded {
            source: source.clone(),
            good: None,
            error: None,
        })
        .collect();
    loop {
        let changed = load_all(&abuse, &client, &mut loaded, settings.max_feed_bytes).await;
        if changed && rescan {
            match abuse.rescan_threats().await {
                Ok(o) => tracing::info!(
                    looked_up = o.looked_up,
                    scanned = o.scanned,
                    matched = o.matched,
                    taken_down = o.taken_down,
                    allowed = o.allowed,
                    failed = o.failed,
                    ms = o.millis,
                    "the links on the hosts of the lists' new entries checked against the threat lists"
                ),
                Err(e) => {
                    tracing::warn!(error = %rebound_core::Causes(&e), "the threat-list rescan stopped; it runs again at the next change")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(settings.refresh_secs)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Loads every list once and puts them in force; whether any list's content changed. A
/// download with the bytes in force is not parsed again, and the index is built again only
/// when a list's content changed.
async fn load_all(abuse: &AbuseService, client: &reqwest::Client, loaded: &mut [Loaded], max: u64) -> bool {
    let mut changed = false;
    for list in loaded.iter_mut() {
        let attempt = match fetch(client, &list.source.source, max).await {
            Ok(bytes) => {
                let sha: [u8; 32] = Sha256::digest(&bytes).into();
                match list.good.as_ref().is_some_and(|g| g.sha == sha) {
                    true => Ok(None),
                    false => parse_feed(list.source.format, &bytes)
                        .map(|feed| {
                            Some(Good {
                                feed,
                                sha,
                                at: abuse.now(),
                            })
                        })
                        .map_err(|e| e.to_string()),
                }
            }
            Err(e) => Err(e),
        };
        match attempt {
            Ok(good) => {
                if let Some(good) = good {
                    changed = true;
                    list.good = Some(good);
                }
                list.error = None;
            }
            Err(error) => {
                tracing::warn!(list = %list.source.name, source = %list.source.source, %error, "threat list not loaded; its entries before stay in force");
                list.error = Some(error);
            }
        }
    }
    let states = loaded
        .iter()
        .map(|list| ListState {
            name: list.source.name.clone(),
            format: list.source.format.as_str().to_owned(),
            source: list.source.source.clone(),
            entries: list.good.as_ref().map_or(0, |g| g.feed.len()),
            skipped: list.good.as_ref().map_or(0, |g| g.feed.skipped()),
            loaded_at: list.good.as_ref().map(|g| g.at),
            error: list.error.clone(),
        })
        .collect();
    if changed {
        let feeds = loaded
            .iter()
            .filter_map(|list| Some((list.source.name.clone(), list.good.as_ref()?.feed.clone())));
        abuse.install_threat_lists(ThreatIndex::build(feeds), states);
    } else {
        abuse.update_threat_lists(states);
    }
    changed
}

/// The feed at `source`: an http(s) URL, or a file; refused past `max` bytes.
async fn fetch(client: &reqwest::Client, source: &str, max: u64) -> Result<Vec<u8>, String> {
    let too_big = || format!("the feed is larger than {max} bytes (threats.max_feed_bytes)");
    if source.starts_with("http://") || source.starts_with("https://") {
        let mut res = client.get(source).send().await.map_err(|e| format!("{e}"))?;
        if !res.status().is_success() {
            return Err(format!("the server answered {}", res.status()));
        }
        if res.content_length().is_some_and(|n| n > max) {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = res.chunk().await.map_err(|e| format!("{e}"))? {
            if (body.len() + chunk.len()) as u64 > max {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    } else {
        let meta = tokio::fs::metadata(source)
            .await
            .map_err(|e| format!("{source}: {e}"))?;
        if meta.len() > max {
            return Err(too_big());
        }
        tokio::fs::read(source).await.map_err(|e| format!("{source}: {e}"))
    }
}
