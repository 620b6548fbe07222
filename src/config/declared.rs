//! Every setting, declared once: file key, variable, default, check and doc. [`read`]
//! puts each in its place in [`Settings`], in the order docs/configuration.md lists them.
//! A default owned by another crate is referred to, never repeated: the edge's is
//! `EdgeLimits::default()`, the data plane's `rebound_proxy::config::Config::default()`,
//! the control plane's `ApiSettings::default()` and `ControlPlaneConfig::default()`.

use super::setting::{choices, Check, Choice, Setting};
use super::{ConfigError, Source};
use crate::settings::{
    AcmeSettings, ApiSettings, ClickStreamSettings, ControlPlaneConfig, EdgeSettings, HomeStore, PeerRegion,
    ProxiedPort, QueueChoice, QueueKind, RedirectSettings, Settings, StoreChoice, StoreKind, ThreatListSource,
    ThreatSettings, TlsFiles, TlsSettings, UPGRADE_SOCK_FILE,
};
use rebound_acme::ChallengeKind;
use rebound_edge::EdgeLimits;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use Check::*;

// The settings that choose, each word once.
impl Choice for StoreKind {
    const OPTIONS: &'static [(&'static str, Self)] =
        &[("sqlite", StoreKind::Sqlite), ("dynamodb", StoreKind::DynamoDb)];
}
impl Choice for QueueKind {
    const OPTIONS: &'static [(&'static str, Self)] = &[("embedded", QueueKind::Embedded), ("sqs", QueueKind::Sqs)];
}
impl Choice for ChallengeKind {
    const OPTIONS: &'static [(&'static str, Self)] = &[
        ("http-01", ChallengeKind::Http01),
        ("tls-alpn-01", ChallengeKind::TlsAlpn01),
    ];
}
/// A word of `redirect.breakdowns`: a dimension, or `none` (a variable cannot be empty:
/// an empty one counts as unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakdownWord {
    On(rebound_store::Dimension),
    None,
}
impl Choice for BreakdownWord {
    const OPTIONS: &'static [(&'static str, Self)] = &{
        use rebound_store::Dimension::*;
        use BreakdownWord::On;
        [
            ("country", On(Country)),
            ("referrer", On(Referrer)),
            ("device", On(Device)),
            ("browser", On(Browser)),
            ("os", On(Os)),
            ("utm_source", On(UtmSource)),
            ("utm_medium", On(UtmMedium)),
            ("utm_campaign", On(UtmCampaign)),
            ("rule", On(Rule)),
            ("none", BreakdownWord::None),
        ]
    };
}

/// The dimensions `words` turn on: `none` alone is none of them.
fn breakdowns(words: Vec<BreakdownWord>) -> Result<Vec<rebound_store::Dimension>, ConfigError> {
    match words.as_slice() {
        [BreakdownWord::None] => Ok(Vec::new()),
        words if words.contains(&BreakdownWord::None) => {
            Err(BREAKDOWNS.refused("`none` stands alone: it is no dimension"))
        }
        words => Ok(words
            .iter()
            .filter_map(|w| match w {
                BreakdownWord::On(d) => Some(*d),
                BreakdownWord::None => None,
            })
            .collect()),
    }
}
impl Choice for rebound_proxy::config::CountryHeader {
    const OPTIONS: &'static [(&'static str, Self)] = &{
        use rebound_proxy::config::CountryHeader::*;
        [("none", None), ("cloudfront", CloudFront), ("cloudflare", Cloudflare)]
    };
}
impl Choice for ProxiedPort {
    const OPTIONS: &'static [(&'static str, Self)] = &[
        ("redirect", ProxiedPort::Redirect),
        ("redirect_tls", ProxiedPort::RedirectTls),
        ("api", ProxiedPort::Api),
    ];
}
choices!(
    StoreKind,
    QueueKind,
    ChallengeKind,
    ProxiedPort,
    BreakdownWord,
    rebound_proxy::config::CountryHeader
);

fn edge() -> EdgeLimits {
    EdgeLimits::default()
}
fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}
fn api() -> ApiSettings {
    ApiSettings::default()
}
fn redirect() -> RedirectSettings {
    RedirectSettings::default()
}
// Whether a name is a DNS name a certificate can be ordered for: the domains' rule.
use rebound_core::domain::is_dns_name;

/// The TLS listener and ACME, each setting read once: `tls_addr` with its certificate
/// files, or alone with `acme.directory_url`. The ACME domains are checked and lower-cased
/// here; none given is the host of `public_base_url`, filled in by [`read`].
fn tls_and_acme(src: &mut impl Source) -> Result<(Option<TlsSettings>, Option<AcmeSettings>), ConfigError> {
    let (addr, cert, key) = (src.get(&TLS_ADDR)?, src.get(&TLS_CERT)?, src.get(&TLS_KEY)?);
    let (directory_url, domains, contact, ca, challenge) = (
        src.get(&ACME_DIRECTORY_URL)?,
        src.get(&ACME_DOMAINS)?,
        src.get(&ACME_CONTACT)?,
        src.get(&ACME_CA)?,
        src.get(&ACME_CHALLENGE)?,
    );
    let tls = match (addr, cert, key) {
        (None, None, None) => None,
        (Some(addr), Some(cert), Some(key)) => Some(TlsSettings {
            addr,
            files: Some(TlsFiles { cert, key }),
        }),
        (Some(addr), None, None) if directory_url.is_some() => Some(TlsSettings { addr, files: None }),
        _ => {
            return Err(ConfigError::Setting {
                setting: [TLS_ADDR.name(), TLS_CERT.name(), TLS_KEY.name()].join(" / "),
                problem: "set all three (address, PEM certificate chain, PEM private key) or none, or the \
                          address alone with acme.directory_url"
                    .into(),
            })
        }
    };
    let Some(directory_url) = directory_url else {
        return Ok((tls, None));
    };
    if tls.is_none() {
        return Err(ACME_DIRECTORY_URL.refused(format!("needs {} (the port the certificates serve)", TLS_ADDR.name())));
    }
    let acme = AcmeSettings {
        directory_url,
        domains: acme_domains(domains)?,
        contact,
        ca,
        challenge,
    };
    Ok((tls, Some(acme)))
}

/// `domains` checked as DNS names, lower-cased, each once.
fn acme_domains(domains: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut checked = Vec::new();
    for domain in domains {
        let domain = domain.trim().to_ascii_lowercase();
        if !is_dns_name(&domain) {
            return Err(ACME_DOMAINS.refused(format!("{domain:?} is not a DNS name a certificate can be ordered for")));
        }
        if !checked.contains(&domain) {
            checked.push(domain);
        }
    }
    Ok(checked)
}

fn threat_lists(entries: Vec<String>) -> Result<Vec<ThreatListSource>, ConfigError> {
    let mut lists: Vec<ThreatListSource> = Vec::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let refused = |why: String| THREAT_LISTS.refused(format!("{entry:?} {why}"));
        let Some((name, rest)) = entry.split_once('=') else {
            return Err(refused("is not `<name>=<format>:<file or URL>`".into()));
        };
        let Some((format, source)) = rest.split_once(':') else {
            return Err(refused("is not `<name>=<format>:<file or URL>`".into()));
        };
        let name = name.trim();
        if !(1..=32).contains(&name.len())
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(refused(
                "needs a name of 1 to 32 lower-case letters, digits or '-'".into(),
            ));
        }
        let Some(format) = rebound_core::threat::FeedFormat::parse(format.trim()) else {
            return Err(refused(
                "names no format: urlhaus, phishtank, openphish or domains".into(),
            ));
        };
        let source = source.trim();
        if source.is_empty() {
            return Err(refused("names no file or URL".into()));
        }
        if source.contains("://") && !(source.starts_with("http://") || source.starts_with("https://")) {
            return Err(refused("is read from a file or an http(s) URL".into()));
        }
        if lists.iter().any(|l| l.name == name) {
            return Err(refused(format!("names the list {name:?} twice")));
        }
        lists.push(ThreatListSource {
            name: name.to_owned(),
            format,
            source: source.to_owned(),
        });
    }
    Ok(lists)
}

fn peer_regions(entries: Vec<String>, here: &str) -> Result<Vec<PeerRegion>, ConfigError> {
    let mut peers: Vec<PeerRegion> = Vec::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let Some((name, redis_url)) = entry.split_once('=') else {
            return Err(PEER_REGIONS.refused(format!("{entry:?} is not `<region>=<redis URL>`")));
        };
        let (name, redis_url) = (name.trim(), redis_url.trim());
        if REGION.verify(&name.to_owned()).is_err() {
            return Err(PEER_REGIONS.refused(format!(
                "{name:?} is not a region name (1 to 32 lower-case letters, digits or '-')"
            )));
        }
        if name == here {
            return Err(PEER_REGIONS.refused(format!(
                "names {name:?}, this region ({}): list the other regions only",
                REGION.name()
            )));
        }
        if peers.iter().any(|p| p.name == name) {
            return Err(PEER_REGIONS.refused(format!("names {name:?} twice")));
        }
        peers.push(PeerRegion {
            name: name.to_owned(),
            redis_url: redis_url.to_owned(),
        });
    }
    Ok(peers)
}
fn visible_ascii(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_graphic())
}

// Top level.

pub const REDIRECT_ADDR: Setting<SocketAddr> = Setting::new("redirect_addr", || ([127, 0, 0, 1], 8080).into())
    .var("REBOUND_REDIRECT_ADDR")
    .doc("the cleartext redirect listener (all-in-one, `rebound proxy`)");
pub const API_ADDR: Setting<SocketAddr> = Setting::new("api_addr", || ([127, 0, 0, 1], 8081).into())
    .var("REBOUND_API_ADDR")
    .doc("the API (all-in-one, `rebound control-plane`)");
pub const METRICS_ADDR: Setting<SocketAddr> = Setting::new("metrics_addr", || ([127, 0, 0, 1], 9090).into())
    .var("REBOUND_METRICS_ADDR")
    .doc("`/metrics`, `/healthz`, `/readyz` (every serving process)");
pub const DATA_DIR: Setting<PathBuf> = Setting::new("data_dir", || "./data".into())
    .var("REBOUND_DATA_DIR")
    .doc(
        "the embedded store's directory: `rebound.db` and `rebound-clicks.db`; also the default place of the \
         upgrade socket. Held by one process at a time (the all-in-one, or `rebound control-plane` on the embedded \
         store): an advisory lock on `rebound.lock` there, which holds the holder's pid. A second start on a \
         directory in use fails at once, naming the directory and that pid; a start with `--upgrade` runs beside \
         the holder it takes over from and holds the directory once that one exits.",
    );
pub const PUBLIC_BASE_URL: Setting<String> =
    Setting::new("public_base_url", || ControlPlaneConfig::default().public_base_url)
        .var("REBOUND_PUBLIC_BASE_URL")
        .check(Elsewhere("an `http` or `https` URL"))
        .doc(
            "the base of every `short_url`; targets on its host and port are refused as loops. Held to the rule for \
             a link's target as written (no user information, no whitespace or control characters: a CR/LF is \
             refused, not stripped), without query or fragment.",
        );
pub const BOOTSTRAP_KEY: Setting<Option<String>> =
    Setting::new("bootstrap_key", || ControlPlaneConfig::default().bootstrap_key)
        .var("REBOUND_BOOTSTRAP_KEY")
        .check(Text("at least 16 visible ASCII characters", |k| {
            k.len() >= 16 && visible_ascii(k)
        }))
        .doc(
            "an operator key accepted from start-up (principal `bootstrap`). Unset: on the first start of a store, \
             an operator key is generated, stored as `initial-operator` and printed once on stdout.",
        );
pub const STORE: Setting<StoreKind> = Setting::new("store", || StoreKind::Sqlite).var("REBOUND_STORE").doc(
    "which backend keeps links, rollups, counters, keys and the audit log. The all-in-one needs `sqlite`, \
         `rebound proxy` needs `dynamodb`.",
);
/// Checked only with `store = "dynamodb"`.
pub const TABLE_PREFIX: Setting<String> = Setting::new("table_prefix", || "rebound_".into())
    .var("REBOUND_TABLE_PREFIX")
    .check(Text("letters, digits, '_', '-' and '.' only", |p| {
        p.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    }))
    .doc("prefix of the DynamoDB table names; used only with `store = \"dynamodb\"`");
pub const REDIS_URL: Setting<Option<String>> = Setting::new("redis_url", || None)
    .var("REBOUND_REDIS_URL")
    .check(Elsewhere("a `redis://` or `rediss://` URL"))
    .doc(
        "Redis for L2, the invalidation channel and the creation feed (`rebound proxy`, `rebound control-plane`; the \
     all-in-one does not use it). Unset: no L2. `rediss://` connects over TLS (rustls); a password or an ACL user \
     goes in the URL: `redis://:password@host:6379/`, `rediss://user:password@host:6379/`. Refused credentials or \
     an untrusted certificate stop the start with an error naming the setting; an unreachable Redis does not (it \
     is connected to when it answers).",
    );
pub const PEER_REGIONS: Setting<Vec<String>> = Setting::new("peer_regions", Vec::new)
    .var("REBOUND_PEER_REGIONS")
    .check(Elsewhere(
        "a list of `<region>=<redis URL>` entries, each region named once and not this one",
    ))
    .doc(
        "for `rebound control-plane` in a fleet of several regions (docs/regions.md): every other region's name \
         and its Redis (`eu-west-1=rediss://redis.eu-west-1.example:6379`), under the same `redis_prefix` and \
         `redis_ca`. A create is written through to each of them and a lease announced on each; a delete or \
         takedown writes its tombstone to each and waits for each region's proxies as for this region's, and \
         answers success only once every region did (else 503, and the reconciler finishes it). With \
         `redis_cluster`, each URL is one seed node of that region's cluster. The variable is comma-separated.",
    );
pub const HOME_REGION_URL: Setting<Option<String>> = Setting::new("home_region_url", || None)
    .var("REBOUND_HOME_REGION_URL")
    .check(Elsewhere("an `http` or `https` URL"))
    .doc(
        "for `rebound control-plane` outside the home region (docs/regions.md): the base URL of the home \
         region's control plane API. The writes that need uniqueness (a create with an alias or an \
         `Idempotency-Key`, an import, a delete, a takedown, a key created or revoked) are forwarded there and \
         its answer returned; a home region out of reach makes them 503 `home_unavailable`. Unset: this region is \
         the home region (or the only one).",
    );
pub const HOME_STORE_REGION: Setting<Option<String>> = Setting::new("home_store_region", || None)
    .var("REBOUND_HOME_STORE_REGION")
    .check(Text("an AWS region name (letters, digits and '-')", |r| {
        (1..=32).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    }))
    .doc(
        "for `rebound proxy` on DynamoDB outside the home region (docs/regions.md): the AWS region of the home \
         region's replica of the tables. A code the local replica does not have (or the issued-code filter has \
         not heard of) is read there, strongly consistent, before the answer is 404, so a link created in another \
         region is served on its first click even while replication lags. Unset: misses are answered from the \
         local replica.",
    );
pub const HOME_STORE_ENDPOINT_URL: Setting<Option<String>> = Setting::new("home_store_endpoint_url", || None)
    .var("REBOUND_HOME_STORE_ENDPOINT_URL")
    .check(Elsewhere("an `http` or `https` URL"))
    .doc(
        "the DynamoDB endpoint of `home_store_region`, for a DynamoDB-compatible server; unset, the SDK's \
         endpoint for that region",
    );
pub const REDIS_CLUSTER: Setting<bool> = Setting::new("redis_cluster", || false)
    .var("REBOUND_REDIS_CLUSTER")
    .doc(
        "`redis_url` is a Redis Cluster (ElastiCache with cluster mode enabled, or `redis-server --cluster-enabled \
     yes`): a comma-separated list of seed nodes' URLs, all `redis://` or all `rediss://` with the same \
     credentials (`redis://a:6379/,redis://b:6379/`); the other nodes are learnt from them. Keys carry hash tags \
     and the channels are shard channels (`SPUBLISH`, Redis 7): see docs/redis-cluster.md. Every process of a \
     deployment must agree. The prefix must not contain `{` or `}`.",
    );
pub const REDIS_CA: Setting<Option<PathBuf>> = Setting::new("redis_ca", || None).var("REBOUND_REDIS_CA").doc(
    "PEM file of the certificate authorities that sign Redis's TLS certificate (only with `rediss://`); unset: the \
     system's trust store",
);
pub const REDIS_PREFIX: Setting<String> = Setting::new("redis_prefix", || "rebound:".into())
    .var("REBOUND_REDIS_PREFIX")
    .check(Text("1 to 64 visible ASCII characters", |p| {
        (1..=64).contains(&p.len()) && visible_ascii(p)
    }))
    .doc("prefix of every Redis key and channel");
pub const QUEUE: Setting<QueueKind> = Setting::new("queue", || QueueKind::Embedded).var("REBOUND_QUEUE").doc(
    "where `rebound proxy` sends clicks, and whether `rebound control-plane` runs the click consumer. The \
         all-in-one always writes its own rollups.",
);
/// Checked only with `queue = "sqs"`.
pub const SQS_QUEUE: Setting<String> = Setting::new("sqs_queue", || "rebound-clicks".into())
    .var("REBOUND_SQS_QUEUE")
    .check(Text("1 to 76 letters, digits, '_' or '-'", |q| {
        (1..=76).contains(&q.len()) && q.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
    }))
    .doc("the SQS queue; its dead-letter queue is `<name>-dlq`; used only with `queue = \"sqs\"`");
pub const SQS_VISIBILITY_SECS: Setting<u32> = Setting::new("sqs_visibility_secs", || 30)
    .var("REBOUND_SQS_VISIBILITY_SECS")
    .check(Between(1, 43_200))
    .doc(
        "seconds a received click message stays hidden before it is delivered again; set on the queue by \
         `rebound provision` and used by the consumer",
    );
pub const TLS_ADDR: Setting<Option<SocketAddr>> = Setting::new("tls_addr", || None).var("REBOUND_TLS_ADDR").doc(
    "the TLS redirect listener; must differ from `redirect_addr`. Set all three TLS settings or none, or \
         `tls_addr` alone with `acme.directory_url` (then only the names of `acme.domains` are served, once \
         their certificates are issued).",
);
pub const TLS_CERT: Setting<Option<PathBuf>> = Setting::new("tls_cert", || None)
    .var("REBOUND_TLS_CERT")
    .doc("PEM certificate chain, leaf first; reloaded on `SIGHUP` or when the file changes");
pub const TLS_KEY: Setting<Option<PathBuf>> = Setting::new("tls_key", || None)
    .var("REBOUND_TLS_KEY")
    .doc("PEM private key (ECDSA, RSA or Ed25519; PKCS#8, PKCS#1 or SEC1)");
pub const ACME_DIRECTORY_URL: Setting<Option<String>> = Setting::new("acme.directory_url", || None)
    .var("REBOUND_ACME_DIRECTORY_URL")
    .check(Text("an `https` URL", |u| {
        url::Url::parse(u).is_ok_and(|u| u.scheme() == "https" && u.host().is_some())
    }))
    .doc(
        "the directory of an ACME server (RFC 8555; Let's Encrypt's is \
         `https://acme-v02.api.letsencrypt.org/directory`, its staging one \
         `https://acme-staging-v02.api.letsencrypt.org/directory`): the TLS port's certificates for \
         `acme.domains` are then ordered and renewed (once a third of a certificate's lifetime is left: 30 days before a 90-day one \
         expires; within the CA's suggested window when it offers ACME Renewal Information, RFC 9773) by the \
         processes serving it, one at \
         a time through a lease in the store, kept in the store for every process, and served by SNI. Needs \
         `tls_addr`, and the domains' DNS pointing at the redirect port (HTTP-01, port 80) or the TLS port \
         (TLS-ALPN-01, port 443). Unset: certificates come from `tls_cert` and `tls_key` only",
    );
pub const ACME_DOMAINS: Setting<Vec<String>> = Setting::new("acme.domains", Vec::new)
    .var("REBOUND_ACME_DOMAINS")
    .shown(|| "the host of `public_base_url`".to_owned())
    .check(Elsewhere("DNS names: letters, digits and '-' in dot-separated labels"))
    .doc(
        "the names certificates are ordered for; no other name is ever ordered (no certificate on demand for a \
         name a client asks for). The variable is comma-separated",
    );
pub const ACME_CONTACT: Setting<Option<String>> = Setting::new("acme.contact", || None)
    .var("REBOUND_ACME_CONTACT")
    .check(Text("a `mailto:` URL", |c| c.starts_with("mailto:") && c.len() > 7))
    .doc("the ACME account's contact, where the CA writes about expiring certificates (`mailto:ops@example.com`)");
pub const ACME_CA: Setting<Option<PathBuf>> = Setting::new("acme.ca", || None)
    .var("REBOUND_ACME_CA")
    .doc("PEM roots to trust for the ACME server's HTTPS (a private CA, or pebble in tests). Unset: the system's");
pub const ACME_CHALLENGE: Setting<ChallengeKind> = Setting::new("acme.challenge", || ChallengeKind::Http01)
    .var("REBOUND_ACME_CHALLENGE")
    .doc(
        "the challenge answered first: `http-01` (on the redirect port, which must be the domain's port 80) or \
         `tls-alpn-01` (on the TLS port, its port 443); the other one when the server does not offer it",
    );
pub const UPGRADE_SOCK: Setting<Option<PathBuf>> = Setting::new("upgrade_sock", || None)
    .var("REBOUND_UPGRADE_SOCK")
    .shown(|| format!("`{UPGRADE_SOCK_FILE}` in `data_dir`"))
    .doc("the Unix socket over which `--upgrade` takes the redirect listeners over");

// [edge]: the defences of every port.

pub const HEAD_TIMEOUT_MS: Setting<u64> = Setting::new("edge.head_timeout_ms", || ms(edge().head_timeout))
    .var("REBOUND_HEAD_TIMEOUT_MS")
    .check(Between(1, 3_600_000))
    .doc(
        "a request head (and a TLS handshake) must arrive within this, from its first byte; then an API \
         request's body within as long again",
    );
pub const IDLE_TIMEOUT_MS: Setting<u64> = Setting::new("edge.idle_timeout_ms", || ms(edge().idle_timeout))
    .var("REBOUND_IDLE_TIMEOUT_MS")
    .check(Between(1, 3_600_000))
    .doc("a keep-alive connection with no request in progress is closed after this");
pub const WRITE_TIMEOUT_MS: Setting<u64> = Setting::new("edge.write_timeout_ms", || ms(edge().write_timeout))
    .var("REBOUND_WRITE_TIMEOUT_MS")
    .check(Between(1, 3_600_000))
    .doc("a client that stops reading is cut off once a write has waited this long");
pub const MAX_CONNECTIONS: Setting<usize> = Setting::new("edge.max_connections", || edge().max_connections)
    .var("REBOUND_MAX_CONNECTIONS")
    .check(Between(1, 10_000_000))
    .doc("open connections per redirect listener; one more is closed at once");
pub const API_MAX_CONNECTIONS: Setting<usize> = Setting::new("edge.api_max_connections", || 1_024)
    .var("REBOUND_API_MAX_CONNECTIONS")
    .check(Between(1, 10_000_000))
    .doc("open connections on the API port");
pub const METRICS_MAX_CONNECTIONS: Setting<usize> = Setting::new("edge.metrics_max_connections", || 64)
    .var("REBOUND_METRICS_MAX_CONNECTIONS")
    .check(Between(1, 10_000_000))
    .doc("open connections on the metrics port");
pub const MAX_HEAD_BYTES: Setting<usize> = Setting::new("edge.max_head_bytes", || edge().max_head_bytes)
    .var("REBOUND_MAX_HEAD_BYTES")
    .check(Between(1024, 65_536))
    .doc("largest request head, 431 beyond; also what one HTTP/1 connection buffers");
pub const MAX_HEADERS: Setting<usize> = Setting::new("edge.max_headers", || edge().max_headers)
    .var("REBOUND_MAX_HEADERS")
    .check(Between(8, 1000))
    .doc("most header fields in a request, 431 beyond");
pub const H2_MAX_STREAMS: Setting<u32> =
    Setting::new("edge.h2_max_concurrent_streams", || edge().h2_max_concurrent_streams)
        .var("REBOUND_H2_MAX_STREAMS")
        .check(Between(1, 10_000))
        .doc("concurrent HTTP/2 streams per connection");
pub const H2C: Setting<bool> = Setting::new("edge.h2c", || edge().h2c)
    .var("REBOUND_H2C")
    .doc("HTTP/2 with prior knowledge on the cleartext redirect port (the API and metrics ports never speak HTTP/2)");
pub const PROXY_PROTOCOL: Setting<Vec<ProxiedPort>> = Setting::new("edge.proxy_protocol", Vec::new)
    .var("REBOUND_PROXY_PROTOCOL")
    .doc(
        "the ports whose every connection starts with a PROXY protocol header (version 1 or 2, as AWS NLB, \
         HAProxy and Envoy send it; on `redirect_tls` before the ClientHello): the client it names is the \
         connection's. Read from `trusted_networks` only: any other peer is closed at once, and a connection \
         that does not start with a header is closed too (both counted in `rebound_edge_refusals_total`). On \
         such a port the forwarding headers are not read. The variable is comma-separated",
    );
pub const TRUSTED_NETWORKS: Setting<rebound_core::client::TrustedNetworks> =
    Setting::new("edge.trusted_networks", Default::default)
        .var("REBOUND_TRUSTED_NETWORKS")
        .doc(
            "the networks of the proxies and load balancers in front of Rebound, believed about the client: a \
             PROXY header is accepted from them only, and on the redirect and API ports their requests' \
             `Forwarded` (else `X-Forwarded-For`) names the client (the nearest address that is not theirs) and \
             `X-Forwarded-Proto: https` (or `Forwarded: proto=https`) says the visitor came over TLS. Empty: \
             nothing is trusted, the client is the TCP peer. The variable is comma-separated",
        );

// [api]: the control plane.

pub const MAX_BODY_BYTES: Setting<usize> = Setting::new("api.max_body_bytes", || api().max_body_bytes)
    .var("REBOUND_MAX_BODY_BYTES")
    .check(Between(1024, 16 * 1024 * 1024))
    .doc("largest request body, 413 beyond");
pub const MAX_IMPORT_BODY_BYTES: Setting<usize> =
    Setting::new("api.max_import_body_bytes", || api().max_import_body_bytes)
        .check(Between(1024, 64 * 1024 * 1024))
        .doc("largest body of `POST /api/v1/links/import`");
pub const MAX_TARGET_BYTES: Setting<usize> = Setting::new("api.max_target_bytes", || api().max_target_bytes)
    .check(Between(32, 65_536))
    .doc("longest `long_url`, in bytes, as sent and after normalisation");
pub const ANONYMOUS_CREATE: Setting<bool> = Setting::new("api.anonymous_create", || api().anonymous_create)
    .var("REBOUND_ANONYMOUS_CREATE")
    .doc("let callers without a key create links (rate limited per IPv4 address or IPv6 /64)");
pub const CREATOR_RATE_PER_SEC: Setting<f64> = Setting::new("api.creator_rate_per_sec", || api().creator_rate_per_sec)
    .check(Positive)
    .doc("creates per second per creator key, sustained");
pub const CREATOR_BURST: Setting<u32> = Setting::new("api.creator_burst", || api().creator_burst)
    .check(Positive)
    .doc("burst of creates per creator key");
pub const ANONYMOUS_RATE_PER_SEC: Setting<f64> =
    Setting::new("api.anonymous_rate_per_sec", || api().anonymous_rate_per_sec)
        .check(Positive)
        .doc("creates per second per anonymous network");
pub const ANONYMOUS_BURST: Setting<u32> = Setting::new("api.anonymous_burst", || api().anonymous_burst)
    .check(Positive)
    .doc("burst of creates per anonymous network");
pub const BLOCKED_DOMAINS: Setting<Vec<String>> = Setting::new("api.blocked_domains", || api().blocked_domains)
    .var("REBOUND_BLOCKED_DOMAINS")
    .check(Elsewhere("a list of host names and IP addresses"))
    .doc(
        "target hosts refused in any spelling (`invalid_url`): a name with all its subdomains (any case, Unicode \
         or punycode, one trailing dot), or an IP address (IPv4 in any form, `[IPv6]`; `10.1.2.3` also blocks \
         `[::ffff:10.1.2.3]`; a loopback address blocks every loopback spelling). An entry that is no host \
         (`a..b`, `.example.com`, a URL, a port) stops the start. The variable is comma-separated and adds to the \
         file's list.",
    );
pub const KGS_BLOCK_SIZE: Setting<u64> = Setting::new("api.kgs_block_size", || api().kgs_block_size)
    .check(Between(1, rebound_control_plane::kgs::MAX_BLOCK_SIZE))
    .doc("counter values leased per block for generated codes; the next block is fetched when a tenth is left");
pub const REGION: Setting<String> = Setting::new("region", || api().region)
    .var("REBOUND_REGION")
    .check(Text("1 to 32 lower-case letters, digits or '-'", |r| {
        (1..=32).contains(&r.len())
            && r.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }))
    .doc("this region's name, recorded in the store with its slot (`region_slot`)");
pub const REGION_SLOT: Setting<u64> = Setting::new("region_slot", || u64::from(api().region_slot))
    .var("REBOUND_REGION_SLOT")
    .check(Between(0, 15))
    .doc(
        "this region's slot, fixed for the life of the store and different in each region: generated codes come \
         from the slot's own range of counter values (a sixteenth of the code space), so regions create links \
         without asking each other and never give a code twice. A fleet of one region keeps 0 (the store's one \
         counter). A control plane records its region's name for its slot in the store on its first start, and \
         refuses to start on a slot that another region holds.",
    );
pub const CODE_KEY: Setting<Option<[u8; 16]>> = Setting::new("api.code_key", || api().code_key)
    .var("REBOUND_CODE_KEY")
    .doc(
        "the key of the code permutation. It is fixed for the life of a store: the \
         first start records it in the store (setting `code_permutation_key`), the configured one or, unset, a \
         generated one, and every later start uses the recorded key. Set to another key, it stops the start \
         (all-in-one, `rebound control-plane`, `rebound proxy`) with an error naming both settings, never a key: \
         every code generated so far would be a 404. Unset later, the recorded key is used. Keep it secret: it is \
         what makes codes unguessable.",
    );
pub const IDEMPOTENCY_TTL_SECS: Setting<u64> = Setting::new("api.idempotency_ttl_secs", || api().idempotency_ttl_secs)
    .check(Positive)
    .doc("how long an `Idempotency-Key`'s first answer is replayed");
pub const APP_SCHEMES: Setting<Vec<String>> = Setting::new("api.app_schemes", || api().app_schemes)
    .var("REBOUND_APP_SCHEMES")
    .check(Elsewhere(
        "a list of URL schemes (a letter, then letters, digits, `+`, `-`, `.`), none of http, https, javascript, \
         data, file, vbscript, blob, about",
    ))
    .doc(
        "schemes of apps a link's rule may send iOS and Android visitors to besides http and https (`intent` for \
         Android intents, your app's own `myapp`); only in a rule whose `os` is `ios` or `android` alone. Empty: \
         rules send visitors to web addresses only (universal links and app links are web addresses)",
    );
pub const REFUSE_MIXED_SCRIPT_FOR_KEYS: Setting<bool> = Setting::new("api.refuse_mixed_script_for_keys", || {
    api().refuse_mixed_script_for_keys
})
.doc(
    "also refuse key holders' targets whose host has a label mixing scripts; anonymous targets are always \
         refused so",
);

// [redirect]: the data plane.

pub const CACHE_MAX_AGE_SECS: Setting<u64> =
    Setting::new("redirect.cache_max_age_secs", || redirect().cache_max_age_secs)
        .check(AtMost(86_400))
        .doc(
            "`max-age` of redirects, never past a link's expiry. At most a day: the redirect service builds one \
             `Cache-Control` value per second from 0 to this at start (`Redirects::new`).",
        );
pub const L1_CAPACITY: Setting<usize> = Setting::new("redirect.l1_capacity", || redirect().l1_capacity)
    .check(Positive)
    .doc(
        "links held in L1. The issued-code filter's Bloom filter of aliases is sized from it too: for twice the \
         larger of this and 1,000,000 aliases, at a 0.1 % false-positive rate (generated codes need no room in it: \
         they are told by the counter's high-water mark).",
    );
pub const INVALIDATION_TIMEOUT_MS: Setting<u64> = Setting::new("redirect.invalidation_timeout_ms", || {
    redirect().invalidation_timeout_ms
})
.var("REBOUND_INVALIDATION_TIMEOUT_MS")
.check(Positive)
.doc("without a message on the invalidation channel for this long, a proxy stops trusting L1 (`rebound proxy`)");
pub const L1_TTL_MS: Setting<u64> = Setting::new("redirect.l1_ttl_ms", || redirect().l1_ttl_ms)
    .var("REBOUND_L1_TTL_MS")
    .check(Positive)
    .doc("the longest an L1 entry is used while L1 is not trusted (`rebound proxy`)");
pub const L2_BUDGET_MS: Setting<u64> = Setting::new("redirect.l2_budget_ms", || redirect().l2_budget_ms)
    .check(Positive)
    .doc("budget of one Redis read; also bounds the populate of L2 after a store read");
pub const STORE_BUDGET_MS: Setting<u64> = Setting::new("redirect.store_budget_ms", || redirect().store_budget_ms)
    .var("REBOUND_STORE_BUDGET_MS")
    .check(Positive)
    .doc("budget of one store read on the redirect path");
pub const CACHE_FRESH_MS: Setting<u64> = Setting::new("redirect.cache_fresh_ms", || redirect().cache_fresh_ms)
    .var("REBOUND_CACHE_FRESH_MS")
    .check(Between(1, 86_400_000))
    .doc(
        "how long a cached active record is fresh (at most 24 h). Also read by the control plane when it writes \
         records through to Redis: give every process of a deployment the same value.",
    );
pub const STALE_GRACE_MS: Setting<u64> = Setting::new("redirect.stale_grace_ms", || redirect().stale_grace_ms)
    .var("REBOUND_STALE_GRACE_MS")
    .doc("how long past freshness a record may still be served while the store fails (same remark)");
pub const CLICK_QUEUE_CAPACITY: Setting<usize> =
    Setting::new("redirect.click_queue_capacity", || redirect().click_queue_capacity)
        .var("REBOUND_CLICK_QUEUE_CAPACITY")
        .check(Positive)
        .doc(
            "slots of the click queue: codes clicked between two drains (10 ms); beyond, clicks are dropped and \
             counted",
        );
pub const CLICK_FLUSH_MS: Setting<u64> = Setting::new("redirect.click_flush_ms", || redirect().click_flush_ms)
    .var("REBOUND_CLICK_FLUSH_MS")
    .check(Positive)
    .doc("how often clicks are written under light load");
pub const CLICK_ROWS_PER_SEC: Setting<u64> =
    Setting::new("redirect.click_rows_per_sec", || redirect().click_rows_per_sec)
        .var("REBOUND_CLICK_ROWS_PER_SEC")
        .check(Positive)
        .doc(
            "a cost bound: rollup rows (one per code and day) written per second, on average (in distributed \
             mode, adds sent to SQS)",
        );
pub const CLICK_WRITE_SHARE: Setting<f64> = Setting::new("redirect.click_write_share", || redirect().click_write_share)
    .var("REBOUND_CLICK_WRITE_SHARE")
    .check(Fraction)
    .doc(
        "the other cost bound: the most of the time spent writing clicks; after a write the next starts no \
             sooner than its duration divided by this after it began (a 50 ms write at 1 %: 5 s); in the \
             all-in-one a write's duration is the CPU time of its writer's threads, not its waits for the CPU",
    );
pub const CLICK_MAX_HOLD_MS: Setting<Option<u64>> =
    Setting::new("redirect.click_max_hold_ms", || redirect().click_max_hold_ms)
        .var("REBOUND_CLICK_MAX_HOLD_MS")
        .check(Positive)
        .shown(|| {
            format!(
                "unset: `{}` in the all-in-one, `{}` for `rebound proxy`",
                RedirectSettings::CLICK_MAX_HOLD_MS,
                RedirectSettings::CLICK_MAX_HOLD_DISTRIBUTED_MS
            )
        })
        .doc("the longest a click waits in memory before it is written or sent: what a SIGKILL can lose");
pub const THREADS: Setting<usize> = Setting::new("redirect.threads", || redirect().threads)
    .var("REBOUND_REDIRECT_THREADS")
    .doc("worker threads of the redirect server; 0 means one per core");
pub const NOT_FOUND_URL: Setting<Option<String>> = Setting::new("redirect.not_found_url", || redirect().not_found_url)
    .var("REBOUND_NOT_FOUND_URL")
    .check(Elsewhere("an `http` or `https` URL"))
    .doc(
        "where a 404 on the redirect port sends the visitor (`302`, `Cache-Control: no-store`): unknown, deleted \
         and taken-down codes and paths that are no code. Held to the rule for a link's target (`docs/http.md`): \
         an absolute `http`/`https` URL, no user information or control characters, not on `public_base_url`'s \
         host and port (a loop), not on a blocked host. Unset: a small static HTML page with status 404",
    );
pub const EXPIRED_URL: Setting<Option<String>> = Setting::new("redirect.expired_url", || redirect().expired_url)
    .var("REBOUND_EXPIRED_URL")
    .check(Elsewhere("an `http` or `https` URL"))
    .doc(
        "where an expired link (410) sends the visitor (`302`); the same rule as `not_found_url`. Unset: a static \
         page with status 410",
    );
pub const ROOT_URL: Setting<Option<String>> = Setting::new("redirect.root_url", || redirect().root_url)
    .var("REBOUND_ROOT_URL")
    .check(Elsewhere("an `http` or `https` URL"))
    .doc(
        "where `GET /` on the redirect port sends the visitor (`302`); the same rule as `not_found_url`. Unset: the \
         404 answer (the page, or `not_found_url`)",
    );
pub const THREAT_LISTS: Setting<Vec<String>> = Setting::new("threats.lists", Vec::new)
    .var("REBOUND_THREAT_LISTS")
    .check(Elsewhere(
        "a list of `<name>=<format>:<file or http(s) URL>` entries, each name once",
    ))
    .doc(
        "threat lists the control plane refuses targets on (`blocked_target`) and takes matching links down by \
         (docs/spec.md §12): `urlhaus=urlhaus:https://urlhaus.abuse.ch/downloads/csv_recent/`, \
         `phish=phishtank:/var/lib/rebound/online-valid.json`, `op=openphish:https://openphish.com/feed.txt`, \
         `local=domains:/etc/rebound/blocked-hosts.txt` (formats: `urlhaus` CSV, `phishtank` JSON, `openphish` \
         URLs, `domains` one host or hosts-file line each). Each is loaded at start and every `refresh_secs`; a \
         load that fails keeps the entries before it. The variable is comma-separated",
    );
pub const THREAT_REFRESH_SECS: Setting<u64> = Setting::new("threats.refresh_secs", || 3600)
    .var("REBOUND_THREAT_REFRESH_SECS")
    .check(Between(1, 604_800))
    .doc(
        "seconds between two loads of the threat lists; when one changed, every active link is checked against \
         them again and the matching ones are taken down (reason `threat-list:<name>`). Public feeds ask for no \
         more than a load every few minutes",
    );
pub const THREAT_MAX_FEED_BYTES: Setting<u64> = Setting::new("threats.max_feed_bytes", || 128 << 20)
    .check(Between(1024, 4 << 30))
    .doc("a threat feed larger than this is refused (the entries before it stay in force)");
pub const BREAKDOWNS: Setting<Vec<BreakdownWord>> = Setting::new("redirect.breakdowns", || {
    redirect().breakdowns.into_iter().map(BreakdownWord::On).collect()
})
.var("REBOUND_BREAKDOWNS")
.doc(
    "the dimensions a person's click is broken down by (`country`, `referrer`, `device`, `browser`, `os`, \
             `utm_source`, `utm_medium`, `utm_campaign`, and `rule`: which of a link's rules chose the target; \
             docs/analytics.md), where the clicks are written to a store \
             that keeps breakdowns (the embedded one). `country` needs `geoip_database` or `country_header`. \
             `[\"none\"]` (or empty in the file): none, and a redirect costs what it did before them. The variable \
             is comma-separated",
);
pub const GEOIP_DATABASE: Setting<Option<PathBuf>> = Setting::new("redirect.geoip_database", || None)
    .var("REBOUND_GEOIP_DATABASE")
    .doc(
        "a country database in the MaxMind DB format (GeoLite2-Country, DB-IP Lite, the CC0 ones), read at start \
         (a file that cannot be read stops it) and again within seconds of a change (a bad new file is logged and \
         the old one kept)",
    );
pub const COUNTRY_HEADER: Setting<rebound_proxy::config::CountryHeader> =
    Setting::new("redirect.country_header", || redirect().country_header)
        .var("REBOUND_COUNTRY_HEADER")
        .doc(
            "the header a CDN in front names the visitor's country in: `cloudfront` (`CloudFront-Viewer-Country`), \
             `cloudflare` (`CF-IPCountry`) or `none`. Believed from `edge.trusted_networks` only, and over the \
             database",
        );
pub const SERVE_UNKNOWN_HOSTS: Setting<bool> =
    Setting::new("redirect.serve_unknown_hosts", || redirect().serve_unknown_hosts)
        .var("REBOUND_SERVE_UNKNOWN_HOSTS")
        .doc(
            "serve a request whose `Host` is no domain of the fleet as the default domain's (a fleet answering under \
             any name); off: it is answered 404 with the default domain's not-found answer. A request by address (an \
             IP, or a one-label name such as `localhost`) is always the default domain's",
        );

pub const KINESIS_STREAM: Setting<Option<String>> = Setting::new("clicks.kinesis_stream", || None)
    .var("REBOUND_KINESIS_STREAM")
    .check(Text("1 to 128 letters, digits, '_', '-' or '.'", |s| {
        (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    }))
    .doc(
        "the Amazon Kinesis data stream each click (a person's or a bot's) is sent to as an event: time, code, \
         domain, link version, bot or person and the dimensions of `redirect.breakdowns`, never an address \
         (docs/analytics.md, \"The click stream\"). Batched with `PutRecords` at most once: what a call does not \
         put is lost and counted. Region, endpoint and credentials come from the standard AWS configuration; \
         `rebound provision` creates the stream. Unset: off, and a redirect costs what it did before it",
    );
pub const KINESIS_QUEUE_CAPACITY: Setting<usize> = Setting::new("clicks.kinesis_queue_capacity", || 65_536)
    .var("REBOUND_KINESIS_QUEUE_CAPACITY")
    .check(Positive)
    .doc("click events held between the redirect path and the stream; beyond, events are dropped and counted");
pub const KINESIS_LINGER_MS: Setting<u64> = Setting::new("clicks.kinesis_linger_ms", || 1000)
    .var("REBOUND_KINESIS_LINGER_MS")
    .check(Between(1, 60_000))
    .doc("the longest a click event waits for a batch of 500 to fill before it is sent anyway");

/// Reads every setting from `src` into its place, in the order of the docs.
pub(super) fn read(src: &mut impl Source) -> Result<Settings, ConfigError> {
    let mut acme: Option<AcmeSettings>;
    let mut settings = Settings {
        redirect_addr: src.get(&REDIRECT_ADDR)?,
        api_addr: src.get(&API_ADDR)?,
        metrics_addr: src.get(&METRICS_ADDR)?,
        data_dir: src.get(&DATA_DIR)?,
        public_base_url: src.get(&PUBLIC_BASE_URL)?,
        bootstrap_key: src.get(&BOOTSTRAP_KEY)?,
        store: match (src.get(&STORE)?, src.written(&TABLE_PREFIX)?) {
            (StoreKind::DynamoDb, table_prefix) => {
                TABLE_PREFIX.verify(&table_prefix)?;
                StoreChoice::DynamoDb { table_prefix }
            }
            (StoreKind::Sqlite, _) => StoreChoice::Sqlite,
        },
        redis_url: src.get(&REDIS_URL)?,
        peer_regions: peer_regions(src.get(&PEER_REGIONS)?, &src.get(&REGION)?)?,
        home_region_url: src.get(&HOME_REGION_URL)?,
        home_store: match (src.get(&HOME_STORE_REGION)?, src.get(&HOME_STORE_ENDPOINT_URL)?) {
            (Some(region), endpoint) => Some(HomeStore { region, endpoint }),
            (None, Some(_)) => {
                return Err(HOME_STORE_ENDPOINT_URL.refused(format!(
                    "is set without {}, the region it belongs to",
                    HOME_STORE_REGION.name()
                )))
            }
            (None, None) => None,
        },
        redis_ca: src.get(&REDIS_CA)?,
        redis_cluster: src.get(&REDIS_CLUSTER)?,
        redis_prefix: src.get(&REDIS_PREFIX)?,
        queue: match (src.get(&QUEUE)?, src.written(&SQS_QUEUE)?) {
            (QueueKind::Sqs, queue_name) => {
                SQS_QUEUE.verify(&queue_name)?;
                QueueChoice::Sqs { queue_name }
            }
            (QueueKind::Embedded, _) => QueueChoice::Embedded,
        },
        sqs_visibility_secs: src.get(&SQS_VISIBILITY_SECS)?,
        tls: {
            let (tls, read) = tls_and_acme(src)?;
            acme = read;
            tls
        },
        acme: None,
        upgrade_sock: src.get(&UPGRADE_SOCK)?,
        threats: ThreatSettings {
            lists: threat_lists(src.get(&THREAT_LISTS)?)?,
            refresh_secs: src.get(&THREAT_REFRESH_SECS)?,
            max_feed_bytes: src.get(&THREAT_MAX_FEED_BYTES)?,
        },
        click_stream: {
            let (stream, queue_capacity, linger_ms) = (
                src.get(&KINESIS_STREAM)?,
                src.get(&KINESIS_QUEUE_CAPACITY)?,
                src.get(&KINESIS_LINGER_MS)?,
            );
            stream.map(|stream| ClickStreamSettings {
                stream,
                queue_capacity,
                linger: Duration::from_millis(linger_ms),
            })
        },
        edge: EdgeSettings {
            head_timeout_ms: src.get(&HEAD_TIMEOUT_MS)?,
            idle_timeout_ms: src.get(&IDLE_TIMEOUT_MS)?,
            write_timeout_ms: src.get(&WRITE_TIMEOUT_MS)?,
            max_connections: src.get(&MAX_CONNECTIONS)?,
            api_max_connections: src.get(&API_MAX_CONNECTIONS)?,
            metrics_max_connections: src.get(&METRICS_MAX_CONNECTIONS)?,
            max_head_bytes: src.get(&MAX_HEAD_BYTES)?,
            max_headers: src.get(&MAX_HEADERS)?,
            h2_max_concurrent_streams: src.get(&H2_MAX_STREAMS)?,
            h2c: src.get(&H2C)?,
            proxy_protocol: src.get(&PROXY_PROTOCOL)?,
            trusted_networks: src.get(&TRUSTED_NETWORKS)?,
        },
        api: ApiSettings {
            max_body_bytes: src.get(&MAX_BODY_BYTES)?,
            body_timeout: Duration::from_millis(src.get(&HEAD_TIMEOUT_MS)?),
            max_import_body_bytes: src.get(&MAX_IMPORT_BODY_BYTES)?,
            max_target_bytes: src.get(&MAX_TARGET_BYTES)?,
            anonymous_create: src.get(&ANONYMOUS_CREATE)?,
            creator_rate_per_sec: src.get(&CREATOR_RATE_PER_SEC)?,
            creator_burst: src.get(&CREATOR_BURST)?,
            anonymous_rate_per_sec: src.get(&ANONYMOUS_RATE_PER_SEC)?,
            anonymous_burst: src.get(&ANONYMOUS_BURST)?,
            blocked_domains: src.get(&BLOCKED_DOMAINS)?,
            kgs_block_size: src.get(&KGS_BLOCK_SIZE)?,
            region: src.get(&REGION)?,
            region_slot: src.get(&REGION_SLOT)? as u8,
            code_key: src.get(&CODE_KEY)?,
            idempotency_ttl_secs: src.get(&IDEMPOTENCY_TTL_SECS)?,
            refuse_mixed_script_for_keys: src.get(&REFUSE_MIXED_SCRIPT_FOR_KEYS)?,
            app_schemes: src.get(&APP_SCHEMES)?,
        },
        redirect: RedirectSettings {
            cache_max_age_secs: src.get(&CACHE_MAX_AGE_SECS)?,
            l1_capacity: src.get(&L1_CAPACITY)?,
            invalidation_timeout_ms: src.get(&INVALIDATION_TIMEOUT_MS)?,
            l1_ttl_ms: src.get(&L1_TTL_MS)?,
            l2_budget_ms: src.get(&L2_BUDGET_MS)?,
            store_budget_ms: src.get(&STORE_BUDGET_MS)?,
            cache_fresh_ms: src.get(&CACHE_FRESH_MS)?,
            stale_grace_ms: src.get(&STALE_GRACE_MS)?,
            click_queue_capacity: src.get(&CLICK_QUEUE_CAPACITY)?,
            click_flush_ms: src.get(&CLICK_FLUSH_MS)?,
            click_rows_per_sec: src.get(&CLICK_ROWS_PER_SEC)?,
            click_write_share: src.get(&CLICK_WRITE_SHARE)?,
            click_max_hold_ms: src.get(&CLICK_MAX_HOLD_MS)?,
            threads: src.get(&THREADS)?,
            not_found_url: src.get(&NOT_FOUND_URL)?,
            expired_url: src.get(&EXPIRED_URL)?,
            root_url: src.get(&ROOT_URL)?,
            serve_unknown_hosts: src.get(&SERVE_UNKNOWN_HOSTS)?,
            breakdowns: breakdowns(src.get(&BREAKDOWNS)?)?,
            geoip_database: src.get(&GEOIP_DATABASE)?,
            country_header: src.get(&COUNTRY_HEADER)?,
        },
    };
    // No ACME domains given: the public host's.
    if let Some(acme) = acme.as_mut().filter(|a| a.domains.is_empty()) {
        let host = url::Url::parse(&settings.public_base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        acme.domains = acme_domains(vec![host])?;
    }
    settings.acme = acme;
    Ok(settings)
}
