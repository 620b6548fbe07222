//! What a link's rules cost in memory (docs/spec.md §14): the bytes of its L1 entry with
//! and without rules, and of the compiled rule set kept beside it, for the bench's five
//! rules (benches/rebound_bench/context.py `bench_rules`) and for a largest set accepted
//! (20 rules, 19 of 250 countries and a language each, the last a split of 10, near the
//! 32 KiB bound on the rules' JSON).
//!
//! `cargo run --release -p rebound-proxy --example rules_memory`

use rebound_core::cache::CachePolicy;
use rebound_core::rules::{normalize, Rule, RuleSet};
use rebound_core::{CacheRecord, Link, RedirectKind};
use rebound_proxy::l1::L1;

fn link(rules: Vec<Rule>) -> Link {
    Link {
        rules,
        ..Link::new_active(
            "AbCdEf1".into(),
            "https://example.com/page/1?ref=bench".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            None,
        )
    }
}

/// The bytes malloc gives for a request of `n` (glibc: 8 bytes of header, 16-byte steps,
/// 32 at least).
fn chunk(n: usize) -> usize {
    (n + 8).div_ceil(16).max(2) * 16
}

fn report(name: &str, rules: Vec<Rule>) {
    let rules = normalize(rules).expect("accepted");
    let record = CacheRecord::active(&link(rules.clone()), 0, &CachePolicy::default());
    let text = match &record.state {
        rebound_core::CacheState::Active { long_url, rules, .. } => {
            7 + long_url.len()
                + if rules.is_empty() {
                    0
                } else {
                    1 + serde_json::to_string(rules).unwrap().len()
                }
        }
        _ => unreachable!(),
    };
    let l1 = L1::new(16);
    let entry = l1.fill("AbCdEf1", record, 0);
    let compiled = match entry.has_rules() {
        true => l1.rules(&entry).map_or(0, |r| r.heap_bytes()),
        false => 0,
    };
    let asked = 8 + 32 + text;
    println!(
        "{name}: {} rules, L1 entry {asked} bytes asked ({} chunk), compiled set {compiled} bytes, JSON {} bytes",
        rules.len(),
        chunk(asked),
        text - 7 - "https://example.com/page/1?ref=bench".len()
    );
    let _ = RuleSet::compile("abcdefg", &rules);
}

fn main() {
    report("no rules", Vec::new());
    let five: Vec<Rule> = serde_json::from_value(serde_json::json!([
        {"countries": ["US", "CA"], "target": "https://example.com/us/1"},
        {"os": ["ios"], "target": "https://example.com/ios/1"},
        {"os": ["android"], "devices": ["mobile"], "target": "https://example.com/android/1"},
        {"languages": ["fr", "de"], "target": "https://example.com/lang/1"},
        {"split": [{"target": "https://example.com/a/1", "weight": 50},
                   {"target": "https://example.com/b/1", "weight": 50}]},
    ]))
    .unwrap();
    report("the bench's five", five);
    let countries: Vec<String> = (0..250)
        .map(|i| format!("{}{}", (b'A' + (i / 26) as u8) as char, (b'A' + (i % 26) as u8) as char))
        .collect();
    let mut largest: Vec<serde_json::Value> = (0..19)
        .map(|i| {
            let language = format!("x{}", (b'a' + i as u8) as char);
            let target = format!("https://example.com/{i}/{}", "x".repeat(60));
            serde_json::json!({"countries": countries, "languages": [language], "target": target})
        })
        .collect();
    largest.push(serde_json::json!({"split": (0..10).map(|v| serde_json::json!({"target": format!("https://example.com/s{v}/{}", "y".repeat(100)), "weight": 10_000})).collect::<Vec<_>>()}));
    let largest: Vec<Rule> = serde_json::from_value(serde_json::Value::Array(largest)).unwrap();
    report("the largest accepted", largest);
}
