//! What the L1 costs per cached link, against the designs it was chosen over. Fills a cache
//! with N links shaped like the bench's (7-character codes, `https://example.com/page/N?ref=bench`)
//! and prints, for each variant, the resident memory (RSS) it added to the process and the
//! heap bytes it asked for, per link held:
//!
//! - `quick_cache`: the L1 before the hashbrown tables: quick_cache keyed by a 64-bit hash of
//!   the code, entries behind a two-word `triomphe::Arc<HeaderSlice<_, str>>`;
//! - `tables+arc`: the L1's tables (shards sized as `L1::new` sizes them, hashbrown keyed by
//!   the code) with that same two-word handle: what `rebound_proxy::l1` was until 2026-12-07;
//! - `tables+thinarc`: the tables with a one-pointer `triomphe::ThinArc` (its allocation holds
//!   the text's length too, and its text is bytes: each `&str` of it is checked as UTF-8);
//! - `tables+hand-rolled`: the tables with the one-pointer handle whose count the L1 wrote by
//!   hand (`unsafe`) until the triomphe handle replaced it;
//! - `l1`: `rebound_proxy::l1::L1` as built: the tables with a one-word `ThinText`
//!   (`proxy/src/thin_text.rs`: the `ThinArc`, its text read back without a check).
//!
//! Each variant runs in a fresh process (this program again, with `--variant`), under glibc's
//! malloc and under jemalloc (the `rebound` binary's allocator, `src/main.rs`): the handles
//! differ by a word in the allocation or in the table, and each allocator rounds differently.
//!
//!     cargo run --release -p rebound-proxy --example l1_memory -- 1000000
//!
//! The capacity is the default `redirect.l1_capacity` (1,200,000) unless given second.
//! `--variant NAME` and `--allocator glibc|jemalloc` run one; `--hits N` also times N hits
//! (a lookup and the destination read twice, as a redirect reads it) in each. Instructions
//! a hit, one variant (the hits alone; the fill is not counted):
//!
//!     L1_MEMORY_CHILD=1 valgrind --tool=callgrind --toggle-collect='*Variant*hits*' \
//!         target/release/examples/l1_memory 100000 --variant tables+thinarc --hits 200000

// Two uses: the global allocator that picks glibc's malloc or jemalloc at the first
// allocation, and the hand-rolled handle measured against (the L1's before triomphe).
#![allow(unsafe_code)]

use rebound_core::cache::CachePolicy;
use rebound_core::{CacheRecord, Link, RedirectKind};
use rebound_proxy::l1::L1;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU8, Ordering};

// ---------------------------------------------------------------------------------------
// The allocator: glibc's malloc, or jemalloc when `L1_MEMORY_ALLOCATOR=jemalloc`; decided
// at the first allocation (one thread then), kept for the process. It also counts the
// bytes asked for and not yet freed.

struct Switch;

/// 0: not decided yet; 1: glibc; 2: jemalloc.
static CHOICE: AtomicU8 = AtomicU8::new(0);
/// Bytes asked for and not freed.
static LIVE: AtomicI64 = AtomicI64::new(0);

#[global_allocator]
static ALLOCATOR: Switch = Switch;

fn jemalloc() -> bool {
    match CHOICE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: getenv with a NUL-terminated name; the value, when there is one, is a
            // NUL-terminated string that this process does not change meanwhile.
            let value = unsafe { libc::getenv(c"L1_MEMORY_ALLOCATOR".as_ptr()) };
            let jemalloc = !value.is_null() && unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == b"jemalloc";
            CHOICE.store(if jemalloc { 2 } else { 1 }, Ordering::Relaxed);
            jemalloc
        }
    }
}

// SAFETY: every call goes to one allocator, the same for the whole process.
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        match jemalloc() {
            true => unsafe { tikv_jemallocator::Jemalloc.alloc(layout) },
            false => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        match jemalloc() {
            true => unsafe { tikv_jemallocator::Jemalloc.alloc_zeroed(layout) },
            false => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        match jemalloc() {
            true => unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) },
            false => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        match jemalloc() {
            true => unsafe { tikv_jemallocator::Jemalloc.realloc(ptr, layout, new_size) },
            false => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}

fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm");
    pages * 4096
}

// ---------------------------------------------------------------------------------------
// The entries. Their fields are the L1's (`proxy/src/l1.rs`): the values do not matter
// here, only the sizes; the code's length sits in the low bits of `stamp` as there.

/// What a triomphe entry holds before its text: 32 bytes, as `l1::Fields`.
#[allow(dead_code)]
struct Fields {
    version: u64,
    stamp: i64,
    fresh: i32,
    stale: i32,
    expires: i32,
    clicks: AtomicU32,
}

fn fields(code: &str) -> Fields {
    Fields {
        version: 1,
        stamp: (1 << 16) | code.len() as i64,
        fresh: 86_400_000,
        stale: 87_300_000,
        expires: i32::MAX,
        clicks: AtomicU32::new(0),
    }
}

trait Entry: Clone {
    fn new(code: &str, long_url: &str) -> Self;
    fn code_bytes(&self) -> &[u8];
    fn long_url(&self) -> &str;
}

fn code_len(f: &Fields) -> usize {
    (f.stamp & 0x3f) as usize
}

/// Two words: a pointer and the text's length.
#[derive(Clone)]
struct ArcEntry(triomphe::Arc<triomphe::HeaderSlice<Fields, str>>);

impl Entry for ArcEntry {
    fn new(code: &str, long_url: &str) -> Self {
        ArcEntry(triomphe::Arc::from_header_and_str(
            fields(code),
            &[code, long_url].concat(),
        ))
    }
    fn code_bytes(&self) -> &[u8] {
        &self.0.slice.as_bytes()[..code_len(&self.0.header)]
    }
    fn long_url(&self) -> &str {
        &self.0.slice[code_len(&self.0.header)..]
    }
}

/// One pointer; the allocation holds the count, the fields, the text's length, the text.
/// The text is bytes (there is no thin `str`): a `&str` of it is checked as UTF-8.
#[derive(Clone)]
struct ThinEntry(triomphe::ThinArc<Fields, u8>);

impl Entry for ThinEntry {
    fn new(code: &str, long_url: &str) -> Self {
        ThinEntry(triomphe::ThinArc::from_header_and_slice(
            fields(code),
            [code, long_url].concat().as_bytes(),
        ))
    }
    fn code_bytes(&self) -> &[u8] {
        &self.0.slice[..code_len(&self.0.header.header)]
    }
    fn long_url(&self) -> &str {
        std::str::from_utf8(&self.0.slice[code_len(&self.0.header.header)..]).unwrap_or_default()
    }
}

/// The hand-rolled handle as the L1 had it (`git show 8fd0535:proxy/src/l1.rs`): one
/// pointer to one allocation of 40 bytes of fields (a 32-bit count and the text's length
/// among them), then the text.
struct HandRolled(NonNull<HandRolledFields>);

#[repr(C)]
#[allow(dead_code)]
struct HandRolledFields {
    refs: AtomicU32,
    clicks: AtomicU32,
    version: u64,
    stamp: i64,
    fresh: i32,
    stale: i32,
    expires: i32,
    text_len: u32,
}

fn hand_rolled_layout(text_len: usize) -> Layout {
    let text = Layout::array::<u8>(text_len).unwrap();
    Layout::new::<HandRolledFields>().extend(text).unwrap().0.pad_to_align()
}

impl HandRolled {
    fn fields(&self) -> &HandRolledFields {
        // SAFETY: the allocation lives as long as any handle, this one included.
        unsafe { self.0.as_ref() }
    }

    fn text(&self) -> &str {
        // SAFETY: `new` copied a `&str` and another right after the fields, `text_len`
        // bytes, which never change.
        unsafe {
            let text = self.0.as_ptr().cast::<u8>().add(size_of::<HandRolledFields>());
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(text, self.fields().text_len as usize))
        }
    }
}

impl Entry for HandRolled {
    fn new(code: &str, long_url: &str) -> Self {
        let f = fields(code);
        let text_len = code.len() + long_url.len();
        let layout = hand_rolled_layout(text_len);
        // SAFETY: as `l1::L1Entry::new` had it: the fields at the start of a non-zero
        // layout aligned for them, the text right after them, inside the allocation.
        unsafe {
            let ptr = NonNull::new(std::alloc::alloc(layout).cast::<HandRolledFields>()).unwrap();
            ptr.as_ptr().write(HandRolledFields {
                refs: AtomicU32::new(1),
                clicks: f.clicks,
                version: f.version,
                stamp: f.stamp,
                fresh: f.fresh,
                stale: f.stale,
                expires: f.expires,
                text_len: text_len as u32,
            });
            let text = ptr.as_ptr().cast::<u8>().add(size_of::<HandRolledFields>());
            std::ptr::copy_nonoverlapping(code.as_ptr(), text, code.len());
            std::ptr::copy_nonoverlapping(long_url.as_ptr(), text.add(code.len()), long_url.len());
            HandRolled(ptr)
        }
    }
    fn code_bytes(&self) -> &[u8] {
        &self.text().as_bytes()[..(self.fields().stamp & 0x3f) as usize]
    }
    fn long_url(&self) -> &str {
        &self.text()[(self.fields().stamp & 0x3f) as usize..]
    }
}

impl Clone for HandRolled {
    fn clone(&self) -> Self {
        if self.fields().refs.fetch_add(1, Ordering::Relaxed) > i32::MAX as u32 {
            std::process::abort();
        }
        HandRolled(self.0)
    }
}

impl Drop for HandRolled {
    fn drop(&mut self) {
        if self.fields().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        std::sync::atomic::fence(Ordering::Acquire);
        let layout = hand_rolled_layout(self.fields().text_len as usize);
        // SAFETY: the last handle; the layout `new` allocated with.
        unsafe { std::alloc::dealloc(self.0.as_ptr().cast(), layout) }
    }
}

// ---------------------------------------------------------------------------------------
// The caches.

/// The L1's tables, with the handle as a parameter: as many shards as `L1::new` makes, each
/// a hashbrown table made for its share of the capacity, keyed by the code. A full shard
/// drops an entry (the L1 evicts one by CLOCK; the memory is the same).
struct Tables<E> {
    shards: Vec<hashbrown::HashTable<E>>,
    per_shard: usize,
    hasher: ahash::RandomState,
}

impl<E: Entry> Tables<E> {
    fn new(capacity: usize) -> Self {
        // As `l1::L1::new`: at most 64 shards, 28,672 codes a shard below that.
        let shards = capacity.div_ceil(28_672).clamp(1, 64);
        let per_shard = capacity.div_ceil(shards).max(1);
        Tables {
            shards: (0..shards)
                .map(|_| hashbrown::HashTable::with_capacity(per_shard))
                .collect(),
            per_shard,
            hasher: ahash::RandomState::new(),
        }
    }

    fn fill(&mut self, code: &str, long_url: &str) {
        let hash = self.hasher.hash_one(code.as_bytes());
        let spread = (hash >> 32) & ((1 << 25) - 1);
        let n = self.shards.len() as u64;
        let shard = &mut self.shards[((spread * n) >> 25) as usize];
        if shard.len() >= self.per_shard {
            let at = (0..shard.num_buckets()).find(|&b| shard.get_bucket(b).is_some());
            if let Some(Ok(full)) = at.map(|b| shard.get_bucket_entry(b)) {
                full.remove();
            }
        }
        let hasher = &self.hasher;
        shard.insert_unique(hash, E::new(code, long_url), |e| hasher.hash_one(e.code_bytes()));
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    fn shard(&self, hash: u64) -> &hashbrown::HashTable<E> {
        let spread = (hash >> 32) & ((1 << 25) - 1);
        &self.shards[((spread * self.shards.len() as u64) >> 25) as usize]
    }

    /// A hit as the L1 has it, less its read lock and CLOCK bit: a probe, a clone.
    fn get(&self, code: &str) -> Option<E> {
        let hash = self.hasher.hash_one(code.as_bytes());
        self.shard(hash)
            .find(hash, |e| e.code_bytes() == code.as_bytes())
            .cloned()
    }
}

/// `codes.len()` hits, each reading the destination twice as the redirect does
/// (`server.rs`: its length, then its bytes); returns the bytes read.
#[inline(never)]
fn hit_loop<E: Entry>(tables: &Tables<E>, codes: &[String]) -> usize {
    let mut read = 0;
    for code in codes {
        if let Some(e) = tables.get(code) {
            read += e.long_url().len() + std::hint::black_box(e.long_url()).len();
        }
    }
    read
}

/// The same hits on `rebound_proxy::l1::L1` (with its read lock and CLOCK bit).
#[inline(never)]
fn hit_loop_l1(l1: &L1, codes: &[String]) -> usize {
    let mut read = 0;
    for code in codes {
        if let Some(e) = l1.get(code) {
            read += e.long_url().len() + std::hint::black_box(e.long_url()).len();
        }
    }
    read
}

enum Variant {
    QuickCache(quick_cache::sync::Cache<u64, ArcEntry>, ahash::RandomState),
    Arc(Tables<ArcEntry>),
    Thin(Tables<ThinEntry>),
    HandRolled(Tables<HandRolled>),
    L1(L1, CachePolicy),
}

const VARIANTS: [(&str, &str); 5] = [
    ("quick_cache", "quick_cache, u64 keys, triomphe::Arc (two words)"),
    ("tables+arc", "L1 tables + triomphe::Arc (two words)"),
    ("tables+thinarc", "L1 tables + triomphe::ThinArc (one pointer)"),
    ("tables+hand-rolled", "L1 tables + hand-rolled count (one pointer)"),
    ("l1", "rebound_proxy::l1::L1 as built (ThinText)"),
];

impl Variant {
    fn new(variant: &str, capacity: usize) -> Variant {
        match variant {
            "quick_cache" => Variant::QuickCache(quick_cache::sync::Cache::new(capacity), ahash::RandomState::new()),
            "tables+arc" => Variant::Arc(Tables::new(capacity)),
            "tables+thinarc" => Variant::Thin(Tables::new(capacity)),
            "tables+hand-rolled" => Variant::HandRolled(Tables::new(capacity)),
            "l1" => Variant::L1(L1::new(capacity), CachePolicy::default()),
            other => panic!("no variant {other:?}; there are {:?}", VARIANTS.map(|v| v.0)),
        }
    }

    fn fill(&mut self, code: &str, long_url: &str) {
        match self {
            Variant::QuickCache(cache, hasher) => cache.insert(hasher.hash_one(code), ArcEntry::new(code, long_url)),
            Variant::Arc(t) => t.fill(code, long_url),
            Variant::Thin(t) => t.fill(code, long_url),
            Variant::HandRolled(t) => t.fill(code, long_url),
            Variant::L1(l1, policy) => {
                let link = Link::new_active(
                    code.into(),
                    long_url.into(),
                    RedirectKind::Found,
                    false,
                    0,
                    "bench".into(),
                    None,
                );
                l1.fill(code, CacheRecord::active(&link, 0, policy), 1);
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Variant::QuickCache(cache, _) => cache.len(),
            Variant::Arc(t) => t.len(),
            Variant::Thin(t) => t.len(),
            Variant::HandRolled(t) => t.len(),
            Variant::L1(l1, _) => l1.len(),
        }
    }

    #[inline(never)]
    fn hits(&self, codes: &[String]) -> usize {
        match self {
            Variant::QuickCache(cache, hasher) => codes
                .iter()
                .filter_map(|code| cache.get(&hasher.hash_one(code.as_str())))
                .map(|e| e.long_url().len() + std::hint::black_box(e.long_url()).len())
                .sum(),
            Variant::Arc(t) => hit_loop(t, codes),
            Variant::Thin(t) => hit_loop(t, codes),
            Variant::HandRolled(t) => hit_loop(t, codes),
            Variant::L1(l1, _) => hit_loop_l1(l1, codes),
        }
    }
}

fn code(i: usize) -> String {
    format!("{:07}", i * 7 + 1_000_000)
}

/// Fills one variant in this process; prints the links held, the RSS it added and the heap
/// bytes asked for that are still held; then, given `hits`, makes that many hits on codes
/// it holds in a scrambled order and prints the nanoseconds a hit.
fn run(variant: &str, n: usize, capacity: usize, hits: usize) {
    let (rss_before, live_before) = (resident_bytes(), LIVE.load(Ordering::Relaxed));
    let mut cache = Variant::new(variant, capacity);
    for i in 0..n {
        // Made one at a time, so their short-lived strings are freed and reused as it goes.
        cache.fill(&code(i), &format!("https://example.com/page/{i}?ref=bench"));
    }
    let (rss, live) = (resident_bytes(), LIVE.load(Ordering::Relaxed));
    print!("{} {} {}", cache.len(), rss - rss_before, live - live_before);
    if hits > 0 && n > 0 {
        // A stride prime to n walks every code once per n hits, far from the last one.
        let stride = (n as f64 * 0.618) as usize | 1;
        let stride = (stride..).find(|s| gcd(*s, n) == 1).unwrap();
        let codes: Vec<String> = (0..hits).map(|k| code(k * stride % n)).collect();
        let start = std::time::Instant::now();
        std::hint::black_box(cache.hits(&codes));
        print!(" {}", start.elapsed().as_nanos() as f64 / hits as f64);
    }
    println!();
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        Some(
            args.get(at + 1)
                .unwrap_or_else(|| panic!("{name} needs a value"))
                .clone(),
        )
    };
    let mut numbers = args
        .iter()
        .enumerate()
        .filter(|&(i, _)| i == 0 || !args[i - 1].starts_with("--"))
        .filter_map(|(_, a)| a.parse::<usize>().ok());
    let n = numbers.next().unwrap_or(1_000_000);
    let capacity = numbers.next().unwrap_or(1_200_000);
    let hits: usize = flag("--hits").map_or(0, |h| h.parse().expect("--hits N"));
    if std::env::var_os("L1_MEMORY_CHILD").is_some() {
        return run(
            &flag("--variant").expect("a child is given its variant"),
            n,
            capacity,
            hits,
        );
    }
    let allocators: Vec<String> = match flag("--allocator") {
        Some(a) => vec![a],
        None => vec!["glibc".into(), "jemalloc".into()],
    };
    assert!(
        allocators.iter().all(|a| a == "glibc" || a == "jemalloc"),
        "--allocator is glibc or jemalloc"
    );
    let variants: Vec<(&str, &str)> = match flag("--variant") {
        Some(v) => VARIANTS.into_iter().filter(|(name, _)| *name == v).collect(),
        None => VARIANTS.to_vec(),
    };
    assert!(!variants.is_empty(), "--variant is one of {:?}", VARIANTS.map(|v| v.0));
    println!("{n} links filled, bench-shaped, into a capacity of {capacity}; each variant in a fresh process.");
    println!("B a link: RSS added / heap bytes asked for, per link held");
    print!("{:<50}", "variant");
    for a in &allocators {
        print!(" {:>22}", a);
    }
    println!();
    let exe = std::env::current_exe().expect("this program's path");
    for (name, label) in variants {
        print!("{label:<50}");
        let mut held = None;
        for allocator in &allocators {
            let out = std::process::Command::new(&exe)
                .args([
                    &n.to_string(),
                    &capacity.to_string(),
                    "--variant",
                    name,
                    "--hits",
                    &hits.to_string(),
                ])
                .env("L1_MEMORY_ALLOCATOR", allocator)
                .env("L1_MEMORY_CHILD", "1")
                .output()
                .expect("run a variant");
            assert!(out.status.success(), "{name} under {allocator}: {out:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            let f: Vec<f64> = text.split_whitespace().map(|x| x.parse().unwrap()).collect();
            let mut cell = format!("{:.1} / {:.1}", f[1] / f[0], f[2] / f[0]);
            if let Some(ns) = f.get(3) {
                cell += &format!(" / {ns:.0} ns");
            }
            print!(" {cell:>22}");
            held = Some(f[0] as usize);
        }
        println!("   ({} held)", held.unwrap_or(0));
    }
}
