//! What the control plane is configured with: plain data the binary's loader fills in
//! and validates (`src/settings.rs`).

/// Settings of the control plane's API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Largest accepted bulk-import body (up to 1,000 links).
    pub max_import_body_bytes: usize,
    /// Longest accepted target URL.
    pub max_target_bytes: usize,
    /// Whether callers without an API key may create links.
    pub anonymous_create: bool,
    /// Sustained creates per second per creator key.
    pub creator_rate_per_sec: f64,
    /// Burst of creates per creator key.
    pub creator_burst: u32,
    /// Sustained creates per second per anonymous IP.
    pub anonymous_rate_per_sec: f64,
    /// Burst of creates per anonymous IP.
    pub anonymous_burst: u32,
    /// Target domains refused, with their subdomains.
    pub blocked_domains: Vec<String>,
    /// Counter values leased per KGS block.
    pub kgs_block_size: u64,
    /// This region's name, recorded in the store for its slot.
    pub region: String,
    /// This region's slot: its range of counter values for generated codes (0 to 15).
    pub region_slot: u8,
    /// Key of the code permutation; when absent one is generated once and kept in the store.
    pub code_key: Option<[u8; 16]>,
    /// How long an idempotency key's first answer is kept.
    pub idempotency_ttl_secs: u64,
    /// How long a request's body may take to arrive once its head has (the edge's head
    /// timeout, which stops counting when the head is in).
    pub body_timeout: std::time::Duration,
    /// Whether key holders' targets are refused, as anonymous ones always are, when a host
    /// label mixes scripts (UTS 39; look-alike names such as Cyrillic `раураl.com`).
    pub refuse_mixed_script_for_keys: bool,
    /// Schemes of apps a rule may send iOS and Android visitors to (`intent`, `myapp`),
    /// besides http and https (docs/spec.md §14).
    pub app_schemes: Vec<String>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            max_body_bytes: 64 * 1024,
            max_import_body_bytes: 4 * 1024 * 1024,
            max_target_bytes: rebound_core::target::DEFAULT_MAX_TARGET_BYTES,
            anonymous_create: false,
            creator_rate_per_sec: 50.0,
            creator_burst: 200,
            anonymous_rate_per_sec: 1.0,
            anonymous_burst: 10,
            blocked_domains: Vec::new(),
            kgs_block_size: 10_000,
            region: "default".to_owned(),
            region_slot: 0,
            code_key: None,
            idempotency_ttl_secs: 24 * 3600,
            body_timeout: std::time::Duration::from_secs(10),
            refuse_mixed_script_for_keys: false,
            app_schemes: Vec::new(),
        }
    }
}

/// Everything a [`crate::ControlPlane`] needs to know about its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPlaneConfig {
    pub api: ApiSettings,
    /// The base of short URLs, e.g. `https://sho.rt`.
    pub public_base_url: String,
    /// An operator key accepted from start-up.
    pub bootstrap_key: Option<String>,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        ControlPlaneConfig {
            api: ApiSettings::default(),
            public_base_url: "http://127.0.0.1:8080".into(),
            bootstrap_key: None,
        }
    }
}

impl ControlPlaneConfig {
    /// The short URL of `code`.
    pub fn short_url(&self, code: &str) -> String {
        format!("{}/{}", self.public_base_url.trim_end_matches('/'), code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_urls() {
        let mut c = ControlPlaneConfig::default();
        assert_eq!(c.short_url("abc"), "http://127.0.0.1:8080/abc");
        c.public_base_url = "https://sho.rt/".into();
        assert_eq!(c.short_url("abc"), "https://sho.rt/abc");
    }
}
