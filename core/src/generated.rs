//! Generated codes, both ways: the KGS turns a counter value into a code (the keyed
//! permutation, then 7 base62 characters, skipping reserved words), and the data plane
//! turns a code back into the only counter value that can have produced it. A code whose
//! value is at or above the counter's high-water mark was never generated.

use crate::base62;
use crate::code::is_reserved;
use crate::permute::CodePermutation;

/// The store counter the KGS leases its blocks from.
pub const COUNTER: &str = "codes";
/// The store setting that keeps the generated permutation key (hex), when it is not configured.
pub const CODE_KEY_SETTING: &str = "code_permutation_key";
/// The store setting written once the alias index holds every alias (after the one-time
/// backfill of a store made before the index existed); data planes trust the index only then.
pub const ALIAS_INDEX_SETTING: &str = "alias_index_complete";

/// What one counter value gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Generated {
    /// The code issued for the value.
    Code(String),
    /// The value's code is a reserved word: it is skipped, never issued.
    Reserved,
    /// The value is past the code space.
    Exhausted,
}

/// The mapping between counter values and generated codes, under one permutation key.
#[derive(Debug, Clone)]
pub struct GeneratedCodes {
    permutation: CodePermutation,
}

impl GeneratedCodes {
    /// The mapping keyed by the 16-byte permutation key.
    pub fn new(key: [u8; 16]) -> Self {
        GeneratedCodes {
            permutation: CodePermutation::for_codes(key),
        }
    }

    /// The code the KGS issues for counter value `value`.
    pub fn code_for(&self, value: u64) -> Generated {
        let Some(code) = self.permutation.permute(value).and_then(base62::encode) else {
            return Generated::Exhausted;
        };
        if is_reserved(&code) {
            Generated::Reserved
        } else {
            Generated::Code(code)
        }
    }

    /// The counter value whose code is `code`, or `None` when no value gives it (not 7
    /// base62 characters, or a reserved word, which is never issued). Allocates nothing:
    /// the data plane asks it for every code that missed its caches.
    #[inline]
    pub fn value_of(&self, code: &[u8]) -> Option<u64> {
        let digits = base62::decode_bytes(code)?;
        // Only ASCII gets here; a reserved word is skipped by the KGS, so it has no value.
        if is_reserved(std::str::from_utf8(code).ok()?) {
            return None;
        }
        self.permutation.unpermute(digits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = *b"0123456789abcdef";

    #[test]
    fn value_of_inverts_code_for() {
        let g = GeneratedCodes::new(KEY);
        let mut x = 12_345u64;
        for i in 0..20_000u64 {
            let value = if i < 10_000 { i } else { x % base62::SPACE };
            match g.code_for(value) {
                Generated::Code(code) => {
                    assert_eq!(g.value_of(code.as_bytes()), Some(value), "code {code}");
                    // Canonical: the value gives this very code back.
                    assert_eq!(g.code_for(g.value_of(code.as_bytes()).unwrap()), Generated::Code(code));
                }
                other => panic!("value {value} gave {other:?}"),
            }
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
    }

    #[test]
    fn value_of_table() {
        let g = GeneratedCodes::new(KEY);
        let issued = match g.code_for(7) {
            Generated::Code(c) => c,
            other => panic!("{other:?}"),
        };
        let cases: &[(&str, Option<u64>)] = &[
            (&issued, Some(7)),
            // Not 7 base62 characters: no generated code looks like that.
            ("abc", None),
            ("abcdefgh", None),
            ("abc-efg", None),
            ("abc_efg", None),
            ("", None),
            // Reserved words of 7 letters are skipped by the KGS.
            ("metrics", None),
            ("healthz", None),
            ("console", None),
            ("Console", None),
        ];
        for (code, want) in cases {
            assert_eq!(g.value_of(code.as_bytes()), *want, "code {code:?}");
        }
        // Any other 7 base62 characters decode to some value of the space.
        for code in ["0000000", "zzzzzzz", "aB3dE5f"] {
            let v = g.value_of(code.as_bytes()).expect("a value");
            assert!(v < base62::SPACE);
            assert_eq!(g.code_for(v), Generated::Code(code.to_owned()));
        }
    }

    #[test]
    fn reserved_and_exhausted_values() {
        let g = GeneratedCodes::new(KEY);
        assert_eq!(g.code_for(base62::SPACE), Generated::Exhausted);
        assert_eq!(g.code_for(u64::MAX), Generated::Exhausted);
        // The value that "metrics" decodes to under the permutation is skipped.
        let digits = base62::decode("metrics").unwrap();
        let perm = CodePermutation::for_codes(KEY);
        let value = perm.unpermute(digits).unwrap();
        assert_eq!(g.code_for(value), Generated::Reserved);
    }

    #[test]
    fn another_key_gives_other_values() {
        let (g, h) = (GeneratedCodes::new(KEY), GeneratedCodes::new(*b"fedcba9876543210"));
        let Generated::Code(code) = g.code_for(3) else { panic!() };
        assert_ne!(h.value_of(code.as_bytes()), Some(3));
    }
}
