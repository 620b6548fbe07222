//! Creation rate limits: a token bucket per creator key and per anonymous network (an
//! IPv4 address, or an IPv6 /64).

use rebound_core::UnixMillis;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Buckets kept before idle, full ones are forgotten.
const PRUNE_ABOVE: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: UnixMillis,
}

/// Token buckets by caller.
#[derive(Debug, Default)]
pub struct CreateRateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// Whole seconds until a bucket refilling at `rate` per second holds `need` tokens.
fn seconds_until(tokens: f64, need: f64, rate: f64) -> u64 {
    ((need - tokens) / rate).ceil().max(1.0) as u64
}

impl CreateRateLimiter {
    /// Runs `f` on `who`'s bucket, refilled up to now (`rate` per second, at most `burst`).
    fn with_bucket<T>(&self, who: &str, rate: f64, burst: u32, now: UnixMillis, f: impl FnOnce(&mut f64) -> T) -> T {
        let burst = f64::from(burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > PRUNE_ABOVE {
            buckets.retain(|_, b| b.tokens + (now - b.last).max(0) as f64 / 1000.0 * rate < burst);
        }
        let bucket = buckets.entry(who.to_owned()).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        let elapsed = (now - bucket.last).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.last = now;
        f(&mut bucket.tokens)
    }

    /// Takes one token from `who`'s bucket (`rate` per second, holding at most `burst`).
    /// When empty, returns how many whole seconds until a token is back.
    pub fn take(&self, who: &str, rate: f64, burst: u32, now: UnixMillis) -> Result<(), u64> {
        self.take_up_to(who, 1, rate, burst, now).map(|_| ())
    }

    /// Takes as many of `n` tokens as the bucket holds now (a bulk import), and returns how
    /// many it took. When it holds not even one, returns how many whole seconds until one
    /// is back: a wait that comes true even when `n` is larger than `burst`.
    pub fn take_up_to(&self, who: &str, n: u32, rate: f64, burst: u32, now: UnixMillis) -> Result<u32, u64> {
        if n == 0 {
            return Ok(0);
        }
        self.with_bucket(who, rate, burst, now, |tokens| {
            let taken = tokens.floor().min(f64::from(n));
            if taken < 1.0 {
                return Err(seconds_until(*tokens, 1.0, rate));
            }
            *tokens -= taken;
            Ok(taken as u32)
        })
    }

    /// Whole seconds until `who`'s bucket holds `n` tokens, or a full bucket when `n` is
    /// more than `burst` (no wait could promise more); 0 when it does already.
    pub fn wait_for(&self, who: &str, n: u32, rate: f64, burst: u32, now: UnixMillis) -> u64 {
        let need = f64::from(n.min(burst));
        self.with_bucket(who, rate, burst, now, |tokens| {
            if *tokens >= need {
                0
            } else {
                seconds_until(*tokens, need, rate)
            }
        })
    }
}

/// The bucket of an anonymous caller: its IPv4 address (also when it arrives IPv4-mapped
/// over IPv6), or its IPv6 /64, since one IPv6 client holds a whole /64 to rotate through.
pub fn anonymous_bucket(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("anonymous:{v4}"),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("anonymous:{v4}"),
            None => {
                let s = v6.segments();
                let prefix = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("anonymous:{prefix}/64")
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let l = CreateRateLimiter::default();
        for _ in 0..3 {
            assert!(l.take("a", 1.0, 3, 0).is_ok());
        }
        assert_eq!(l.take("a", 1.0, 3, 0), Err(1));
        assert!(l.take("b", 1.0, 3, 0).is_ok(), "buckets are per caller");
        assert!(l.take("a", 1.0, 3, 1000).is_ok(), "a second later one token is back");
        assert!(l.take("a", 1.0, 3, 1000).is_err());
        assert_eq!(l.take("slow", 0.1, 1, 0), Ok(()));
        assert_eq!(l.take("slow", 0.1, 1, 0), Err(10));
    }

    #[test]
    fn a_bulk_take_takes_what_the_bucket_holds() {
        let l = CreateRateLimiter::default();
        assert_eq!(l.take_up_to("bulk", 3, 1.0, 5, 0), Ok(3));
        assert_eq!(l.take_up_to("bulk", 3, 1.0, 5, 0), Ok(2), "2 left, 3 asked: 2 taken");
        assert_eq!(l.take_up_to("bulk", 3, 1.0, 5, 0), Err(1), "empty: one is back in 1 s");
        assert_eq!(l.take_up_to("bulk", 0, 1.0, 5, 0), Ok(0));
        // More than the burst: a full bucket now, the rest later, never an endless refusal.
        assert_eq!(l.take_up_to("big", 1000, 50.0, 200, 0), Ok(200));
        assert_eq!(l.wait_for("big", 800, 50.0, 200, 0), 4, "a full bucket in 4 s, not 16");
        assert_eq!(l.take_up_to("big", 800, 50.0, 200, 4000), Ok(200));
        assert_eq!(
            l.take_up_to("big", 600, 50.0, 200, 4010),
            Err(1),
            "half a token after 10 ms"
        );
        assert_eq!(l.wait_for("fresh", 3, 1.0, 5, 0), 0);
        assert_eq!(l.take_up_to("half", 1, 0.5, 1, 0), Ok(1));
        assert_eq!(l.take_up_to("half", 1, 0.5, 1, 1000), Err(1), "half a token: 1 s more");
    }

    #[test]
    fn anonymous_buckets_are_per_ipv4_address_and_per_ipv6_64() {
        let key = |s: &str| anonymous_bucket(s.parse().unwrap());
        let cases = [
            ("192.0.2.1", "anonymous:192.0.2.1"),
            ("::ffff:192.0.2.1", "anonymous:192.0.2.1"),
            ("2001:db8:1:2::1", "anonymous:2001:db8:1:2::/64"),
            ("2001:db8:1:2:ffff:ffff:ffff:ffff", "anonymous:2001:db8:1:2::/64"),
            ("2001:db8:1:3::1", "anonymous:2001:db8:1:3::/64"),
            ("::1", "anonymous:::/64"),
        ];
        for (ip, want) in cases {
            assert_eq!(key(ip), want, "{ip}");
        }
        let l = CreateRateLimiter::default();
        assert!(l.take(&key("2001:db8::1"), 0.001, 1, 0).is_ok());
        assert!(
            l.take(&key("2001:db8::2"), 0.001, 1, 0).is_err(),
            "same /64, same bucket"
        );
        assert!(l.take(&key("2001:db8:0:1::2"), 0.001, 1, 0).is_ok());
    }
}
