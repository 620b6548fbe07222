//! The "bare Rust" baseline of the benchmark suite: what a redirect costs on plain hyper 1
//! with a `HashMap` and nothing else (no cache tiers, no clicks, no metrics, no logging).
//!
//! Usage: `hyper-ref <table> <addr>`, where `<table>` has one link a line, `<code> <target-url>`,
//! and `<addr>` is where to listen (`127.0.0.1:0` picks a free port). It prints
//! `hyper-ref: listening on <addr>`, then `hyper-ref: ready` once the table is loaded, and
//! answers `GET /{code}` with a 301 to the target (empty body, keep-alive), anything else with 404.
#![forbid(unsafe_code)]

use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, LOCATION};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;

type Table = HashMap<String, String>;

/// Parses the table file: `<code> <target-url>` a line; blank lines are skipped.
fn parse_table(text: &str) -> Result<Table, String> {
    let mut table = Table::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (code, target) = line
            .split_once(' ')
            .ok_or_else(|| format!("line {}: expected `<code> <target-url>`", n + 1))?;
        let target = target.trim();
        // Checked once here so that building the header per request cannot fail.
        HeaderValue::from_str(target).map_err(|_| format!("line {}: target is not a valid header value", n + 1))?;
        table.insert(code.to_owned(), target.to_owned());
    }
    Ok(table)
}

/// The answer to one request.
fn answer(table: &Table, req: &Request<Incoming>) -> Response<Empty<Bytes>> {
    let target = match req.uri().path().strip_prefix('/') {
        Some(code) if req.method() == Method::GET => table.get(code),
        _ => None,
    };
    let mut res = Response::new(Empty::new());
    match target.and_then(|t| HeaderValue::from_str(t).ok()) {
        Some(location) => {
            *res.status_mut() = StatusCode::MOVED_PERMANENTLY;
            res.headers_mut().insert(LOCATION, location);
        }
        None => *res.status_mut() = StatusCode::NOT_FOUND,
    }
    res.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    res
}

/// tokio's multi-threaded runtime (its default, a worker per core), or with
/// `HYPER_REF_RUNTIME=current_thread` one thread: the cheapest hyper can be per request, the
/// floor that any server on hyper starts from (benches/results, issue 9's workload).
fn main() -> ExitCode {
    let runtime = match std::env::var("HYPER_REF_RUNTIME").as_deref() {
        Ok("current_thread") => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hyper-ref: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hyper-ref: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(table_path), Some(addr), None) = (args.next(), args.next(), args.next()) else {
        return Err("usage: hyper-ref <table> <addr>".into());
    };

    let listener = TcpListener::bind(&addr).await?;
    println!("hyper-ref: listening on {}", listener.local_addr()?);
    let text = std::fs::read_to_string(&table_path).map_err(|e| format!("{table_path}: {e}"))?;
    let table = Arc::new(parse_table(&text).map_err(|e| format!("{table_path}: {e}"))?);
    println!("hyper-ref: ready");

    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or a reset before accept: keep serving the others.
            continue;
        };
        let _ = stream.set_nodelay(true);
        let table = table.clone();
        tokio::spawn(async move {
            let service = service_fn(|req| std::future::ready(Ok::<_, Infallible>(answer(&table, &req))));
            // A client that resets or sends garbage only ends its own connection.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_format() {
        let table = parse_table("abc https://e.com/a\n\n  xyz   https://e.com/b?q=1  \n").unwrap();
        assert_eq!(table.len(), 2);
        assert_eq!(table["abc"], "https://e.com/a");
        assert_eq!(table["xyz"], "https://e.com/b?q=1");
        assert!(parse_table("abc\n").is_err());
        assert!(parse_table("abc https://e.com/\u{1}\n").is_err());
    }
}
