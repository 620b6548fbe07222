//! Measures what Redis holds per cached link: writes N records for links shaped like the
//! bench's (7-character codes, `https://example.com/page/N?ref=bench`) through
//! `RedisCache::put_record`, as a proxy's L2 fill does, and reports Redis's `used_memory`
//! before and after. docs/scaling.md quotes it.
//!
//!     cargo run --release -p rebound-redis --example record_memory -- redis://127.0.0.1:6379/ 100000
//!
//! Use a Redis nothing else uses: it writes under the prefix `memtest:` and deletes those
//! keys at the end.

use rebound_core::cache::{CachePolicy, CacheRecord};
use rebound_core::{Link, RedirectKind};
use rebound_redis::RedisCache;
use rebound_store::RecordCache;

fn used_memory(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("usage: record_memory REDIS_URL N");
    let n: u64 = args.next().map_or(100_000, |v| v.parse().expect("N is a number"));
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut admin = client.get_multiplexed_async_connection().await.expect("Redis answers");
    let info = |c: &mut redis::aio::MultiplexedConnection| {
        let mut c = c.clone();
        async move {
            let raw: String = redis::cmd("INFO").arg("memory").query_async(&mut c).await.unwrap();
            used_memory(&raw)
        }
    };
    let before = info(&mut admin).await;
    let cache = RedisCache::new(&url, "memtest:").expect("a Redis URL");
    let now = 1_790_000_000_000;
    let policy = CachePolicy::default();
    let alphabet = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for i in 0..n {
        let mut code = String::with_capacity(7);
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
        for _ in 0..7 {
            code.push(alphabet[(x % 62) as usize] as char);
            x /= 62;
        }
        let link = Link::new_active(
            code.clone(),
            format!("https://example.com/page/{i}?ref=bench"),
            RedirectKind::Found,
            false,
            now,
            "creator".into(),
            None,
        );
        let record = CacheRecord::active(&link, now, &policy);
        cache.put_record(&code, &record, now).await.expect("written");
    }
    let after = info(&mut admin).await;
    let sample: Option<String> = redis::cmd("RANDOMKEY").query_async(&mut admin).await.unwrap();
    let value: Option<String> = match &sample {
        Some(k) => redis::cmd("GET").arg(k).query_async(&mut admin).await.unwrap(),
        None => None,
    };
    println!("records: {n}");
    println!("used_memory before: {before} B, after: {after} B");
    println!("per record: {:.0} B", (after - before) as f64 / n as f64);
    if let (Some(k), Some(v)) = (sample, value) {
        println!("a key: {k} ({} B), its value: {} B: {v}", k.len(), v.len());
    }
    // Clean up.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("memtest:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    for chunk in keys.chunks(1000) {
        let _: () = redis::cmd("DEL").arg(chunk).query_async(&mut admin).await.unwrap();
    }
}
