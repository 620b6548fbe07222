//! A keyed bijection of [0, domain) used to turn the KGS counter into codes that can
//! neither collide nor be enumerated: a balanced Feistel network over the smallest even
//! bit width covering the domain, with cycle-walking back into the domain.

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

const ROUNDS: u32 = 8;

/// A keyed permutation of `[0, domain)`.
#[derive(Clone)]
pub struct CodePermutation {
    key: (u64, u64),
    domain: u64,
    half_bits: u32,
    half_mask: u64,
}

impl std::fmt::Debug for CodePermutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("CodePermutation")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl CodePermutation {
    /// A permutation of `[0, domain)` keyed by 16 bytes. `domain` must be at least 2.
    pub fn new(key: [u8; 16], domain: u64) -> Self {
        assert!(domain >= 2, "a permutation needs a domain of at least 2");
        let bits = 64 - (domain - 1).leading_zeros();
        let half_bits = bits.div_ceil(2);
        let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
        CodePermutation {
            key: (k0, k1),
            domain,
            half_bits,
            half_mask: (1u64 << half_bits) - 1,
        }
    }

    /// The permutation over the 7-character base62 code space.
    pub fn for_codes(key: [u8; 16]) -> Self {
        Self::new(key, crate::base62::SPACE)
    }

    /// The size of the domain.
    pub fn domain(&self) -> u64 {
        self.domain
    }

    fn round(&self, round: u32, half: u64) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write_u32(round);
        h.write_u64(half);
        h.finish() & self.half_mask
    }

    fn feistel(&self, x: u64) -> u64 {
        let mut left = x >> self.half_bits;
        let mut right = x & self.half_mask;
        for r in 0..ROUNDS {
            let next = left ^ self.round(r, right);
            left = right;
            right = next;
        }
        (left << self.half_bits) | right
    }

    fn feistel_inverse(&self, y: u64) -> u64 {
        let mut left = y >> self.half_bits;
        let mut right = y & self.half_mask;
        for r in (0..ROUNDS).rev() {
            let prev = right ^ self.round(r, left);
            right = left;
            left = prev;
        }
        (left << self.half_bits) | right
    }

    /// Maps `x` (< domain) to its image; `None` when `x` is outside the domain.
    pub fn permute(&self, x: u64) -> Option<u64> {
        if x >= self.domain {
            return None;
        }
        // Cycle-walking: the Feistel network permutes [0, 2^(2*half_bits)), a superset of
        // the domain, so following the cycle from x always comes back into the domain.
        let mut y = self.feistel(x);
        while y >= self.domain {
            y = self.feistel(y);
        }
        Some(y)
    }

    /// The inverse of [`CodePermutation::permute`].
    pub fn unpermute(&self, y: u64) -> Option<u64> {
        if y >= self.domain {
            return None;
        }
        let mut x = self.feistel_inverse(y);
        while x >= self.domain {
            x = self.feistel_inverse(x);
        }
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = *b"0123456789abcdef";

    #[test]
    fn codes_already_issued_keep_their_values() {
        // Images the permutation gives today: a change here would re-map every code ever
        // issued, and the data plane would take issued codes for never-issued ones.
        let p = CodePermutation::for_codes(KEY);
        let q = CodePermutation::for_codes([7; 16]);
        let table: &[(&CodePermutation, u64, u64)] = &[
            (&p, 0, 2_533_869_963_203),
            (&q, 0, 746_045_375_878),
            (&p, 1, 3_083_866_571_050),
            (&q, 1, 3_185_809_349_355),
            (&p, 99, 1_871_276_029_513),
            (&q, 99, 1_791_305_289_830),
            (&p, 1_000_000, 1_284_420_599_027),
            (&q, 1_000_000, 817_272_897_257),
            (&p, 3_521_614_606_207, 2_478_709_618_350),
            (&q, 3_521_614_606_207, 3_127_320_864_698),
        ];
        for (perm, value, image) in table {
            assert_eq!(perm.permute(*value), Some(*image), "value {value}");
            assert_eq!(perm.unpermute(*image), Some(*value), "image {image}");
        }
    }

    #[test]
    fn exhaustive_bijection_on_small_domains() {
        for domain in [2u64, 3, 1000, 4096, 62 * 62 * 62] {
            let p = CodePermutation::new(KEY, domain);
            let mut seen = vec![false; domain as usize];
            for x in 0..domain {
                let y = p.permute(x).unwrap();
                assert!(y < domain);
                assert!(!seen[y as usize], "collision at {y} in domain {domain}");
                seen[y as usize] = true;
                assert_eq!(p.unpermute(y), Some(x));
            }
            assert!(seen.iter().all(|s| *s));
            assert_eq!(p.permute(domain), None);
        }
    }

    #[test]
    fn sampled_round_trip_on_the_code_space() {
        let p = CodePermutation::for_codes(KEY);
        let space = crate::base62::SPACE;
        let mut x = 0x9E37_79B9_7F4A_7C15u64 % space;
        let mut images = std::collections::HashSet::new();
        for i in 0..20_000u64 {
            let sample = if i < 10_000 { i } else { x };
            let y = p.permute(sample).unwrap();
            assert!(y < space);
            assert_eq!(p.unpermute(y), Some(sample));
            images.insert((sample, y));
            x = (x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407)) % space;
        }
        // Distinct inputs gave distinct outputs.
        let outputs: std::collections::HashSet<u64> = images.iter().map(|(_, y)| *y).collect();
        let inputs: std::collections::HashSet<u64> = images.iter().map(|(x, _)| *x).collect();
        assert_eq!(outputs.len(), inputs.len());
    }

    #[test]
    fn consecutive_counters_do_not_give_consecutive_codes() {
        let p = CodePermutation::for_codes(KEY);
        let a = p.permute(1000).unwrap();
        let b = p.permute(1001).unwrap();
        assert!(a.abs_diff(b) > 1_000_000, "{a} and {b} are too close");
    }

    #[test]
    fn the_key_changes_the_permutation() {
        let p = CodePermutation::for_codes(KEY);
        let q = CodePermutation::for_codes(*b"fedcba9876543210");
        let differ = (0..100).filter(|x| p.permute(*x) != q.permute(*x)).count();
        assert!(differ > 95);
    }
}
