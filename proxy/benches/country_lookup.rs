//! A country lookup (`CountryDb::country_of`) in a real database, over addresses spread across
//! the registries, each lookup a different address in turn; first it prints what the database
//! says for each, the list a black-box test can pick its countries from.
//!
//! Run: `scripts/fetch-country-db` (prints the path), then
//! `REBOUND_TEST_COUNTRY_DB=PATH cargo bench -p rebound-proxy --bench country_lookup -- --warm-up-time 1 --measurement-time 3`.
//!
//! `country_of` remembers the 16 addresses per thread; `look_up_now` reads the database every
//! time (what an address not seen before costs). With `COUNTRY_LOOKUPS=N` (or
//! `N:remembered`) it makes exactly N lookups of one kind and stops, for callgrind:
//! instructions per lookup are (run of N₂ − run of N₁) / (N₂ − N₁).
//!
//! Results: benches/results/2026-12-06d-user-agent-parsers.md ("The country database").

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rebound_proxy::geoip::CountryDb;
use std::net::IpAddr;

const ADDRESSES: &[&str] = &[
    "8.8.8.8",
    "1.1.1.1",
    "9.9.9.9",
    "193.0.6.139",
    "202.12.27.33",
    "200.160.2.3",
    "212.58.244.20",
    "85.214.132.117",
    "91.198.174.192",
    "77.88.55.242",
    "101.6.6.6",
    "196.216.2.1",
    "41.203.64.1",
    "2001:4860:4860::8888",
    "2a00:1450:4001:81c::200e",
    "10.0.0.1",
];

fn lookup(c: &mut Criterion) {
    let path = std::env::var("REBOUND_TEST_COUNTRY_DB").expect("REBOUND_TEST_COUNTRY_DB: a country .mmdb");
    let db = CountryDb::open(&path).unwrap();
    let (kind, built) = db.description();
    println!("{path}: {kind}, built at {built}");
    let addresses: Vec<IpAddr> = ADDRESSES.iter().map(|a| a.parse().unwrap()).collect();
    if let Ok(n) = std::env::var("COUNTRY_LOOKUPS") {
        let (n, remembered) = match n.split_once(':') {
            Some((n, "remembered")) => (n, true),
            _ => (n.as_str(), false),
        };
        for i in 0..n.parse::<usize>().unwrap() {
            let address = black_box(addresses[i % addresses.len()]);
            black_box(match remembered {
                true => db.country_of(address),
                false => db.look_up_now(address),
            });
        }
        std::process::exit(0);
    }
    for a in &addresses {
        println!("{a}\t{}", db.country_of(*a).as_str());
    }
    let mut i = 0;
    c.bench_function("look_up_now", |b| {
        b.iter(|| {
            i = (i + 1) % addresses.len();
            db.look_up_now(black_box(addresses[i]))
        })
    });
    c.bench_function("country_of_remembered", |b| {
        b.iter(|| {
            i = (i + 1) % addresses.len();
            db.country_of(black_box(addresses[i]))
        })
    });
}

criterion_group!(benches, lookup);
criterion_main!(benches);
