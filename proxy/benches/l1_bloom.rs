//! The two in-memory tiers of the redirect path, single-threaded: an L1 hit (`get` plus
//! `verdict`) on a cache of 100,000 active records, and the issued-code filter (the
//! high-water mark of 1,000,000 generated codes and a Bloom filter of 10,000 aliases sized
//! for 2,000,000) for generated codes below and far above the mark, aliases and unknown
//! aliases; beside it, the Bloom filter of every code the data plane used before, for the
//! same codes.
//! Codes are real generated ones (Feistel permutation, then base62); lookups pick them in
//! a pseudo-random order so the cache lines are not warm from the previous iteration.
//!
//! Run: `cargo bench -p rebound-proxy --bench l1_bloom`
//! (short: `cargo bench -p rebound-proxy --bench l1_bloom -- --warm-up-time 1 --measurement-time 3`).
//!
//! Measured 2026-11-30 on the development machine (AMD EPYC VM, 2 cores), `--warm-up-time 1 --measurement-time 3`,
//! medians, with the one-allocation L1 entry keyed by a 64-bit hash (the earlier layout, an
//! `Arc<str>` key and an `Arc` entry holding a `String`, measured 203-244 ns for `l1_hit`
//! in the same hour; the machine was slower then than when it first measured 126 ns):
//!
//!     l1_hit/get_verdict             188.4 ns
//!     bloom_may_contain/known        365.1 ns   (~10 probes, each a likely cache miss in ~3.6 MB)
//!     bloom_may_contain/unknown       73.3 ns   (stops at the first clear bit)
//!
//! 2026-12-01, the entry's fields packed into 32 bytes (was 48): the bench binaries of
//! both layouts run in turn, six times each, `--bench l1_hit --warm-up-time 1
//! --measurement-time 3`, on the same machine under another developer's load (load
//! average 3.0-3.8 on 2 cores): `l1_hit/get_verdict` medians 349-596 ns before (median
//! of the six 413 ns), 307-579 ns after (432 ns); after won 4 of the 6 pairs. No
//! difference shows beyond that noise; the hit does two more shifts and adds.
//!
//! 2026-12-01, the issued-code filter against the Bloom filter of every code it replaced, in
//! one run (`--warm-up-time 1 --measurement-time 3`, load average ~3 from another
//! developer's builds: figures moved 20-50 % between runs, so only differences within a
//! run mean much). The plain rows fetch each code's `String` from a vector of 1,000,000
//! (known) or 100,000 (unknown) codes in random order, a cache miss of its own; the `_warm`
//! rows cycle through 1,024 codes, so the figure is the check's own (and the old filter's
//! bits for those codes stay in cache too, its best case):
//!
//!     l1_hit/get_verdict                         339 ns
//!     issued_may_exist/generated_known           733 ns   bloom_of_every_code/known         891 ns
//!     issued_may_exist/generated_unknown         469 ns   bloom_of_every_code/unknown       369 ns
//!     issued_may_exist/generated_known_warm      186 ns   bloom_of_every_code/known_warm     90 ns
//!     issued_may_exist/generated_unknown_warm    236 ns   bloom_of_every_code/unknown_warm   46 ns
//!     issued_may_exist/alias_known               185 ns   (10,000 aliases)
//!     issued_may_exist/alias_unknown             264 ns   (not 7 base62 characters)
//!
//! The new check's own cost is the inverse permutation (`GeneratedCodes::value_of`, about
//! 125-145 ns: 8 SipHash-1-3 rounds, fixed by the codes already issued; a hand-written
//! round measured no faster than `siphasher`'s) plus, for a code above the mark, one check
//! of a small alias filter: it is slower than the old filter's best case, and within the
//! noise of its cold case. Neither allocates; both run only after L1 (and L2) missed.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rebound_core::cache::CachePolicy;
use rebound_core::permute::CodePermutation;
use rebound_core::{base62, CacheRecord, CachedVerdict, Link, RedirectKind};
use rebound_proxy::issued::IssuedCodeGate;
use rebound_proxy::l1::L1;

const NOW: i64 = 1_796_000_000_000;
const L1_CODES: u64 = 100_000;
const BLOOM_CODES: u64 = 1_000_000;

/// Generated codes for counter values `range`, as the key generator issues them.
fn codes(range: std::ops::Range<u64>) -> Vec<String> {
    let perm = CodePermutation::for_codes(*b"0123456789abcdef");
    range
        .map(|i| base62::encode(perm.permute(i).expect("inside the code space")).expect("fits 7 characters"))
        .collect()
}

/// xorshift64: a cheap pseudo-random index, so the bench measures the lookup, not the RNG.
fn next_index(state: &mut u64, len: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % len as u64) as usize
}

fn l1_hit(c: &mut Criterion) {
    let codes = codes(0..L1_CODES);
    let l1 = L1::new(1_000_000);
    let policy = CachePolicy::default();
    for code in &codes {
        let link = Link::new_active(
            code.clone(),
            format!("https://example.com/{code}"),
            RedirectKind::Found,
            false,
            NOW,
            "k".into(),
            None,
        );
        l1.fill(code, CacheRecord::active(&link, NOW, &policy), NOW);
    }
    assert_eq!(l1.len(), codes.len(), "every record stays in L1");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    c.bench_function("l1_hit/get_verdict", |b| {
        b.iter(|| {
            let code = &codes[next_index(&mut rng, codes.len())];
            let entry = l1.get(black_box(code)).expect("filled");
            let verdict = entry.verdict(black_box(NOW));
            debug_assert_eq!(verdict, CachedVerdict::Redirect);
            verdict
        })
    });
}

fn issued_check(c: &mut Criterion) {
    let known = codes(0..BLOOM_CODES);
    // The permutation is a bijection, so these were never issued below the mark.
    let far = BLOOM_CODES + rebound_proxy::issued::HIGH_WATER_SLACK;
    let unknown = codes(far..far + 100_000);
    let aliases: Vec<String> = (0..10_000).map(|i| format!("alias-{i}")).collect();
    let unknown_aliases: Vec<String> = (0..100_000).map(|i| format!("nope-{i}")).collect();
    // Sized as the data plane sizes it by default (2,000,000 aliases).
    let gate = IssuedCodeGate::new(2_000_000);
    gate.set_key(*b"0123456789abcdef");
    gate.raise_high_water(BLOOM_CODES);
    for a in &aliases {
        gate.created(a);
    }
    gate.set_current(true);
    let mut g = c.benchmark_group("issued_may_exist");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    // 1,024 codes of each kind, so fetching the code stays in cache and the figure is the
    // check's own.
    let known_warm: Vec<String> = known[..1024].to_vec();
    let unknown_warm: Vec<String> = unknown[..1024].to_vec();
    for (name, set) in [
        ("generated_known", &known),
        ("generated_unknown", &unknown),
        ("alias_known", &aliases),
        ("alias_unknown", &unknown_aliases),
        ("generated_known_warm", &known_warm),
        ("generated_unknown_warm", &unknown_warm),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| gate.may_exist(black_box(&set[next_index(&mut rng, set.len())])))
        });
    }
    g.finish();

    // What the data plane did before: a Bloom filter of every code (here 1,000,000 of them,
    // sized for 2,000,000 at 0.1 %), for the same known and unknown codes, in this same run.
    let mut every_code = bloomfilter::Bloom::new_for_fp_rate(2_000_000, 0.001).expect("a positive size and rate");
    for code in &known {
        every_code.set(code.as_str());
    }
    let mut g = c.benchmark_group("bloom_of_every_code");
    for (name, set) in [
        ("known", &known),
        ("unknown", &unknown),
        ("known_warm", &known_warm),
        ("unknown_warm", &unknown_warm),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| every_code.check(black_box(set[next_index(&mut rng, set.len())].as_str())))
        });
    }
    g.finish();
}

criterion_group!(benches, l1_hit, issued_check);
criterion_main!(benches);
