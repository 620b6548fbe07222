//! What the L1 costs per cached link: fills an L1 with N links shaped like the bench's
//! (`https://example.com/page/N?ref=bench`, 7-character codes), then prints the process's
//! resident memory before and after, per link, and what the tables take.
//!
//!     cargo run --release -p rebound-proxy --example l1_memory -- 1000000
//!
//! The capacity is the default `redirect.l1_capacity` (1,200,000) unless given second.

use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Link, RedirectKind};
use rebound_proxy::l1::L1;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm");
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let capacity: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_200_000);
    let policy = CachePolicy::default();
    let l1 = L1::new(capacity);
    let before = resident_bytes();
    for i in 0..n {
        // Made one at a time, so their short-lived strings are freed and reused as it goes.
        let code = format!("{:07}", i * 7 + 1_000_000);
        let link = Link::new_active(
            code.clone(),
            format!("https://example.com/page/{i}?ref=bench"),
            RedirectKind::Found,
            false,
            0,
            "bench".into(),
            None,
        );
        l1.fill(&code, CacheRecord::active(&link, 0, &policy), 1);
    }
    let after = resident_bytes();
    let held = l1.len();
    println!(
        "{held} links held (of {n} filled, capacity {capacity}): RSS +{:.1} MiB, {:.1} B a link",
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / held as f64
    );
    let table = l1.table_bytes();
    println!(
        "tables (buckets and control bytes): {:.1} MiB, {:.1} B a link",
        table as f64 / (1 << 20) as f64,
        table as f64 / held as f64
    );
}
