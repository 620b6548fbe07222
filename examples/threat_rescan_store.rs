//! Rescanning after a start, with 1,000,000 stored links and a 100,000-entry threat list
//! (issues 33 and 42): the control plane's own rescan (`ControlPlane::rescan_threats`) over
//! the embedded SQLite store. A start looks every entry up in the index of active links by
//! target host and reads the links on those hosts alone, 1 % of all links, each listed and
//! taken down (a versioned write and its audit event; no cache is told here:
//! `NoLinkEvents`); a second control plane started on the same store and lists looks every
//! entry up again and finds nothing left up. Prints the times, the links read and the
//! memory.
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
    let start_control_plane = || async {
        ControlPlane::new(
            ControlPlaneConfig::default(),
            store.clone() as Arc<dyn Store>,
            Arc::new(NoLinkEvents),
            Arc::new(SystemClock),
        )
        .await
        .unwrap()
    };
    let cp = start_control_plane().await;
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
    let states: Vec<ListState> = feeds
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
    let again_feeds = feeds.clone();
    let index = ThreatIndex::build(feeds);
    let entries_in_force = index.len();
    cp.abuse().install_threat_lists(index, states.clone());
    drop((text, urls));
    let with_index = rss_kib("VmRSS:");
    let started = Instant::now();
    let outcome = cp.abuse().rescan_threats().await.unwrap();
    let took = started.elapsed();
    println!(
        "rescan after a start against {entries_in_force} entries: {:.2} s, {} looked up, {} links read of {links}; {} matched, {} taken down, {} failed",
        took.as_secs_f64(),
        outcome.looked_up,
        outcome.scanned,
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
    // Another control plane started on the same store and lists: every entry looked up
    // again, nothing left up on their hosts.
    let cp = start_control_plane().await;
    cp.abuse().install_threat_lists(ThreatIndex::build(again_feeds), states);
    let started = Instant::now();
    let again = cp.abuse().rescan_threats().await.unwrap();
    println!(
        "a second start, the same lists: {:.2} s, {} looked up, {} links read",
        started.elapsed().as_secs_f64(),
        again.looked_up,
        again.scanned
    );
}
