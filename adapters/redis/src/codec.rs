//! The wire formats: invalidation messages, acknowledgements and stored cache records.

use rebound_core::CacheRecord;
use rebound_store::{ChannelMessage, StoreError};

/// The invalidation message of `code` at `version`: `"<version> <code>"` when it went down,
/// `"<version> <code> edited"` when it was edited; `code` is the link's key, which carries
/// its domain (`rebound_core::domain`). A proxy from before edits reads an edit's message
/// as malformed and never acknowledges it: the edit waits the bound out for it, as for a
/// proxy that missed the message, and its L1 entries have expired by then.
pub fn encode_invalidation(version: u64, code: &str, edited: bool) -> String {
    match edited {
        false => format!("{version} {code}"),
        true => format!("{version} {code} {EDITED}"),
    }
}

/// The word after the code in an edit's invalidation message.
const EDITED: &str = "edited";

/// Reads an invalidation message that [`encode_invalidation`] wrote (`Invalidate` or
/// `Edited`); `None` when malformed.
pub fn decode_message(payload: &str) -> Option<ChannelMessage> {
    let edit = payload.strip_suffix(EDITED).and_then(|h| h.strip_suffix(' '));
    if let Some((version, code)) = edit.and_then(decode_invalidation) {
        let code = code.to_owned();
        return Some(ChannelMessage::Edited { version, code });
    }
    let (version, code) = decode_invalidation(payload)?;
    let code = code.to_owned();
    Some(ChannelMessage::Invalidate { version, code })
}

/// A proxy's acknowledgement of an invalidation: `"<proxy> <version> <code>"`.
pub fn encode_ack(proxy: &str, version: u64, code: &str) -> String {
    format!("{proxy} {version} {code}")
}

/// Reads an acknowledgement that [`encode_ack`] wrote: `(proxy, version, code)`.
pub fn decode_ack(payload: &str) -> Option<(&str, u64, &str)> {
    let (proxy, rest) = payload.split_once(' ')?;
    let (version, code) = decode_invalidation(rest)?;
    (!proxy.is_empty() && proxy.bytes().all(|b| b.is_ascii_alphanumeric())).then_some((proxy, version, code))
}

/// Reads `"<version> <code>"` (a delete's invalidation, and the head of an
/// acknowledgement); `None` when malformed.
pub fn decode_invalidation(payload: &str) -> Option<(u64, &str)> {
    let (version, code) = payload.split_once(' ')?;
    let version = version.parse().ok()?;
    rebound_core::domain::is_valid_key(code).then_some((version, code))
}

/// Reads a stored record.
pub fn decode_record(raw: &str) -> Result<CacheRecord, StoreError> {
    decode_stamped_record(raw).map(|(record, _)| record)
}

/// Reads a stored record and the epoch it was written in (none: written by a version
/// before epochs, or not through the write script).
pub fn decode_stamped_record(raw: &str) -> Result<(CacheRecord, Option<i64>), StoreError> {
    let (_, json) = raw
        .split_once(' ')
        .ok_or_else(|| StoreError::Corrupt("cache record without version".into()))?;
    let epoch = json
        .strip_prefix(r#"{"e":"#)
        .and_then(|rest| rest.split_once(',')?.0.parse().ok());
    let record = serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("cache record: {e}")))?;
    Ok((record, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_messages_round_trip_and_garbage_is_refused() {
        let down = |version, code: &str| {
            Some(ChannelMessage::Invalidate {
                version,
                code: code.into(),
            })
        };
        let edited = |version, code: &str| {
            Some(ChannelMessage::Edited {
                version,
                code: code.into(),
            })
        };
        assert_eq!(decode_message(&encode_invalidation(3, "abc", false)), down(3, "abc"));
        assert_eq!(
            encode_invalidation(3, "abc", false),
            "3 abc",
            "unchanged since before edits"
        );
        assert_eq!(decode_message(&encode_invalidation(3, "abc", true)), edited(3, "abc"));
        // A link on another domain than the default one: its key.
        assert_eq!(
            decode_message(&encode_invalidation(4, "promo.Zz", false)),
            down(4, "promo.Zz")
        );
        assert_eq!(
            decode_message(&encode_invalidation(4, "promo.Zz", true)),
            edited(4, "promo.Zz")
        );
        // An alias may be the word itself.
        assert_eq!(decode_message("5 edited"), down(5, "edited"));
        assert_eq!(decode_message("5 edited edited"), edited(5, "edited"));
        for bad in [
            "x abc",
            "3 a/b",
            "3",
            "",
            " abc",
            "-1 abc",
            "3 ",
            "3 abc.",
            "3 abc.a-b",
            "3 abc edit",
            "3 abc  edited",
            "3 abc edited ",
        ] {
            assert_eq!(decode_message(bad), None, "{bad:?}");
        }
        // What a proxy from before edits reads of an edit's message: nothing.
        assert_eq!(decode_invalidation(&encode_invalidation(3, "abc", true)), None);
    }

    #[test]
    fn acknowledgements_round_trip_and_garbage_is_refused() {
        assert_eq!(
            decode_ack(&crate::encode_ack("p1a2", 7, "abc")),
            Some(("p1a2", 7, "abc"))
        );
        assert_eq!(decode_ack("p1a2 7 promo.1"), Some(("p1a2", 7, "promo.1")));
        for bad in ["", "p1", "p1 7", "p1 x abc", " 7 abc", "p-1 7 abc", "p1 7 a/b"] {
            assert_eq!(decode_ack(bad), None, "{bad:?}");
        }
    }
}
