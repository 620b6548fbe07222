//! Rebound's settings as plain data, validated: addresses, the data directory, the choice
//! of backends, the redirect path, the edge, TLS. `config` reads the file format and the
//! environment into [`Settings`]; the planes receive only their part (the control plane a
//! [`ControlPlaneConfig`], the data plane what `data_plane` passes on).

pub use rebound_control_plane::config::{ApiSettings, ControlPlaneConfig};
use rebound_core::target::{HostIdentity, TargetError, TargetPolicy};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Which backend keeps links, rollups, counters, keys and the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// One SQLite file under the data directory.
    Sqlite,
    /// DynamoDB (or any DynamoDB-API endpoint), tables named with the prefix.
    DynamoDb { table_prefix: String },
}

/// Where clicks go between the data plane and the rollups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChoice {
    /// An in-process bounded channel (all-in-one only).
    Embedded,
    /// An SQS queue (with its dead-letter queue `<name>-dlq`).
    Sqs { queue_name: String },
}

/// Settings of the redirect path.
#[derive(Debug, Clone, PartialEq)]
pub struct RedirectSettings {
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
    /// SIGKILL can lose. `None`: 60 s in the all-in-one (its stats add what is pending),
    /// 20 s for `rebound proxy` (its stats are only as fresh as this).
    pub click_max_hold_ms: Option<u64>,
    /// Worker threads of the redirect server; 0 means one per core.
    pub threads: usize,
    /// Where a 404 redirects (a URL a link could point to); none: the built-in page.
    pub not_found_url: Option<String>,
    /// Where a 410 (expired link) redirects; none: the built-in page.
    pub expired_url: Option<String>,
    /// Where `GET /` redirects; none: the 404 answer.
    pub root_url: Option<String>,
}

impl RedirectSettings {
    /// The longest a click waits in memory: `click_max_hold_ms`, or the mode's default.
    pub fn click_max_hold(&self, distributed: bool) -> std::time::Duration {
        let default = if distributed { 20_000 } else { 60_000 };
        std::time::Duration::from_millis(self.click_max_hold_ms.unwrap_or(default))
    }

    /// The lifetimes of cached records.
    pub fn cache_policy(&self) -> rebound_core::cache::CachePolicy {
        rebound_core::cache::CachePolicy {
            fresh_millis: self.cache_fresh_ms as i64,
            stale_grace_millis: self.stale_grace_ms as i64,
            ..rebound_core::cache::CachePolicy::default()
        }
    }
}

impl Default for RedirectSettings {
    fn default() -> Self {
        RedirectSettings {
            cache_max_age_secs: 5,
            l1_capacity: 1_200_000,
            invalidation_timeout_ms: 2_000,
            l1_ttl_ms: 1_000,
            l2_budget_ms: 150,
            store_budget_ms: 1_000,
            cache_fresh_ms: 24 * 3_600_000,
            stale_grace_ms: 15 * 60_000,
            click_queue_capacity: 65_536,
            click_flush_ms: 1_000,
            click_rows_per_sec: 500,
            click_write_share: 0.01,
            click_max_hold_ms: None,
            threads: 0,
            not_found_url: None,
            expired_url: None,
            root_url: None,
        }
    }
}

/// The defences of the listening ports (SPEC §3a). Each refusal is counted by reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    /// A request head (and a TLS handshake) must arrive within this, from its first byte.
    pub head_timeout_ms: u64,
    /// A keep-alive connection with no request in progress is closed after this.
    pub idle_timeout_ms: u64,
    /// A client that stops reading is cut off once a write has waited this long.
    pub write_timeout_ms: u64,
    /// Open connections on each redirect listener (cleartext, TLS); more are closed at once.
    pub max_connections: usize,
    /// Open connections on the API port.
    pub api_max_connections: usize,
    /// Open connections on the metrics port.
    pub metrics_max_connections: usize,
    /// Largest request head in bytes (431 beyond).
    pub max_head_bytes: usize,
    /// Most header fields in a request (431 beyond).
    pub max_headers: usize,
    /// Concurrent HTTP/2 streams per connection.
    pub h2_max_concurrent_streams: u32,
    /// Whether the cleartext redirect port accepts HTTP/2 with prior knowledge.
    pub h2c: bool,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        EdgeSettings {
            head_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            write_timeout_ms: 10_000,
            max_connections: 8_192,
            api_max_connections: 1_024,
            metrics_max_connections: 64,
            max_head_bytes: 8 * 1024,
            max_headers: 100,
            h2_max_concurrent_streams: 128,
            h2c: true,
        }
    }
}

/// The TLS listener of the redirect port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub addr: SocketAddr,
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key (ECDSA, RSA or Ed25519; PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Everything Rebound is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub redirect_addr: SocketAddr,
    pub api_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The base of short URLs, e.g. `https://sho.rt`.
    pub public_base_url: String,
    /// An operator key accepted from start-up.
    pub bootstrap_key: Option<String>,
    pub store: StoreChoice,
    /// Redis for L2, invalidation and the creation feed; none means L1 only. `rediss://`
    /// for TLS; a password or an ACL user and password in the URL
    /// (`redis://:password@host/`, `rediss://user:password@host/`).
    pub redis_url: Option<String>,
    /// PEM file of the certificate authorities that sign Redis's certificate (for
    /// `rediss://`); none means the system's trust store.
    pub redis_ca: Option<PathBuf>,
    /// Prefix of every Redis key and channel.
    pub redis_prefix: String,
    /// How long a received click message stays hidden before it is delivered again.
    pub sqs_visibility_secs: u32,
    pub queue: QueueChoice,
    pub api: ApiSettings,
    pub redirect: RedirectSettings,
    pub edge: EdgeSettings,
    /// The TLS listener of the redirect port; none means cleartext only.
    pub tls: Option<TlsSettings>,
    /// The socket over which a new process takes the redirect listeners over from the
    /// running one; none means `rebound-upgrade.sock` in the data directory.
    pub upgrade_sock: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            redirect_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            api_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 9090)),
            data_dir: PathBuf::from("./data"),
            public_base_url: "http://127.0.0.1:8080".into(),
            bootstrap_key: None,
            store: StoreChoice::Sqlite,
            redis_url: None,
            redis_ca: None,
            redis_prefix: "rebound:".into(),
            sqs_visibility_secs: 30,
            queue: QueueChoice::Embedded,
            api: ApiSettings::default(),
            redirect: RedirectSettings::default(),
            edge: EdgeSettings::default(),
            tls: None,
            upgrade_sock: None,
        }
    }
}

/// A setting that is out of range, named as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {problem}")]
pub struct SettingError {
    pub setting: String,
    pub problem: String,
}

fn bad(setting: &str, problem: impl Into<String>) -> SettingError {
    SettingError {
        setting: setting.into(),
        problem: problem.into(),
    }
}

const PUBLIC_BASE_URL: &str = "public_base_url (REBOUND_PUBLIC_BASE_URL)";
const NOT_FOUND_URL: &str = "redirect.not_found_url (REBOUND_NOT_FOUND_URL)";
const EXPIRED_URL: &str = "redirect.expired_url (REBOUND_EXPIRED_URL)";
const ROOT_URL: &str = "redirect.root_url (REBOUND_ROOT_URL)";

/// `url` (as written, before any parser strips a control character) held to the rule for
/// a link's target, its normalised form returned.
fn as_target(setting: &str, url: &str, rule: &TargetPolicy) -> Result<String, SettingError> {
    rule.validate(url).map_err(|e| {
        bad(
            setting,
            format!("{url:?} is refused by the rule for a link's target: {e}"),
        )
    })
}

impl Settings {
    /// Checks ranges and relations between settings.
    pub fn validate(&self) -> Result<(), SettingError> {
        // The base starts every short URL: a URL a link could point to, less query and fragment.
        let base = as_target(PUBLIC_BASE_URL, &self.public_base_url, &TargetPolicy::default())?;
        let base = url::Url::parse(&base).map_err(|e| bad(PUBLIC_BASE_URL, format!("not a URL: {e}")))?;
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad(PUBLIC_BASE_URL, "must not have a query or fragment"));
        }
        for entry in self
            .api
            .blocked_domains
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
        {
            if let Err(e) = HostIdentity::parse(entry) {
                let why = match e {
                    TargetError::EmptyLabel => "has an empty label",
                    _ => "is not a host name, an IPv4 address or an IPv6 address in brackets",
                };
                return Err(bad(
                    "api.blocked_domains (REBOUND_BLOCKED_DOMAINS)",
                    format!("{entry:?} {why}"),
                ));
            }
        }
        // Sent to visitors as a `Location`: on this service's own host it would loop.
        let rule = self.target_policy()?;
        let r = &self.redirect;
        for (name, url) in [
            (NOT_FOUND_URL, &r.not_found_url),
            (EXPIRED_URL, &r.expired_url),
            (ROOT_URL, &r.root_url),
        ] {
            if let Some(url) = url {
                as_target(name, url, &rule)?;
            }
        }
        if let Some(k) = &self.bootstrap_key {
            if k.len() < 16 || !k.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(bad(
                    "bootstrap_key (REBOUND_BOOTSTRAP_KEY)",
                    "must be at least 16 visible ASCII characters",
                ));
            }
        }
        let a = &self.api;
        if !(1024..=16 * 1024 * 1024).contains(&a.max_body_bytes) {
            return Err(bad("api.max_body_bytes", "must be between 1024 and 16777216"));
        }
        if !(1024..=64 * 1024 * 1024).contains(&a.max_import_body_bytes) {
            return Err(bad("api.max_import_body_bytes", "must be between 1024 and 67108864"));
        }
        if !(32..=65_536).contains(&a.max_target_bytes) {
            return Err(bad("api.max_target_bytes", "must be between 32 and 65536"));
        }
        for (name, rate) in [
            ("api.creator_rate_per_sec", a.creator_rate_per_sec),
            ("api.anonymous_rate_per_sec", a.anonymous_rate_per_sec),
        ] {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(bad(name, "must be a positive number"));
            }
        }
        if a.creator_burst == 0 || a.anonymous_burst == 0 {
            return Err(bad("api.creator_burst / api.anonymous_burst", "must be at least 1"));
        }
        if !(1..=10_000_000).contains(&a.kgs_block_size) {
            return Err(bad("api.kgs_block_size", "must be between 1 and 10000000"));
        }
        if a.idempotency_ttl_secs == 0 {
            return Err(bad("api.idempotency_ttl_secs", "must be positive"));
        }
        let r = &self.redirect;
        // The redirect service prebuilds one Cache-Control value per second up to it.
        if r.cache_max_age_secs > 86_400 {
            return Err(bad("redirect.cache_max_age_secs", "must be at most 86400 (a day)"));
        }
        if r.l1_capacity == 0 {
            return Err(bad("redirect.l1_capacity", "must be positive"));
        }
        if !(1..=24 * 3_600_000).contains(&r.cache_fresh_ms) {
            return Err(bad("redirect.cache_fresh_ms", "must be between 1 and 86400000 (24 h)"));
        }
        if !(r.click_write_share > 0.0 && r.click_write_share <= 1.0) {
            return Err(bad(
                "redirect.click_write_share (REBOUND_CLICK_WRITE_SHARE)",
                "must be a fraction above 0 and at most 1",
            ));
        }
        if r.click_queue_capacity == 0 {
            return Err(bad("redirect.click_queue_capacity", "must be positive"));
        }
        for (name, v) in [
            ("redirect.invalidation_timeout_ms", r.invalidation_timeout_ms),
            ("redirect.l1_ttl_ms", r.l1_ttl_ms),
            ("redirect.l2_budget_ms", r.l2_budget_ms),
            ("redirect.store_budget_ms", r.store_budget_ms),
            ("redirect.click_flush_ms", r.click_flush_ms),
            ("redirect.click_rows_per_sec", r.click_rows_per_sec),
            ("redirect.click_max_hold_ms", r.click_max_hold_ms.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(bad(name, "must be positive"));
            }
        }
        if let StoreChoice::DynamoDb { table_prefix } = &self.store {
            if !table_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
            {
                return Err(bad(
                    "table_prefix (REBOUND_TABLE_PREFIX)",
                    "may contain only letters, digits, '_', '-' and '.'",
                ));
            }
        }
        if self.redis_prefix.is_empty()
            || self.redis_prefix.len() > 64
            || !self.redis_prefix.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(bad(
                "redis_prefix (REBOUND_REDIS_PREFIX)",
                "must be 1-64 visible ASCII characters",
            ));
        }
        if !(1..=43_200).contains(&self.sqs_visibility_secs) {
            return Err(bad(
                "sqs_visibility_secs (REBOUND_SQS_VISIBILITY_SECS)",
                "must be between 1 and 43200",
            ));
        }
        if let QueueChoice::Sqs { queue_name } = &self.queue {
            if queue_name.is_empty()
                || queue_name.len() > 76
                || !queue_name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
            {
                return Err(bad(
                    "sqs_queue (REBOUND_SQS_QUEUE)",
                    "must be 1-76 letters, digits, '_' or '-'",
                ));
            }
        }
        let e = &self.edge;
        for (name, v) in [
            ("edge.head_timeout_ms (REBOUND_HEAD_TIMEOUT_MS)", e.head_timeout_ms),
            ("edge.idle_timeout_ms (REBOUND_IDLE_TIMEOUT_MS)", e.idle_timeout_ms),
            ("edge.write_timeout_ms (REBOUND_WRITE_TIMEOUT_MS)", e.write_timeout_ms),
        ] {
            if !(1..=3_600_000).contains(&v) {
                return Err(bad(name, "must be between 1 and 3600000 (an hour)"));
            }
        }
        for (name, v) in [
            ("edge.max_connections (REBOUND_MAX_CONNECTIONS)", e.max_connections),
            (
                "edge.api_max_connections (REBOUND_API_MAX_CONNECTIONS)",
                e.api_max_connections,
            ),
            (
                "edge.metrics_max_connections (REBOUND_METRICS_MAX_CONNECTIONS)",
                e.metrics_max_connections,
            ),
        ] {
            if !(1..=10_000_000).contains(&v) {
                return Err(bad(name, "must be between 1 and 10000000"));
            }
        }
        if !(1024..=65_536).contains(&e.max_head_bytes) {
            return Err(bad(
                "edge.max_head_bytes (REBOUND_MAX_HEAD_BYTES)",
                "must be between 1024 and 65536",
            ));
        }
        if !(8..=1000).contains(&e.max_headers) {
            return Err(bad(
                "edge.max_headers (REBOUND_MAX_HEADERS)",
                "must be between 8 and 1000",
            ));
        }
        if !(1..=10_000).contains(&e.h2_max_concurrent_streams) {
            return Err(bad(
                "edge.h2_max_concurrent_streams (REBOUND_H2_MAX_STREAMS)",
                "must be between 1 and 10000",
            ));
        }
        if let Some(t) = &self.tls {
            if t.addr == self.redirect_addr && t.addr.port() != 0 {
                return Err(bad(
                    "tls_addr (REBOUND_TLS_ADDR)",
                    "must differ from redirect_addr (REBOUND_REDIRECT_ADDR)",
                ));
            }
        }
        Ok(())
    }

    /// The rule a link's target follows here (a keyed caller's): not on the host and port
    /// of `public_base_url`, not on a blocked host.
    pub fn target_policy(&self) -> Result<TargetPolicy, SettingError> {
        let rule = TargetPolicy {
            max_bytes: self.api.max_target_bytes,
            refuse_mixed_script: self.api.refuse_mixed_script_for_keys,
            ..TargetPolicy::default()
        };
        Ok(rule
            .with_public_base(&self.public_base_url)
            .map_err(|e| bad(PUBLIC_BASE_URL, e.to_string()))?
            .with_blocklist(&self.api.blocked_domains))
    }

    /// Puts the visitor redirects in the form a link's target is stored in (punycode host,
    /// percent-encoded path), ready to be a `Location`.
    pub fn normalise_dead_end_urls(&mut self) -> Result<(), SettingError> {
        let rule = self.target_policy()?;
        let r = &mut self.redirect;
        for (name, url) in [
            (NOT_FOUND_URL, &mut r.not_found_url),
            (EXPIRED_URL, &mut r.expired_url),
            (ROOT_URL, &mut r.root_url),
        ] {
            if let Some(url) = url {
                *url = as_target(name, url, &rule)?;
            }
        }
        Ok(())
    }

    /// The upgrade socket in force.
    pub fn upgrade_sock_path(&self) -> PathBuf {
        self.upgrade_sock
            .clone()
            .unwrap_or_else(|| self.data_dir.join("rebound-upgrade.sock"))
    }

    /// The control plane's part.
    pub fn control_plane(&self) -> ControlPlaneConfig {
        ControlPlaneConfig {
            api: self.api.clone(),
            public_base_url: self.public_base_url.clone(),
            bootstrap_key: self.bootstrap_key.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
    }

    #[test]
    fn invalid_settings_name_the_setting() {
        type Change = Box<dyn Fn(&mut Settings)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|s| s.public_base_url = "nope".into()), "public_base_url"),
            (
                Box::new(|s| s.public_base_url = "ftp://x.example".into()),
                "public_base_url",
            ),
            (
                Box::new(|s| s.public_base_url = "https://x.example/?a".into()),
                "public_base_url",
            ),
            (Box::new(|s| s.bootstrap_key = Some("short".into())), "bootstrap_key"),
            (Box::new(|s| s.api.max_body_bytes = 10), "api.max_body_bytes"),
            (
                Box::new(|s| s.api.creator_rate_per_sec = -1.0),
                "api.creator_rate_per_sec",
            ),
            (
                Box::new(|s| s.api.anonymous_rate_per_sec = f64::NAN),
                "api.anonymous_rate_per_sec",
            ),
            (Box::new(|s| s.api.kgs_block_size = 0), "api.kgs_block_size"),
            (Box::new(|s| s.redirect.l1_capacity = 0), "redirect.l1_capacity"),
            (
                Box::new(|s| s.redirect.cache_max_age_secs = 86_401),
                "redirect.cache_max_age_secs",
            ),
            (Box::new(|s| s.redirect.l1_ttl_ms = 0), "redirect.l1_ttl_ms"),
            (
                Box::new(|s| s.redirect.click_rows_per_sec = 0),
                "redirect.click_rows_per_sec",
            ),
            (
                Box::new(|s| s.redirect.click_write_share = 0.0),
                "redirect.click_write_share",
            ),
            (
                Box::new(|s| s.redirect.click_write_share = 1.5),
                "redirect.click_write_share",
            ),
            (
                Box::new(|s| s.redirect.click_write_share = f64::NAN),
                "redirect.click_write_share",
            ),
            (
                Box::new(|s| s.redirect.click_max_hold_ms = Some(0)),
                "redirect.click_max_hold_ms",
            ),
            (Box::new(|s| s.edge.head_timeout_ms = 0), "edge.head_timeout_ms"),
            (Box::new(|s| s.edge.max_connections = 0), "edge.max_connections"),
            (Box::new(|s| s.edge.max_head_bytes = 100), "edge.max_head_bytes"),
            (Box::new(|s| s.edge.max_headers = 2), "edge.max_headers"),
            (
                Box::new(|s| {
                    s.tls = Some(TlsSettings {
                        addr: s.redirect_addr,
                        cert: "c.pem".into(),
                        key: "k.pem".into(),
                    })
                }),
                "tls_addr",
            ),
            (
                Box::new(|s| {
                    s.store = StoreChoice::DynamoDb {
                        table_prefix: "bad prefix".into(),
                    }
                }),
                "table_prefix",
            ),
            (
                Box::new(|s| {
                    s.queue = QueueChoice::Sqs {
                        queue_name: String::new(),
                    }
                }),
                "sqs_queue",
            ),
        ];
        for (change, name) in cases {
            let mut s = Settings::default();
            change(&mut s);
            let err = s.validate().unwrap_err();
            assert!(err.setting.starts_with(name), "{err} should name {name}");
        }
    }

    #[test]
    fn the_control_plane_gets_its_part() {
        let s = Settings {
            public_base_url: "https://sho.rt".into(),
            bootstrap_key: Some("a-key-of-sixteen-chars".into()),
            ..Settings::default()
        };
        let c = s.control_plane();
        assert_eq!(c.short_url("abc"), "https://sho.rt/abc");
        assert_eq!(c.bootstrap_key, s.bootstrap_key);
        assert_eq!(c.api, s.api);
    }
}
