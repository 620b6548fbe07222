//! What the domains' summary adds to the SQLite writer, side by side with a take's own
//! writes, in the bench's worst shape: every click a different link (N links, one click
//! each per take), five breakdown values a click, one domain. Each take writes its rows and
//! breakdown adds as the shipper does (500 adds a batch, ten click batches a call), then its
//! summary: one click add under the scope code and, in batches of 500, one `link` add per
//! code plus one country and one referrer add. Six takes of one day; the first (an empty
//! day) is left out.
//!
//! `cargo test --workspace --test summary_cost -- --ignored --nocapture` (N=1000 to change
//! the links a take). 2026-12-06, this 2-core VM (AMD EPYC), a debug build (dependencies at
//! opt-level 1), while two other engineers' builds ran (load 3 to 5): wall time of five
//! takes, summary / own, over two or three runs each.
//!
//! | links a take | own writes | summary | ratio |
//! | --- | --- | --- | --- |
//! | 100 | 19 to 32 ms | 3.2 to 8.7 ms | 0.15 to 0.27 |
//! | 1,000 | 160 to 240 ms | 48 to 67 ms | 0.27 to 0.31 |
//! | 10,000 | 1.5 to 2.7 s | 0.38 to 0.59 s | 0.20 to 0.22 (0.24 to 0.25 before the store merged the adds bounded to `(other)` into one row) |
//!
//! The summary's adds cost about twice a link's each: every batch of them first reads what
//! the scope's day holds (up to 1,000 links, 50 countries, 50 referrers) to bound them.

use rebound_core::Day;
use rebound_store::breakdowns::scope_code;
use rebound_store::{BreakdownStore, ClickAdd, ClickBatch, Dimension, DimensionAdd, DimensionBatch, RollupStore};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn the_summary_beside_a_takes_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = rebound_sqlite::SqliteStore::open(dir.path().join("rebound.db")).unwrap();
    let n: usize = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let (day, scope) = (Day(100), scope_code(None));
    let add = |code: &str, dimension, value: &str, clicks| DimensionAdd {
        code: code.into(),
        day,
        dimension,
        value: value.into(),
        clicks,
    };
    let mut seq = 0;
    let mut id = || {
        seq += 1;
        format!("b{seq}")
    };
    let (mut own, mut summary) = (Duration::ZERO, Duration::ZERO);
    for take in 0..6 {
        let codes: Vec<String> = (0..n).map(|i| format!("c{i:06}")).collect();
        let rows: Vec<ClickAdd> = codes
            .iter()
            .map(|c| ClickAdd {
                code: c.clone(),
                day,
                clicks: 1,
                bot_clicks: 0,
            })
            .collect();
        let values = [
            (Dimension::Country, "unknown"),
            (Dimension::Referrer, "news.ycombinator.com"),
            (Dimension::Device, "desktop"),
            (Dimension::Browser, "Chrome"),
            (Dimension::Os, "Windows"),
        ];
        let adds: Vec<DimensionAdd> = codes
            .iter()
            .flat_map(|c| values.map(|(d, v)| add(c, d, v, 1)))
            .collect();
        let started = Instant::now();
        let batches: Vec<ClickBatch> = rows
            .chunks(500)
            .map(|c| ClickBatch {
                id: id(),
                adds: c.to_vec(),
            })
            .collect();
        for group in batches.chunks(10) {
            store.apply_click_batches(group).await.unwrap();
        }
        for c in adds.chunks(500) {
            let batch = DimensionBatch {
                id: id(),
                adds: c.to_vec(),
            };
            store.apply_dimensions(&batch).await.unwrap();
        }
        let took_own = started.elapsed();
        let started = Instant::now();
        let total = ClickBatch {
            id: id(),
            adds: vec![ClickAdd {
                code: scope.clone(),
                day,
                clicks: n as u64,
                bot_clicks: 0,
            }],
        };
        store.apply_click_batches(&[total]).await.unwrap();
        let mut adds = vec![
            add(&scope, Dimension::Country, "unknown", n as u64),
            add(&scope, Dimension::Referrer, "news.ycombinator.com", n as u64),
        ];
        adds.extend(codes.iter().map(|c| add(&scope, Dimension::Link, c, 1)));
        for c in adds.chunks(500) {
            let batch = DimensionBatch {
                id: id(),
                adds: c.to_vec(),
            };
            store.apply_dimensions(&batch).await.unwrap();
        }
        let took_summary = started.elapsed();
        if take > 0 {
            (own, summary) = (own + took_own, summary + took_summary);
        }
    }
    eprintln!(
        "{n} links a take, five takes: own writes {own:?}, summary {summary:?}, ratio {:.2}",
        summary.as_secs_f64() / own.as_secs_f64()
    );
}
