//! Creation rate limits: a token bucket per creator key and per anonymous IP.

use rebound_core::UnixMillis;
use std::collections::HashMap;
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

impl CreateRateLimiter {
    /// Takes one token from `who`'s bucket (`rate` per second, holding at most `burst`).
    /// When empty, returns how many whole seconds until a token is back.
    pub fn take(&self, who: &str, rate: f64, burst: u32, now: UnixMillis) -> Result<(), u64> {
        self.take_n(who, 1, rate, burst, now)
    }

    /// Takes `n` tokens at once (a bulk import), or none.
    pub fn take_n(&self, who: &str, n: u32, rate: f64, burst: u32, now: UnixMillis) -> Result<(), u64> {
        let need = f64::from(n);
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
        if bucket.tokens >= need {
            bucket.tokens -= need;
            Ok(())
        } else {
            Err(((need.min(burst) - bucket.tokens) / rate).ceil().max(1.0) as u64)
        }
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
        assert!(l.take_n("bulk", 3, 1.0, 5, 0).is_ok());
        assert_eq!(l.take_n("bulk", 3, 1.0, 5, 0), Err(1), "2 left, 3 needed: none taken");
        assert!(l.take_n("bulk", 2, 1.0, 5, 0).is_ok());
    }
}
