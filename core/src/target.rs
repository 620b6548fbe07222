//! Validation and normalisation of target URLs (SPEC §5). The destination is never fetched.

use url::{Host, Url};

/// Default longest target accepted, in bytes.
pub const DEFAULT_MAX_TARGET_BYTES: usize = 2048;

/// Why a target URL is refused. Messages never echo the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("long_url must not be empty")]
    Empty,
    #[error("long_url is longer than {0} bytes")]
    TooLong(usize),
    #[error("long_url must not contain whitespace or control characters")]
    Whitespace,
    #[error("long_url must be an absolute http or https URL")]
    Scheme,
    #[error("long_url is not a valid URL")]
    Malformed,
    #[error("long_url must have a host")]
    NoHost,
    #[error("long_url must not contain user information")]
    UserInfo,
    #[error("long_url must not point at this service's own short links")]
    OwnHost,
    #[error("long_url's domain is blocked")]
    Blocked,
}

/// The rules a target must follow.
#[derive(Debug, Clone)]
pub struct TargetPolicy {
    /// Longest target, in bytes, as sent and after normalisation.
    pub max_bytes: usize,
    /// The service's own short host (lower-case, punycode) and port: targets there are loops.
    pub own_host: Option<(String, u16)>,
    /// Domains refused together with all their subdomains (lower-case, punycode).
    pub blocked_domains: Vec<String>,
}

impl Default for TargetPolicy {
    fn default() -> Self {
        TargetPolicy {
            max_bytes: DEFAULT_MAX_TARGET_BYTES,
            own_host: None,
            blocked_domains: Vec::new(),
        }
    }
}

impl TargetPolicy {
    /// The policy that refuses targets on the host and port of `public_base_url`.
    pub fn with_public_base(mut self, public_base_url: &str) -> Result<Self, TargetError> {
        let base = Url::parse(public_base_url).map_err(|_| TargetError::Malformed)?;
        let host = base.host_str().ok_or(TargetError::NoHost)?;
        let port = base.port_or_known_default().ok_or(TargetError::Scheme)?;
        self.own_host = Some((normalise_host(host), port));
        Ok(self)
    }

    /// Adds blocked domains (any case, Unicode or punycode).
    pub fn with_blocklist<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, domains: I) -> Self {
        for d in domains {
            let d = d.as_ref().trim();
            if d.is_empty() {
                continue;
            }
            let ascii = idna_domain(d).unwrap_or_else(|| d.to_ascii_lowercase());
            self.blocked_domains.push(normalise_host(&ascii));
        }
        self
    }

    /// Validates `raw` as sent and returns the normalised target.
    pub fn validate(&self, raw: &str) -> Result<String, TargetError> {
        if raw.is_empty() {
            return Err(TargetError::Empty);
        }
        if raw.len() > self.max_bytes {
            return Err(TargetError::TooLong(self.max_bytes));
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(TargetError::Whitespace);
        }
        let lower_prefix: String = raw.chars().take(8).collect::<String>().to_ascii_lowercase();
        let after_scheme = if lower_prefix.starts_with("https://") {
            &raw[8..]
        } else if lower_prefix.starts_with("http://") {
            &raw[7..]
        } else {
            return Err(TargetError::Scheme);
        };
        // A backslash is not legal in a URL; browsers and parsers disagree on what it means.
        if raw.contains('\\') {
            return Err(TargetError::Malformed);
        }
        let authority_end = after_scheme.find(['/', '?', '#']).unwrap_or(after_scheme.len());
        let authority = &after_scheme[..authority_end];
        if authority.contains('@') {
            return Err(TargetError::UserInfo);
        }
        if authority.is_empty() {
            return Err(TargetError::NoHost);
        }
        let url = Url::parse(raw).map_err(|_| TargetError::Malformed)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TargetError::Scheme);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(TargetError::UserInfo);
        }
        let host = match url.host() {
            Some(Host::Domain(d)) if !d.is_empty() => normalise_host(d),
            Some(Host::Domain(_)) | None => return Err(TargetError::NoHost),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => format!("[{ip}]"),
        };
        if let Some((own_host, own_port)) = &self.own_host {
            let port = url.port_or_known_default().unwrap_or(0);
            let both_default = is_default_port(port) && is_default_port(*own_port);
            if &host == own_host && (port == *own_port || both_default) {
                return Err(TargetError::OwnHost);
            }
        }
        if self
            .blocked_domains
            .iter()
            .any(|b| host == *b || host.ends_with(&format!(".{b}")))
        {
            return Err(TargetError::Blocked);
        }
        let normalised = String::from(url);
        if normalised.len() > self.max_bytes {
            return Err(TargetError::TooLong(self.max_bytes));
        }
        Ok(normalised)
    }
}

fn is_default_port(port: u16) -> bool {
    port == 80 || port == 443
}

fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn idna_domain(domain: &str) -> Option<String> {
    let url = Url::parse(&format!("http://{domain}/")).ok()?;
    url.host_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> TargetPolicy {
        TargetPolicy::default()
            .with_public_base("https://sho.rt")
            .unwrap()
            .with_blocklist(["evil.example", "BÜCHER.example"])
    }

    #[test]
    fn accepted_and_normalised() {
        let p = policy();
        let cases = [
            ("https://example.com", "https://example.com/"),
            ("http://example.com/a?b=c#d", "http://example.com/a?b=c#d"),
            ("HTTPS://EXAMPLE.com/Path", "https://example.com/Path"),
            (
                "https://münchen.example/straße",
                "https://xn--mnchen-3ya.example/stra%C3%9Fe",
            ),
            ("https://example.com:8443/x", "https://example.com:8443/x"),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/"),
            ("http://[::1]/", "http://[::1]/"),
            ("https://sho.rt:8080/abc", "https://sho.rt:8080/abc"),
            ("https://notevil.example/", "https://notevil.example/"),
            ("https://example.com/a%20b", "https://example.com/a%20b"),
        ];
        for (raw, want) in cases {
            assert_eq!(p.validate(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refused() {
        let p = policy();
        let long = format!("https://example.com/{}", "a".repeat(2100));
        let cases: Vec<(&str, TargetError)> = vec![
            ("", TargetError::Empty),
            (&long, TargetError::TooLong(2048)),
            ("https://example.com/a b", TargetError::Whitespace),
            (" https://example.com/", TargetError::Whitespace),
            ("https://example.com/\t", TargetError::Whitespace),
            ("https://example.com/\u{7f}", TargetError::Whitespace),
            ("https://example.com/\u{a0}", TargetError::Whitespace),
            ("ftp://example.com/", TargetError::Scheme),
            ("javascript:alert(1)", TargetError::Scheme),
            ("data:text/html,hi", TargetError::Scheme),
            ("//example.com/", TargetError::Scheme),
            ("example.com", TargetError::Scheme),
            ("/relative", TargetError::Scheme),
            ("http:/example.com", TargetError::Scheme),
            ("https://", TargetError::NoHost),
            ("https:///path", TargetError::NoHost),
            ("https://user:pw@example.com/", TargetError::UserInfo),
            ("https://user@example.com/", TargetError::UserInfo),
            ("https://@example.com/", TargetError::UserInfo),
            ("https://example.com\\@evil.example/", TargetError::Malformed),
            ("https://exa mple.com/", TargetError::Whitespace),
            ("https://exam<ple.com/", TargetError::Malformed),
            ("https://example.com:99999/", TargetError::Malformed),
            ("https://sho.rt/abc", TargetError::OwnHost),
            ("http://sho.rt/abc", TargetError::OwnHost),
            ("https://SHO.RT./abc", TargetError::OwnHost),
            ("https://sho.rt:443/abc", TargetError::OwnHost),
            ("https://evil.example/", TargetError::Blocked),
            ("https://a.b.evil.example/x", TargetError::Blocked),
            ("https://EVIL.example./", TargetError::Blocked),
            ("https://bücher.example/", TargetError::Blocked),
            ("https://xn--bcher-kva.example/", TargetError::Blocked),
        ];
        for (raw, want) in cases {
            assert_eq!(p.validate(raw), Err(want.clone()), "{raw:?}");
        }
    }

    #[test]
    fn own_host_with_an_explicit_port() {
        let p = TargetPolicy::default()
            .with_public_base("http://127.0.0.1:8080")
            .unwrap();
        assert_eq!(p.validate("http://127.0.0.1:8080/abc"), Err(TargetError::OwnHost));
        assert_eq!(p.validate("https://127.0.0.1:8080/abc"), Err(TargetError::OwnHost));
        assert!(p.validate("http://127.0.0.1:8081/abc").is_ok());
        assert!(p.validate("http://127.0.0.1/abc").is_ok());
    }

    #[test]
    fn length_limit_is_configurable_and_applies_after_normalisation() {
        let p = TargetPolicy {
            max_bytes: 30,
            ..TargetPolicy::default()
        };
        assert!(p.validate("https://example.com/abcdefghij").is_ok());
        assert_eq!(
            p.validate("https://example.com/abcdefghijk"),
            Err(TargetError::TooLong(30))
        );
        // 28 bytes as sent, longer once the path is percent-encoded.
        assert_eq!(p.validate("https://example.com/ééé"), Err(TargetError::TooLong(30)));
    }
}
