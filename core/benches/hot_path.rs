//! The pure steps of the redirect hot path, one at a time: the code rule on a valid code and
//! on a scanner's path, the redirect decision of a store read, the judgement of a cached
//! record, the `Location` with and without query forwarding, a generated code (Feistel
//! permutation, then base62), and the way back (`GeneratedCodes::value_of`).
//!
//! Run: `cargo bench -p rebound-core --bench hot_path`
//! (short: `cargo bench -p rebound-core --bench hot_path -- --warm-up-time 1 --measurement-time 3`).
//!
//! Measured 2026-11-30 on the development machine (AMD EPYC VM, 2 cores), `--warm-up-time 1 --measurement-time 3`,
//! medians:
//!
//!     is_valid_code/valid_7_chars      3.39 ns
//!     is_valid_code/invalid_path       3.63 ns   ("wp-admin/install.php")
//!     decide_redirect/active           2.37 ns
//!     cache_record_verdict/fresh       0.63 ns
//!     location/plain                   7.94 ns   (one copy of the target)
//!     location/forward_query          16.76 ns
//!     permute_then_base62             89.14 ns   (8 SipHash-1-3 Feistel rounds dominate)
//!
//! 2026-12-01, under another developer's load (load average ~4 on 2 cores), same options:
//! `permute_then_base62` 150.2 ns and `value_of` 142.6 ns (base62 decode, the reserved
//! words, the inverse permutation) in the same run: the way back costs the way there.
//!
//! 2026-12-06, same machine and options (issue 45's dimensions):
//!
//!     dimensions/referrer_host                  55.5 ns   (a 84-byte Google search referrer)
//!     dimensions/referrer_host_with_url_crate  236.8 ns   (`url::Url::parse`, one allocation)
//!     dimensions/campaign/none                  33.4 ns   (a query without `utm`)
//!     dimensions/campaign/three                254.5 ns   (three `utm_*` parameters)

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rebound_core::cache::CachePolicy;
use rebound_core::generated::GeneratedCodes;
use rebound_core::permute::CodePermutation;
use rebound_core::{base62, code, decide_redirect, decision, CacheRecord, Link, RedirectKind};

const NOW: i64 = 1_796_000_000_000;

fn link(forward_query: bool) -> Link {
    Link::new_active(
        "aZ3x9Qk".into(),
        "https://example.com/landing/page?utm_source=rebound".into(),
        RedirectKind::Found,
        forward_query,
        NOW - 60_000,
        "k".into(),
        Some(NOW + 86_400_000),
    )
}

fn code_rule(c: &mut Criterion) {
    let mut g = c.benchmark_group("is_valid_code");
    g.bench_function("valid_7_chars", |b| {
        b.iter(|| code::is_valid_code(black_box(b"aZ3x9Qk")))
    });
    // What a path scanner sends: fails on the '/' after a few bytes.
    g.bench_function("invalid_path", |b| {
        b.iter(|| code::is_valid_code(black_box(b"wp-admin/install.php")))
    });
    g.finish();
}

fn decision(c: &mut Criterion) {
    let active = link(false);
    c.bench_function("decide_redirect/active", |b| {
        b.iter(|| decide_redirect(black_box(Some(&active)), black_box(None), black_box(NOW)))
    });
    let record = CacheRecord::active(&active, NOW, &CachePolicy::default());
    c.bench_function("cache_record_verdict/fresh", |b| {
        b.iter(|| black_box(&record).verdict(black_box(NOW)))
    });
}

fn location(c: &mut Criterion) {
    let target = link(false).long_url;
    let mut g = c.benchmark_group("location");
    g.bench_function("plain", |b| {
        b.iter(|| decision::location(black_box(&target), black_box(false), black_box(Some("x=2"))))
    });
    g.bench_function("forward_query", |b| {
        b.iter(|| decision::location(black_box(&target), black_box(true), black_box(Some("x=2"))))
    });
    g.finish();
}

fn generated_code(c: &mut Criterion) {
    let perm = CodePermutation::for_codes(*b"0123456789abcdef");
    let mut counter = 1_000_000u64;
    c.bench_function("permute_then_base62", |b| {
        b.iter(|| {
            counter += 1;
            let image = perm.permute(black_box(counter)).expect("counter inside the code space");
            base62::encode(image)
        })
    });
    // The data plane's way back (the issued-code filter asks it for every code that missed
    // L1 and L2): base62 decode, the reserved words, the inverse permutation; no allocation.
    let codes = GeneratedCodes::new(*b"0123456789abcdef");
    let probes: Vec<String> = (0..1024u64)
        .map(|i| base62::encode(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % base62::SPACE).unwrap())
        .collect();
    let mut i = 0usize;
    c.bench_function("value_of", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            codes.value_of(black_box(probes[i].as_bytes()))
        })
    });
}

/// Issue 45's dimensions that need no table: the referrer's host parsed by hand, beside the
/// `url` crate's parse of the same header (what it would cost to use it), and the campaign of
/// a query with and without `utm_*` parameters.
fn dimensions(c: &mut Criterion) {
    use rebound_core::dimensions::{campaign, referrer_host};
    let referer = "https://www.google.com/search?q=rebound+url+shortener&sca_esv=1a2b3c&source=hp";
    let mut g = c.benchmark_group("dimensions");
    g.bench_function("referrer_host", |b| {
        b.iter(|| referrer_host(black_box(Some(referer.as_bytes()))))
    });
    g.bench_function("referrer_host_with_url_crate", |b| {
        b.iter(|| url::Url::parse(black_box(referer)).map(|u| u.host_str().map(str::len)))
    });
    g.bench_function("campaign/none", |b| {
        b.iter(|| campaign(black_box(Some("ref=home&lang=en"))))
    });
    g.bench_function("campaign/three", |b| {
        b.iter(|| {
            campaign(black_box(Some(
                "utm_source=newsletter&utm_medium=email&utm_campaign=spring_sale",
            )))
        })
    });
    g.finish();
}

criterion_group!(benches, code_rule, decision, location, generated_code, dimensions);
criterion_main!(benches);
