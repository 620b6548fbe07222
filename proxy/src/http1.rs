//! The redirect port's HTTP/1.1 connection loop, as a Pingora `ServerApp`: Pingora keeps
//! the listeners, the accept loop, the server lifecycle and graceful upgrades; this file
//! reads requests with `httparse` straight from the connection buffer and writes each
//! answer as bytes into a reused output buffer. A redirect never allocates a header map;
//! the only work per request is parsing, the lookup and a few appends.
//!
//! What it honours: keep-alive (HTTP/1.1 by default, HTTP/1.0 on request), `Connection:
//! close`, pipelining (answers in order, written together), request bodies (skipped by
//! `Content-Length`; a chunked body or an oversized one closes the connection after the
//! answer), an idle timeout, graceful shutdown (the answer in progress says `Connection:
//! close`). Malformed requests get 400, oversized heads 431, and the connection closes.

use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most headers in a request.
const MAX_HEADERS: usize = 48;
/// Largest body skipped to keep a connection open; a larger one closes it.
const MAX_SKIPPED_BODY: u64 = 64 * 1024;
/// How long a connection may sit idle (or send a head slowly).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A request the connection loop understood.
#[derive(Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// Bytes of the head, to consume from the buffer.
    pub len: usize,
    pub keep_alive: bool,
    /// Whether the client spoke HTTP/1.0 (it must be told about keep-alive).
    pub http10: bool,
    pub body: Body,
}

/// What follows the head.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Body {
    None,
    Length(u64),
    /// Chunked or otherwise unknown framing: the connection cannot be reused.
    Unframed,
}

/// The outcome of parsing the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    Request(Head<'a>),
    /// More bytes are needed.
    Partial,
    /// A request that cannot be answered except with this status (and a close).
    Invalid(u16),
}

/// Parses one request head from the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Parsed::Invalid(431),
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Invalid(431),
        Err(_) => return Parsed::Invalid(400),
    };
    if len > MAX_HEAD {
        return Parsed::Invalid(431);
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Invalid(400);
    };
    let http10 = version == 0;
    let mut keep_alive = !http10;
    let mut body = Body::None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                    keep_alive = true;
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
            match (n, body) {
                (Some(n), Body::None) => body = if n == 0 { Body::None } else { Body::Length(n) },
                (Some(n), Body::Length(m)) if n == m => {}
                // Conflicting or unreadable lengths: request smuggling territory.
                _ => return Parsed::Invalid(400),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            body = Body::Unframed;
        }
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    Parsed::Request(Head {
        method,
        path,
        query,
        len,
        keep_alive,
        http10,
        body,
    })
}

/// The reason phrase of the statuses this port sends.
fn reason(status: u16) -> &'static str {
    match status {
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

thread_local! {
    /// The `Date` header value, formatted once per second per thread.
    static DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((0, String::new())) };
}

fn push_date(out: &mut Vec<u8>, now_millis: i64) {
    let secs = now_millis.max(0) as u64 / 1000;
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs || d.1.is_empty() {
            let at = std::time::UNIX_EPOCH + Duration::from_secs(secs);
            *d = (secs, httpdate::fmt_http_date(at));
        }
        out.extend_from_slice(d.1.as_bytes());
    });
}

fn system_now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// What to write for one request (the body is always empty).
pub enum Reply<'a> {
    Redirect {
        status: u16,
        long_url: &'a str,
        forward_query: bool,
        query: Option<&'a str>,
        max_age: u64,
    },
    Status(u16),
}

/// Appends the response to `out`; `now` (Unix milliseconds) dates it.
pub fn write_reply(out: &mut Vec<u8>, reply: &Reply<'_>, keep_alive: bool, http10: bool, now: i64) {
    let status = match reply {
        Reply::Redirect { status, .. } => *status,
        Reply::Status(s) => *s,
    };
    out.extend_from_slice(b"HTTP/1.1 ");
    push_u64(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    match reply {
        Reply::Redirect {
            long_url,
            forward_query,
            query,
            max_age,
            ..
        } => {
            out.extend_from_slice(b"Location: ");
            rebound_core::decision::push_location(out, long_url, *forward_query, *query);
            out.extend_from_slice(b"\r\nCache-Control: public, max-age=");
            push_u64(out, *max_age);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Status(s) => {
            out.extend_from_slice(b"Cache-Control: no-store\r\n");
            match s {
                405 => out.extend_from_slice(b"Allow: GET, HEAD\r\n"),
                503 => out.extend_from_slice(b"Retry-After: 1\r\n"),
                _ => {}
            }
        }
    }
    out.extend_from_slice(b"Date: ");
    push_date(out, now);
    out.extend_from_slice(b"\r\nContent-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Answers requests; implemented by the redirect application.
pub trait Answerer: Send + Sync {
    /// Answers one request into `out` (a whole response).
    fn answer<'a>(
        &'a self,
        head: &'a Head<'a>,
        out: &'a mut Vec<u8>,
        keep_alive: bool,
    ) -> impl std::future::Future<Output = ()> + Send + 'a;
}

/// Serves one connection until it closes, times out, or the server shuts down.
pub async fn serve_connection<A: Answerer>(app: &A, mut io: Stream, shutdown: &ShutdownWatch) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    let mut start = 0usize;
    let mut discard = 0u64;
    let mut shutdown = shutdown.clone();
    let idle = tokio::time::sleep(IDLE_TIMEOUT);
    tokio::pin!(idle);
    let mut idle_reset_at = Instant::now();
    loop {
        // Skip what remains of a request body.
        if discard > 0 {
            let d = discard.min((buf.len() - start) as u64);
            start += d as usize;
            discard -= d;
        }
        let mut close = false;
        while discard == 0 {
            let head = match parse(&buf[start..]) {
                Parsed::Request(head) => head,
                Parsed::Partial => break,
                Parsed::Invalid(status) => {
                    write_reply(&mut out, &Reply::Status(status), false, false, system_now_millis());
                    close = true;
                    break;
                }
            };
            let stopping = *shutdown.borrow();
            let keep_alive = head.keep_alive && !stopping && head.body != Body::Unframed;
            let keep_alive = keep_alive && !matches!(head.body, Body::Length(n) if n > MAX_SKIPPED_BODY);
            app.answer(&head, &mut out, keep_alive).await;
            start += head.len;
            if let Body::Length(n) = head.body {
                discard = n;
            }
            if !keep_alive {
                close = true;
                break;
            }
            if discard > 0 {
                let d = discard.min((buf.len() - start) as u64);
                start += d as usize;
                discard -= d;
            }
        }
        if !out.is_empty() {
            // Pingora's stream buffers writes: flush to send.
            if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
                return;
            }
            out.clear();
        }
        if close {
            return;
        }
        // Keep the unread tail at the front of the buffer.
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        // The idle deadline moves at most once a second: cheaper than a timer per read.
        let now = Instant::now();
        if now.duration_since(idle_reset_at) > Duration::from_secs(1) {
            idle.as_mut().reset(tokio::time::Instant::from_std(now) + IDLE_TIMEOUT);
            idle_reset_at = now;
        }
        let read = tokio::select! {
            biased;
            r = io.read_buf(&mut buf) => r,
            _ = &mut idle => return,
            _ = shutdown.changed(), if buf.is_empty() => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(buf: &[u8]) -> Head<'_> {
        match parse(buf) {
            Parsed::Request(h) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parse_table() {
        let h = head(b"GET /abc?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            (h.method, h.path, h.query, h.keep_alive, h.http10, h.body),
            ("GET", "/abc", Some("x=1"), true, false, Body::None)
        );
        assert_eq!(h.len, 34);
        let h = head(b"GET /abc HTTP/1.0\r\n\r\n");
        assert!(!h.keep_alive && h.http10);
        let h = head(b"GET /abc HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(h.keep_alive);
        let h = head(b"GET /abc HTTP/1.1\r\nConnection: foo, close\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head(b"POST /abc HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!(h.body, Body::Length(5));
        let h = head(b"POST /abc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.body, Body::Unframed);
        assert_eq!(parse(b"GET /abc HTTP/1.1\r\nHost"), Parsed::Partial);
        assert_eq!(parse(b"GET /abc HT"), Parsed::Partial);
        assert_eq!(parse(b"\x00\x01 garbage\r\n\r\n"), Parsed::Invalid(400));
        assert_eq!(
            parse(b"GET /abc HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            Parsed::Invalid(400)
        );
        assert_eq!(
            parse(b"GET /abc HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Parsed::Invalid(400)
        );
        let long = format!("GET /abc HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(parse(long.as_bytes()), Parsed::Invalid(431));
        let many: String = (0..60).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            parse(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            Parsed::Invalid(431)
        );
    }

    #[test]
    fn replies_are_well_formed() {
        let mut out = Vec::new();
        let r = Reply::Redirect {
            status: 302,
            long_url: "https://e.com/a?b",
            forward_query: true,
            query: Some("x=1"),
            max_age: 5,
        };
        write_reply(&mut out, &r, true, false, 1_790_000_000_000);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "HTTP/1.1 302 Found\r\nLocation: https://e.com/a?b&x=1\r\nCache-Control: public, max-age=5\r\nDate: "
            ),
            "{text}"
        );
        assert!(
            text.ends_with("Date: Mon, 21 Sep 2026 14:13:20 GMT\r\nContent-Length: 0\r\n\r\n"),
            "{text}"
        );
        let mut out = Vec::new();
        write_reply(&mut out, &Reply::Status(503), false, false, 0);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 503 Service Unavailable\r\nCache-Control: no-store\r\nRetry-After: 1\r\nDate: "),
            "{text}"
        );
        assert!(text.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"));
        let mut out = Vec::new();
        write_reply(&mut out, &Reply::Status(405), true, true, 0);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Allow: GET, HEAD\r\n") && text.ends_with("Connection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn numbers() {
        for n in [0u64, 5, 10, 301, 86_400, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }
}
