//! Generated codes, both ways: the KGS turns a counter value into a code (the keyed
//! permutation, then 7 base62 characters, skipping reserved words), and the data plane
//! turns a code back into the only counter value that can have produced it. A code whose
//! value is at or above the counter's high-water mark was never generated.

use crate::base62;
use crate::code::is_reserved;
use crate::permute::CodePermutation;

/// How far above the high-water mark a data plane knows a generated code is still looked
/// up in the store rather than answered 404: 2^28 values. The contract between the planes:
/// a control plane uses a block as soon as it leased it, before every proxy has heard of
/// the new mark, so its blocks are far smaller than this (`rebound_control_plane::kgs`
/// checks it when it compiles). A random 7-character code lands in the slack with
/// probability 2^28 / 62^7, under 0.008 %.
pub const HIGH_WATER_SLACK: u64 = 1 << 28;

/// The store counter the KGS of region slot 0 leases its blocks from (every store made
/// before regions: its codes are slot 0's).
pub const COUNTER: &str = "codes";
/// Region slots: the counter values (the code space) are split into this many equal
/// ranges, one per region of a fleet, each leased from a counter of its own, so that
/// regions generate codes without asking each other and never give one twice (docs/spec.md §8).
pub const REGION_SLOTS: u8 = 16;
/// Counter values in each region slot's range.
pub const REGION_SPAN: u64 = base62::SPACE / REGION_SLOTS as u64;

/// The store counter of region slot `slot`: [`COUNTER`] for slot 0, `codes@<slot>` for
/// the others.
pub fn region_counter(slot: u8) -> String {
    match slot {
        0 => COUNTER.to_owned(),
        n => format!("{COUNTER}@{n}"),
    }
}

/// Value `offset` of region slot `slot`'s counter, as a value of the whole code space;
/// `None` past the slot's range (or for a slot that does not exist).
pub fn region_value(slot: u8, offset: u64) -> Option<u64> {
    (slot < REGION_SLOTS && offset < REGION_SPAN).then(|| u64::from(slot) * REGION_SPAN + offset)
}

/// The region slot a value of the code space belongs to, and its offset in that slot's
/// range (values past the last full range belong to no slot: `None`).
pub fn split_value(value: u64) -> Option<(u8, u64)> {
    let slot = value / REGION_SPAN;
    (slot < u64::from(REGION_SLOTS)).then_some((slot as u8, value % REGION_SPAN))
}
/// The store setting that keeps the permutation key (hex), recorded by the first start of a
/// control plane on the store (the configured key, or a generated one) and fixed from then on.
pub const CODE_KEY_SETTING: &str = "code_permutation_key";
/// The store setting written once the alias index holds every alias (after the one-time
/// backfill of a store made before the index existed); data planes trust the index only then.
pub const ALIAS_INDEX_SETTING: &str = "alias_index_complete";

/// A configured permutation key that is not the one the store was created with. It names
/// the settings, never a key: the key is what makes codes unguessable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the configured code key (REBOUND_CODE_KEY, or api.code_key in the configuration file) is not the \
     permutation key this store was created with (the store's setting {CODE_KEY_SETTING}): every code \
     generated so far would answer 404. The key is fixed for the life of a store: unset REBOUND_CODE_KEY \
     and api.code_key to use the stored key, or set them to it"
)]
pub struct CodeKeyMismatch;

/// The key codes are generated and read with: the one the store recorded, which a configured
/// key must equal.
pub fn store_permutation_key(configured: Option<[u8; 16]>, stored: [u8; 16]) -> Result<[u8; 16], CodeKeyMismatch> {
    match configured {
        Some(k) if k != stored => Err(CodeKeyMismatch),
        _ => Ok(stored),
    }
}

/// A permutation key as the store keeps it: 32 lower-case hex digits.
pub fn key_to_hex(key: &[u8; 16]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A stored permutation key read back; `None` unless it is 32 hex digits.
pub fn key_from_hex(hex: &str) -> Option<[u8; 16]> {
    // from_str_radix alone would take a sign.
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

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
    fn region_slots_split_the_code_space_without_overlap() {
        assert_eq!(
            REGION_SPAN * u64::from(REGION_SLOTS),
            base62::SPACE,
            "62^7 splits evenly"
        );
        // (slot, offset, the value)
        let cases = [
            (0, 0, Some(0)),
            (0, 12_345, Some(12_345)),
            (0, REGION_SPAN - 1, Some(REGION_SPAN - 1)),
            (0, REGION_SPAN, None),
            (1, 0, Some(REGION_SPAN)),
            (1, 7, Some(REGION_SPAN + 7)),
            (15, REGION_SPAN - 1, Some(base62::SPACE - 1)),
            (16, 0, None),
        ];
        for (slot, offset, want) in cases {
            assert_eq!(region_value(slot, offset), want, "slot {slot} offset {offset}");
            if let Some(value) = want {
                assert_eq!(split_value(value), Some((slot, offset)), "value {value}");
            }
        }
        assert_eq!(split_value(base62::SPACE), None);
        assert_eq!(split_value(u64::MAX), None);
        assert_eq!(region_counter(0), COUNTER, "a store made before regions is slot 0's");
        assert_eq!(region_counter(3), "codes@3");
        // Every slot's codes are codes of the one permutation: any value decodes back.
        let g = GeneratedCodes::new(KEY);
        for slot in [0, 1, 7, 15] {
            let value = region_value(slot, 99).unwrap();
            let Generated::Code(code) = g.code_for(value) else {
                continue;
            };
            assert_eq!(g.value_of(code.as_bytes()).and_then(split_value), Some((slot, 99)));
        }
    }

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
    fn the_stored_key_is_used_and_a_configured_one_must_equal_it() {
        let other = *b"fedcba9876543210";
        // (configured, what the start runs with)
        type Case = (Option<[u8; 16]>, Result<[u8; 16], CodeKeyMismatch>);
        let cases: &[Case] = &[
            (None, Ok(KEY)),
            (Some(KEY), Ok(KEY)),
            (Some(other), Err(CodeKeyMismatch)),
        ];
        for (configured, want) in cases {
            assert_eq!(store_permutation_key(*configured, KEY), *want, "{configured:?}");
        }
        let message = CodeKeyMismatch.to_string();
        for named in ["REBOUND_CODE_KEY", "api.code_key", CODE_KEY_SETTING] {
            assert!(message.contains(named), "{message}");
        }
        for key in [KEY, other] {
            assert!(!message.contains(&key_to_hex(&key)), "{message}");
        }
    }

    #[test]
    fn keys_are_kept_as_hex() {
        assert_eq!(key_to_hex(&KEY), "30313233343536373839616263646566");
        let cases: &[(&str, Option<[u8; 16]>)] = &[
            ("30313233343536373839616263646566", Some(KEY)),
            ("30313233343536373839616263646566".to_uppercase().leak(), Some(KEY)),
            ("3031", None),
            ("zz313233343536373839616263646566", None),
            ("3031323334353637383961626364656", None),
            ("303132333435363738396162636465667", None),
            ("+0313233343536373839616263646566", None),
            ("é313233343536373839616263646566", None),
        ];
        for (hex, want) in cases {
            assert_eq!(key_from_hex(hex), *want, "{hex:?}");
        }
    }

    #[test]
    fn another_key_gives_other_values() {
        let (g, h) = (GeneratedCodes::new(KEY), GeneratedCodes::new(*b"fedcba9876543210"));
        let Generated::Code(code) = g.code_for(3) else { panic!() };
        assert_ne!(h.value_of(code.as_bytes()), Some(3));
    }
}
