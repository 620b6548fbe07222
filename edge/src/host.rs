//! RFC 9112 §3.2 on every port: an HTTP/1.1 request carries exactly one `Host`, an HTTP/1.0
//! one at most one, and a `Host` is a valid `uri-host [ ":" port ]`; anything else is
//! answered 400 and the connection closed, before the port's service sees it. HTTP/2
//! carries `:authority` instead, which hyper checks.
//!
//! RFC 9110 §15.5.20 on TLS: the certificate of a connection was chosen for the name the
//! client sent by SNI, so a request on it for another host was never authenticated as that
//! host (a client reusing a connection for every name a certificate covers, or a request
//! fronted by one name for another). Each request's host (the target's authority, else
//! `Host`; HTTP/2's `:authority` is the former) must be the SNI name, or it is answered 421
//! Misdirected Request, which tells the client to ask again on a connection of its own; the
//! connection stays open. A request that names no host at all (HTTP/1.0 without `Host`, an
//! HTTP/2 stream without `:authority` or `Host`) on a connection with SNI is for the SNI
//! name, the only one the connection was authenticated for: it is handed on with that name
//! as its `Host`, never as a request for whatever the service would pick by default. A
//! client without SNI (one that connected to an IP address) named nothing to compare with,
//! and a cleartext connection has no SNI: neither checks anything, and the check is a test
//! of an `Option` per request for them.

use crate::guard::HeadArrived;
use http::header::{HeaderValue, CACHE_CONTROL, CONNECTION, HOST};
use http::{Request, Response, StatusCode, Version};
use hyper::service::Service;
use prometheus::IntCounter;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Whether `req`'s `Host` headers are what RFC 9112 §3.2 asks of its version.
///
/// Walks the few headers of a request rather than looking `Host` up: comparing standard
/// names is cheaper than hashing one (about 100 instructions a redirect under callgrind
/// with wrk's one header).
pub fn host_is_acceptable<B>(req: &Request<B>) -> bool {
    let mut hosts = req.headers().iter().filter(|(name, _)| *name == HOST);
    let first = hosts.next();
    if hosts.next().is_some() {
        return false;
    }
    match first {
        Some((_, value)) => is_valid_host(value.as_bytes()),
        None => req.version() != Version::HTTP_11,
    }
}

/// Whether `value` is `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2): an IP
/// literal in brackets, or a registered name (an IPv4 address is one) of unreserved,
/// sub-delims and `%XX` bytes with no empty label (`a..b`, `.a`: nginx refuses them too,
/// and DNS has none; one trailing dot names the root), then digits after a colon. An empty
/// host is refused: an `http` URI must not have one (RFC 9110 §4.2.1).
pub fn is_valid_host(value: &[u8]) -> bool {
    let port = match value.first() {
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(end) if is_ip_literal(&value[1..end]) => &value[end + 1..],
            _ => return false,
        },
        _ => match reg_name_len(value) {
            Some(end) => &value[end..],
            None => return false,
        },
    };
    match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

/// The length of the registered name `value` starts with (up to a `:` or its end), when it
/// is one: no empty label, one trailing dot allowed, not empty. One pass over a byte-class
/// table, every `Host` of every request runs it: about 80 instructions for
/// `127.0.0.1:8080` under callgrind against 210 for a first split at the colon then a
/// `match` per byte.
fn reg_name_len(value: &[u8]) -> Option<usize> {
    let mut label_len = 0;
    let mut i = 0;
    while i < value.len() {
        let b = value[i];
        if NAME_BYTES[b as usize] {
            label_len += 1;
            i += 1;
            continue;
        }
        match b {
            b'.' if label_len == 0 => return None,
            b'.' => label_len = 0,
            b'%' => {
                let escaped = value.get(i + 1..i + 3);
                if !escaped.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    return None;
                }
                i += 2;
                label_len += 1;
            }
            b':' => break,
            _ => return None,
        }
        i += 1;
    }
    // Ended in a label, or in one dot after a label (a dot after an empty one returned).
    (label_len > 0 || (i > 0 && value[i - 1] == b'.')).then_some(i)
}

/// The bytes of a name's label: unreserved and sub-delims, but `.` (RFC 3986 §3.2.2).
const NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = is_unreserved_or_sub_delim(b as u8) && b != b'.' as usize;
        b += 1;
    }
    table
};

const fn is_unreserved_or_sub_delim(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        )
}

/// What is inside the brackets: an IPv6 address or an `IPvFuture`.
fn is_ip_literal(inside: &[u8]) -> bool {
    match inside.split_first() {
        Some((b'v' | b'V', rest)) => match rest.iter().position(|&b| b == b'.') {
            Some(dot) => {
                let (version, tail) = (&rest[..dot], &rest[dot + 1..]);
                !version.is_empty()
                    && version.iter().all(u8::is_ascii_hexdigit)
                    && !tail.is_empty()
                    && tail.iter().all(|&b| b == b':' || is_unreserved_or_sub_delim(b))
            }
            None => false,
        },
        _ => std::str::from_utf8(inside).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok()),
    }
}

/// Whether `host` (`uri-host [ ":" port ]`) names the host `sni`, the name a TLS client
/// sent by SNI: the same name, ASCII letters in either case, the port ignored, as is one
/// trailing dot on either side. An IP address never does (SNI carries none, RFC 6066 §3;
/// rustls reports a client that sent one as sending no name), nor does an empty name.
pub fn sni_matches_host(sni: &str, host: &[u8]) -> bool {
    if host.first() == Some(&b'[') {
        return false;
    }
    let host = match host.iter().position(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    };
    let sni = sni.as_bytes();
    let sni = sni.strip_suffix(b".").unwrap_or(sni);
    let host = host.strip_suffix(b".").unwrap_or(host);
    !sni.is_empty()
        && sni.eq_ignore_ascii_case(host)
        && !std::str::from_utf8(host).is_ok_and(|h| h.parse::<std::net::Ipv4Addr>().is_ok())
}

/// The host a request is for: the authority of its target (HTTP/2's `:authority`, or an
/// HTTP/1 absolute-form target, which RFC 9112 §3.2.2 puts before `Host`), else its first
/// `Host`.
fn request_host<B>(req: &Request<B>) -> Option<&[u8]> {
    match req.uri().host() {
        Some(host) => Some(host.as_bytes()),
        None => req
            .headers()
            .iter()
            .find(|(name, _)| *name == HOST)
            .map(|(_, value)| value.as_bytes()),
    }
}

/// The name a TLS connection's client sent by SNI, which every request on it must name
/// (RFC 9110 §15.5.20), and the port's counter of those that do not.
#[derive(Clone)]
pub(crate) struct SniCheck {
    name: Arc<str>,
    /// The name as the `Host` of a request that names none; `None` when it cannot be one
    /// (rustls hands over DNS names only, so never in practice): such a request is refused.
    host: Option<HeaderValue>,
    misdirected: IntCounter,
}

impl SniCheck {
    /// The check of a connection opened for `name`; a refusal counts in `misdirected`.
    pub(crate) fn new(name: &str, misdirected: IntCounter) -> SniCheck {
        SniCheck {
            name: Arc::from(name),
            host: HeaderValue::from_str(name).ok(),
            misdirected,
        }
    }

    /// The 421 for `req` when it is for another host than the SNI name (counted); `None`
    /// when it may be served. A request that names no host at all (HTTP/1.0 without
    /// `Host`, HTTP/2 without `:authority`) is for the SNI name: it gets it as its `Host`,
    /// so the service answers it as that name's, never as another's.
    pub(crate) fn admit<B: Default, R>(&self, req: &mut Request<R>) -> Option<Response<B>> {
        match request_host(req) {
            Some(host) if sni_matches_host(&self.name, host) => return None,
            Some(_) => {}
            None => {
                if let Some(host) = &self.host {
                    req.headers_mut().insert(HOST, host.clone());
                    return None;
                }
            }
        }
        self.misdirected.inc();
        Some(refusal(StatusCode::MISDIRECTED_REQUEST))
    }
}

/// A port's service behind the `Host` check of its HTTP/1 requests: a request that fails it
/// is answered 400 with `Connection: close` and counted as
/// [`Refusal::BadRequest`](crate::Refusal::BadRequest). On a TLS connection with SNI, a
/// request for another host is then answered 421 and counted as
/// [`Refusal::Misdirected`](crate::Refusal::Misdirected), and one that names no host gets the
/// SNI name as its `Host`.
#[derive(Clone)]
pub struct HostChecked<S> {
    pub(crate) inner: S,
    /// The port's `bad_request` refusals.
    pub(crate) refused: IntCounter,
    /// Marked as each request is handed over: its head has arrived.
    pub(crate) head_arrived: HeadArrived,
    /// The SNI name of a TLS connection whose client sent one.
    pub(crate) sni: Option<SniCheck>,
}

impl<S, B, ReqBody> Service<Request<ReqBody>> for HostChecked<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>, Future: Unpin>,
    B: Default,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Checked<S::Future, Response<B>>;

    fn call(&self, mut req: Request<ReqBody>) -> Self::Future {
        self.head_arrived.mark();
        if !host_is_acceptable(&req) {
            self.refused.inc();
            return Checked::Refused(std::future::ready(bad_request()));
        }
        if let Some(misdirected) = self.sni.as_ref().and_then(|sni| sni.admit(&mut req)) {
            return Checked::Refused(std::future::ready(misdirected));
        }
        Checked::Served(self.inner.call(req))
    }
}

/// The edge's own answer `status`: no body, not cached.
fn refusal<B: Default>(status: StatusCode) -> Response<B> {
    let mut res = Response::new(B::default());
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// The 400 of a refused `Host`: no body, not cached, the connection closed after it.
fn bad_request<B: Default>() -> Response<B> {
    let mut res = refusal(StatusCode::BAD_REQUEST);
    res.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    res
}

/// The answer of [`HostChecked`] (and of HTTP/2's SNI check): the service's, or the edge's
/// own 400 or 421.
pub enum Checked<F, R> {
    Served(F),
    /// (A `Ready` is `Unpin` whatever it holds.)
    Refused(std::future::Ready<R>),
}

impl<F, R, E> Future for Checked<F, R>
where
    F: Future<Output = Result<R, E>> + Unpin,
{
    type Output = Result<R, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Checked::Served(f) => Pin::new(f).poll(cx),
            Checked::Refused(answer) => Pin::new(answer).poll(cx).map(Ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_a_uri_host_and_an_optional_port() {
        let valid: &[&str] = &[
            "x",
            "example.com",
            "Example.COM.",
            "example.com:8080",
            "example.com:",
            "a-b_c~d",
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[2001:db8::7]",
            "[::ffff:10.1.2.3]",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "%41bc",
            "a!$&'()*+,;=b",
            "a.:80",
            "a%41:80",
        ];
        for host in valid {
            assert!(is_valid_host(host.as_bytes()), "{host:?} is valid");
        }
        let invalid: &[&[u8]] = &[
            b"",
            b"a b",
            b"a/b",
            b"a\\b",
            b"a..b",
            b".a",
            b"a..",
            b".",
            b":80",
            b"a:8o",
            b"a:80:90",
            b"a@b",
            b"a?b",
            b"a#b",
            b"%zz",
            b"a%4",
            b"a%4:80",
            b"a..:80",
            b".:80",
            b"a:\xff",
            b"\xff",
            b"[::1",
            b"[::1]x",
            b"[::1]:8o",
            b"[1.2.3.4]",
            b"[fe80::1%25en0]",
            b"[v.x]",
            b"[v1.]",
            b"[]",
            b"a\tb",
            b"a\"b",
            b"a<b",
            b"caf\xc3\xa9",
            b"a\x7f",
        ];
        for host in invalid {
            assert!(!is_valid_host(host), "{:?} is refused", String::from_utf8_lossy(host));
        }
    }

    /// The rule as RFC 3986 states it, split at the first colon then a label at a time: the
    /// table walk of [`reg_name_len`] must agree with it.
    fn by_the_rfc(value: &[u8]) -> bool {
        let (name, port) = match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon + 1..]),
            None => (value, &b""[..]),
        };
        let name = name.strip_suffix(b".").unwrap_or(name);
        let label_ok = |label: &[u8]| {
            let escaped = |i: usize| {
                label
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
            };
            let mut i = 0;
            while i < label.len() {
                match label[i] {
                    b'%' if escaped(i) => i += 3,
                    b if b != b'.' && b != b'%' && is_unreserved_or_sub_delim(b) => i += 1,
                    _ => return false,
                }
            }
            !label.is_empty()
        };
        !name.is_empty() && name.split(|&b| b == b'.').all(label_ok) && port.iter().all(u8::is_ascii_digit)
    }

    #[test]
    fn the_table_walk_agrees_with_the_rule_on_every_short_host() {
        let alphabet = b"a1F.%:-~!\xff /";
        let mut checked = 0;
        let mut host = Vec::new();
        for len in 0..=5u32 {
            for mut n in 0..alphabet.len().pow(len) {
                host.clear();
                for _ in 0..len {
                    host.push(alphabet[n % alphabet.len()]);
                    n /= alphabet.len();
                }
                assert_eq!(
                    is_valid_host(&host),
                    by_the_rfc(&host),
                    "{:?}",
                    String::from_utf8_lossy(&host)
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 271_453);
    }

    fn request(version: Version, hosts: &[&'static str]) -> Request<()> {
        let mut req = Request::builder().version(version).uri("/a");
        for host in hosts {
            req = req.header(HOST, *host);
        }
        req.body(()).unwrap()
    }

    #[test]
    fn http_1_1_needs_one_valid_host_and_http_1_0_at_most_one() {
        assert!(host_is_acceptable(&request(Version::HTTP_11, &["x"])));
        assert!(!host_is_acceptable(&request(Version::HTTP_11, &[])));
        assert!(!host_is_acceptable(&request(Version::HTTP_11, &["x", "x"])));
        assert!(!host_is_acceptable(&request(Version::HTTP_11, &["a..b"])));
        assert!(host_is_acceptable(&request(Version::HTTP_10, &[])));
        assert!(host_is_acceptable(&request(Version::HTTP_10, &["x"])));
        assert!(!host_is_acceptable(&request(Version::HTTP_10, &["x", "y"])));
        assert!(!host_is_acceptable(&request(Version::HTTP_10, &["a b"])));
    }

    #[test]
    fn a_host_matches_the_sni_name_in_any_case_with_any_port_and_one_trailing_dot() {
        let cases: &[(&str, &[u8], bool)] = &[
            ("a.example", b"a.example", true),
            ("a.example", b"A.Example", true),
            ("A.EXAMPLE", b"a.example", true),
            ("a.example", b"a.example:443", true),
            ("a.example", b"a.example:8443", true),
            ("a.example", b"a.example:", true),
            ("a.example", b"a.example.", true),
            ("a.example.", b"a.example", true),
            ("a.example.", b"A.EXAMPLE.:443", true),
            ("xn--bcher-kva.example", b"XN--BCHER-KVA.example", true),
            ("a.example", b"b.example", false),
            ("a.example", b"a.example.com", false),
            ("a.example", b"xa.example", false),
            ("a.example", b"a.exampl", false),
            ("a.example", b"a.example..", false),
            ("a.example..", b"a.example", false),
            ("a.example", b":443", false),
            // Empty: no name matches, not even another empty one.
            ("a.example", b"", false),
            ("", b"", false),
            ("", b"a.example", false),
            (".", b".", false),
            // IP addresses: SNI carries none, so with SNI no IP host is right.
            ("a.example", b"127.0.0.1", false),
            ("a.example", b"127.0.0.1:443", false),
            ("127.0.0.1", b"127.0.0.1", false),
            ("a.example", b"[::1]", false),
            ("a.example", b"[::1]:443", false),
            ("::1", b"[::1]", false),
            ("[::1]", b"[::1]", false),
            ("a.example", b"[v1.a.example]", false),
        ];
        for (sni, host, matches) in cases {
            assert_eq!(
                sni_matches_host(sni, host),
                *matches,
                "SNI {sni:?}, host {:?}",
                String::from_utf8_lossy(host)
            );
        }
    }

    #[test]
    fn a_request_is_for_its_targets_authority_else_its_host_and_refused_421_when_not_the_sni_name() {
        let misdirected = IntCounter::new("misdirected", "test").unwrap();
        let sni = SniCheck::new("a.example", misdirected.clone());
        let req = |uri: &str, host: Option<&str>| {
            let mut req = Request::builder().uri(uri);
            if let Some(host) = host {
                req = req.header(HOST, host);
            }
            req.body(()).unwrap()
        };
        // (target, Host, served)
        let cases = [
            ("/a", Some("a.example"), true),
            ("/a", Some("b.example"), false),
            // HTTP/2's `:authority`, or an absolute-form target: `Host` does not count.
            ("https://a.example/a", None, true),
            ("https://a.example:443/a", Some("b.example"), true),
            ("https://b.example/a", Some("a.example"), false),
            ("https://[::1]/a", Some("a.example"), false),
            // Nothing named: for the SNI name (below).
            ("/a", None, true),
        ];
        for (uri, host, served) in cases {
            let answer = sni.admit::<String, _>(&mut req(uri, host));
            assert_eq!(answer.is_none(), served, "{uri} with Host {host:?}");
            if let Some(answer) = answer {
                assert_eq!(answer.status(), StatusCode::MISDIRECTED_REQUEST);
                assert_eq!(answer.headers()[CACHE_CONTROL], "no-store");
                assert!(answer.headers().get(CONNECTION).is_none(), "the connection goes on");
                assert!(answer.body().is_empty());
            }
        }
        assert_eq!(misdirected.get(), 3);
    }

    #[test]
    fn a_request_naming_no_host_is_for_the_sni_name_and_gets_it_as_its_host() {
        let misdirected = IntCounter::new("misdirected", "test").unwrap();
        let sni = SniCheck::new("go.alpha.example", misdirected.clone());
        for version in [Version::HTTP_10, Version::HTTP_2] {
            let mut req = Request::builder().version(version).uri("/home1").body(()).unwrap();
            assert!(sni.admit::<String, _>(&mut req).is_none(), "{version:?}: served");
            assert_eq!(
                req.headers().get_all(HOST).iter().collect::<Vec<_>>(),
                ["go.alpha.example"],
                "{version:?}"
            );
            // What the service reads it by: the SNI name, not "none" (the default domain).
            assert_eq!(request_host(&req), Some(&b"go.alpha.example"[..]));
        }
        // A request that names its host keeps it.
        let mut req = Request::builder()
            .uri("/a")
            .header(HOST, "GO.alpha.example:443")
            .body(())
            .unwrap();
        assert!(sni.admit::<String, _>(&mut req).is_none());
        assert_eq!(req.headers()[HOST], "GO.alpha.example:443");
        assert_eq!(misdirected.get(), 0);
    }
}
