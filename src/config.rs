//! Reads the optional TOML file and the `REBOUND_*` variables into the plain [`Settings`],
//! driven by the declarations in `declared`; nothing else sees the file format. Also
//! writes docs/configuration.md from the same declarations (`rebound config docs`).

mod declared;
mod document;
mod setting;

pub use declared::*;
pub use document::document;
pub use setting::{Check, Setting, Value};

use crate::settings::Settings;
use rebound_core::target::{HostIdentity, TargetError, TargetPolicy};
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// A configuration that cannot be used, with the setting it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read or parsed, or has a key that no setting declares.
    #[error("configuration file: {0}")]
    File(String),
    /// A value that is not one of the setting's type, where it was written.
    #[error("{setting}, in {origin}: {problem}")]
    Unreadable {
        setting: String,
        origin: Origin,
        problem: String,
    },
    /// A value that the setting's check, or another setting, refuses.
    #[error("{setting}: {problem}")]
    Setting { setting: String, problem: String },
}

/// Where a value was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    File,
    Environment,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::File => "the configuration file",
            Origin::Environment => "the environment",
        })
    }
}

/// Where settings come from: the file and the variables, or the declared defaults.
pub trait Source {
    /// The value of `setting` as written (or its default), not yet checked.
    fn written<T: Value>(&mut self, setting: &Setting<T>) -> Result<T, ConfigError>;

    /// The value of `setting`, checked.
    fn get<T: Value>(&mut self, setting: &Setting<T>) -> Result<T, ConfigError> {
        let value = self.written(setting)?;
        setting.verify(&value)?;
        Ok(value)
    }
}

/// The file's values under the variables': a variable that is set and not empty wins (a
/// list adds to the file's). The keys are taken out as they are read: what is left, no
/// setting declares.
struct Layers<'a> {
    file: toml::Table,
    env: &'a HashMap<String, String>,
    tables: BTreeSet<&'static str>,
}

impl Layers<'_> {
    fn take(&mut self, key: &'static str) -> Result<Option<toml::Value>, ConfigError> {
        let Some((table, leaf)) = key.split_once('.') else {
            return Ok(self.file.remove(key));
        };
        self.tables.insert(table);
        match self.file.get_mut(table) {
            None => Ok(None),
            Some(toml::Value::Table(t)) => Ok(t.remove(leaf)),
            Some(_) => Err(ConfigError::File(format!("`{table}` must be a table ([{table}])"))),
        }
    }

    /// Refuses the first key left over.
    fn finish(self) -> Result<(), ConfigError> {
        let unknown =
            |key: String| ConfigError::File(format!("unknown key `{key}` (docs/configuration.md lists them)"));
        for (key, value) in self.file {
            match value {
                toml::Value::Table(t) if self.tables.contains(key.as_str()) => {
                    if let Some(leaf) = t.keys().next() {
                        return Err(unknown(format!("{key}.{leaf}")));
                    }
                }
                _ => return Err(unknown(key)),
            }
        }
        Ok(())
    }
}

impl Source for Layers<'_> {
    fn written<T: Value>(&mut self, setting: &Setting<T>) -> Result<T, ConfigError> {
        let unreadable = |origin, problem| ConfigError::Unreadable {
            setting: setting.name(),
            origin,
            problem,
        };
        let file = match self.take(setting.key)? {
            Some(v) => Some(T::from_file(v).map_err(|p| unreadable(Origin::File, p))?),
            None => None,
        };
        let var = match setting
            .var
            .and_then(|name| self.env.get(name))
            .filter(|v| !v.is_empty())
        {
            Some(text) => Some(T::from_var(text).map_err(|p| unreadable(Origin::Environment, p))?),
            None => None,
        };
        Ok(T::layer(file, var).unwrap_or_else(setting.default))
    }
}

/// Every setting at its default.
struct Defaults;

impl Source for Defaults {
    fn written<T: Value>(&mut self, setting: &Setting<T>) -> Result<T, ConfigError> {
        Ok((setting.default)())
    }
}

impl Default for Settings {
    /// Every setting at its declared default.
    fn default() -> Self {
        declared::read(&mut Defaults).expect("the defaults are complete")
    }
}

/// Builds the settings from an optional TOML text and the environment (the variables win).
pub fn load(file: Option<&str>, env: &HashMap<String, String>) -> Result<Settings, ConfigError> {
    let file = match file {
        Some(text) => toml::from_str(text).map_err(|e| ConfigError::File(e.to_string()))?,
        None => toml::Table::new(),
    };
    let mut layers = Layers {
        file,
        env,
        tables: BTreeSet::new(),
    };
    let mut settings = declared::read(&mut layers)?;
    layers.finish()?;
    check_relations(&mut settings)?;
    Ok(settings)
}

/// Reads `path` (if given) and the process environment.
pub fn load_from_process(path: Option<&std::path::Path>) -> Result<Settings, ConfigError> {
    let text = path
        .map(|p| std::fs::read_to_string(p).map_err(|e| ConfigError::File(format!("{}: {e}", p.display()))))
        .transpose()?;
    let env: HashMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("REBOUND_")).collect();
    load(text.as_deref(), &env)
}

/// `url` (as written, before any parser strips a control character) held to the rule for
/// a link's target, its normalised form returned.
fn as_target(setting: &Setting<impl Value>, url: &str, rule: &TargetPolicy) -> Result<String, ConfigError> {
    rule.validate(url)
        .map_err(|e| setting.refused(format!("{url:?} is refused by the rule for a link's target: {e}")))
}

/// The checks that involve more than one setting, or more than a value's form; the
/// visitor redirects are put in the form a link's target is stored in (punycode host,
/// percent-encoded path), ready to be a `Location`.
fn check_relations(s: &mut Settings) -> Result<(), ConfigError> {
    // A port that reads PROXY headers believes the peers it trusts: with none, it would
    // refuse every connection.
    if !s.edge.proxy_protocol.is_empty() && s.edge.trusted_networks.is_empty() {
        return Err(PROXY_PROTOCOL.refused(format!(
            "needs {}: the networks of the load balancers that send the header",
            TRUSTED_NETWORKS.name()
        )));
    }
    // A country header is believed from the CDN only: anyone else could name any country.
    if s.redirect.country_header != rebound_proxy::config::CountryHeader::None && s.edge.trusted_networks.is_empty() {
        return Err(COUNTRY_HEADER.refused(format!(
            "needs {}: the networks of the CDN that sends the header",
            TRUSTED_NETWORKS.name()
        )));
    }
    if s.edge.reads_proxy_protocol(crate::settings::ProxiedPort::RedirectTls) && s.tls.is_none() {
        return Err(PROXY_PROTOCOL.refused(format!("names `redirect_tls`, but {} is not set", TLS_ADDR.name())));
    }
    // The base starts every short URL: a URL a link could point to, less query and fragment.
    let base = as_target(&PUBLIC_BASE_URL, &s.public_base_url, &TargetPolicy::default())?;
    let base = url::Url::parse(&base).map_err(|e| PUBLIC_BASE_URL.refused(format!("not a URL: {e}")))?;
    if base.query().is_some() || base.fragment().is_some() {
        return Err(PUBLIC_BASE_URL.refused("must not have a query or fragment"));
    }
    for entry in s.api.blocked_domains.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        if let Err(e) = HostIdentity::parse(entry) {
            let why = match e {
                TargetError::EmptyLabel => "has an empty label",
                _ => "is not a host name, an IPv4 address or an IPv6 address in brackets",
            };
            return Err(BLOCKED_DOMAINS.refused(format!("{entry:?} {why}")));
        }
    }
    for scheme in &s.api.app_schemes {
        let shaped = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let refused = [
            "http",
            "https",
            "javascript",
            "data",
            "file",
            "vbscript",
            "blob",
            "about",
        ]
        .iter()
        .any(|r| r.eq_ignore_ascii_case(scheme));
        if !shaped || refused {
            return Err(APP_SCHEMES.refused(format!(
                "{scheme:?} is not a scheme an app may be sent to (letters, digits, `+`, `-`, `.`, a letter first; \
                 not a web or script scheme)"
            )));
        }
    }
    // Sent to visitors as a `Location`: on this service's own host it would loop.
    let rule = TargetPolicy {
        max_bytes: s.api.max_target_bytes,
        refuse_mixed_script: s.api.refuse_mixed_script_for_keys,
        ..TargetPolicy::default()
    }
    .with_public_base(&s.public_base_url)
    .map_err(|e| PUBLIC_BASE_URL.refused(e.to_string()))?
    .with_blocklist(&s.api.blocked_domains);
    let r = &mut s.redirect;
    for (setting, url) in [
        (&NOT_FOUND_URL, &mut r.not_found_url),
        (&EXPIRED_URL, &mut r.expired_url),
        (&ROOT_URL, &mut r.root_url),
    ] {
        if let Some(url) = url {
            *url = as_target(setting, url, &rule)?;
        }
    }
    if s.home_store.is_some() && !matches!(s.store, crate::settings::StoreChoice::DynamoDb { .. }) {
        return Err(HOME_STORE_REGION.refused(format!(
            "is for a store replicated between regions: it needs {} = \"dynamodb\"",
            STORE.name()
        )));
    }
    for (setting, url) in [
        (&HOME_REGION_URL, &s.home_region_url),
        (
            &HOME_STORE_ENDPOINT_URL,
            &s.home_store.as_ref().and_then(|h| h.endpoint.clone()),
        ),
    ] {
        if let Some(url) = url {
            match url::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                _ => return Err(setting.refused(format!("{url:?} is not an `http` or `https` URL"))),
            }
        }
    }
    if let Some(t) = &s.tls {
        if t.addr == s.redirect_addr && t.addr.port() != 0 {
            return Err(TLS_ADDR.refused(format!("must differ from {}", REDIRECT_ADDR.name())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{QueueChoice, StoreChoice};

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
    fn breakdowns_are_every_dimension_by_default_the_ones_named_or_none() {
        use rebound_store::Dimension;
        let read = |file: Option<&str>, vars: &[(&str, &str)]| load(file, &env(vars)).unwrap().redirect.breakdowns;
        assert_eq!(read(None, &[]), Dimension::ALL.to_vec());
        assert_eq!(
            read(None, &[("REBOUND_BREAKDOWNS", "referrer, os")]),
            vec![Dimension::Referrer, Dimension::Os]
        );
        assert_eq!(read(None, &[("REBOUND_BREAKDOWNS", "none")]), vec![]);
        assert_eq!(read(Some("[redirect]\nbreakdowns = []"), &[]), vec![]);
        assert_eq!(read(Some("[redirect]\nbreakdowns = [\"none\"]"), &[]), vec![]);
        // An empty variable counts as unset: the file's, else the default.
        assert_eq!(
            read(
                Some("[redirect]\nbreakdowns = [\"device\"]"),
                &[("REBOUND_BREAKDOWNS", "")]
            ),
            vec![Dimension::Device]
        );
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
        let files = tls.files.unwrap();
        assert_eq!(
            (tls.addr.port(), files.cert.to_str(), files.key.to_str()),
            (8443, Some("/c.pem"), Some("/k.pem"))
        );
        assert_eq!(
            (s.edge.idle_timeout_ms, s.edge.write_timeout_ms, s.edge.h2c),
            (5000, 2500, false)
        );
        assert_eq!(s.acme, None);
        // ACME: the TLS address alone, the domains the public host's by default, lower-cased
        // and each once when given.
        let s = load(
            Some("public_base_url = \"https://Go.Example\"\ntls_addr = \"127.0.0.1:8443\"\n[acme]\ndirectory_url = \"https://acme.example/dir\""),
            &env(&[]),
        )
        .unwrap();
        assert_eq!(s.tls.as_ref().map(|t| t.files.is_none()), Some(true));
        let acme = s.acme.unwrap();
        assert_eq!(
            (acme.domains, acme.challenge, acme.contact),
            (vec!["go.example".to_owned()], rebound_acme::ChallengeKind::Http01, None)
        );
        let s = load(
            Some("tls_addr = \"127.0.0.1:8443\"\n[acme]\ndirectory_url = \"https://acme.example/dir\""),
            &env(&[
                ("REBOUND_ACME_DOMAINS", "A.example,b.example,a.example"),
                ("REBOUND_ACME_CHALLENGE", "tls-alpn-01"),
                ("REBOUND_ACME_CONTACT", "mailto:ops@example.com"),
            ]),
        )
        .unwrap();
        let acme = s.acme.unwrap();
        assert_eq!(
            (acme.domains, acme.challenge, acme.contact.as_deref()),
            (
                vec!["a.example".to_owned(), "b.example".to_owned()],
                rebound_acme::ChallengeKind::TlsAlpn01,
                Some("mailto:ops@example.com")
            )
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

    #[test]
    fn every_check_names_its_setting() {
        for (file, vars, name) in [
            (
                "public_base_url = \"nope\"",
                &[][..],
                "public_base_url (REBOUND_PUBLIC_BASE_URL)",
            ),
            ("public_base_url = \"ftp://x.example\"", &[], "public_base_url"),
            ("public_base_url = \"https://x.example/?a\"", &[], "public_base_url"),
            (
                "bootstrap_key = \"short\"",
                &[],
                "bootstrap_key (REBOUND_BOOTSTRAP_KEY)",
            ),
            (
                "[api]\nmax_body_bytes = 10",
                &[],
                "api.max_body_bytes (REBOUND_MAX_BODY_BYTES)",
            ),
            ("[api]\ncreator_rate_per_sec = -1.0", &[], "api.creator_rate_per_sec"),
            ("[api]\nanonymous_rate_per_sec = nan", &[], "api.anonymous_rate_per_sec"),
            ("[api]\nanonymous_burst = 0", &[], "api.anonymous_burst"),
            ("[api]\nidempotency_ttl_secs = 0", &[], "api.idempotency_ttl_secs"),
            ("[redirect]\nl1_capacity = 0", &[], "redirect.l1_capacity"),
            (
                "[redirect]\ncache_max_age_secs = 86401",
                &[],
                "redirect.cache_max_age_secs",
            ),
            ("[redirect]\ncache_fresh_ms = 86400001", &[], "redirect.cache_fresh_ms"),
            (
                "",
                &[("REBOUND_L1_TTL_MS", "0")],
                "redirect.l1_ttl_ms (REBOUND_L1_TTL_MS)",
            ),
            ("[redirect]\nclick_rows_per_sec = 0", &[], "redirect.click_rows_per_sec"),
            ("[redirect]\nclick_write_share = 0.0", &[], "redirect.click_write_share"),
            ("", &[("REBOUND_CLICK_WRITE_SHARE", "1.5")], "REBOUND_CLICK_WRITE_SHARE"),
            ("", &[("REBOUND_CLICK_WRITE_SHARE", "NaN")], "REBOUND_CLICK_WRITE_SHARE"),
            ("[redirect]\nclick_max_hold_ms = 0", &[], "redirect.click_max_hold_ms"),
            // TLS without a certificate, and ACME that cannot work.
            ("tls_addr = \"127.0.0.1:8443\"", &[], "tls_addr (REBOUND_TLS_ADDR) / tls_cert (REBOUND_TLS_CERT) / tls_key"),
            (
                "[acme]\ndirectory_url = \"https://acme.example/dir\"",
                &[],
                "acme.directory_url (REBOUND_ACME_DIRECTORY_URL): needs tls_addr",
            ),
            (
                "tls_addr = \"127.0.0.1:8443\"\n[acme]\ndirectory_url = \"http://acme.example/dir\"",
                &[],
                "acme.directory_url (REBOUND_ACME_DIRECTORY_URL)",
            ),
            (
                "tls_addr = \"127.0.0.1:8443\"\n[acme]\ndirectory_url = \"https://acme.example/dir\"\ndomains = [\"go.example\", \"bad_name.example\"]",
                &[],
                "acme.domains (REBOUND_ACME_DOMAINS): \"bad_name.example\" is not a DNS name",
            ),
            (
                "tls_addr = \"127.0.0.1:8443\"\n[acme]\ndirectory_url = \"https://acme.example/dir\"\ndomains = [\"10.0.0.1\"]",
                &[],
                "acme.domains (REBOUND_ACME_DOMAINS)",
            ),
            ("", &[("REBOUND_ACME_CHALLENGE", "dns-01")], "acme.challenge (REBOUND_ACME_CHALLENGE)"),
            // A choice is one of its words exactly, from the file as from a variable: no
            // other case, no default arm.
            ("store = \"SQLite\"", &[], "\"SQLite\" is not sqlite or dynamodb"),
            ("queue = 1", &[], "queue (REBOUND_QUEUE)"),
            ("", &[("REBOUND_QUEUE", "SQS")], "\"SQS\" is not embedded or sqs"),
            ("", &[("REBOUND_BREAKDOWNS", "country,city")], "\"city\" is not country or referrer or device"),
            ("", &[("REBOUND_BREAKDOWNS", "none,country")], "redirect.breakdowns (REBOUND_BREAKDOWNS): `none` stands alone"),
            ("[redirect]\nbreakdowns = [\"Country\"]", &[], "redirect.breakdowns (REBOUND_BREAKDOWNS)"),
            ("", &[("REBOUND_COUNTRY_HEADER", "akamai")], "redirect.country_header (REBOUND_COUNTRY_HEADER)"),
            (
                "",
                &[("REBOUND_COUNTRY_HEADER", "cloudflare")],
                "redirect.country_header (REBOUND_COUNTRY_HEADER): needs edge.trusted_networks",
            ),
            ("[acme]\nchallenge = \"dns-01\"", &[], "\"dns-01\" is not http-01 or tls-alpn-01"),
            ("[acme]\ncontact = \"ops@example.com\"", &[], "acme.contact"),
            (
                "[edge]\nhead_timeout_ms = 0",
                &[],
                "edge.head_timeout_ms (REBOUND_HEAD_TIMEOUT_MS)",
            ),
            ("[edge]\nmax_head_bytes = 100", &[], "edge.max_head_bytes"),
            ("", &[("REBOUND_API_MAX_CONNECTIONS", "0")], "edge.api_max_connections"),
            ("redis_prefix = \"\"", &[], "redis_prefix (REBOUND_REDIS_PREFIX)"),
            ("sqs_visibility_secs = 43201", &[], "sqs_visibility_secs"),
            (
                "store = \"dynamodb\"\ntable_prefix = \"bad prefix\"",
                &[],
                "table_prefix",
            ),
            (
                "queue = \"sqs\"\nsqs_queue = \"\"",
                &[],
                "sqs_queue (REBOUND_SQS_QUEUE)",
            ),
            (
                "redirect_addr = \"127.0.0.1:8080\"",
                &[
                    ("REBOUND_TLS_ADDR", "127.0.0.1:8080"),
                    ("REBOUND_TLS_CERT", "/c.pem"),
                    ("REBOUND_TLS_KEY", "/k.pem"),
                ],
                "tls_addr (REBOUND_TLS_ADDR): must differ from redirect_addr (REBOUND_REDIRECT_ADDR)",
            ),
            (
                "peer_regions = [\"redis://r.example:6379\"]",
                &[],
                "peer_regions (REBOUND_PEER_REGIONS): \"redis://r.example:6379\" is not `<region>=<redis URL>`",
            ),
            (
                "region = \"eu\"\npeer_regions = [\"eu=redis://r.example:6379\"]",
                &[],
                "peer_regions (REBOUND_PEER_REGIONS): names \"eu\", this region",
            ),
            (
                "",
                &[("REBOUND_PEER_REGIONS", "us=redis://a:1,us=redis://b:1")],
                "names \"us\" twice",
            ),
            (
                "",
                &[("REBOUND_PEER_REGIONS", "US=redis://a:1")],
                "is not a region name",
            ),
            (
                "home_region_url = \"ftp://h.example\"",
                &[],
                "home_region_url (REBOUND_HOME_REGION_URL)",
            ),
            (
                "home_store_endpoint_url = \"http://h.example\"",
                &[],
                "home_store_endpoint_url (REBOUND_HOME_STORE_ENDPOINT_URL): is set without home_store_region",
            ),
            (
                "home_store_region = \"us-east-1\"",
                &[],
                "home_store_region (REBOUND_HOME_STORE_REGION): is for a store replicated between regions",
            ),
            ("home_store_region = \"us east\"", &[], "home_store_region"),
        ] {
            let err = load(Some(file), &env(vars)).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(name), "{file:?} {vars:?}: {err:?} should name {name}");
        }
    }

    #[test]
    fn a_region_reads_its_peers_and_its_home() {
        let s = load(
            Some("store = \"dynamodb\"\nregion = \"eu-west-1\"\nhome_region_url = \"https://api.us.example\""),
            &env(&[
                (
                    "REBOUND_PEER_REGIONS",
                    " us-east-1=rediss://r.us.example:6379 , ap-1=redis://r.ap:6379/",
                ),
                ("REBOUND_HOME_STORE_REGION", "us-east-1"),
                ("REBOUND_HOME_STORE_ENDPOINT_URL", "http://127.0.0.1:8000"),
            ]),
        )
        .unwrap();
        let peers: Vec<(&str, &str)> = s
            .peer_regions
            .iter()
            .map(|p| (p.name.as_str(), p.redis_url.as_str()))
            .collect();
        assert_eq!(
            peers,
            [
                ("us-east-1", "rediss://r.us.example:6379"),
                ("ap-1", "redis://r.ap:6379/")
            ]
        );
        assert_eq!(s.home_region_url.as_deref(), Some("https://api.us.example"));
        let home = s.home_store.unwrap();
        assert_eq!(
            (home.region.as_str(), home.endpoint.as_deref()),
            ("us-east-1", Some("http://127.0.0.1:8000"))
        );
    }

    #[test]
    fn a_value_not_of_its_type_says_where_it_was_written() {
        let err = load(Some("api_addr = 5"), &env(&[])).unwrap_err().to_string();
        assert!(
            err.starts_with("api_addr (REBOUND_API_ADDR), in the configuration file: "),
            "{err}"
        );
        let err = load(None, &env(&[("REBOUND_H2C", "perhaps")])).unwrap_err().to_string();
        assert_eq!(
            err,
            "edge.h2c (REBOUND_H2C), in the environment: \"perhaps\" is not true or false"
        );
        let err = load(Some("[api]\ncode_key = \"a-secret-value\""), &env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("api.code_key (REBOUND_CODE_KEY)") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_and_tables_are_refused_by_name() {
        for (file, key) in [
            ("[edge]\nmax_conections = 5", "`edge.max_conections`"),
            ("[nosuch]\na = 1", "`nosuch`"),
            ("[nosuch]", "`nosuch`"),
            ("edge = 5", "`edge`"),
            ("max_connections = 5", "`max_connections`"),
        ] {
            let err = load(Some(file), &env(&[])).unwrap_err().to_string();
            assert!(
                err.starts_with("configuration file: ") && err.contains(key),
                "{file:?}: {err}"
            );
        }
        let s = load(Some("[edge]\n[api]\n[redirect]"), &env(&[])).unwrap();
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn an_empty_variable_is_unset_and_a_prefix_is_checked_only_where_used() {
        let s = load(
            Some("[edge]\nmax_connections = 10"),
            &env(&[("REBOUND_MAX_CONNECTIONS", ""), ("REBOUND_TABLE_PREFIX", "bad prefix")]),
        )
        .unwrap();
        assert_eq!((s.edge.max_connections, s.store), (10, StoreChoice::Sqlite));
        let s = load(
            None,
            &env(&[("REBOUND_STORE", "dynamodb"), ("REBOUND_TABLE_PREFIX", "t-1.")]),
        )
        .unwrap();
        assert_eq!(
            s.store,
            StoreChoice::DynamoDb {
                table_prefix: "t-1.".into()
            }
        );
    }

    #[test]
    fn defaults_come_from_the_crates_that_own_them() {
        let s = Settings::default();
        let edge = rebound_edge::EdgeLimits::default();
        assert_eq!(s.edge.max_connections, edge.max_connections);
        assert_eq!(s.edge.head_timeout_ms, edge.head_timeout.as_millis() as u64);
        assert_eq!(s.redirect, crate::settings::RedirectSettings::default());
        assert_eq!(s.api, crate::settings::ApiSettings::default());
        assert_eq!(
            s.public_base_url,
            crate::settings::ControlPlaneConfig::default().public_base_url
        );
    }
}
