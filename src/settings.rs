//! Rebound's settings as plain data: addresses, the data directory, the choice of
//! backends, the redirect path, the edge, TLS. `config` reads the file and the variables
//! into [`Settings`] and checks them; each field's meaning, default and range are in its
//! declaration there (`src/config/declared.rs`). The planes receive only their part: the
//! control plane a [`ControlPlaneConfig`], the data plane a [`RedirectSettings`] (the
//! data plane's own `Config`).

pub use rebound_control_plane::config::{ApiSettings, ControlPlaneConfig};
pub use rebound_proxy::config::Config as RedirectSettings;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The upgrade socket's file in the data directory, when `upgrade_sock` is unset.
pub const UPGRADE_SOCK_FILE: &str = "rebound-upgrade.sock";

/// Which backend keeps links, rollups, counters, keys and the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// One SQLite file under the data directory.
    Sqlite,
    /// DynamoDB (or any DynamoDB-API endpoint), tables named with the prefix.
    DynamoDb { table_prefix: String },
}

/// The `store` setting: which backend; [`StoreChoice`] is it with its own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    DynamoDb,
}

/// The `queue` setting: where clicks go; [`QueueChoice`] is it with its own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Embedded,
    Sqs,
}

/// Where clicks go between the data plane and the rollups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueChoice {
    /// An in-process bounded channel (all-in-one only).
    Embedded,
    /// An SQS queue (with its dead-letter queue `<name>-dlq`).
    Sqs { queue_name: String },
}

/// The defences of the listening ports (docs/spec.md §3a), in milliseconds and counts; each
/// refusal is counted by reason. The defaults are `rebound_edge::EdgeLimits`'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    pub head_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub write_timeout_ms: u64,
    /// Open connections on each redirect listener (cleartext, TLS).
    pub max_connections: usize,
    pub api_max_connections: usize,
    pub metrics_max_connections: usize,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub h2_max_concurrent_streams: u32,
    pub h2c: bool,
    /// The ports whose connections start with a PROXY header (docs/spec.md §13).
    pub proxy_protocol: Vec<ProxiedPort>,
    /// The networks whose proxies are believed about the client: a PROXY header is read
    /// from them only, and the forwarding headers of their requests are read.
    pub trusted_networks: rebound_core::client::TrustedNetworks,
}

/// A port that may read the PROXY protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxiedPort {
    /// The cleartext redirect port.
    Redirect,
    /// The TLS redirect port (the header before the ClientHello).
    RedirectTls,
    /// The control-plane API port.
    Api,
}

impl EdgeSettings {
    /// Whether `port`'s connections start with a PROXY header.
    pub fn reads_proxy_protocol(&self, port: ProxiedPort) -> bool {
        self.proxy_protocol.contains(&port)
    }
}

/// Another region of the fleet, as a control plane reaches it (docs/regions.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRegion {
    pub name: String,
    /// Its Redis (with `redis_cluster`, one seed node of its cluster).
    pub redis_url: String,
}

/// The home region's replica of the DynamoDB tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeStore {
    /// Its AWS region.
    pub region: String,
    /// Its endpoint, for a DynamoDB-compatible server; none: the SDK's for the region.
    pub endpoint: Option<String>,
}

/// The TLS listener of the redirect port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub addr: SocketAddr,
    /// The port's own certificate, if any (with ACME on, the names of `acme.domains` are
    /// answered with theirs, and every other name with this one).
    pub files: Option<TlsFiles>,
}

/// A certificate chain and its key, in PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain (leaf first).
    pub cert: PathBuf,
    /// PEM private key (ECDSA, RSA or Ed25519; PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Certificates the fleet orders and renews itself over ACME (RFC 8555) for the TLS port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The ACME server's directory (`https://acme-v02.api.letsencrypt.org/directory`).
    pub directory_url: String,
    /// The names to order certificates for (never any other).
    pub domains: Vec<String>,
    /// The account's contact (`mailto:…`), if any.
    pub contact: Option<String>,
    /// PEM roots to trust for the ACME server; none: the system's.
    pub ca: Option<PathBuf>,
    /// The challenge answered first.
    pub challenge: rebound_acme::ChallengeKind,
}

/// Threat lists: the control plane's loader owns their settings.
pub use rebound_control_plane::threat_loader::{ThreatListSource, ThreatSettings};

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
    /// Redis for L2, invalidation and the creation feed; none means L1 only.
    pub redis_url: Option<String>,
    /// Every other region and its Redis, for a control plane (docs/regions.md).
    pub peer_regions: Vec<PeerRegion>,
    /// The home region's control plane, which unique writes are forwarded to; none: this
    /// region is the home region.
    pub home_region_url: Option<String>,
    /// The home region's replica of the store, read before a 404 by a proxy; none: misses
    /// are answered from the local replica.
    pub home_store: Option<HomeStore>,
    /// The certificate authorities of Redis's certificate; none: the system's.
    pub redis_ca: Option<PathBuf>,
    /// `redis_url` lists the seed nodes of a Redis Cluster.
    pub redis_cluster: bool,
    pub redis_prefix: String,
    pub sqs_visibility_secs: u32,
    pub queue: QueueChoice,
    pub api: ApiSettings,
    pub redirect: RedirectSettings,
    pub edge: EdgeSettings,
    /// The TLS listener of the redirect port; none means cleartext only.
    pub tls: Option<TlsSettings>,
    /// ACME for the TLS port's certificates, if on.
    pub acme: Option<AcmeSettings>,
    /// None: [`UPGRADE_SOCK_FILE`] in the data directory.
    pub upgrade_sock: Option<PathBuf>,
    pub threats: ThreatSettings,
    /// Each click as an event to a Kinesis data stream (docs/analytics.md); none: off.
    pub click_stream: Option<ClickStreamSettings>,
}

/// The click stream: each click, a person's or a bot's, as an event to a Kinesis data
/// stream, at most once. Where AWS is comes from the standard AWS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickStreamSettings {
    /// The Kinesis data stream's name.
    pub stream: String,
    /// Events held between the redirect path and the put (more are dropped and counted).
    pub queue_capacity: usize,
    /// The longest an event waits for a batch of 500 to fill before it is put anyway.
    pub linger: std::time::Duration,
}

impl Settings {
    /// The upgrade socket in force.
    pub fn upgrade_sock_path(&self) -> PathBuf {
        self.upgrade_sock
            .clone()
            .unwrap_or_else(|| self.data_dir.join(UPGRADE_SOCK_FILE))
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
