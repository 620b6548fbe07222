//! The size and the read time of breakdowns in the embedded SQLite store (issue 45): LINKS
//! links (default 100) for DAYS days (default 365), each link-day with 50 countries, 20
//! referrers and 10 agents (10 browsers, 10 OSes, 4 device classes), written as the click
//! writer writes them (batches of 500 adds, each applied once). Prints the bytes the
//! breakdowns table adds per link-day (the clicks file's size before and after, after a
//! VACUUM), and the median time of a year-long `by=country` read of one link (the store's
//! read, as the stats handler calls it) over 20 reads.
//!
//! cargo run --release --example breakdown_store [LINKS] [DAYS]

use rebound_core::Day;
use rebound_store::{BreakdownStore, Dimension, DimensionAdd, DimensionBatch};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let links: usize = args.next().map_or(100, |a| a.parse().unwrap());
    let days: i32 = args.next().map_or(365, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rebound.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = rebound_sqlite::SqliteStore::open(&path).unwrap();
    let clicks_file = rebound_sqlite::clicks_file(&path);
    let size = |file: &std::path::Path| {
        let conn = rusqlite::Connection::open(file).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM").unwrap();
        std::fs::metadata(file).unwrap().len()
    };
    let before = size(&clicks_file);
    let values: Vec<(Dimension, String)> = (0..50)
        .map(|i| {
            (
                Dimension::Country,
                format!("{}{}", (b'A' + i / 26) as char, (b'A' + i % 26) as char),
            )
        })
        .chain((0..20).map(|i| (Dimension::Referrer, format!("site{i}.example.com"))))
        .chain((0..10).map(|i| (Dimension::Browser, format!("Browser {i}"))))
        .chain((0..10).map(|i| (Dimension::Os, format!("OS {i}"))))
        .chain(["desktop", "mobile", "tablet", "other"].map(|d| (Dimension::Device, d.to_owned())))
        .collect();
    let started = Instant::now();
    let mut adds = Vec::new();
    let mut batch = 0;
    for day in 0..days {
        for link in 0..links {
            for (dimension, value) in &values {
                adds.push(DimensionAdd {
                    code: format!("link{link:05}"),
                    day: Day(20_000 + day),
                    dimension: *dimension,
                    value: value.clone(),
                    clicks: 3,
                });
                if adds.len() == 500 {
                    batch += 1;
                    let b = DimensionBatch {
                        id: format!("b{batch}"),
                        adds: std::mem::take(&mut adds),
                    };
                    runtime.block_on(store.apply_dimensions(&b)).unwrap();
                }
            }
        }
    }
    if !adds.is_empty() {
        let b = DimensionBatch {
            id: "last".into(),
            adds,
        };
        runtime.block_on(store.apply_dimensions(&b)).unwrap();
    }
    let wrote = started.elapsed();
    let after = size(&clicks_file);
    let link_days = links as u64 * days as u64;
    println!(
        "{links} links x {days} days, {} values a link-day: written in {:.1} s; {:.0} bytes a link-day ({} bytes in all)",
        values.len(),
        wrote.as_secs_f64(),
        (after - before) as f64 / link_days as f64,
        after - before
    );
    let mut times: Vec<f64> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let got = runtime
                .block_on(store.read_breakdown(
                    &format!("link{:05}", links / 2),
                    Dimension::Country,
                    Day(20_000),
                    Day(20_000 + days - 1),
                ))
                .unwrap();
            assert_eq!(got.len(), 50);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "a {days}-day by=country read of one link: median {:.2} ms (min {:.2}, max {:.2})",
        times[10], times[0], times[19]
    );
}
