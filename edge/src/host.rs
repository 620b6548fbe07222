//! RFC 9112 §3.2 on every port: an HTTP/1.1 request carries exactly one `Host`, an HTTP/1.0
//! one at most one, and a `Host` is a valid `uri-host [ ":" port ]`; anything else is
//! answered 400 and the connection closed, before the port's service sees it. HTTP/2
//! carries `:authority` instead, which hyper checks.

use crate::guard::HeadArrived;
use http::header::{HeaderValue, CACHE_CONTROL, CONNECTION, HOST};
use http::{Request, Response, StatusCode, Version};
use hyper::service::Service;
use prometheus::IntCounter;
use std::future::Future;
use std::pin::Pin;
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
    let (host, port) = match value.first() {
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(end) => {
                if !is_ip_literal(&value[1..end]) {
                    return false;
                }
                (None, &value[end + 1..])
            }
            None => return false,
        },
        _ => match value.iter().position(|&b| b == b':') {
            Some(colon) => (Some(&value[..colon]), &value[colon..]),
            None => (Some(value), &value[value.len()..]),
        },
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    port_ok && host.is_none_or(is_reg_name)
}

/// A registered name without empty labels, one trailing dot allowed.
fn is_reg_name(name: &[u8]) -> bool {
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() {
        return false;
    }
    let mut label_len = 0;
    let mut i = 0;
    while i < name.len() {
        match name[i] {
            b'.' if label_len == 0 => return false,
            b'.' => label_len = 0,
            b'%' => {
                let escaped = name.get(i + 1..i + 3);
                if !escaped.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 2;
                label_len += 1;
            }
            b if is_unreserved_or_sub_delim(b) => label_len += 1,
            _ => return false,
        }
        i += 1;
    }
    label_len > 0
}

fn is_unreserved_or_sub_delim(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
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

/// A port's service behind the `Host` check of its HTTP/1 requests: a request that fails it
/// is answered 400 with `Connection: close` and counted as
/// [`Refusal::BadRequest`](crate::Refusal::BadRequest).
#[derive(Clone)]
pub struct HostChecked<S> {
    pub(crate) inner: S,
    /// The port's `bad_request` refusals.
    pub(crate) refused: IntCounter,
    /// Marked as each request is handed over: its head has arrived.
    pub(crate) head_arrived: HeadArrived,
}

impl<S, B, ReqBody> Service<Request<ReqBody>> for HostChecked<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>, Future: Unpin>,
    B: Default,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Checked<S::Future, Response<B>>;

    fn call(&self, req: Request<ReqBody>) -> Self::Future {
        self.head_arrived.mark();
        if host_is_acceptable(&req) {
            return Checked::Served(self.inner.call(req));
        }
        self.refused.inc();
        Checked::Refused(std::future::ready(bad_request()))
    }
}

/// The 400 of a refused `Host`: no body, not cached, the connection closed after it.
fn bad_request<B: Default>() -> Response<B> {
    let mut res = Response::new(B::default());
    *res.status_mut() = StatusCode::BAD_REQUEST;
    let headers = res.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    res
}

/// The answer of [`HostChecked`]: the service's, or the 400.
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
}
