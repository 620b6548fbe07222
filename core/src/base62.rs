//! Fixed-width base62 for generated codes: 7 characters cover [0, 62^7).

/// Width of a generated code.
pub const WIDTH: usize = 7;
/// Number of values a generated code can carry: 62^7.
pub const SPACE: u64 = 62u64.pow(WIDTH as u32);

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Encodes `value` (< [`SPACE`]) as exactly 7 base62 characters, most significant first.
/// Returns `None` when the value does not fit.
pub fn encode(value: u64) -> Option<String> {
    if value >= SPACE {
        return None;
    }
    let mut out = [b'0'; WIDTH];
    let mut v = value;
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v % 62) as usize];
        v /= 62;
    }
    // The alphabet is ASCII, so this never fails.
    Some(out.iter().map(|&b| b as char).collect())
}

/// Decodes 7 base62 characters back to their value.
pub fn decode(code: &str) -> Option<u64> {
    decode_bytes(code.as_bytes())
}

/// [`decode`] over bytes: `None` unless exactly 7 characters of the alphabet. Every such
/// string is canonical (fixed width), so `encode` gives it back.
#[inline]
pub fn decode_bytes(code: &[u8]) -> Option<u64> {
    if code.len() != WIDTH {
        return None;
    }
    code.iter().try_fold(0u64, |acc, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'A'..=b'Z' => b - b'A' + 10,
            b'a'..=b'z' => b - b'a' + 36,
            _ => return None,
        };
        Some(acc * 62 + u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_table() {
        let cases: &[(u64, Option<&str>)] = &[
            (0, Some("0000000")),
            (1, Some("0000001")),
            (61, Some("000000z")),
            (62, Some("0000010")),
            (SPACE - 1, Some("zzzzzzz")),
            (SPACE, None),
            (u64::MAX, None),
        ];
        for (value, want) in cases {
            assert_eq!(encode(*value).as_deref(), *want, "value {value}");
        }
    }

    #[test]
    fn decode_inverts_encode() {
        for v in [0, 1, 61, 62, 3843, 123_456_789, SPACE / 2, SPACE - 1] {
            assert_eq!(decode(&encode(v).unwrap()), Some(v));
        }
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("abc-efg"), None);
        assert_eq!(decode("00000000"), None);
    }
}
