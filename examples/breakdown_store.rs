//! The size and the read time of breakdowns (issue 45): LINKS links (default 100) for DAYS
//! days (default 365), each link-day with 50 countries, 20 referrers and 10 agents (10
//! browsers, 10 OSes, 4 device classes), written as the click writer or the consumer writes
//! them (batches of 500 adds, each applied once). Then the median time of a year-long
//! `by=country` read of one link (the store's read, as the stats handler calls it) over 20
//! reads.
//!
//! - `sqlite` (the default): the bytes the breakdowns table adds per link-day, from the
//!   clicks file's size before and after (after a VACUUM).
//! - `dynamodb`, on the endpoint `REBOUND_TEST_DYNAMODB_URL` (moto in the test services):
//!   the bytes per link-day as DynamoDB sizes items (attribute names and values: what its
//!   400 KB limit, read units and storage count; storage adds 100 bytes an item), and the
//!   read units of the year-long read. Its time is moto's, not DynamoDB's.
//!
//! cargo run --release --example breakdown_store [sqlite|dynamodb] [LINKS] [DAYS]

use rebound_core::Day;
use rebound_store::{BreakdownStore, Dimension, DimensionAdd, DimensionBatch};
use std::time::Instant;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let dynamodb = match args.first().map(String::as_str) {
        Some("dynamodb") => {
            args.remove(0);
            true
        }
        Some("sqlite") => {
            args.remove(0);
            false
        }
        _ => false,
    };
    let mut args = args.into_iter();
    let links: usize = args.next().map_or(100, |a| a.parse().unwrap());
    let days: i32 = args.next().map_or(365, |a| a.parse().unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if dynamodb {
        let store = runtime.block_on(dynamo_store());
        let (store2, runtime2) = (store.clone(), &runtime);
        measure(&runtime, &store, links, days, move |link_days| {
            let bytes = runtime2.block_on(dynamo_sizes(&store2));
            println!(
                "DynamoDB: {:.0} bytes a link-day as items are sized, {:.0} with the 100 bytes of storage an item \
                 ({} items, {} bytes)",
                bytes.0 as f64 / link_days as f64,
                (bytes.0 + 100 * bytes.1) as f64 / link_days as f64,
                bytes.1,
                bytes.0
            );
        });
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rebound.db");
    let store = rebound_sqlite::SqliteStore::open(&path).unwrap();
    let clicks_file = rebound_sqlite::clicks_file(&path);
    let size = |file: &std::path::Path| {
        let conn = rusqlite::Connection::open(file).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM").unwrap();
        std::fs::metadata(file).unwrap().len()
    };
    let before = size(&clicks_file);
    measure(&runtime, &store, links, days, |link_days| {
        let after = size(&clicks_file);
        println!(
            "SQLite: {:.0} bytes a link-day ({} bytes in all)",
            (after - before) as f64 / link_days as f64,
            after - before
        );
    });
}

/// A DynamoDB store on fresh tables at `REBOUND_TEST_DYNAMODB_URL`.
async fn dynamo_store() -> rebound_dynamodb::DynamoStore {
    let url = std::env::var("REBOUND_TEST_DYNAMODB_URL").expect("REBOUND_TEST_DYNAMODB_URL");
    let conf = rebound_store::testing::local_aws_config(&url).await;
    let prefix = format!(
        "bench{}_",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let store = rebound_dynamodb::DynamoStore::new(aws_sdk_dynamodb::Client::new(&conf), prefix);
    store.provision().await.unwrap();
    store
}

/// The bytes of the breakdowns' items as DynamoDB sizes them (each attribute's name and
/// value: a string its UTF-8 length, a number about one byte per two digits and one more),
/// and how many items.
async fn dynamo_sizes(store: &rebound_dynamodb::DynamoStore) -> (u64, u64) {
    use aws_sdk_dynamodb::types::AttributeValue;
    let (mut bytes, mut items) = (0u64, 0u64);
    let mut start = None;
    loop {
        let out = store
            .client()
            .scan()
            .table_name(store.table("breakdowns"))
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in out.items() {
            items += 1;
            for (name, value) in item {
                bytes += name.len() as u64
                    + match value {
                        AttributeValue::S(s) => s.len() as u64,
                        AttributeValue::N(n) => n.trim_start_matches('-').len().div_ceil(2) as u64 + 1,
                        other => panic!("an attribute of another kind: {other:?}"),
                    };
            }
        }
        match out.last_evaluated_key() {
            Some(k) => start = Some(k.clone()),
            None => return (bytes, items),
        }
    }
}

/// Writes the breakdowns of `links` links for `days` days, has `sized` report their size
/// (given the link-days written), then times the year-long read.
fn measure(
    runtime: &tokio::runtime::Runtime,
    store: &dyn BreakdownStore,
    links: usize,
    days: i32,
    sized: impl FnOnce(u64),
) {
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
    let link_days = links as u64 * days as u64;
    println!(
        "{links} links x {days} days, {} values a link-day: written in {:.1} s",
        values.len(),
        wrote.as_secs_f64(),
    );
    sized(link_days);
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
