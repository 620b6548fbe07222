//! A control plane's other regions (docs/regions.md): the Redis of each peer region, which
//! its link events reach as this region's do (`FanOutLinkEvents`).

use crate::backends::{redis_ca, redis_cache};
use crate::config::PEER_REGIONS;
use crate::settings::Settings;
use rebound_control_plane::home::{HomeRegion, HomeUnavailable};
use rebound_core::Causes;
use rebound_redis::RedisCache;
use std::sync::Arc;

/// Opens the Redis of every peer region (`peer_regions`, under this region's prefix and
/// certificate authorities), each with its region's name. A wrong URL, refused credentials
/// or an untrusted certificate stop the start naming the setting and the region; an
/// unreachable one does not.
pub async fn open_peers(settings: &Settings) -> anyhow::Result<Vec<(String, Arc<RedisCache>)>> {
    let setting = PEER_REGIONS.var.unwrap_or(PEER_REGIONS.key);
    if settings.peer_regions.is_empty() {
        return Ok(Vec::new());
    }
    let ca = redis_ca(settings)?;
    let mut peers = Vec::new();
    for peer in &settings.peer_regions {
        let region = peer.name.as_str();
        let named = |e| anyhow::Error::new(e).context(format!("{setting}, region {region}"));
        // With `redis_cluster`, the URL is one seed node of that region's cluster.
        let cache = redis_cache(settings, &peer.redis_url, ca.clone()).map_err(named)?;
        match cache.check_settings().await.map_err(named)? {
            None => tracing::info!(region, "connected to a peer region's Redis"),
            Some(why) => {
                tracing::warn!(region, error = %Causes(&why), "a peer region's Redis is not reachable yet; its deletes answer 503 until it is")
            }
        }
        peers.push((peer.name.clone(), Arc::new(cache)));
    }
    Ok(peers)
}

/// The home region's control plane over HTTP(S) (`home_region_url`).
pub struct HttpHome {
    client: reqwest::Client,
    base: url::Url,
}

impl HttpHome {
    /// A client of the control plane at `base`; an answer that takes longer than `limit` (a
    /// delete waits for every region's proxies) counts as none.
    pub fn new(base: &str, limit: std::time::Duration) -> anyhow::Result<HttpHome> {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            // A certificate the system lists but rustls cannot read is skipped, as curl does.
            let _ = roots.add(cert);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(limit)
            .connect_timeout(std::time::Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(HttpHome {
            client,
            base: url::Url::parse(base)?,
        })
    }
}

#[async_trait::async_trait]
impl HomeRegion for HttpHome {
    async fn forward(
        &self,
        request: http::Request<axum::body::Bytes>,
    ) -> Result<http::Response<axum::body::Bytes>, HomeUnavailable> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = self
            .base
            .join(path.trim_start_matches('/'))
            .map_err(|e| HomeUnavailable(format!("{path}: {e}")))?;
        let unavailable = |e: reqwest::Error| HomeUnavailable(Causes(&e).to_string());
        let answer = self
            .client
            .request(parts.method, url)
            .headers(parts.headers)
            .body(body)
            .send()
            .await
            .map_err(unavailable)?;
        let mut response = http::Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            // This hop's framing is its own.
            if !matches!(
                name.as_str(),
                "connection" | "transfer-encoding" | "content-length" | "keep-alive"
            ) {
                response = response.header(name, value);
            }
        }
        let body = answer.bytes().await.map_err(unavailable)?;
        response.body(body).map_err(|e| HomeUnavailable(e.to_string()))
    }
}
