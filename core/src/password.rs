//! Password-protected links (docs/spec.md §12): the password as stored (an Argon2id hash in the PHC
//! string format, never the password), its check, and the signed cookie that lets a visitor
//! who gave it through for a while. The salt, the cookie key and the clock come from the
//! caller: nothing here does I/O.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::time::UnixMillis;

/// Shortest and longest password accepted, in characters.
pub const PASSWORD_CHARS: std::ops::RangeInclusive<usize> = 4..=128;
/// The store setting holding the key (hex) the fleet signs unlock cookies with, made by
/// the first control plane that starts.
pub const UNLOCK_KEY_SETTING: &str = "unlock_cookie_key";
/// The store setting holding the key (hex) the control planes take a password's MAC with
/// where an idempotency record's request fingerprint needs it ([`password_fingerprint`]),
/// made by the first control plane that starts. Only control planes read it.
pub const IDEMPOTENCY_KEY_SETTING: &str = "idempotency_password_key";

/// How long the cookie of a correct password lets its visitor through.
pub const UNLOCK_MILLIS: i64 = 15 * 60_000;

/// The cost of a hash: OWASP's first Argon2id choice (19 MiB, 2 passes, 1 lane), about
/// 20-50 ms of one core; a verification costs the same.
fn argon2() -> Argon2<'static> {
    Argon2::new(
        Algorithm::Argon2id,
        Version::V0x13,
        Params::new(19 * 1024, 2, 1, None).expect("valid Argon2 parameters"),
    )
}

/// Why a password is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    #[error("password must be 4 to 128 characters without control characters")]
    Shape,
}

/// `password` checked: 4 to 128 characters, none of them a control character.
pub fn check_password(password: &str) -> Result<(), PasswordError> {
    let chars = password.chars().count();
    if !PASSWORD_CHARS.contains(&chars) || password.chars().any(char::is_control) {
        return Err(PasswordError::Shape);
    }
    Ok(())
}

/// The Argon2id hash of `password` with `salt` (16 random bytes), as a PHC string
/// (`$argon2id$v=19$m=19456,t=2,p=1$…`). About 20-50 ms: not for a request's thread.
pub fn hash_password(password: &str, salt: [u8; 16]) -> String {
    let salt = SaltString::encode_b64(&salt).expect("16 bytes make a valid salt");
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .expect("hashing with valid parameters cannot fail")
        .to_string()
}

/// Whether `password` is the one `hash` (a PHC string [`hash_password`] made) was made
/// from; a hash that cannot be read matches nothing. As slow as [`hash_password`].
pub fn verify_password(password: &str, hash: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => argon2().verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

/// The value of the cookie that lets its visitor through to `key` (a link's key) at
/// `version` until `until`: `<version>.<until>.<HMAC-SHA256 hex>`, signed with `secret`.
/// A new version (the password changed, or the link was edited) needs a new cookie.
pub fn unlock_cookie(secret: &[u8], key: &str, version: u64, until: UnixMillis) -> String {
    let signature = mac(secret, key, version, until).finalize().into_bytes();
    format!("{version}.{until}.{}", hex::encode(signature))
}

/// Whether `value` is a cookie [`unlock_cookie`] made for `key` at `version` that has not
/// run out at `now`. Compared in constant time.
pub fn cookie_unlocks(secret: &[u8], value: &str, key: &str, version: u64, now: UnixMillis) -> bool {
    let mut parts = value.splitn(3, '.');
    let (Some(v), Some(until), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(v), Ok(until)) = (v.parse::<u64>(), until.parse::<UnixMillis>()) else {
        return false;
    };
    if v != version || now >= until || until - now > UNLOCK_MILLIS {
        return false;
    }
    let Ok(sig) = hex::decode(sig) else { return false };
    mac(secret, key, version, until).verify_slice(&sig).is_ok()
}

/// A password as a request fingerprint (an idempotency record's) holds it:
/// `hmac-sha256:<hex>`, an HMAC-SHA256 keyed with `secret` (the store's
/// [`IDEMPOTENCY_KEY_SETTING`]). Equal passwords give equal fingerprints under one key, so a
/// replay with another password is told apart; without the key a guess cannot be checked
/// against a record, so a reader of the store cannot guess passwords at a fast hash's speed.
pub fn password_fingerprint(secret: &[u8], password: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(b"rebound idempotency password\n");
    mac.update(password.as_bytes());
    format!("hmac-sha256:{}", hex::encode(mac.finalize().into_bytes()))
}

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8], key: &str, version: u64, until: UnixMillis) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(key.as_bytes());
    mac.update(b"\n");
    mac.update(&version.to_be_bytes());
    mac.update(&until.to_be_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_stored_as_an_argon2id_hash_and_only_it_matches() {
        let hash = hash_password("correct horse", [7; 16]);
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{hash}");
        assert!(!hash.contains("correct horse"));
        assert_ne!(hash, hash_password("correct horse", [8; 16]), "salted");
        for (given, matches) in [
            ("correct horse", true),
            ("correct hors", false),
            ("Correct horse", false),
            ("", false),
        ] {
            assert_eq!(verify_password(given, &hash), matches, "{given:?}");
        }
        assert!(!verify_password("x", "not a hash"));
    }

    #[test]
    fn a_password_fingerprint_is_keyed_and_holds_no_fast_hash_of_it() {
        use sha2::Digest;
        let a = password_fingerprint(b"server secret", "correct horse");
        assert!(a.starts_with("hmac-sha256:"), "{a}");
        assert_eq!(
            a,
            password_fingerprint(b"server secret", "correct horse"),
            "stable under a key"
        );
        assert_ne!(
            a,
            password_fingerprint(b"server secret", "correct hors"),
            "tells passwords apart"
        );
        assert_ne!(
            a,
            password_fingerprint(b"another secret", "correct horse"),
            "depends on the key"
        );
        assert!(!a.contains("correct horse"));
        for unkeyed in [
            hex::encode(Sha256::digest(b"correct horse")),
            hex::encode(Sha256::digest(b"rebound idempotency password\ncorrect horse")),
        ] {
            assert!(!a.contains(&unkeyed), "no unkeyed hash of the password");
        }
    }

    #[test]
    fn passwords_are_4_to_128_characters_without_control_characters() {
        for (password, ok) in [
            ("abcd", true),
            ("abc", false),
            (&"é".repeat(128) as &str, true),
            (&"a".repeat(129), false),
            ("pass\nword", false),
            ("pass word", true),
        ] {
            assert_eq!(check_password(password).is_ok(), ok, "{password:?}");
        }
    }

    #[test]
    fn a_cookie_unlocks_its_link_at_its_version_until_it_runs_out() {
        let secret = b"fleet secret";
        let cookie = unlock_cookie(secret, "abc", 3, 1_000_000);
        let now = 1_000_000 - UNLOCK_MILLIS + 1;
        assert!(cookie_unlocks(secret, &cookie, "abc", 3, now));
        for (what, secret, value, key, version, now) in [
            ("another link", &secret[..], cookie.as_str(), "abd", 3, now),
            ("another version", &secret[..], cookie.as_str(), "abc", 4, now),
            ("run out", &secret[..], cookie.as_str(), "abc", 3, 1_000_000),
            ("another secret", &b"other"[..], cookie.as_str(), "abc", 3, now),
            ("garbage", &secret[..], "3.1000000.zz", "abc", 3, now),
            ("truncated", &secret[..], &cookie[..cookie.len() - 2], "abc", 3, now),
            ("empty", &secret[..], "", "abc", 3, now),
        ] {
            assert!(!cookie_unlocks(secret, value, key, version, now), "{what}");
        }
        // A forged expiry far ahead (signed with the right secret, by someone who has it)
        // is still refused: no cookie lasts longer than UNLOCK_MILLIS.
        let long = unlock_cookie(secret, "abc", 3, now + 10 * UNLOCK_MILLIS);
        assert!(!cookie_unlocks(secret, &long, "abc", 3, now));
    }
}
