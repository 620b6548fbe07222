//! Random and mutated request heads fed through the real connection handler: the edge
//! (hyper inside the port's defences) with the redirect service over an in-memory stream.
//! Every input must end in well-formed answers with statuses the port may send and only the
//! headers it sends, and nothing may panic.
//!
//! By default a fixed number of cases runs with every `cargo test`; `scripts/fuzz [SECONDS]`
//! runs it for a bounded time in release mode and reports the executions per second.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound_core::{Link, ManualClock, RedirectKind};
use rebound_edge::{Edge, EdgeLimits, PortMetrics};
use rebound_proxy::clicks::ClickQueue;
use rebound_proxy::issued::IssuedCodeGate;
use rebound_proxy::l1::L1;
use rebound_proxy::metrics::ProxyMetrics;
use rebound_proxy::path::RedirectPath;
use rebound_proxy::server::Redirects;
use rebound_store::{LinkStore, MemoryStore};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SEEDS: &[&[u8]] = &[
    b"GET /pipe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"HEAD /fwd?a=1&b=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /pipe HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"GET http://x/pipe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /pipe HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /pipe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET /fwd?x=%0d%0aSet-Cookie:%20a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"GET /pipe HTTP/1.1\r\nHost: x\r\n\r\nGET /nope-nope HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
];

/// Bytes a mutation likes to insert: delimiters, digits, signs, controls, non-ASCII.
const SPICE: &[u8] = b"\r\n :;,\t\0\x7f\xff\xc2\xa0+-0123456789?#%/";

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..6) {
        let at = if input.is_empty() {
            0
        } else {
            rng.gen_range(0..input.len())
        };
        match rng.gen_range(0..6) {
            0 if !input.is_empty() => input[at] = rng.gen(),
            1 => input.insert(at, SPICE[rng.gen_range(0..SPICE.len())]),
            2 if !input.is_empty() => {
                input.remove(at);
            }
            3 => {
                let len = rng.gen_range(0..input.len().min(64) + 1);
                let piece: Vec<u8> = input[at..(at + len).min(input.len())].to_vec();
                let to = rng.gen_range(0..input.len() + 1);
                input.splice(to..to, piece);
            }
            4 => {
                let other = SEEDS[rng.gen_range(0..SEEDS.len())];
                input.extend_from_slice(other);
            }
            _ => {
                let n = rng.gen_range(0..40);
                input.extend((0..n).map(|_| rng.gen::<u8>()));
            }
        }
    }
}

/// Statuses and header names the redirect port may send.
const STATUSES: &[&str] = &["302", "400", "404", "405", "410", "414", "431", "501", "503"];
const HEADERS: &[&str] = &[
    "location",
    "cache-control",
    "content-length",
    "connection",
    "date",
    "allow",
    "retry-after",
    "content-type",
    "content-security-policy",
];

/// The only bodies the port sends: the static 404 and 410 pages.
const PAGES: &[(&str, &str)] = &[
    ("404", include_str!("../pages/not-found.html")),
    ("410", include_str!("../pages/gone.html")),
];

/// Checks every answer in `out`; `Err` says what is wrong.
fn check(out: &[u8]) -> Result<usize, String> {
    let text = String::from_utf8_lossy(out);
    let mut answers = 0;
    let mut rest: &str = &text;
    while !rest.is_empty() {
        let Some((head, after)) = rest.split_once("\r\n\r\n") else {
            return Err(format!("a truncated answer: {rest:?}"));
        };
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or_default();
        let code = status
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| status.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3))
            .ok_or_else(|| format!("not a status line: {status:?}"))?;
        if !STATUSES.contains(&code) {
            return Err(format!("status {code} is not one the port sends"));
        }
        let mut length = 0;
        for line in lines {
            let name = line.split(':').next().unwrap_or_default().to_ascii_lowercase();
            if !HEADERS.contains(&name.as_str()) {
                return Err(format!("header {line:?} is not one the port sends"));
            }
            if name == "content-length" {
                length = line[15..].trim().parse().map_err(|_| format!("bad {line:?}"))?;
            }
        }
        answers += 1;
        // Every answer has an empty body, or is a 404 or 410 with its static page (whose
        // length an answer to HEAD states without sending it).
        let page = PAGES.iter().find(|(status, _)| *status == code).map(|(_, page)| *page);
        rest = match page {
            Some(page) if length == page.len() && after.starts_with(page) => &after[length..],
            Some(page) if length == page.len() && (after.is_empty() || after.starts_with("HTTP/1.")) => after,
            _ if length == 0 => after,
            _ => return Err(format!("a {code} with a body that is not its page: {after:?}")),
        };
    }
    Ok(answers)
}

async fn redirects() -> Redirects {
    let store = Arc::new(MemoryStore::new());
    for (code, forward) in [("pipe", false), ("fwd", true)] {
        let link = Link::new_active(
            code.into(),
            format!("https://example.com/{code}?q=1"),
            RedirectKind::Found,
            forward,
            0,
            "k".into(),
            None,
        );
        store.insert_link(&link, None).await.unwrap();
    }
    let metrics = ProxyMetrics::register(&prometheus::Registry::new()).unwrap();
    let clock = Arc::new(ManualClock::at(1_000_000));
    let path = RedirectPath::new(
        Arc::new(L1::new(1000)),
        Arc::new(IssuedCodeGate::new(1000)),
        store,
        clock.clone(),
        metrics.clone(),
        Duration::from_secs(1),
    );
    Redirects::new(Arc::new(path), Arc::new(ClickQueue::new(1024, metrics, clock)), 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_mutated_heads_get_well_formed_answers_and_never_a_panic() {
    let seconds: Option<u64> = std::env::var("REBOUND_FUZZ_SECS").ok().and_then(|s| s.parse().ok());
    let cases_by_default = 2_000;
    let redirects = redirects().await;
    let edge = Edge::plain(EdgeLimits::default(), PortMetrics::detached());
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let mut rng = StdRng::seed_from_u64(
        std::env::var("REBOUND_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(9112),
    );
    let started = Instant::now();
    let (mut cases, mut answers) = (0u64, 0u64);
    loop {
        match seconds {
            Some(s) if started.elapsed() >= Duration::from_secs(s) => break,
            None if cases >= cases_by_default => break,
            _ => {}
        }
        let mut input = SEEDS[rng.gen_range(0..SEEDS.len())].to_vec();
        if rng.gen_bool(0.9) {
            mutate(&mut rng, &mut input);
        }
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        let task = tokio::spawn({
            let (edge, redirects, shutdown) = (edge.clone(), redirects.clone(), shutdown.clone());
            async move { edge.serve(server, redirects, shutdown).await }
        });
        let _ = client.write_all(&input).await;
        let _ = client.shutdown().await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "no end to the answer for {input:?}");
        drop(client);
        task.await
            .unwrap_or_else(|e| panic!("the handler panicked on {input:?}: {e}"));
        if input.starts_with(b"PRI * HTTP/2.0") {
            continue;
        }
        match check(&out) {
            Ok(n) => answers += n as u64,
            Err(e) => panic!("{e}\nrequest: {input:?}\nanswer: {:?}", String::from_utf8_lossy(&out)),
        }
        cases += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "fuzz_heads: {cases} inputs, {answers} answers in {secs:.1} s: {:.0} executions/s",
        cases as f64 / secs
    );
    assert!(answers > 0);
}
