//! Validation and normalisation of target URLs (docs/spec.md §5). The destination is never fetched,
//! and no name is ever resolved: a loop is recognised from the URL's text alone.

use std::net::IpAddr;
use unicode_security::MixedScript;
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
    #[error("long_url's host is longer than DNS allows (labels at most 63 octets, the name at most 253)")]
    HostTooLong,
    #[error("long_url's port must be from 1 to 65535")]
    PortZero,
    #[error("long_url's host mixes scripts in one label, as look-alike names do")]
    MixedScript,
    #[error("long_url has a '%' that is not followed by two hexadecimal digits")]
    BadPercentEscape,
    #[error("long_url's host has an empty label (a leading dot, or two dots in a row)")]
    EmptyLabel,
}

/// A host as the network sees it, so that different spellings of one host compare equal.
/// The own-host check and the blocklist both compare these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostIdentity {
    /// This machine: 127.0.0.0/8, ::1, the unspecified 0.0.0.0 and ::, `localhost` and
    /// `*.localhost` (RFC 6761), in any spelling (IPv4-mapped, trailing dot, any case).
    Loopback,
    /// Any other address; an IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-compatible
    /// (`::a.b.c.d`) IPv6 address as its IPv4.
    Ip(IpAddr),
    /// Any other name: lower-case punycode, without the trailing dot.
    Name(String),
}

impl HostIdentity {
    /// The identity of a host written alone, as a blocklist entry is: a name in any case,
    /// Unicode or punycode, with at most one trailing dot; an IPv4 address in any form the
    /// URL Standard's IPv4 parser reads (`10.1.2.3`, `0x0a.1.2.3`, `012.1.2.3`, `10.66051`,
    /// `167838211`); or an IPv6 address in brackets.
    pub fn parse(text: &str) -> Result<HostIdentity, TargetError> {
        let host = Host::parse(text).map_err(|_| TargetError::Malformed)?;
        if let Host::Domain(name) = &host {
            check_labels(name)?;
        }
        Ok(HostIdentity::of(&host))
    }

    pub(crate) fn of<S: AsRef<str>>(host: &Host<S>) -> HostIdentity {
        let ip = match host {
            Host::Domain(d) => {
                let name = normalise_host(d.as_ref());
                if name == "localhost" || name.ends_with(".localhost") {
                    return HostIdentity::Loopback;
                }
                return HostIdentity::Name(name);
            }
            Host::Ipv4(v4) => IpAddr::V4(*v4),
            // `to_ipv4` would read ::1 as 0.0.0.1: loopback and unspecified stay IPv6.
            Host::Ipv6(v6) if v6.is_loopback() || v6.is_unspecified() => IpAddr::V6(*v6),
            Host::Ipv6(v6) => v6.to_ipv4().map_or(IpAddr::V6(*v6), IpAddr::V4),
        };
        if ip.is_loopback() || ip.is_unspecified() {
            HostIdentity::Loopback
        } else {
            HostIdentity::Ip(ip)
        }
    }
}

/// Longest DNS label and name, in octets (RFC 1035 §2.3.4; the name without its final dot).
const MAX_LABEL_OCTETS: usize = 63;
const MAX_NAME_OCTETS: usize = 253;

/// The rules a target must follow.
#[derive(Debug, Clone)]
pub struct TargetPolicy {
    /// Longest target, in bytes, as sent and after normalisation.
    pub max_bytes: usize,
    /// The service's own short host and port: targets there, in any spelling, are loops.
    pub own_host: Option<(HostIdentity, u16)>,
    /// Hosts refused in any spelling; a name together with all its subdomains.
    pub blocked_hosts: Vec<HostIdentity>,
    /// Refuse hosts with a label that mixes scripts (UTS 39), as look-alikes of other
    /// names do (`раураl.com`, Cyrillic with a Latin `l`).
    pub refuse_mixed_script: bool,
}

impl Default for TargetPolicy {
    fn default() -> Self {
        TargetPolicy {
            max_bytes: DEFAULT_MAX_TARGET_BYTES,
            own_host: None,
            blocked_hosts: Vec::new(),
            refuse_mixed_script: false,
        }
    }
}

impl TargetPolicy {
    /// The policy that refuses targets on the host and port of `public_base_url`.
    pub fn with_public_base(mut self, public_base_url: &str) -> Result<Self, TargetError> {
        let base = Url::parse(public_base_url).map_err(|_| TargetError::Malformed)?;
        let host = base.host().ok_or(TargetError::NoHost)?;
        let port = base.port_or_known_default().ok_or(TargetError::Scheme)?;
        self.own_host = Some((HostIdentity::of(&host), port));
        Ok(self)
    }

    /// Adds blocked hosts, each read by [`HostIdentity::parse`]. An entry that is no host
    /// (the settings refuse those at start) is kept as its lower-case text.
    pub fn with_blocklist<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, hosts: I) -> Self {
        for h in hosts {
            let h = h.as_ref().trim();
            if h.is_empty() {
                continue;
            }
            let identity = HostIdentity::parse(h).unwrap_or_else(|_| HostIdentity::Name(h.to_ascii_lowercase()));
            self.blocked_hosts.push(identity);
        }
        self
    }

    fn is_blocked(&self, host: &HostIdentity) -> bool {
        self.blocked_hosts.iter().any(|blocked| match (blocked, host) {
            (HostIdentity::Name(b), HostIdentity::Name(h)) => h
                .strip_suffix(b.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.ends_with('.')),
            (b, h) => b == h,
        })
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
        // The URL parser keeps a bad escape as it is; RFC 3986 §2.1 does not allow one.
        if !percent_escapes_are_valid(raw) {
            return Err(TargetError::BadPercentEscape);
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
        let parsed_host = url.host().ok_or(TargetError::NoHost)?;
        if let Host::Domain(d) = parsed_host {
            if d.is_empty() {
                return Err(TargetError::NoHost);
            }
            check_labels(d)?;
            let name = normalise_host(d);
            check_dns_lengths(&name)?;
            if self.refuse_mixed_script && has_mixed_script_label(&name) {
                return Err(TargetError::MixedScript);
            }
        }
        let host = HostIdentity::of(&parsed_host);
        let port = url.port_or_known_default().unwrap_or(0);
        if port == 0 {
            return Err(TargetError::PortZero);
        }
        if let Some((own_host, own_port)) = &self.own_host {
            let both_default = is_default_port(port) && is_default_port(*own_port);
            if host == *own_host && (port == *own_port || both_default) {
                return Err(TargetError::OwnHost);
            }
        }
        if self.is_blocked(&host) {
            return Err(TargetError::Blocked);
        }
        let normalised = String::from(url);
        if normalised.len() > self.max_bytes {
            return Err(TargetError::TooLong(self.max_bytes));
        }
        Ok(normalised)
    }
}

/// The name of `target`'s host as the fleet's added domains are named (lower-case punycode,
/// no trailing dot: `rebound_core::domain::normalize_domain`), in any spelling the URL
/// parser reads; `None` when the host is an address, `localhost`, or `target` no URL.
///
/// The own-host rule for added domains (docs/spec.md §11): the fleet routes a request to a domain
/// by its name alone, on every port it listens on, so a target on a served domain's name,
/// at any port, reaches the fleet again (a loop, [`TargetError::OwnHost`]). Which names are
/// served is the store's to say: the caller looks this name up ([`is_on_domain`] for one
/// name it holds).
pub fn served_name_of(target: &str) -> Option<String> {
    let url = Url::parse(target).ok()?;
    match HostIdentity::of(&url.host()?) {
        HostIdentity::Name(name) => Some(name),
        HostIdentity::Loopback | HostIdentity::Ip(_) => None,
    }
}

/// Whether `target` is on the added domain `domain` (canonical), at any port: a loop
/// through the fleet ([`served_name_of`]).
pub fn is_on_domain(target: &str, domain: &str) -> bool {
    served_name_of(target).is_some_and(|name| name == domain)
}

fn is_default_port(port: u16) -> bool {
    port == 80 || port == 443
}

/// RFC 1035 lengths, on the ASCII (punycode) form the resolver would send.
fn check_dns_lengths(ascii_host: &str) -> Result<(), TargetError> {
    if ascii_host.len() > MAX_NAME_OCTETS || ascii_host.split('.').any(|l| l.len() > MAX_LABEL_OCTETS) {
        return Err(TargetError::HostTooLong);
    }
    Ok(())
}

/// True when a label of the host, in Unicode, is not single-script (UTS 39 §5.1, with the
/// augmented script sets, so that `日本語` or `テスト例` count as one script).
fn has_mixed_script_label(ascii_host: &str) -> bool {
    let (unicode, result) = idna::domain_to_unicode(ascii_host);
    // The host came out of the URL parser in valid punycode; a failure here is not expected,
    // and is treated as suspicious.
    result.is_err() || unicode.split('.').any(|label| !label.is_single_script())
}

/// RFC 3986 §2.1: pct-encoded = "%" HEXDIG HEXDIG, wherever a `%` appears.
fn percent_escapes_are_valid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().filter(|(_, b)| **b == b'%').all(|(i, _)| {
        bytes
            .get(i + 1..i + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    })
}

/// A DNS name has no empty label but the root's (RFC 1034 §3.1), so one trailing dot is
/// allowed and means the same host; the URL Standard would accept `a..b` and `.a`.
fn check_labels(name: &str) -> Result<(), TargetError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    match name.split('.').any(str::is_empty) {
        true => Err(TargetError::EmptyLabel),
        false => Ok(()),
    }
}

fn normalise_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
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
    fn a_target_on_an_added_domain_is_on_it_at_every_port_in_every_spelling() {
        let domain = "go.alpha.test";
        let on: &[&str] = &[
            "http://go.alpha.test/selfa",
            "https://go.alpha.test/selfa",
            "http://go.alpha.test:80/selfa",
            "https://go.alpha.test:443/selfa",
            "http://go.alpha.test:8080/selfa",
            "https://go.alpha.test:48443/x?y#z",
            "HTTP://GO.Alpha.TEST/selfa",
            "http://go.alpha.test./selfa",
            "http://GO.ALPHA.TEST.:8080/",
            "http://go.alpha.test",
            "http://go%2ealpha.test/x",
        ];
        for target in on {
            assert!(is_on_domain(target, domain), "{target} is on {domain}");
            assert_eq!(served_name_of(target).as_deref(), Some(domain), "{target}");
        }
        let off: &[&str] = &[
            "http://alpha.test/selfa",
            "http://x.go.alpha.test/selfa",
            "http://go.alpha.test.example/selfa",
            "http://go-alpha.test/selfa",
            "http://example.com/go.alpha.test",
            "http://example.com/?u=http://go.alpha.test/",
            "http://127.0.0.1:8080/selfa",
            "http://[::1]/selfa",
            "http://localhost/selfa",
            "not a url",
        ];
        for target in off {
            assert!(!is_on_domain(target, domain), "{target} is not on {domain}");
        }
        // Unicode names are named as domains are: in punycode.
        assert!(is_on_domain("https://Bücher.example:8443/x", "xn--bcher-kva.example"));
        assert_eq!(served_name_of("http://10.1.2.3/x"), None);
        assert_eq!(served_name_of("http://a.localhost/x"), None);
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

    #[test]
    fn every_spelling_of_the_own_host_is_a_loop() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "http://127.0.0.1:48080",
                &[
                    "http://127.0.0.1:48080/x",
                    "https://127.0.0.1:48080/x",
                    "http://[::ffff:127.0.0.1]:48080/x",
                    "http://[::FFFF:7f00:1]:48080/x",
                    "http://localhost:48080/x",
                    "http://LocalHost.:48080/x",
                    "http://a.b.localhost:48080/x",
                    "http://0.0.0.0:48080/x",
                    "http://[::]:48080/x",
                    "http://[::1]:48080/x",
                    "http://127.1.2.3:48080/x",
                    "http://2130706433:48080/x",
                    "http://0x7f.1:48080/x",
                    "http://127.0.0.1.:48080/x",
                ],
                &[
                    "http://127.0.0.1:48081/x",
                    "http://localhost:48081/x",
                    "http://127.0.0.1/x",
                    "http://[::2]:48080/x",
                    "http://localhostx:48080/x",
                    "http://localhost.example:48080/x",
                    "http://example.com:48080/x",
                ],
            ),
            (
                "http://sho.rt",
                &[
                    "http://sho.rt/x",
                    "http://sho.rt:80/x",
                    "https://sho.rt:443/x",
                    "http://SHO.RT.:80/x",
                    "https://sho.rt./x",
                ],
                &[
                    "http://sho.rt:8080/x",
                    "http://localhost/x",
                    "http://127.0.0.1/x",
                    "http://a.sho.rt/x",
                ],
            ),
            (
                "http://localhost:8080",
                &[
                    "http://127.0.0.1:8080/x",
                    "http://[::1]:8080/x",
                    "http://localhost.:8080/x",
                    "http://0.0.0.0:8080/x",
                ],
                &["http://127.0.0.1:8081/x", "http://example.com:8080/x"],
            ),
            (
                "http://[::1]:9000",
                &[
                    "http://127.0.0.1:9000/x",
                    "http://[0:0:0:0:0:0:0:1]:9000/x",
                    "http://localhost:9000/x",
                ],
                &["http://[::1]:9001/x"],
            ),
            (
                "http://[::ffff:203.0.113.5]:8080",
                &[
                    "http://203.0.113.5:8080/x",
                    "http://[::ffff:cb00:7105]:8080/x",
                    "http://[::203.0.113.5]:8080/x",
                    "http://0xcb.0.113.5:8080/x",
                ],
                &[
                    "http://203.0.113.6:8080/x",
                    "http://localhost:8080/x",
                    "http://127.0.0.1:8080/x",
                ],
            ),
        ];
        for (base, loops, fine) in cases {
            let p = TargetPolicy::default().with_public_base(base).unwrap();
            for raw in *loops {
                assert_eq!(p.validate(raw), Err(TargetError::OwnHost), "{raw} on {base}");
            }
            for raw in *fine {
                assert!(p.validate(raw).is_ok(), "{raw} on {base}: {:?}", p.validate(raw));
            }
        }
    }

    #[test]
    fn dns_lengths_and_port_zero() {
        let p = TargetPolicy::default();
        let label = |n: usize| "a".repeat(n);
        let ok_host = format!("{}.{}.{}.{}", label(63), label(63), label(63), label(61));
        assert_eq!(ok_host.len(), 253);
        for raw in [
            format!("https://{}.com/", label(63)),
            format!("https://{ok_host}/"),
            format!("https://{ok_host}./"),
            "https://example.com:1/".to_owned(),
            "https://example.com:65535/".to_owned(),
        ] {
            assert!(p.validate(&raw).is_ok(), "{raw}: {:?}", p.validate(&raw));
        }
        for (raw, want) in [
            (format!("https://{}.com/", label(64)), TargetError::HostTooLong),
            (format!("https://{}.com/", label(300)), TargetError::HostTooLong),
            (format!("https://{ok_host}a/"), TargetError::HostTooLong),
            // 60 characters, but 67 octets once punycode.
            (format!("https://{}.com/", "ü".repeat(60)), TargetError::HostTooLong),
            ("https://example.com:0/".to_owned(), TargetError::PortZero),
            ("http://127.0.0.1:0/".to_owned(), TargetError::PortZero),
        ] {
            assert_eq!(p.validate(&raw), Err(want), "{raw}");
        }
    }

    #[test]
    fn the_blocklist_refuses_every_spelling_of_a_blocked_host() {
        let ten: &[&str] = &[
            "http://10.1.2.3/x",
            "http://0x0a.1.2.3/x",
            "http://012.1.2.3/x",
            "http://10.1.515/x",
            "http://10.66051/x",
            "http://167838211/x",
            "http://0xa010203/x",
            "http://10.1.2.3./x",
            "http://[::ffff:10.1.2.3]/x",
            "http://[::FFFF:a01:203]:8080/x",
            "http://[0:0:0:0:0:ffff:0a01:0203]/x",
            "http://[::10.1.2.3]/x",
            "http://[::a01:203]/x",
        ];
        let not_ten: &[&str] = &[
            "http://10.1.2.4/x",
            "http://[::ffff:10.1.2.4]/x",
            "http://[2001:db8::a01:203]/x",
            "http://[64:ff9b::a01:203]/x",
            "http://10.1.2.3.example/x",
        ];
        let example: &[&str] = &[
            "https://example.com/",
            "https://EXAMPLE.COM./x",
            "https://a.b.Example.com/x",
            "https://www.example.com./x",
        ];
        let not_example: &[&str] = &[
            "https://notexample.com/",
            "https://example.com.evil/",
            "https://example.co/",
        ];
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("10.1.2.3", ten, not_ten),
            ("10.1.2.3.", ten, not_ten),
            ("0x0a.1.2.3", ten, not_ten),
            ("167838211", ten, not_ten),
            ("[::ffff:a01:203]", ten, not_ten),
            ("[::ffff:10.1.2.3]", ten, not_ten),
            ("example.com", example, not_example),
            ("EXAMPLE.com", example, not_example),
            ("example.com.", example, not_example),
            (
                "bücher.example",
                &[
                    "https://BÜCHER.example/",
                    "https://xn--bcher-kva.example/",
                    "https://www.bücher.example./",
                ],
                &["https://bucher.example/"],
            ),
            (
                "XN--BCHER-KVA.example",
                &["https://bücher.example/"],
                &["https://bucher.example/"],
            ),
            (
                "[2001:DB8::1]",
                &["http://[2001:db8:0:0::1]/", "http://[2001:db8::0.0.0.1]:81/"],
                &["http://[2001:db8::2]/", "http://0.0.0.1/"],
            ),
            // A loopback entry blocks this machine in every spelling.
            (
                "127.0.0.1",
                &[
                    "http://localhost/",
                    "http://[::1]/",
                    "http://0x7f000001/",
                    "http://127.0.0.2/",
                    "http://[::ffff:127.0.0.1]/",
                ],
                &["http://128.0.0.1/"],
            ),
        ];
        for (entry, blocked, fine) in cases {
            let p = TargetPolicy::default().with_blocklist([entry]);
            for raw in *blocked {
                assert_eq!(p.validate(raw), Err(TargetError::Blocked), "{raw} with {entry} blocked");
            }
            for raw in *fine {
                assert!(
                    p.validate(raw).is_ok(),
                    "{raw} with {entry} blocked: {:?}",
                    p.validate(raw)
                );
            }
        }
    }

    #[test]
    fn every_spelling_of_a_host_has_one_identity() {
        let ten = HostIdentity::Ip(IpAddr::from([10, 1, 2, 3]));
        let example = HostIdentity::Name("example.com".into());
        let cases: &[(&[&str], HostIdentity)] = &[
            (
                &[
                    "10.1.2.3",
                    "10.1.2.3.",
                    "0x0a.1.2.3",
                    "0XA.0x1.0x2.0x3",
                    "012.1.2.3",
                    "10.1.515",
                    "10.66051",
                    "167838211",
                    "0xa010203",
                    "[::ffff:10.1.2.3]",
                    "[::FFFF:A01:203]",
                    "[0:0:0:0:0:ffff:a01:203]",
                    "[::10.1.2.3]",
                    "[::a01:203]",
                ],
                ten.clone(),
            ),
            (&["example.com", "EXAMPLE.com", "example.com.", "Example.COM."], example),
            (
                &[
                    "bücher.example",
                    "BÜCHER.example.",
                    "xn--bcher-kva.example",
                    "XN--BCHER-KVA.EXAMPLE",
                ],
                HostIdentity::Name("xn--bcher-kva.example".into()),
            ),
            (
                &["[2001:db8::1]", "[2001:DB8:0:0:0:0:0:1]", "[2001:db8::0.0.0.1]"],
                HostIdentity::Ip("2001:db8::1".parse().unwrap()),
            ),
            (
                &["[64:ff9b::a01:203]"],
                HostIdentity::Ip("64:ff9b::a01:203".parse().unwrap()),
            ),
            (
                &[
                    "localhost",
                    "LOCALHOST.",
                    "a.localhost",
                    "127.0.0.1",
                    "127.1",
                    "0x7f000001",
                    "127.9.9.9",
                    "0.0.0.0",
                    "0",
                    "[::1]",
                    "[::]",
                    "[::ffff:127.0.0.1]",
                ],
                HostIdentity::Loopback,
            ),
        ];
        for (spellings, want) in cases {
            for text in *spellings {
                assert_eq!(HostIdentity::parse(text).as_ref(), Ok(want), "{text}");
            }
        }
        assert_ne!(HostIdentity::parse("10.1.2.4"), Ok(ten));
        for (text, want) in [
            ("a..b", TargetError::EmptyLabel),
            (".example.com", TargetError::EmptyLabel),
            ("example.com..", TargetError::EmptyLabel),
            (".", TargetError::EmptyLabel),
            ("", TargetError::Malformed),
            ("example.com:443", TargetError::Malformed),
            ("example.com/x", TargetError::Malformed),
            ("user@example.com", TargetError::Malformed),
            ("http://example.com", TargetError::Malformed),
            ("exa mple.com", TargetError::Malformed),
            ("[::ffff:a01:203", TargetError::Malformed),
            ("::ffff:a01:203", TargetError::Malformed),
            ("10.1.2.256", TargetError::Malformed),
            ("1..2", TargetError::Malformed),
        ] {
            assert_eq!(HostIdentity::parse(text), Err(want), "{text:?}");
        }
    }

    #[test]
    fn a_percent_not_followed_by_two_hex_digits_is_refused() {
        let p = TargetPolicy::default();
        for raw in [
            "https://example.com/%zz",
            "https://example.com/a%2",
            "https://example.com/a%",
            "https://example.com/%g0",
            "https://example.com/?q=%",
            "https://example.com/?q=100%25%",
            "https://example.com/#%x1",
            "https://ex%zzample.com/",
        ] {
            assert_eq!(p.validate(raw), Err(TargetError::BadPercentEscape), "{raw}");
        }
        for (raw, want) in [
            ("https://example.com/%2F%2f", "https://example.com/%2F%2f"),
            ("https://example.com/?q=100%25", "https://example.com/?q=100%25"),
            ("https://example.com/#%C3%A9", "https://example.com/#%C3%A9"),
        ] {
            assert_eq!(p.validate(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn empty_dns_labels_are_refused_but_one_trailing_dot_is_the_root() {
        let p = TargetPolicy::default();
        for raw in [
            "https://a..b/",
            "https://.example.com/",
            "https://example.com../",
            "https://./",
            "https://../",
            "https://www..example.com:8080/x",
        ] {
            assert_eq!(p.validate(raw), Err(TargetError::EmptyLabel), "{raw}");
        }
        for raw in [
            "https://example.com./",
            "https://a.b.example.com./x",
            "https://localhost./",
        ] {
            assert!(p.validate(raw).is_ok(), "{raw}: {:?}", p.validate(raw));
        }
    }

    #[test]
    fn mixed_script_labels_are_refused_when_asked() {
        let strict = TargetPolicy {
            refuse_mixed_script: true,
            ..TargetPolicy::default()
        };
        let lax = TargetPolicy::default();
        for raw in [
            "https://раураl.com/",
            "https://xn--l-7sba6dbr.com/",
            "https://wwв.example/",
        ] {
            assert_eq!(strict.validate(raw), Err(TargetError::MixedScript), "{raw}");
            assert!(lax.validate(raw).is_ok(), "{raw}");
        }
        for raw in [
            "https://раура.com/",
            "https://münchen.example/",
            "https://日本語.jp/",
            "https://テスト例.jp/",
            "https://ab-12.example/",
            "https://127.0.0.1/",
        ] {
            assert!(strict.validate(raw).is_ok(), "{raw}: {:?}", strict.validate(raw));
        }
    }
}
