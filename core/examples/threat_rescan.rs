//! Rescanning 1,000,000 links against a 100,000-entry threat list: time and memory.
//!
//! Writes a synthetic list of 100,000 entries (50,000 URLs in OpenPhish's format, 49,000
//! names and 1,000 addresses in the domains format), reads it with `parse_feed`, builds a
//! `ThreatIndex`, then asks it about 1,000,000 synthetic normalised targets, 1% of them on
//! the list (4,000 URLs as listed, 1,000 of those with a fragment, 4,500 names under a listed
//! domain, 500 listed addresses). Everything is drawn from a fixed seed: each run asks the
//! same questions. Memory is the process's resident set from /proc/self/status.
//!
//! Run: `cargo run --release -p rebound-core --example threat_rescan`
//!
//! Measured 2026-12-05 on the development machine (AMD EPYC VM, 2 cores, load average ~2.4
//! from another engineer's build), release profile, three runs:
//!
//!     parse_feed    108-179 ms  (5.0 MiB of feed text, 100,000 entries; the URL parser dominates)
//!     build          17-24 ms
//!     scan          198-291 ms  per 1,000,000 targets, ~200 ns per target at best
//!     matches        10,000     (5,000 openphish, 5,000 domains: exactly the planted ones)
//!     RSS            12.8 MiB before the feeds, 21.2 MiB with the parsed feeds, 23.6 MiB
//!                    with the index: the index ~10.8 MiB, ~113 bytes per entry (47 of them
//!                    the entry's text)
//!     peak (VmHWM)  140.5 MiB   (the 1,000,000 targets held in memory, 52 MiB of text,
//!                    make up ~117 MiB of it; a rescan that streams the store needs not)

use rebound_core::target::TargetPolicy;
use rebound_core::threat::{parse_feed, FeedFormat, ThreatIndex};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

const URL_ENTRIES: usize = 50_000;
const NAME_ENTRIES: usize = 49_000;
const ADDRESS_ENTRIES: usize = 1_000;
const TARGETS: usize = 1_000_000;
/// One target in this many is on the list.
const MATCH_EVERY: usize = 100;
const SCANS: usize = 3;

/// xorshift64*: enough spread for synthetic names, and the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len())]
    }

    fn hex(&mut self, digits: usize) -> String {
        let mut out = format!("{:016x}{:016x}", self.next(), self.next());
        out.truncate(digits);
        out
    }
}

const WORDS: &[&str] = &[
    "secure", "login", "account", "verify", "update", "support", "billing", "wallet", "bank", "mail", "office",
    "cloud", "drive", "share", "docs", "portal", "auth", "online", "service", "client", "payment", "delivery",
    "parcel", "track", "id", "customer", "help", "center",
];
/// The list's hosts live under these; the benign targets under others, so that the matches
/// are exactly the ones planted.
const THREAT_TLDS: &[&str] = &["top", "xyz", "shop", "online", "site", "icu", "info"];
const BENIGN_TLDS: &[&str] = &["com", "org", "net", "de", "co.uk", "io", "fr"];
const PATHS: &[&str] = &[
    "wp-content/plugins/office365/login.php",
    "signin/v2/identifier",
    "verify/account/index.html",
    "secure/update.php",
    "Login/index.php",
    "a/b/c/download",
];

fn threat_url(rng: &mut Rng, n: usize) -> String {
    match n % 5 {
        // URLhaus's commonest shape: an IoT malware drop on an address and a high port.
        0 => format!(
            "http://{}.{}.{}.{}:{}/{}",
            1 + rng.below(222),
            rng.below(256),
            rng.below(256),
            1 + rng.below(254),
            1024 + rng.below(60_000),
            rng.pick(&["i", "bin.sh", "Mozi.m", "mips", "arm7"])
        ),
        // A phishing kit on a free hosting subdomain.
        1 => format!(
            "https://{}-{}{n}.{}/",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(&["web.app", "weebly.com", "firebaseapp.com", "pages.dev", "github.io"])
        ),
        // A phishing page deep in a compromised or registered site, with a session token.
        _ => format!(
            "https://{}-{}{n}.{}/{}/{}?session={}",
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(THREAT_TLDS),
            rng.hex(12),
            rng.pick(PATHS),
            rng.hex(24)
        ),
    }
}

fn threat_name(rng: &mut Rng, n: usize) -> String {
    format!("{}{n}-{}.{}", rng.pick(WORDS), rng.pick(WORDS), rng.pick(THREAT_TLDS))
}

/// 198.18.0.0/15, the benchmarking range: no benign target uses it.
fn threat_address(n: usize) -> String {
    format!("198.{}.{}.{}", 18 + n / 65_536, (n / 256) % 256, n % 256)
}

fn benign_target(rng: &mut Rng, n: usize) -> String {
    let site = format!(
        "{}{}",
        rng.pick(&["news", "shop", "blog", "docs", "www", "media"]),
        n % 200_000
    );
    let tld = rng.pick(BENIGN_TLDS);
    match n % 4 {
        0 => format!(
            "https://www.{site}.{tld}/articles/{}/{}-{}?utm_source=newsletter&utm_medium=email&utm_campaign=c{}",
            2020 + rng.below(7),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.below(1000)
        ),
        1 => format!("https://{site}.{tld}/products/{}", rng.below(10_000_000)),
        2 => format!("https://{}.{site}.{tld}/", rng.pick(&["app", "go", "m", "en"])),
        _ => format!("https://{site}.{tld}/p/{}#section-{}", rng.hex(10), rng.below(9)),
    }
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let mut rng = Rng(0x5eed_7417_ea75_0001);
    // Kept to plant matching targets; measured before the feeds are written.
    let urls: Vec<String> = (0..URL_ENTRIES).map(|n| threat_url(&mut rng, n)).collect();
    let names: Vec<String> = (0..NAME_ENTRIES).map(|n| threat_name(&mut rng, n)).collect();
    let rss_start = status_kib("VmRSS");
    let mut openphish = String::new();
    urls.iter().for_each(|u| writeln!(openphish, "{u}").unwrap());
    let mut domains = String::from("# synthetic host list\n");
    names.iter().for_each(|d| writeln!(domains, "0.0.0.0 {d}").unwrap());
    (0..ADDRESS_ENTRIES).for_each(|n| writeln!(domains, "{}", threat_address(n)).unwrap());
    let feed_bytes = openphish.len() + domains.len();

    let started = Instant::now();
    let url_feed = parse_feed(FeedFormat::Openphish, openphish.as_bytes()).unwrap();
    let host_feed = parse_feed(FeedFormat::Domains, domains.as_bytes()).unwrap();
    let parse_time = started.elapsed();
    let entry_bytes: usize =
        url_feed.urls().map(str::len).sum::<usize>() + names.iter().map(String::len).sum::<usize>();
    drop((openphish, domains));
    let rss_before_build = status_kib("VmRSS");

    let started = Instant::now();
    let index = ThreatIndex::build([("openphish".to_owned(), url_feed), ("domains".to_owned(), host_feed)]);
    let build_time = started.elapsed();
    let rss_after_build = status_kib("VmRSS");

    let mut planted = 0;
    let targets: Vec<String> = (0..TARGETS)
        .map(|n| {
            if n % MATCH_EVERY != 37 {
                return benign_target(&mut rng, n);
            }
            planted += 1;
            match (n / MATCH_EVERY) % 20 {
                0..=7 => urls[rng.below(urls.len())].clone(),
                8 | 9 => format!("{}#top", urls[rng.below(urls.len())]),
                10..=18 => format!(
                    "https://{}.{}/{}",
                    rng.pick(&["www", "login", "m", "secure.account"]),
                    names[rng.below(names.len())],
                    rng.pick(PATHS)
                ),
                _ => format!(
                    "http://{}/{}",
                    threat_address(rng.below(ADDRESS_ENTRIES)),
                    rng.pick(PATHS)
                ),
            }
        })
        .collect();
    let target_bytes: usize = targets.iter().map(String::len).sum();
    // The targets must be what the store holds: the form `TargetPolicy::validate` returns.
    let policy = TargetPolicy::default();
    for target in targets.iter().step_by(997) {
        assert_eq!(policy.validate(target).as_deref(), Ok(target.as_str()));
    }
    let rss_with_targets = status_kib("VmRSS");

    let mut scans = Vec::new();
    let mut found: HashMap<&str, usize> = HashMap::new();
    for scan in 0..SCANS {
        let started = Instant::now();
        let mut per_list: HashMap<&str, usize> = HashMap::new();
        for target in &targets {
            if let Some(list) = index.find(target) {
                *per_list.entry(list).or_default() += 1;
            }
        }
        scans.push(started.elapsed());
        if scan == 0 {
            found = per_list;
        } else {
            assert_eq!(found, per_list);
        }
    }
    let matches: usize = found.values().sum();
    assert_eq!(matches, planted, "every planted target and nothing else matches");

    println!(
        "entries: {} in the index ({} bytes of entry text)",
        index.len(),
        entry_bytes
    );
    for list in index.lists() {
        println!(
            "  list {}: {} URLs, {} hosts, {} skipped",
            list.name, list.urls, list.hosts, list.skipped
        );
    }
    println!(
        "parse_feed: {:.1} ms for {:.1} MiB of feed text",
        parse_time.as_secs_f64() * 1e3,
        feed_bytes as f64 / 1_048_576.0
    );
    println!("build: {:.1} ms", build_time.as_secs_f64() * 1e3);
    println!(
        "targets: {} ({:.1} MiB of text), {} planted on the list",
        targets.len(),
        target_bytes as f64 / 1_048_576.0,
        planted
    );
    for (n, elapsed) in scans.iter().enumerate() {
        println!(
            "scan {}: {:.1} ms, {:.0} ns per target",
            n + 1,
            elapsed.as_secs_f64() * 1e3,
            elapsed.as_secs_f64() * 1e9 / targets.len() as f64
        );
    }
    let mut found: Vec<_> = found.into_iter().collect();
    found.sort();
    println!("matches: {matches} {found:?}");
    println!(
        "RSS: {:.1} MiB before the feeds, {:.1} MiB with the parsed feeds, {:.1} MiB with the index \
         (index ~{:.1} MiB, {:.0} bytes per entry), {:.1} MiB with the targets; peak (VmHWM) {:.1} MiB",
        mib(rss_start),
        mib(rss_before_build),
        mib(rss_after_build),
        mib(rss_after_build.saturating_sub(rss_start)),
        rss_after_build.saturating_sub(rss_start) as f64 * 1024.0 / index.len() as f64,
        mib(rss_with_targets),
        mib(status_kib("VmHWM"))
    );
}
