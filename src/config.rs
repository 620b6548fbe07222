//! Reads the optional TOML file and the `REBOUND_*` variables into the core's plain
//! [`Settings`], with errors that name the bad setting. Nothing else sees the file format.

use crate::settings::{QueueChoice, Settings, StoreChoice};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A configuration that cannot be used, with the setting it concerns.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read or parsed.
    File(String),
    /// A setting (its name first) has an unusable value.
    Setting(String, String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::File(m) => write!(f, "configuration file: {m}"),
            ConfigError::Setting(name, m) => write!(f, "{name}: {m}"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    redirect_addr: Option<String>,
    api_addr: Option<String>,
    metrics_addr: Option<String>,
    data_dir: Option<PathBuf>,
    public_base_url: Option<String>,
    bootstrap_key: Option<String>,
    store: Option<String>,
    table_prefix: Option<String>,
    redis_url: Option<String>,
    redis_ca: Option<PathBuf>,
    redis_prefix: Option<String>,
    queue: Option<String>,
    sqs_visibility_secs: Option<u32>,
    sqs_queue: Option<String>,
    tls_addr: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    upgrade_sock: Option<PathBuf>,
    #[serde(default)]
    edge: FileEdge,
    #[serde(default)]
    api: FileApi,
    #[serde(default)]
    redirect: FileRedirect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileApi {
    max_body_bytes: Option<usize>,
    max_import_body_bytes: Option<usize>,
    max_target_bytes: Option<usize>,
    anonymous_create: Option<bool>,
    creator_rate_per_sec: Option<f64>,
    creator_burst: Option<u32>,
    anonymous_rate_per_sec: Option<f64>,
    anonymous_burst: Option<u32>,
    blocked_domains: Option<Vec<String>>,
    kgs_block_size: Option<u64>,
    code_key: Option<String>,
    idempotency_ttl_secs: Option<u64>,
    refuse_mixed_script_for_keys: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRedirect {
    cache_max_age_secs: Option<u64>,
    l1_capacity: Option<usize>,
    invalidation_timeout_ms: Option<u64>,
    l1_ttl_ms: Option<u64>,
    l2_budget_ms: Option<u64>,
    store_budget_ms: Option<u64>,
    click_queue_capacity: Option<usize>,
    click_flush_ms: Option<u64>,
    click_rows_per_sec: Option<u64>,
    click_write_share: Option<f64>,
    click_max_hold_ms: Option<u64>,
    cache_fresh_ms: Option<u64>,
    stale_grace_ms: Option<u64>,
    threads: Option<usize>,
    not_found_url: Option<String>,
    expired_url: Option<String>,
    root_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEdge {
    head_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    write_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    api_max_connections: Option<usize>,
    metrics_max_connections: Option<usize>,
    max_head_bytes: Option<usize>,
    max_headers: Option<usize>,
    h2_max_concurrent_streams: Option<u32>,
    h2c: Option<bool>,
}

fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value
        .trim()
        .parse::<T>()
        .map_err(|e| ConfigError::Setting(name.to_owned(), format!("{value:?} is not valid: {e}")))
}

/// The variable `name` parsed when it is set (and not empty), else the file's value, else
/// `default`.
fn env_or_file<T: std::str::FromStr>(
    env: &HashMap<String, String>,
    name: &str,
    file: Option<T>,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match env.get(name).map(String::as_str).filter(|v| !v.is_empty()) {
        Some(v) => parse(name, v),
        None => Ok(file.unwrap_or(default)),
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Setting(
            name.to_owned(),
            format!("{value:?} is not true or false"),
        )),
    }
}

fn code_key(name: &str, value: &str) -> Result<[u8; 16], ConfigError> {
    let bytes = (0..value.len())
        .step_by(2)
        .map(|i| value.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>();
    bytes
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| ConfigError::Setting(name.to_owned(), "must be 32 hexadecimal characters (16 bytes)".into()))
}

/// Builds the settings from an optional TOML text and the environment (the variables win).
pub fn load(file: Option<&str>, env: &HashMap<String, String>) -> Result<Settings, ConfigError> {
    let f: FileConfig = match file {
        Some(text) => toml::from_str(text).map_err(|e| ConfigError::File(e.to_string()))?,
        None => FileConfig::default(),
    };
    let var = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let mut s = Settings::default();

    let addr = |file: &Option<String>,
                env_name: &str,
                file_name: &str,
                default: SocketAddr|
     -> Result<SocketAddr, ConfigError> {
        match (var(env_name), file) {
            (Some(v), _) => parse(env_name, v),
            (None, Some(v)) => parse(file_name, v),
            (None, None) => Ok(default),
        }
    };
    s.redirect_addr = addr(
        &f.redirect_addr,
        "REBOUND_REDIRECT_ADDR",
        "redirect_addr",
        s.redirect_addr,
    )?;
    s.api_addr = addr(&f.api_addr, "REBOUND_API_ADDR", "api_addr", s.api_addr)?;
    s.metrics_addr = addr(&f.metrics_addr, "REBOUND_METRICS_ADDR", "metrics_addr", s.metrics_addr)?;
    if let Some(d) = var("REBOUND_DATA_DIR").map(PathBuf::from).or(f.data_dir) {
        s.data_dir = d;
    }
    if let Some(u) = var("REBOUND_PUBLIC_BASE_URL").map(str::to_owned).or(f.public_base_url) {
        s.public_base_url = u;
    }
    s.bootstrap_key = var("REBOUND_BOOTSTRAP_KEY").map(str::to_owned).or(f.bootstrap_key);
    let table_prefix = var("REBOUND_TABLE_PREFIX")
        .map(str::to_owned)
        .or(f.table_prefix)
        .unwrap_or_else(|| "rebound_".into());
    s.store = match var("REBOUND_STORE").map(str::to_owned).or(f.store).as_deref() {
        None | Some("sqlite") => StoreChoice::Sqlite,
        Some("dynamodb") => StoreChoice::DynamoDb { table_prefix },
        Some(other) => {
            return Err(ConfigError::Setting(
                "store (REBOUND_STORE)".into(),
                format!("{other:?} is not sqlite or dynamodb"),
            ))
        }
    };
    s.redis_url = var("REBOUND_REDIS_URL").map(str::to_owned).or(f.redis_url);
    s.redis_ca = var("REBOUND_REDIS_CA").map(PathBuf::from).or(f.redis_ca);
    if let Some(p) = var("REBOUND_REDIS_PREFIX").map(str::to_owned).or(f.redis_prefix) {
        s.redis_prefix = p;
    }
    s.sqs_visibility_secs = match var("REBOUND_SQS_VISIBILITY_SECS") {
        Some(v) => parse("REBOUND_SQS_VISIBILITY_SECS", v)?,
        None => f.sqs_visibility_secs.unwrap_or(s.sqs_visibility_secs),
    };
    let queue_name = var("REBOUND_SQS_QUEUE")
        .map(str::to_owned)
        .or(f.sqs_queue)
        .unwrap_or_else(|| "rebound-clicks".into());
    s.queue = match var("REBOUND_QUEUE").map(str::to_owned).or(f.queue).as_deref() {
        None | Some("embedded") => QueueChoice::Embedded,
        Some("sqs") => QueueChoice::Sqs { queue_name },
        Some(other) => {
            return Err(ConfigError::Setting(
                "queue (REBOUND_QUEUE)".into(),
                format!("{other:?} is not embedded or sqs"),
            ))
        }
    };

    let a = &mut s.api;
    let fa = f.api;
    a.max_body_bytes = match var("REBOUND_MAX_BODY_BYTES") {
        Some(v) => parse("REBOUND_MAX_BODY_BYTES", v)?,
        None => fa.max_body_bytes.unwrap_or(a.max_body_bytes),
    };
    a.max_import_body_bytes = fa.max_import_body_bytes.unwrap_or(a.max_import_body_bytes);
    a.max_target_bytes = fa.max_target_bytes.unwrap_or(a.max_target_bytes);
    a.anonymous_create = match var("REBOUND_ANONYMOUS_CREATE") {
        Some(v) => parse_bool("REBOUND_ANONYMOUS_CREATE", v)?,
        None => fa.anonymous_create.unwrap_or(a.anonymous_create),
    };
    a.creator_rate_per_sec = fa.creator_rate_per_sec.unwrap_or(a.creator_rate_per_sec);
    a.creator_burst = fa.creator_burst.unwrap_or(a.creator_burst);
    a.anonymous_rate_per_sec = fa.anonymous_rate_per_sec.unwrap_or(a.anonymous_rate_per_sec);
    a.anonymous_burst = fa.anonymous_burst.unwrap_or(a.anonymous_burst);
    a.blocked_domains = fa.blocked_domains.unwrap_or_default();
    if let Some(v) = var("REBOUND_BLOCKED_DOMAINS") {
        a.blocked_domains
            .extend(v.split(',').map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()));
    }
    a.kgs_block_size = fa.kgs_block_size.unwrap_or(a.kgs_block_size);
    a.code_key = match (var("REBOUND_CODE_KEY"), fa.code_key) {
        (Some(v), _) => Some(code_key("REBOUND_CODE_KEY", v)?),
        (None, Some(v)) => Some(code_key("api.code_key", &v)?),
        (None, None) => None,
    };
    a.idempotency_ttl_secs = fa.idempotency_ttl_secs.unwrap_or(a.idempotency_ttl_secs);
    a.refuse_mixed_script_for_keys = fa
        .refuse_mixed_script_for_keys
        .unwrap_or(a.refuse_mixed_script_for_keys);

    let r = &mut s.redirect;
    let fr = f.redirect;
    r.cache_max_age_secs = fr.cache_max_age_secs.unwrap_or(r.cache_max_age_secs);
    r.l1_capacity = fr.l1_capacity.unwrap_or(r.l1_capacity);
    r.invalidation_timeout_ms = match var("REBOUND_INVALIDATION_TIMEOUT_MS") {
        Some(v) => parse("REBOUND_INVALIDATION_TIMEOUT_MS", v)?,
        None => fr.invalidation_timeout_ms.unwrap_or(r.invalidation_timeout_ms),
    };
    r.l1_ttl_ms = match var("REBOUND_L1_TTL_MS") {
        Some(v) => parse("REBOUND_L1_TTL_MS", v)?,
        None => fr.l1_ttl_ms.unwrap_or(r.l1_ttl_ms),
    };
    r.l2_budget_ms = fr.l2_budget_ms.unwrap_or(r.l2_budget_ms);
    r.store_budget_ms = match var("REBOUND_STORE_BUDGET_MS") {
        Some(v) => parse("REBOUND_STORE_BUDGET_MS", v)?,
        None => fr.store_budget_ms.unwrap_or(r.store_budget_ms),
    };
    r.click_queue_capacity = env_or_file(
        env,
        "REBOUND_CLICK_QUEUE_CAPACITY",
        fr.click_queue_capacity,
        r.click_queue_capacity,
    )?;
    r.click_flush_ms = env_or_file(env, "REBOUND_CLICK_FLUSH_MS", fr.click_flush_ms, r.click_flush_ms)?;
    r.click_rows_per_sec = env_or_file(
        env,
        "REBOUND_CLICK_ROWS_PER_SEC",
        fr.click_rows_per_sec,
        r.click_rows_per_sec,
    )?;
    r.click_write_share = env_or_file(
        env,
        "REBOUND_CLICK_WRITE_SHARE",
        fr.click_write_share,
        r.click_write_share,
    )?;
    r.click_max_hold_ms = match var("REBOUND_CLICK_MAX_HOLD_MS") {
        Some(v) => Some(parse("REBOUND_CLICK_MAX_HOLD_MS", v)?),
        None => fr.click_max_hold_ms.or(r.click_max_hold_ms),
    };
    r.threads = match var("REBOUND_REDIRECT_THREADS") {
        Some(v) => parse("REBOUND_REDIRECT_THREADS", v)?,
        None => fr.threads.unwrap_or(r.threads),
    };
    // As written: `Settings::validate` holds them to the rule for a link's target.
    r.not_found_url = var("REBOUND_NOT_FOUND_URL").map(str::to_owned).or(fr.not_found_url);
    r.expired_url = var("REBOUND_EXPIRED_URL").map(str::to_owned).or(fr.expired_url);
    r.root_url = var("REBOUND_ROOT_URL").map(str::to_owned).or(fr.root_url);
    r.cache_fresh_ms = match var("REBOUND_CACHE_FRESH_MS") {
        Some(v) => parse("REBOUND_CACHE_FRESH_MS", v)?,
        None => fr.cache_fresh_ms.unwrap_or(r.cache_fresh_ms),
    };
    r.stale_grace_ms = match var("REBOUND_STALE_GRACE_MS") {
        Some(v) => parse("REBOUND_STALE_GRACE_MS", v)?,
        None => fr.stale_grace_ms.unwrap_or(r.stale_grace_ms),
    };

    let e = &mut s.edge;
    let fe = f.edge;
    e.head_timeout_ms = env_or_file(env, "REBOUND_HEAD_TIMEOUT_MS", fe.head_timeout_ms, e.head_timeout_ms)?;
    e.idle_timeout_ms = env_or_file(env, "REBOUND_IDLE_TIMEOUT_MS", fe.idle_timeout_ms, e.idle_timeout_ms)?;
    e.write_timeout_ms = env_or_file(env, "REBOUND_WRITE_TIMEOUT_MS", fe.write_timeout_ms, e.write_timeout_ms)?;
    e.max_connections = env_or_file(env, "REBOUND_MAX_CONNECTIONS", fe.max_connections, e.max_connections)?;
    e.api_max_connections = env_or_file(
        env,
        "REBOUND_API_MAX_CONNECTIONS",
        fe.api_max_connections,
        e.api_max_connections,
    )?;
    e.metrics_max_connections = env_or_file(
        env,
        "REBOUND_METRICS_MAX_CONNECTIONS",
        fe.metrics_max_connections,
        e.metrics_max_connections,
    )?;
    e.max_head_bytes = env_or_file(env, "REBOUND_MAX_HEAD_BYTES", fe.max_head_bytes, e.max_head_bytes)?;
    e.max_headers = env_or_file(env, "REBOUND_MAX_HEADERS", fe.max_headers, e.max_headers)?;
    e.h2_max_concurrent_streams = env_or_file(
        env,
        "REBOUND_H2_MAX_STREAMS",
        fe.h2_max_concurrent_streams,
        e.h2_max_concurrent_streams,
    )?;
    e.h2c = match var("REBOUND_H2C") {
        Some(v) => parse_bool("REBOUND_H2C", v)?,
        None => fe.h2c.unwrap_or(e.h2c),
    };

    let tls_addr = match (var("REBOUND_TLS_ADDR"), &f.tls_addr) {
        (Some(v), _) => Some(parse::<SocketAddr>("REBOUND_TLS_ADDR", v)?),
        (None, Some(v)) => Some(parse::<SocketAddr>("tls_addr", v)?),
        (None, None) => None,
    };
    let tls_cert = var("REBOUND_TLS_CERT").map(PathBuf::from).or(f.tls_cert);
    let tls_key = var("REBOUND_TLS_KEY").map(PathBuf::from).or(f.tls_key);
    s.tls = match (tls_addr, tls_cert, tls_key) {
        (None, None, None) => None,
        (Some(addr), Some(cert), Some(key)) => Some(crate::settings::TlsSettings { addr, cert, key }),
        _ => {
            return Err(ConfigError::Setting(
                "REBOUND_TLS_ADDR / REBOUND_TLS_CERT / REBOUND_TLS_KEY".into(),
                "set all three (address, PEM certificate chain, PEM private key) or none".into(),
            ))
        }
    };
    s.upgrade_sock = var("REBOUND_UPGRADE_SOCK").map(PathBuf::from).or(f.upgrade_sock);

    s.validate().map_err(|e| ConfigError::Setting(e.setting, e.problem))?;
    s.normalise_dead_end_urls()
        .map_err(|e| ConfigError::Setting(e.setting, e.problem))?;
    Ok(s)
}

/// Reads `path` (if given) and the process environment.
pub fn load_from_process(path: Option<&std::path::Path>) -> Result<Settings, ConfigError> {
    let text = path
        .map(|p| std::fs::read_to_string(p).map_err(|e| ConfigError::File(format!("{}: {e}", p.display()))))
        .transpose()?;
    let env: HashMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("REBOUND_")).collect();
    load(text.as_deref(), &env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_without_file_or_variables() {
        assert_eq!(load(None, &env(&[])).unwrap(), Settings::default());
    }

    #[test]
    fn the_example_config_in_deploy_is_valid() {
        let text = include_str!("../deploy/rebound.example.toml");
        load(Some(text), &env(&[])).unwrap();
    }

    #[test]
    fn variables_override_the_file() {
        let file = r#"
            api_addr = "127.0.0.1:7000"
            public_base_url = "https://from.file"
            [api]
            blocked_domains = ["a.example"]
            kgs_block_size = 500
            [redirect]
            l1_capacity = 10
        "#;
        let s = load(
            Some(file),
            &env(&[
                ("REBOUND_API_ADDR", "127.0.0.1:0"),
                ("REBOUND_STORE", "dynamodb"),
                ("REBOUND_QUEUE", "sqs"),
                ("REBOUND_BLOCKED_DOMAINS", "b.example, c.example"),
                ("REBOUND_CODE_KEY", "000102030405060708090a0b0c0d0e0f"),
            ]),
        )
        .unwrap();
        assert_eq!(s.api_addr.port(), 0);
        assert_eq!(s.public_base_url, "https://from.file");
        assert_eq!(
            s.store,
            StoreChoice::DynamoDb {
                table_prefix: "rebound_".into()
            }
        );
        assert_eq!(
            s.queue,
            QueueChoice::Sqs {
                queue_name: "rebound-clicks".into()
            }
        );
        assert_eq!(s.api.blocked_domains, ["a.example", "b.example", "c.example"]);
        assert_eq!(s.api.kgs_block_size, 500);
        assert_eq!(s.api.code_key.unwrap()[15], 15);
        assert_eq!(s.redirect.l1_capacity, 10);
    }

    #[test]
    fn visitor_redirects_are_read() {
        let s = load(
            Some("[redirect]\nexpired_url = \"https://example.com/expired\""),
            &env(&[
                ("REBOUND_NOT_FOUND_URL", "https://example.com/missing"),
                ("REBOUND_ROOT_URL", "https://example.com"),
            ]),
        )
        .unwrap();
        assert_eq!(s.redirect.not_found_url.as_deref(), Some("https://example.com/missing"));
        assert_eq!(s.redirect.expired_url.as_deref(), Some("https://example.com/expired"));
        assert_eq!(s.redirect.root_url.as_deref(), Some("https://example.com/"));
    }

    #[test]
    fn dead_end_urls_are_refused_like_link_targets_naming_the_setting() {
        for (name, value) in [
            // Loops: the default public_base_url, http://127.0.0.1:8080, in other spellings.
            ("REBOUND_ROOT_URL", "http://127.0.0.1:8080/"),
            ("REBOUND_ROOT_URL", "http://LOCALHOST.:8080/"),
            ("REBOUND_NOT_FOUND_URL", "http://0x7f.1:8080/x"),
            ("REBOUND_EXPIRED_URL", "http://[::ffff:127.0.0.1]:8080/gone"),
            // User information, and control characters the URL parser would strip silently.
            ("REBOUND_NOT_FOUND_URL", "https://user:pw@example.com/"),
            ("REBOUND_EXPIRED_URL", "https://@example.com/"),
            ("REBOUND_ROOT_URL", "https://example.com/\r\nSet-Cookie: a=b"),
            ("REBOUND_ROOT_URL", "https://exam\tple.com/"),
            ("REBOUND_ROOT_URL", "https://example.com/\n"),
            ("REBOUND_ROOT_URL", "https://example.com/%zz"),
            ("REBOUND_ROOT_URL", "https://a..b/"),
        ] {
            let err = load(None, &env(&[(name, value)])).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(name), "{value:?}: {err:?} should name {name}");
        }
        let file = "public_base_url = \"https://sho.rt\"\n[redirect]\nroot_url = \"http://SHO.RT./\"";
        let err = load(Some(file), &env(&[])).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains("redirect.root_url"), "{err:?}");
        // Another host, or the own host on another port, is no loop.
        let s = load(
            Some(file),
            &env(&[
                ("REBOUND_ROOT_URL", "https://www.sho.rt/"),
                ("REBOUND_NOT_FOUND_URL", "https://sho.rt:8443/missing"),
            ]),
        )
        .unwrap();
        assert_eq!(s.redirect.root_url.as_deref(), Some("https://www.sho.rt/"));
    }

    #[test]
    fn a_public_base_url_with_user_info_or_controls_is_refused() {
        for bad in [
            "https://sho.rt/\r\n",
            "https://sho.rt\n",
            "https://sh\to.rt",
            " https://sho.rt",
            "https://user@sho.rt",
            "https://user:pw@sho.rt",
            "https://sho..rt",
            "https://sho.rt/%z",
        ] {
            let err = load(None, &env(&[("REBOUND_PUBLIC_BASE_URL", bad)]))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(err.contains("REBOUND_PUBLIC_BASE_URL"), "{bad:?}: {err:?}");
        }
        for good in [
            "https://sho.rt",
            "https://sho.rt/s",
            "http://127.0.0.1:8080",
            "https://sho.rt.",
        ] {
            let s = load(None, &env(&[("REBOUND_PUBLIC_BASE_URL", good)])).unwrap();
            assert_eq!(s.public_base_url, good);
        }
    }

    #[test]
    fn blocklist_entries_must_be_hosts() {
        for bad in [
            "a..b",
            ".example.com",
            "http://example.com/",
            "example.com:443",
            "example.com/x",
            "user@example.com",
            "[::ffff:a01:203",
            "exa mple.com",
        ] {
            let err = load(None, &env(&[("REBOUND_BLOCKED_DOMAINS", bad)]))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(err.contains("REBOUND_BLOCKED_DOMAINS"), "{bad:?}: {err:?}");
        }
        let err = load(Some("[api]\nblocked_domains = [\"a..b\"]"), &env(&[]))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("api.blocked_domains"), "{err:?}");
        let s = load(
            None,
            &env(&[(
                "REBOUND_BLOCKED_DOMAINS",
                "[::ffff:a01:203], 10.1.2.3., 0x0a.1.2.3, EXAMPLE.com, bücher.example.",
            )]),
        )
        .unwrap();
        assert_eq!(s.api.blocked_domains.len(), 5);
    }

    #[test]
    fn tls_and_edge_settings_are_read() {
        let s = load(
            Some("[edge]\nidle_timeout_ms = 5000\nh2c = false"),
            &env(&[
                ("REBOUND_TLS_ADDR", "127.0.0.1:8443"),
                ("REBOUND_TLS_CERT", "/c.pem"),
                ("REBOUND_TLS_KEY", "/k.pem"),
                ("REBOUND_WRITE_TIMEOUT_MS", "2500"),
            ]),
        )
        .unwrap();
        let tls = s.tls.unwrap();
        assert_eq!(
            (tls.addr.port(), tls.cert.to_str(), tls.key.to_str()),
            (8443, Some("/c.pem"), Some("/k.pem"))
        );
        assert_eq!(
            (s.edge.idle_timeout_ms, s.edge.write_timeout_ms, s.edge.h2c),
            (5000, 2500, false)
        );
    }

    #[test]
    fn errors_name_the_setting() {
        type Case<'a> = (Option<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
        let cases: Vec<Case> = vec![
            (None, vec![("REBOUND_API_ADDR", "nowhere")], "REBOUND_API_ADDR"),
            (None, vec![("REBOUND_STORE", "postgres")], "REBOUND_STORE"),
            (None, vec![("REBOUND_QUEUE", "kafka")], "REBOUND_QUEUE"),
            (
                None,
                vec![("REBOUND_PUBLIC_BASE_URL", "not a url")],
                "REBOUND_PUBLIC_BASE_URL",
            ),
            (None, vec![("REBOUND_CODE_KEY", "xyz")], "REBOUND_CODE_KEY"),
            (None, vec![("REBOUND_TLS_ADDR", "127.0.0.1:8443")], "REBOUND_TLS_ADDR"),
            (
                None,
                vec![("REBOUND_HEAD_TIMEOUT_MS", "soon")],
                "REBOUND_HEAD_TIMEOUT_MS",
            ),
            (None, vec![("REBOUND_MAX_CONNECTIONS", "0")], "edge.max_connections"),
            (None, vec![("REBOUND_H2C", "perhaps")], "REBOUND_H2C"),
            (
                None,
                vec![("REBOUND_NOT_FOUND_URL", "/missing")],
                "REBOUND_NOT_FOUND_URL",
            ),
            (
                None,
                vec![("REBOUND_ROOT_URL", "ftp://example.com/")],
                "REBOUND_ROOT_URL",
            ),
            (
                Some("[redirect]\nexpired_url = \"nope\""),
                vec![],
                "redirect.expired_url",
            ),
            (
                None,
                vec![("REBOUND_ANONYMOUS_CREATE", "maybe")],
                "REBOUND_ANONYMOUS_CREATE",
            ),
            (Some("api_addr = 5"), vec![], "configuration file"),
            (Some("unknown_setting = 1"), vec![], "unknown_setting"),
            (Some("[api]\nkgs_block_size = 0"), vec![], "api.kgs_block_size"),
            (Some("[edge]\nmax_headers = 1"), vec![], "edge.max_headers"),
        ];
        for (file, vars, name) in cases {
            let err = load(file, &env(&vars)).unwrap_err().to_string();
            assert!(err.contains(name), "{err:?} should name {name}");
        }
    }
}
