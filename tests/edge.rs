//! Black-box tests of the redirect port's edge (docs/spec.md §3a) on real sockets, against the
//! all-in-one started on port 0: RFC 9112 framing and heads side by side with nginx, the
//! deadlines, the connection caps of every port, lingering close, HTTP/2 in clear and over
//! TLS, certificate reload and the upgrade hand-over.

use rebound_test_support as common;

use common::rebound::{exchange, trickle, End, Rebound};
use common::services::{free_port, wait_for_port};
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The status codes of the responses in `text`, in order.
fn statuses(text: &str) -> Vec<u16> {
    text.split("\r\n")
        .filter(|l| l.starts_with("HTTP/1."))
        .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
        .collect()
}

/// The hostile and odd requests of docs/spec.md §3a, with what Rebound answers and what nginx 1.22
/// answers to the same bytes (`/pipe` is a redirect on both).
struct Case {
    name: &'static str,
    request: Vec<u8>,
    rebound: (&'static [u16], End),
    nginx: (&'static [u16], End),
}

fn cases() -> Vec<Case> {
    let get_pipe = b"GET /pipe HTTP/1.1\r\nHost: x\r\n\r\n".as_slice();
    let with_next = |head: &[u8]| [head, get_pipe].concat();
    use End::*;
    vec![
        Case {
            name: "conflicting Content-Length: refused, the next request is not eaten as body",
            request: with_next(b"GET /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 32\r\n\r\n"),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "Content-Length with a sign",
            request: b"GET /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: +32\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "Content-Length followed by a no-break space",
            request: b"GET /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 32\xc2\xa0\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "HTTP/1.1 without Host",
            request: b"GET /pipe HTTP/1.1\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "HTTP/1.1 with two Host headers",
            request: b"GET /pipe HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "a Host with a space",
            request: b"GET /pipe HTTP/1.1\r\nHost: a b\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "a Host with a slash",
            request: b"GET /pipe HTTP/1.1\r\nHost: a/b\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "a Host with an empty label",
            request: b"GET /pipe HTTP/1.1\r\nHost: a..b\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "an empty Host",
            request: b"GET /pipe HTTP/1.1\r\nHost: \r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "HTTP/1.0 with a Host with an empty label",
            request: b"GET /pipe HTTP/1.0\r\nHost: a..b\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "a Host of a name with a trailing dot and a port",
            request: b"GET /pipe HTTP/1.1\r\nHost: Sho.RT.:8080\r\n\r\n".to_vec(),
            rebound: (&[302], Open),
            nginx: (&[302], Open),
        },
        Case {
            name: "a Host of an IPv6 literal and a port",
            request: b"GET /pipe HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n".to_vec(),
            rebound: (&[302], Open),
            nginx: (&[302], Open),
        },
        Case {
            name: "HTTP/1.0 with Connection: close, keep-alive closes",
            request: b"GET /pipe HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n".to_vec(),
            rebound: (&[302], Closed),
            nginx: (&[302], Closed),
        },
        Case {
            name: "HTTP/1.1 with Connection: keep-alive, close closes",
            request: b"GET /pipe HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n".to_vec(),
            rebound: (&[302], Closed),
            nginx: (&[302], Closed),
        },
        Case {
            name: "HTTP/1.0 keep-alive stays open",
            request: b"GET /pipe HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_vec(),
            rebound: (&[302], Open),
            nginx: (&[302], Open),
        },
        Case {
            name: "absolute-form target answered by its path",
            request: b"GET http://x/pipe HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            rebound: (&[302], Open),
            nginx: (&[302], Open),
        },
        Case {
            name: "Content-Length with Transfer-Encoding: at most one answer, then close",
            request: with_next(
                b"POST /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            ),
            rebound: (&[405], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "Transfer-Encoding on HTTP/1.0",
            request: b"POST /pipe HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "unknown transfer coding",
            request: b"POST /pipe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[501], Closed),
        },
        Case {
            name: "a head over 8 KiB, the client still sending: 431 and a clean close",
            request: [
                b"GET /pipe HTTP/1.1\r\nHost: x\r\nX-Big: ".as_slice(),
                &[b'a'; 9000],
                b"\r\n\r\n",
                &[b'z'; 64 * 1024],
            ]
            .concat(),
            rebound: (&[431], Closed),
            nginx: (&[400], Closed),
        },
        Case {
            name: "more than 100 header fields",
            request: [
                b"GET /pipe HTTP/1.1\r\nHost: x\r\n".to_vec(),
                (0..101).flat_map(|i| format!("X-{i}: v\r\n").into_bytes()).collect(),
                b"\r\n".to_vec(),
            ]
            .concat(),
            rebound: (&[431], Closed),
            nginx: (&[302], Open),
        },
        Case {
            name: "Expect: 100-continue on a refused request: the final answer, no 100",
            request: b"POST /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n".to_vec(),
            rebound: (&[405], Closed),
            nginx: (&[100, 302], Open),
        },
        Case {
            name: "two pipelined requests: two answers in order",
            request: with_next(b"HEAD /nope-nope HTTP/1.1\r\nHost: x\r\n\r\n"),
            rebound: (&[404, 302], Open),
            nginx: (&[404, 302], Open),
        },
        Case {
            name: "a small body is skipped and the connection kept",
            request: with_next(b"POST /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
            rebound: (&[405, 302], Open),
            nginx: (&[302, 302], Open),
        },
        Case {
            name: "not HTTP at all",
            request: b"\x16\x03\x01 not http\r\n\r\n".to_vec(),
            rebound: (&[400], Closed),
            nginx: (&[400], Closed),
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_heads_are_refused_as_rfc_9112_says_and_the_connection_closed_cleanly() {
    let dir = temp_dir();
    // The domain the named Host is for (docs/spec.md §11: a host of no domain is 404).
    let rb = Rebound::start(dir.path(), &[("REBOUND_PUBLIC_BASE_URL", "http://sho.rt")]);
    rb.create(json!({"long_url": "https://example.com/p", "custom_alias": "pipe"}))
        .await;
    let addr = rb.redirect();
    for case in cases() {
        let (text, end) = tokio::task::block_in_place(|| exchange(&addr, &case.request, Duration::from_millis(700)));
        assert_eq!((statuses(&text).as_slice(), end), case.rebound, "{}: {text}", case.name);
    }
    assert!(rb.refusals("redirect", "bad_request").await >= 5.0);
    assert!(rb.refusals("redirect", "head_too_large").await >= 2.0);
}

/// The same bytes sent to nginx, to keep the reference column of the table honest.
#[test]
#[ignore = "needs REBOUND_TEST_NGINX (an nginx binary): scripts/test installs nginx and runs it"]
fn the_nginx_column_of_the_table_is_what_nginx_answers() {
    let nginx = env_or_panic("REBOUND_TEST_NGINX");
    let dir = temp_dir();
    let port = free_port();
    let conf = format!(
        "worker_processes 1; daemon off; error_log {d}/error.log; pid {d}/nginx.pid;\n\
         events {{ worker_connections 256; }}\n\
         http {{ access_log off; client_body_temp_path {d};\n\
           server {{ listen 127.0.0.1:{port};\n\
             location = /pipe {{ return 302 https://example.com/p; }}\n\
             location / {{ return 404; }} }} }}\n",
        d = dir.path().display()
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let _nginx = StopsNginx(
        Command::new(nginx)
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .spawn()
            .expect("start nginx"),
    );
    wait_for_port(port, "nginx");
    let addr = format!("127.0.0.1:{port}");
    for case in cases() {
        let (text, end) = exchange(&addr, &case.request, Duration::from_millis(700));
        assert_eq!((statuses(&text).as_slice(), end), case.nginx, "{}: {text}", case.name);
    }
}

/// nginx's master, stopped with SIGTERM when dropped (also when an assertion fails): a
/// SIGKILL would leave its worker running, orphaned, after the test.
struct StopsNginx(std::process::Child);

impl Drop for StopsNginx {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_from_the_request_becomes_a_header_but_the_forwarded_query() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/p", "custom_alias": "fwd", "forward_query": true}))
        .await;
    let addr = rb.redirect();
    let (text, _) = tokio::task::block_in_place(|| {
        exchange(
            &addr,
            b"GET /fwd?x=%0d%0aSet-Cookie:%20a HTTP/1.1\r\nHost: x\r\nX-Echo: Set-Cookie: b\r\nConnection: close\r\n\r\n",
            Duration::from_millis(700),
        )
    });
    let head: Vec<&str> = text.split("\r\n\r\n").next().unwrap().split("\r\n").collect();
    assert_eq!(head[0], "HTTP/1.1 302 Found");
    assert!(
        head.contains(&"location: https://example.com/p?x=%0d%0aSet-Cookie:%20a"),
        "the query is forwarded as sent: {head:?}"
    );
    let names: Vec<String> = head[1..]
        .iter()
        .map(|l| l.split(':').next().unwrap().to_ascii_lowercase())
        .collect();
    assert_eq!(
        names,
        ["location", "cache-control", "connection", "content-length", "date"],
        "{head:?}"
    );
    // A raw CR or LF in the target is refused before it can reach a header.
    let (text, end) = tokio::task::block_in_place(|| {
        exchange(
            &addr,
            b"GET /fwd?x=\rSet-Cookie:a HTTP/1.1\r\nHost: x\r\n\r\n",
            Duration::from_millis(700),
        )
    });
    assert_eq!(
        (statuses(&text).as_slice(), end),
        (&[400u16][..], End::Closed),
        "{text}"
    );
}

/// `curl` with `args`, returning `<http version> <status> <location>`.
fn curl_redirect(args: &[&str]) -> String {
    curl("%{http_version} %{http_code} %{redirect_url}", args)
}

/// The subject of the certificate the TLS port serves now.
fn served_subject(tls: &str) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", tls, "-servername", "localhost"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_gets_the_same_redirect_h1_h2c_and_tls_with_ecdsa_and_rsa() {
    for kind in ["ec", "rsa"] {
        let dir = temp_dir();
        let (cert, key) = self_signed(dir.path(), "rebound-test", kind);
        let data = dir.path().join("data");
        let run = start(
            &[],
            &data,
            &tls_env(&cert, &key),
            &["redirect", "redirect TLS", "API", "metrics"],
        );
        let rb = Rebound::from(run);
        rb.create(json!({"long_url": "https://example.com/t?a=1", "custom_alias": "proto", "forward_query": true}))
            .await;
        let plain = format!("http://{}/proto?q=1", rb.redirect());
        let port = rb.run.addrs["redirect TLS"].rsplit(':').next().unwrap().to_owned();
        let tls = format!("https://localhost:{port}/proto?q=1");
        let resolve = format!("localhost:{port}:127.0.0.1");
        let want = "https://example.com/t?a=1&q=1";
        let cacert = cert.to_str().unwrap();
        let answers = tokio::task::block_in_place(|| {
            [
                curl_redirect(&["--http1.1", &plain]),
                curl_redirect(&["--http1.0", &plain]),
                curl_redirect(&["--http2-prior-knowledge", &plain]),
                curl_redirect(&["--http2", "--cacert", cacert, "--resolve", &resolve, &tls]),
                curl_redirect(&["--http1.1", "--cacert", cacert, "--resolve", &resolve, &tls]),
                curl_redirect(&[
                    "--http1.1",
                    "--tlsv1.2",
                    "--tls-max",
                    "1.2",
                    "--cacert",
                    cacert,
                    "--resolve",
                    &resolve,
                    &tls,
                ]),
                curl_redirect(&["--http2", "--tlsv1.3", "--cacert", cacert, "--resolve", &resolve, &tls]),
            ]
        });
        // curl spells HTTP/1.0 "1".
        let expected = ["1.1", "1", "2", "2", "1.1", "1.1", "2"].map(|v| format!("{v} 302 {want}"));
        assert_eq!(answers, expected, "{kind}");
        for (outcome, version) in [("full", "1.3"), ("full", "1.2")] {
            let handshakes = metric(
                &rb.run,
                &format!(
                    r#"rebound_edge_tls_handshakes_total{{outcome="{outcome}",port="redirect_tls",version="{version}"}}"#
                ),
            )
            .await;
            assert!(handshakes >= 1.0, "{kind}: {outcome} TLS {version} handshakes counted");
        }
        assert!(metric(&rb.run, r#"rebound_edge_h2_streams_total{port="redirect_tls"}"#).await >= 2.0);
        assert!(metric(&rb.run, r#"rebound_edge_h2_streams_total{port="redirect"}"#).await >= 1.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sessions_resume() {
    let dir = temp_dir();
    let (cert, key) = self_signed(dir.path(), "rebound-test", "ec");
    let data = dir.path().join("data");
    let run = start(&[], &data, &tls_env(&cert, &key), &["redirect TLS", "metrics"]);
    let tls = run.addrs["redirect TLS"].clone();
    let session = dir.path().join("session.pem");
    let session = session.to_str().unwrap();
    for version in ["-tls1_2", "-tls1_3"] {
        let reused = tokio::task::block_in_place(|| {
            (0..2)
                .map(|i| {
                    let store = if i == 0 { "-sess_out" } else { "-sess_in" };
                    s_client_session(&tls, &[version, store, session]).contains("Reused, TLS")
                })
                .collect::<Vec<_>>()
        });
        assert_eq!(
            reused,
            [false, true],
            "{version}: the second connection resumes the first session"
        );
    }
    let resumed = |v: &'static str| {
        format!(r#"rebound_edge_tls_handshakes_total{{outcome="resumed",port="redirect_tls",version="{v}"}}"#)
    };
    assert!(metric(&run, &resumed("1.2")).await >= 1.0);
    assert!(metric(&run, &resumed("1.3")).await >= 1.0);
}

/// What `openssl s_client` printed (with `-msg`) for one request on `tls` with `args` (a
/// request, so that TLS 1.3's ticket, sent after the handshake, arrives).
fn s_client_session(tls: &str, args: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", tls, "-msg", "-ign_eof"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET /abc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_prefers_aes_128_unless_the_client_puts_chacha_first_and_sends_one_ticket() {
    let dir = temp_dir();
    let (cert, key) = self_signed(dir.path(), "rebound-test", "ec");
    let data = dir.path().join("data");
    let run = start(&[], &data, &tls_env(&cert, &key), &["redirect TLS"]);
    let tls = run.addrs["redirect TLS"].clone();
    let (aes_session, chacha_session) = (dir.path().join("aes.pem"), dir.path().join("chacha.pem"));
    let (aes_session, chacha_session) = (aes_session.to_str().unwrap(), chacha_session.to_str().unwrap());
    let aes256_first = "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
    let chacha_first = "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
    let cases: &[(&[&str], &str, &str)] = &[
        // TLS 1.3: OpenSSL's own order, AES-256 first; the session resumes.
        (
            &["-tls1_3", "-ciphersuites", aes256_first, "-sess_out", aes_session],
            "New",
            "TLS_AES_128_GCM_SHA256",
        ),
        (
            &["-tls1_3", "-ciphersuites", aes256_first, "-sess_in", aes_session],
            "Reused",
            "TLS_AES_128_GCM_SHA256",
        ),
        // A client without AES hardware.
        (
            &["-tls1_3", "-ciphersuites", chacha_first, "-sess_out", chacha_session],
            "New",
            "TLS_CHACHA20_POLY1305_SHA256",
        ),
        (
            &["-tls1_3", "-ciphersuites", chacha_first, "-sess_in", chacha_session],
            "Reused",
            "TLS_CHACHA20_POLY1305_SHA256",
        ),
        // What the client offers alone it gets.
        (
            &["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"],
            "New",
            "TLS_AES_256_GCM_SHA384",
        ),
        // TLS 1.2.
        (
            &[
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256",
            ],
            "New",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
        ),
        (
            &[
                "-tls1_2",
                "-cipher",
                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
            ],
            "New",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
        ),
    ];
    for (args, kind, suite) in cases {
        let out = tokio::task::block_in_place(|| s_client_session(&tls, args));
        assert!(
            out.contains(&format!("{kind}, TLSv1.")),
            "{args:?}: a {kind} session\n{out}"
        );
        assert!(out.contains(&format!("Cipher is {suite}")), "{args:?}: {suite}\n{out}");
        assert!(out.contains("HTTP/1.1 404"), "{args:?}: answered\n{out}");
        if args[0] == "-tls1_3" {
            let tickets = out.matches("NewSessionTicket").count();
            assert_eq!(tickets, 1, "{args:?}: one session ticket\n{out}");
        }
    }
}

/// A TLS connection to `tls` for `localhost` that trusts only `cert`.
fn tls_connection(tls: &str, cert: &Path) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = trusting(cert);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(tls).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).expect("TLS handshake");
    }
    stream
}

/// One HTTP/1.1 GET of `path` on `stream`, its response read whole (by its Content-Length):
/// the status line, or why there was none.
fn get_on(stream: &mut (impl Read + Write), path: &str) -> Result<String, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .ok_or_else(|| format!("no Content-Length: {head}"))?;
            if got.len() >= end + 4 + length {
                return Ok(head.lines().next().unwrap_or_default().to_owned());
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e} after {:?}", String::from_utf8_lossy(&got))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_is_served_after_sighup_or_a_file_change_and_a_bad_one_is_refused() {
    let dir = temp_dir();
    self_signed(dir.path(), "first", "ec");
    // The files the port serves from, replaced by copies below.
    let (cert, key) = (dir.path().join("served.crt"), dir.path().join("served.key"));
    std::fs::copy(dir.path().join("first.crt"), &cert).unwrap();
    std::fs::copy(dir.path().join("first.key"), &key).unwrap();
    let data = dir.path().join("data");
    // Far beyond the test: only a reload could close the kept connection.
    let idle = [("REBOUND_IDLE_TIMEOUT_MS", "600000")];
    let run = start(
        &[],
        &data,
        &[&tls_env(&cert, &key)[..], &idle].concat(),
        &["redirect TLS", "API", "metrics"],
    );
    let tls = run.addrs["redirect TLS"].clone();
    let subject = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let got = served_subject(&tls);
            if got.contains(want) {
                return;
            }
            assert!(Instant::now() < deadline, "still serving {got:?}, want {want}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    tokio::task::block_in_place(|| subject("CN = first"));
    // A keep-alive connection, handshake done and a request answered before the reloads,
    // must answer a request after them.
    let first = dir.path().join("first.crt");
    let mut kept = tokio::task::block_in_place(|| tls_connection(&tls, &first));
    let answer = tokio::task::block_in_place(|| get_on(&mut kept, "/some-code"));
    assert_eq!(answer.as_deref(), Ok("HTTP/1.1 404 Not Found"), "before the reloads");
    // A load of new TLS connections (a handshake each) runs through every reload below.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, port) = (stop.clone(), tls.rsplit(':').next().unwrap().to_owned());
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && ok + failed < 5_000 {
                let url = format!("https://127.0.0.1:{port}/some-code");
                if curl_redirect(&["-k", "--max-time", "5", &url]).ends_with(" 404 ") {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            (ok, failed)
        })
    };

    // A changed file is noticed by itself.
    let (cert2, key2) = self_signed(dir.path(), "second", "ec");
    std::fs::copy(&key2, &key).unwrap();
    std::fs::copy(&cert2, &cert).unwrap();
    tokio::task::block_in_place(|| subject("CN = second"));

    // A pair that does not match is refused; the old one keeps serving.
    let (_, key3) = self_signed(dir.path(), "third", "ec");
    std::fs::copy(&key3, &key).unwrap();
    let refused = r#"rebound_edge_tls_reloads_total{outcome="refused"}"#;
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric_absent_or_zero(&run, refused).await < 1.0 {
        assert!(Instant::now() < deadline, "the bad pair was not refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::task::block_in_place(|| subject("CN = second"));

    // SIGHUP reloads; the process does not die of it.
    std::fs::copy(dir.path().join("first.key"), &key).unwrap();
    std::fs::copy(dir.path().join("first.crt"), &cert).unwrap();
    signal(run.pid(), "HUP");
    tokio::task::block_in_place(|| subject("CN = first"));
    assert!(metric(&run, r#"rebound_edge_tls_reloads_total{outcome="loaded"}"#).await >= 2.0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = load.join().unwrap();
    eprintln!("TLS load across the reloads: {ok} answered, {failed} failed");
    assert_eq!(
        failed, 0,
        "no handshake or request failed across the reloads ({ok} answered)"
    );
    assert!(ok > 0);
    let answer = tokio::task::block_in_place(|| get_on(&mut kept, "/some-code"));
    assert_eq!(
        answer.as_deref(),
        Ok("HTTP/1.1 404 Not Found"),
        "the connection opened before the reloads still answers"
    );
    let res = http()
        .get(format!("{}/healthz", run.addr("metrics")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_idle_and_non_reading_clients_are_cut_off_and_counted() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[
            ("REBOUND_HEAD_TIMEOUT_MS", "600"),
            ("REBOUND_IDLE_TIMEOUT_MS", "1500"),
            ("REBOUND_WRITE_TIMEOUT_MS", "600"),
        ],
    );
    let long = format!("https://example.com/{}", "x".repeat(2000));
    rb.create(json!({"long_url": long, "custom_alias": "longtarget"})).await;
    let addr = rb.redirect();

    // A head trickled one byte every 100 ms: cut off long before it is complete (the
    // trickle would take 6 s), although every read brings a byte.
    let trickled = tokio::task::block_in_place(|| {
        trickle(
            &addr,
            b"GET /longtarget HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        )
    });
    assert!(trickled < 60, "the trickling head was cut off ({trickled} bytes sent)");
    assert!(rb.refusals("redirect", "head_timeout").await >= 1.0);

    // An answered keep-alive connection left idle: closed by the server.
    let (text, end) = tokio::task::block_in_place(|| {
        exchange(
            &addr,
            b"GET /longtarget HTTP/1.1\r\nHost: x\r\n\r\n",
            Duration::from_secs(10),
        )
    });
    assert_eq!((statuses(&text).as_slice(), end), (&[302u16][..], End::Closed));
    assert!(rb.refusals("redirect", "idle_timeout").await >= 1.0);

    // Clients that pipeline requests for a 2 KiB target and never read: each is cut off at
    // the write timeout and its buffers freed (the open-connection gauge falls back).
    // Enough requests that the answers overflow the kernel's socket buffers both ways.
    let request = b"GET /longtarget HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1000);
    let writers: Vec<_> = (0..5)
        .map(|_| {
            let addr = addr.clone();
            let request = request.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
                for _ in 0..100 {
                    if s.write_all(&request).is_err() {
                        break;
                    }
                }
                s
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rb.refusals("redirect", "write_timeout").await < 5.0 {
        assert!(Instant::now() < deadline, "non-reading clients were not cut off");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while rb.open_connections("redirect").await > 0.0 {
        assert!(
            Instant::now() < deadline,
            "connections of non-reading clients stay open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for w in writers {
        drop(w.join().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_port_leaves_the_other_ports_answering() {
    let dir = temp_dir();
    let rb = Rebound::start(
        dir.path(),
        &[("REBOUND_MAX_CONNECTIONS", "8"), ("REBOUND_API_MAX_CONNECTIONS", "8")],
    );
    rb.create(json!({"long_url": "https://example.com/f", "custom_alias": "flood"}))
        .await;
    let api = rb.run.addrs["API"].clone();
    let redirect = rb.redirect();
    for (addr, port) in [(&redirect, "redirect"), (&api, "api")] {
        // Idle connections fill the port's cap …
        let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rb.open_connections(port).await < 8.0 {
            assert!(Instant::now() < deadline, "{port}: 8 connections open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // … the next one is closed at once and counted …
        let (text, end) = tokio::task::block_in_place(|| {
            exchange(addr, b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(5))
        });
        assert!(
            text.is_empty() && end != End::Open,
            "{port}: over the cap: {text:?} {end:?}"
        );
        assert!(rb.refusals(port, "connection_limit").await >= 1.0);
        // … while the other ports answer.
        let res = http()
            .get(format!("{}/readyz", rb.run.addr("metrics")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), reqwest::StatusCode::OK, "{port} flooded: metrics answer");
        if port == "redirect" {
            let res = http()
                .get(format!("{}/api/v1/links/flood", rb.run.api()))
                .bearer_auth(OPERATOR_KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(
                res.status(),
                reqwest::StatusCode::OK,
                "redirect flooded: the API answers"
            );
        } else {
            let (text, _) = tokio::task::block_in_place(|| {
                exchange(
                    &redirect,
                    b"GET /flood HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    Duration::from_secs(5),
                )
            });
            assert_eq!(statuses(&text), [302], "API flooded: redirects answer");
        }
        drop(held);
        // Once they are gone the port serves again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while rb.open_connections(port).await > 0.0 {
            assert!(Instant::now() < deadline, "{port}: held connections released");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (text, _) = tokio::task::block_in_place(|| {
        exchange(
            &redirect,
            b"GET /flood HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
    });
    assert_eq!(statuses(&text), [302]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_port_refuses_slow_heads_and_a_413_reaches_a_client_that_sends_its_whole_body() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[("REBOUND_HEAD_TIMEOUT_MS", "600")]);
    let api = rb.run.addrs["API"].clone();
    // 200 KiB of JSON, over the 64 KiB limit, sent whole: the 413 arrives and the
    // connection closes cleanly (no reset that would destroy the answer).
    let body = format!("{{\"long_url\":\"https://example.com/{}\"}}", "a".repeat(200 * 1024));
    let request = format!(
        "POST /api/v1/links HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (text, end) = tokio::task::block_in_place(|| exchange(&api, request.as_bytes(), Duration::from_secs(5)));
    assert_eq!(statuses(&text), [413], "{}", &text[..text.len().min(300)]);
    assert!(
        text.contains("payload_too_large") || text.contains("too_large"),
        "{text}"
    );
    assert_ne!(end, End::Reset);
    // A head trickled to the API port is cut off too.
    let cut = tokio::task::block_in_place(|| {
        trickle(
            &api,
            b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        )
    });
    assert!(cut < 70, "the API's trickling head was cut off ({cut} bytes sent)");
    assert!(rb.refusals("api", "head_timeout").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_body_that_stops_coming_is_answered_408_and_closed_not_cut_as_a_slow_head() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[("REBOUND_HEAD_TIMEOUT_MS", "600")]);
    let api = rb.run.addrs["API"].clone();
    // The head in full, then 5 of the body's 40 bytes, then nothing.
    let request = format!(
        "POST /api/v1/links HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{{\"lon"
    );
    let (text, end) = tokio::task::block_in_place(|| exchange(&api, request.as_bytes(), Duration::from_secs(5)));
    assert_eq!(statuses(&text), [408], "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    assert_eq!(end, End::Closed, "{text}");
    assert_eq!(
        rb.refusals("api", "head_timeout").await,
        0.0,
        "the head had arrived: its clock stopped there"
    );
    let (s, v) = rb.api(reqwest::Method::GET, "/api/v1/links", None).await;
    assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    assert_eq!(v["links"].as_array().map(Vec::len), Some(0), "nothing was created");
}

/// One request on a new connection: Ok when it was answered with the redirect, else what
/// went wrong.
fn one_redirect(addr: &str) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    s.write_all(b"GET /upgrade-me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    if read.is_ok() && got.starts_with(b"HTTP/1.1 302 Found\r\n") {
        return Ok(());
    }
    Err(format!(
        "read {read:?} after {} bytes: {:?}",
        got.len(),
        String::from_utf8_lossy(&got[..got.len().min(80)])
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_takes_the_listeners_over_under_load_with_zero_failed_requests() {
    let dir = temp_dir();
    let env = upgradable_env(&dir.path().join("upgrade.sock"));
    let env = as_pairs(&env);
    let data = dir.path().join("data");
    let rb = Rebound::from(start(&[], &data, &env, common::rebound::ALL_PORTS));
    rb.create(json!({"long_url": "https://example.com/u", "custom_alias": "upgrade-me"}))
        .await;
    let addr = rb.redirect();
    let mut old = rb.run;

    // A bounded, constant load: four clients, one request per connection, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, addr) = (stop.clone(), addr.clone());
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0u32, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && ok as usize + failed.len() < 200_000 {
                    match one_redirect(&addr) {
                        Ok(()) => ok += 1,
                        Err(e) => failed.push(e),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The new binary asks for the listeners; the old one hands them over on SIGQUIT.
    let new = upgrade(&mut old, &data, &env).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, Vec::new());
    for c in clients {
        let (o, f) = c.join().unwrap();
        ok += o;
        failed.extend(f);
    }
    eprintln!("upgrade under load: {ok} requests answered, {} failed", failed.len());
    assert!(
        failed.is_empty(),
        "zero failed requests across the hand-over ({ok} answered): {failed:?}"
    );
    assert!(ok > 100, "the load ran ({ok} requests)");
    // The new process serves the redirect port, the API and the metrics port.
    assert_eq!(one_redirect(&addr), Ok(()));
    assert!(metric(&new, r#"rebound_redirect_requests_total{outcome="redirect"}"#).await >= 1.0);
    let res = http()
        .get(format!("{}/api/v1/links/upgrade-me", new.api()))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_accepted_before_the_drain_gets_its_first_request_answered() {
    // A client whose connection the server accepted just before the drain began sends its
    // request a moment later: it is answered and then closed, not dropped unread — the case
    // of every connection in flight at a listener hand-over.
    let dir = temp_dir();
    let mut rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/late", "custom_alias": "late-one"}))
        .await;
    let mut s = TcpStream::connect(rb.redirect()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rb.open_connections("redirect").await < 1.0 {
        assert!(Instant::now() < deadline, "the connection was accepted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(rb.run.pid(), "TERM");
    // Well inside the 500 ms the drain leaves a fresh connection, even on a busy machine.
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b"GET /late-one HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let read = s.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 302 Found\r\n"),
        "answered during the drain: {got:?}"
    );
    assert!(read.is_ok(), "then the server closed the connection: {read:?}");
    let status = tokio::task::block_in_place(|| rb.run.wait_exit(Duration::from_secs(30)));
    assert!(status.success(), "{status:?}");
}

/// An HTTP/2 frame.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;

/// Writes `frames` from a thread while reading; returns the frame types the server sent
/// and whether it closed the connection before we were done writing.
fn h2_flood(addr: &str, frames: Vec<u8>) -> (Vec<(u8, u32)>, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let writer = std::thread::spawn(move || w.write_all(&frames).is_ok());
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let wrote_all = writer.join().unwrap();
    let mut seen = Vec::new();
    let mut at = 0;
    while got.len() >= at + 9 {
        let len = (usize::from(got[at]) << 16) | (usize::from(got[at + 1]) << 8) | usize::from(got[at + 2]);
        let kind = got[at + 3];
        let error = if kind == GOAWAY && got.len() >= at + 17 {
            u32::from_be_bytes(got[at + 13..at + 17].try_into().unwrap())
        } else {
            0
        };
        seen.push((kind, error));
        at += 9 + len;
    }
    (seen, !wrote_all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_rapid_reset_and_continuation_floods_are_cut_off() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[]);
    rb.create(json!({"long_url": "https://example.com/f", "custom_alias": "flood"}))
        .await;
    let addr = rb.redirect();
    // GET / (indexed :method GET, :scheme http, :path /).
    let request = [0x82u8, 0x86, 0x84];

    // Rapid reset: 20,000 streams opened and reset at once.
    let mut frames = [H2_PREFACE, &h2_frame(SETTINGS, 0, 0, &[])].concat();
    for i in 0..20_000u32 {
        let stream = 2 * i + 1;
        frames.extend(h2_frame(HEADERS, 0x5, stream, &request));
        frames.extend(h2_frame(RST_STREAM, 0, stream, &8u32.to_be_bytes()));
    }
    let (seen, _) = tokio::task::block_in_place(|| h2_flood(&addr, frames));
    assert!(
        seen.contains(&(GOAWAY, 0xb)),
        "rapid reset answered with GOAWAY ENHANCE_YOUR_CALM: {:?}",
        &seen[seen.len().saturating_sub(5)..]
    );

    // CONTINUATION flood: one header block that never ends, 16 KiB at a time, 32 MiB in all.
    let mut frames = [H2_PREFACE, &h2_frame(SETTINGS, 0, 0, &[])].concat();
    frames.extend(h2_frame(HEADERS, 0x1, 1, &request));
    let mut literal = vec![0x40u8, 3, b'x', b'-', b'a', 0x7f, 0x81, 0x7f];
    literal.extend(std::iter::repeat_n(b'a', 255));
    let chunk: Vec<u8> = literal.iter().cycle().take(16 * 1024).copied().collect();
    for _ in 0..2048 {
        frames.extend(h2_frame(CONTINUATION, 0, 1, &chunk));
    }
    let (seen, cut) = tokio::task::block_in_place(|| h2_flood(&addr, frames));
    assert!(
        seen.iter().any(|(kind, _)| *kind == GOAWAY) || cut,
        "a header block without end is refused: {seen:?}"
    );
    assert!(rb.refusals("redirect", "h2_protocol").await >= 1.0);

    // The port still answers.
    let (text, _) = tokio::task::block_in_place(|| {
        exchange(
            &addr,
            b"GET /flood HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
    });
    assert_eq!(statuses(&text), [302]);
}

/// RFC 9112 §3.2 on every port, checked once by the edge: an HTTP/1.1 request carries exactly
/// one `Host`, and a `Host` is a valid `uri-host [ ":" port ]`.
mod host {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_port_refuses_a_missing_doubled_or_invalid_host_with_400_and_closes() {
        let dir = temp_dir();
        let rb = Rebound::start(dir.path(), &[]);
        let ports = [
            ("redirect", "redirect", "/pipe"),
            ("API", "api", "/healthz"),
            ("metrics", "metrics", "/healthz"),
        ];
        for (name, label, path) in ports {
            let addr = rb.run.addrs[name].clone();
            for (what, head) in [
                ("no Host", String::new()),
                ("two Host headers", "Host: a\r\nHost: b\r\n".to_owned()),
                ("a Host with a space", "Host: a b\r\n".to_owned()),
                ("a Host with a slash", "Host: a/b\r\n".to_owned()),
                ("a Host with an empty label", "Host: a..b\r\n".to_owned()),
            ] {
                let request = format!("GET {path} HTTP/1.1\r\n{head}\r\n");
                let (text, end) =
                    tokio::task::block_in_place(|| exchange(&addr, request.as_bytes(), Duration::from_millis(700)));
                assert_eq!(
                    (statuses(&text).as_slice(), end),
                    (&[400u16][..], End::Closed),
                    "{name} port, {what}: {text}"
                );
            }
            // HTTP/1.0 needs no Host.
            let request = format!("GET {path} HTTP/1.0\r\n\r\n");
            let (text, _) =
                tokio::task::block_in_place(|| exchange(&addr, request.as_bytes(), Duration::from_millis(700)));
            assert_ne!(statuses(&text), [400], "{name} port, HTTP/1.0 without Host: {text}");
            assert!(
                rb.refusals(label, "bad_request").await >= 5.0,
                "{name} port: the refusals are counted"
            );
        }
    }
}

/// A HEAD gets the status and headers its GET gets (`Content-Length: 0` included), no body.
mod head {
    use super::*;

    /// The head of the one answer to `request`: its status line, then its header lines but
    /// `Date`, sorted, lower-cased names.
    fn head_of(addr: &str, request: &str) -> Vec<String> {
        let (text, _) = exchange(addr, request.as_bytes(), Duration::from_millis(700));
        let head = text.split("\r\n\r\n").next().unwrap_or_default();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or_default().to_owned();
        let mut fields: Vec<String> = lines
            .map(|l| {
                let (name, value) = l.split_once(':').unwrap_or((l, ""));
                format!("{}:{}", name.to_ascii_lowercase(), value.trim())
            })
            .filter(|l| !l.starts_with("date:"))
            .collect();
        fields.sort();
        [vec![status], fields].concat()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_gets_the_headers_of_its_get_on_every_redirect_and_dead_end() {
        let dir = temp_dir();
        let rb = Rebound::start(dir.path(), &[]);
        for status in [301, 302, 307, 308] {
            rb.create(json!({"long_url": "https://example.com/p", "custom_alias": format!("to-{status}"), "redirect": status}))
                .await;
        }
        let addr = rb.redirect();
        for (path, status) in [
            ("/to-301", "301"),
            ("/to-302", "302"),
            ("/to-307", "307"),
            ("/to-308", "308"),
            ("/no-such-code", "404"),
            ("/", "404"),
        ] {
            let [get, head] = ["GET", "HEAD"].map(|method| {
                let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                tokio::task::block_in_place(|| head_of(&addr, &request))
            });
            assert!(get[0].contains(status), "{path}: {get:?}");
            assert!(get.iter().any(|l| l.starts_with("content-length:")), "{path}: {get:?}");
            assert_eq!(head, get, "HEAD {path} has the headers of its GET");
        }
    }
}
