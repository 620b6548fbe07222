//! Rescanning 1,000,000 stored links against a 100,000-entry threat list (issue 33): the
//! control plane's own rescan (`ControlPlane::rescan_threats`) over the embedded SQLite
//! store, every link read in pages of 1,000 and matched, 1 % of them listed and taken down
//! (each a versioned write and its audit event; no cache is told here: `NoLinkEvents`).
//! Prints the time and the
//! memory. 2026-12-05, the 2-core VM, three runs: 6.79 s (5.32-8.13 s) with 10,000
//! takedowns, 1.57 s (1.50-1.63 s) for a rescan with none left; the index +3.6 MiB of RSS,
//! peak 32.8 MiB (32.7-33.0).
//!
//! cargo run --release --example threat_rescan_store [LINKS] [ENTRIES]

use rebound_control_plane::config::ControlPlaneConfig;
use rebound_control_plane::threats::ListState;
use rebound_control_plane::ControlPlane;
use rebound_core::threat::{parse_feed, FeedFormat, ThreatIndex};
use rebound_core::{Link, RedirectKind, SystemClock};
use rebound_store::{LinkStore, NoLinkEvents, Store};
use std::sync::Arc;
use std::time::Instant;

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let links: u64 = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let entries: u64 = args.next().map_or(100_000, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(rebound_sqlite::SqliteStore::open(dir.path().join("rebound.db")).unwrap());
    let started = Instant::now();
    // Every 100th link's host is on the list; the rest are not.
    let mut batch = Vec::with_capacity(1000);
    for i in 0..links {
        let host = if i % 100 == 0 {
            format!("bad{}.listed.example", i / 100 % entries.max(1))
        } else {
            format!("site{}.example.org", i % 50_000)
        };
        batch.push(Link::new_active(
            format!("c{i:07}"),
            format!("https://{host}/page/{i}?ref=bench"),
            RedirectKind::Found,
            false,
            1_700_000_000_000 + i as i64,
            "bench".into(),
            None,
        ));
        if batch.len() == 1000 {
            store.insert_links(&batch).await.unwrap();
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.insert_links(&batch).await.unwrap();
    }
    eprintln!("{links} links stored in {:.1} s", started.elapsed().as_secs_f64());
    // The list: half hosts (the listed ones among them), half URLs of other hosts.
    let mut text = String::new();
    for i in 0..entries / 2 {
        text.push_str(&format!("bad{i}.listed.example\n"));
    }
    let mut urls = String::new();
    for i in 0..entries - entries / 2 {
        urls.push_str(&format!("http://phish{i}.example.net/login/{i}.php\n"));
    }
    let cp = ControlPlane::new(
        ControlPlaneConfig::default(),
        store.clone() as Arc<dyn Store>,
        Arc::new(NoLinkEvents),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let before_index = rss_kib("VmRSS:");
    let feeds = vec![
        (
            "hosts".to_owned(),
            parse_feed(FeedFormat::Domains, text.as_bytes()).unwrap(),
        ),
        (
            "urls".to_owned(),
            parse_feed(FeedFormat::Openphish, urls.as_bytes()).unwrap(),
        ),
    ];
    let states = feeds
        .iter()
        .map(|(name, f)| ListState {
            name: name.clone(),
            format: "domains".into(),
            source: "bench".into(),
            entries: f.len(),
            skipped: 0,
            loaded_at: None,
            error: None,
        })
        .collect();
    let index = ThreatIndex::build(feeds);
    let entries_in_force = index.len();
    cp.install_threat_lists(index, states);
    drop((text, urls));
    let with_index = rss_kib("VmRSS:");
    let started = Instant::now();
    let outcome = cp.rescan_threats().await.unwrap();
    let took = started.elapsed();
    println!(
        "rescan of {} links against {entries_in_force} entries: {:.2} s ({:.1} µs a link); {} matched, {} taken down, {} failed",
        outcome.scanned,
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / outcome.scanned.max(1) as f64,
        outcome.matched,
        outcome.taken_down,
        outcome.failed
    );
    println!(
        "RSS: {:.1} MiB before the index, {:.1} MiB with it, {:.1} MiB after the rescan; peak {:.1} MiB",
        before_index as f64 / 1024.0,
        with_index as f64 / 1024.0,
        rss_kib("VmRSS:") as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0
    );
    // A second rescan: nothing left to take down, the reading and matching alone.
    let started = Instant::now();
    let again = cp.rescan_threats().await.unwrap();
    println!(
        "again (nothing to take down): {:.2} s for {} links",
        started.elapsed().as_secs_f64(),
        again.scanned
    );
}
