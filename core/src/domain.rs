//! Domains (docs/spec.md §11): the hosts a fleet serves links on, and how a link's key carries its
//! domain.
//!
//! A link belongs to one domain. The default domain is the host of `public_base_url`; every
//! other domain gets a short id when it is added (from a counter, so never reused), and a
//! link's key in every store, cache, filter and feed is its code on the default domain and
//! `<code>.<id>` on another. `.` is not a code character, so the two never meet, a store
//! made before domains existed is already the default domain's, and the default domain's
//! redirect path builds no key at all. The longest key, 32 + 1 + [`MAX_ID_LEN`] bytes,
//! stays well inside what L1 holds.

use crate::app_links::AppLinks;
use crate::time::UnixMillis;
use serde::{Deserialize, Serialize};

/// The counter domain ids come from (leased one at a time; never reused).
pub const DOMAIN_ID_COUNTER: &str = "domain_ids";
/// The counter bumped by every change of the domains: a data plane polls its high-water
/// mark (one strongly consistent read) and reloads the list only when it moved.
pub const DOMAINS_CHANGED_COUNTER: &str = "domain_changes";
/// Between a code and its domain's id in a key.
pub const KEY_SEPARATOR: char = '.';
/// Longest domain id: base62 of a counter value below 62^8 (2.1 × 10^14 domains).
pub const MAX_ID_LEN: usize = 8;
/// Longest link key: a code, the separator and an id.
pub const MAX_KEY_LEN: usize = crate::code::MAX_LEN + 1 + MAX_ID_LEN;

/// The id of the domain whose counter value is `value` (≥ 1): base62, shortest form.
pub fn domain_id(value: u64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let (mut v, mut out) = (value, Vec::new());
    loop {
        out.push(DIGITS[(v % 62) as usize]);
        v /= 62;
        if v == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("base62 digits are ASCII")
}

/// Whether `id` is one [`domain_id`] can have made.
pub fn is_domain_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The key of `code` on the domain `id` (`None`: the default domain).
pub fn link_key(code: &str, id: Option<&str>) -> String {
    match id {
        None => code.to_owned(),
        Some(id) => format!("{code}{KEY_SEPARATOR}{id}"),
    }
}

/// A key's code and its domain's id (`None`: the default domain).
pub fn split_key(key: &str) -> (&str, Option<&str>) {
    match key.split_once(KEY_SEPARATOR) {
        Some((code, id)) => (code, Some(id)),
        None => (key, None),
    }
}

/// Whether `key` is a code, or a code, the separator and a domain id.
pub fn is_valid_key(key: &str) -> bool {
    let (code, id) = split_key(key);
    crate::code::is_valid_code(code.as_bytes()) && id.is_none_or(is_domain_id)
}

/// Why a name is not a domain Rebound can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    #[error("is not a DNS name (letters, digits and '-' in dot-separated labels of at most 63, two labels or more)")]
    NotDnsName,
    #[error("is an IP address, not a domain")]
    IpAddress,
}

/// The domain's canonical form: lower case, no trailing dot; refused unless it is a DNS
/// name ([`is_dns_name`]). An internationalized name is given in its ASCII form
/// (`xn--bcher-kva.example`, as DNS and certificates carry it), so what is accepted is
/// exactly what [`DOMAIN_PATTERN`] states.
pub fn normalize_domain(name: &str) -> Result<String, DomainError> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.parse::<std::net::IpAddr>().is_ok() || bare.starts_with('[') {
        return Err(DomainError::IpAddress);
    }
    match is_dns_name(bare) {
        true => Ok(bare.to_ascii_lowercase()),
        false => Err(DomainError::NotDnsName),
    }
}

/// [`normalize_domain`]'s rule as a regular expression (the API's schema states it): labels
/// of letters, digits and inner `-`, the last starting with a letter, one trailing dot
/// allowed (the 253-byte bound is the schema's length).
pub const DOMAIN_PATTERN: &str =
    r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$";

/// A DNS name of two labels or more, each of letters, digits and inner `-`, the last
/// starting with a letter (as every top-level domain does; an all-digit one would read as an
/// IPv4 address), at most 253 bytes.
pub fn is_dns_name(name: &str) -> bool {
    let mut labels = 0;
    let mut last = "";
    for label in name.split('.') {
        let ok = (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return false;
        }
        labels += 1;
        last = label;
    }
    name.len() <= 253 && labels >= 2 && last.as_bytes()[0].is_ascii_alphabetic()
}

/// The host of a request's authority (`Host` or `:authority`, as bytes: the redirect path
/// never needs it as text for the default domain): without its port and one trailing dot;
/// an IPv6 literal keeps its brackets. Not lower-cased: compare with `eq_ignore_ascii_case`.
#[inline]
pub fn host_of(authority: &[u8]) -> &[u8] {
    let host = match authority.first() {
        Some(b'[') => match authority.iter().position(|&b| b == b']') {
            Some(end) => &authority[..=end],
            None => authority,
        },
        _ => match authority.iter().rposition(|&b| b == b':') {
            Some(colon) => &authority[..colon],
            None => authority,
        },
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// Whether a request's `host` (as [`host_of`] gives it) is an address rather than a name
/// any domain could have: an IPv6 literal, or a last label that starts with a digit (an
/// IPv4 address's does; no domain's does, see [`DOMAIN_PATTERN`]). A client that reached
/// the port by its address. One byte looked at, where parsing the address cost the
/// redirect path about 170 instructions.
#[inline]
pub fn is_address(host: &[u8]) -> bool {
    let last_label = match host.iter().rposition(|&b| b == b'.') {
        Some(dot) => &host[dot + 1..],
        None => host,
    };
    host.first() == Some(&b'[') || last_label.first().is_some_and(u8::is_ascii_digit)
}

/// Where a domain's certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CertificateSource {
    /// Ordered and renewed over ACME by the fleet, kept in the store.
    #[default]
    Acme,
    /// The operator's certificate files of the TLS port (`tls.cert`), managed by hand.
    Files,
}

/// A domain's own answers for a code it does not have, a link that expired, and `/`: each a
/// URL redirected to, or the built-in page when `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DomainPages {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_url: Option<String>,
}

/// A domain other than the default one, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Canonical ([`normalize_domain`]).
    pub name: String,
    /// What its links' keys end with ([`domain_id`]).
    pub id: String,
    pub created_at: UnixMillis,
    pub created_by: String,
    #[serde(default)]
    pub certificate: CertificateSource,
    #[serde(default)]
    pub pages: DomainPages,
    /// The last failure to order its certificate, when the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_error: Option<String>,
    /// When its certificate was last ordered or tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_attempt_at: Option<UnixMillis>,
    /// Its app links (docs/spec.md §14). Not part of the record's JSON: a store keeps them
    /// beside it, written by `insert_domain` and `set_app_links` alone, so an update of the
    /// rest (a certificate's state) never undoes them, nor they it.
    #[serde(skip)]
    pub app_links: AppLinks,
}

impl Domain {
    /// The key of `code` on this domain.
    pub fn key(&self, code: &str) -> String {
        link_key(code, Some(&self.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_base62_and_distinct() {
        let cases = [(1, "1"), (9, "9"), (10, "A"), (61, "z"), (62, "10"), (3_843, "zz")];
        for (value, want) in cases {
            assert_eq!(domain_id(value), want);
            assert!(is_domain_id(want));
        }
        assert_eq!(domain_id(62u64.pow(8) - 1).len(), MAX_ID_LEN);
        let ids: std::collections::HashSet<String> = (1..10_000).map(domain_id).collect();
        assert_eq!(ids.len(), 9_999);
        for bad in ["", "a-b", "a.b", "123456789"] {
            assert!(!is_domain_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn keys_carry_the_domain_and_split_back() {
        let cases: &[(&str, Option<&str>, &str)] = &[
            ("abc1234", None, "abc1234"),
            ("abc1234", Some("1"), "abc1234.1"),
            ("my-alias_", Some("zZ9"), "my-alias_.zZ9"),
        ];
        for (code, id, key) in cases {
            assert_eq!(link_key(code, *id), *key);
            assert_eq!(split_key(key), (*code, *id));
            assert!(is_valid_key(key));
        }
        let longest = link_key(&"x".repeat(32), Some(&domain_id(62u64.pow(8) - 1)));
        assert_eq!(longest.len(), MAX_KEY_LEN);
        assert!(is_valid_key(&longest));
        for bad in ["ab", "abc.", "abc.d.e", "abc.d-e", ".1", "a b.1", "abc.123456789"] {
            assert!(!is_valid_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn domain_names_are_canonical_or_refused() {
        let cases: &[(&str, Result<&str, DomainError>)] = &[
            ("go.acme.com", Ok("go.acme.com")),
            ("Go.ACME.com.", Ok("go.acme.com")),
            (" acme.link ", Err(DomainError::NotDnsName)),
            ("xn--bcher-kva.example", Ok("xn--bcher-kva.example")),
            ("bücher.example", Err(DomainError::NotDnsName)),
            ("a.b1", Ok("a.b1")),
            ("a.1b", Err(DomainError::NotDnsName)),
            ("a-b.c-d.example", Ok("a-b.c-d.example")),
            ("localhost", Err(DomainError::NotDnsName)),
            ("", Err(DomainError::NotDnsName)),
            ("-a.example", Err(DomainError::NotDnsName)),
            ("a..example", Err(DomainError::NotDnsName)),
            ("a_b.example", Err(DomainError::NotDnsName)),
            ("a.example/x", Err(DomainError::NotDnsName)),
            ("a.example:443", Err(DomainError::NotDnsName)),
            ("1.2.3.4", Err(DomainError::IpAddress)),
            ("::1", Err(DomainError::IpAddress)),
            ("[::1]", Err(DomainError::IpAddress)),
            ("a.123", Err(DomainError::NotDnsName)),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_domain(input).as_deref().map_err(|e| *e), *want, "{input:?}");
        }
        let long = format!("{}.example", vec!["a".repeat(63); 4].join("."));
        assert_eq!(normalize_domain(&long), Err(DomainError::NotDnsName));
    }

    #[test]
    fn the_host_of_an_authority() {
        let cases = [
            ("go.acme.com", "go.acme.com", false),
            ("go.acme.com:8443", "go.acme.com", false),
            ("Go.Acme.Com.", "Go.Acme.Com", false),
            ("go.acme.com.:80", "go.acme.com", false),
            ("127.0.0.1:8080", "127.0.0.1", true),
            ("127.0.0.1", "127.0.0.1", true),
            ("[::1]:8080", "[::1]", true),
            ("[::1]", "[::1]", true),
            ("1.example", "1.example", false),
            ("10.0.0.300", "10.0.0.300", true),
            ("example.1a", "example.1a", true),
            ("", "", false),
        ];
        for (authority, host, address) in cases {
            assert_eq!(host_of(authority.as_bytes()), host.as_bytes(), "{authority:?}");
            assert_eq!(is_address(host.as_bytes()), address, "{authority:?}");
            // No name an address is could be a domain's.
            if address {
                assert!(normalize_domain(host).is_err(), "{host:?}");
            }
        }
    }

    #[test]
    fn a_domain_record_reads_back_and_tolerates_missing_fields() {
        let d = Domain {
            name: "acme.link".into(),
            id: "2".into(),
            created_at: 5,
            created_by: "op".into(),
            certificate: CertificateSource::Files,
            pages: DomainPages {
                not_found_url: Some("https://acme.com/404".into()),
                ..DomainPages::default()
            },
            certificate_error: None,
            certificate_attempt_at: None,
            app_links: AppLinks::default(),
        };
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Domain>(&text).unwrap(), d);
        // The app links are kept beside the record, never in it.
        let with_links = Domain {
            app_links: AppLinks {
                apple_app_site_association: Some("{}".into()),
                assetlinks: None,
            },
            ..d.clone()
        };
        assert_eq!(serde_json::to_string(&with_links).unwrap(), text);
        let old: Domain =
            serde_json::from_str(r#"{"name":"a.example","id":"1","created_at":1,"created_by":"o"}"#).unwrap();
        assert_eq!(old.certificate, CertificateSource::Acme);
        assert_eq!(old.pages, DomainPages::default());
        assert_eq!(old.key("abc"), "abc.1");
    }
}
