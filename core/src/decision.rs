//! The redirect decision of a store read (docs/spec.md §3 step 5) as one pure function of
//! (item, the newest tombstone seen, now), and the pure parts of the redirect response.

use crate::link::Link;
use crate::time::UnixMillis;

/// What a store read means for the request and for the caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreVerdict {
    /// Active and not expired: redirect, and populate L2 and L1.
    Redirect,
    /// No such code: 404 and cache nothing (a cached miss would hide a link created a moment later).
    NotFound,
    /// Expired: 410 and cache nothing.
    Gone,
    /// Deleted or taken down: write a tombstone, 404.
    Tombstone,
    /// Active, but older than a tombstone of the code already seen (in L1 or L2): a store
    /// replica that has not caught up with the delete (docs/spec.md §8). A deletion is final, so
    /// it is not served: 404, and nothing is cached or populated from it.
    Superseded,
}

/// Decides what a store read of `item` at `now` means, `seen_tombstone` being the version
/// of the newest tombstone of the code this process holds (L1 or L2, however old), if any.
pub fn decide_redirect(item: Option<&Link>, seen_tombstone: Option<u64>, now: UnixMillis) -> StoreVerdict {
    match item {
        None => StoreVerdict::NotFound,
        Some(link) if link.is_active && seen_tombstone.is_some_and(|v| v > link.version) => StoreVerdict::Superseded,
        Some(link) if !link.is_active => StoreVerdict::Tombstone,
        Some(link) if link.is_expired(now) => StoreVerdict::Gone,
        Some(_) => StoreVerdict::Redirect,
    }
}

/// The `Location` of a redirect: the target, with the request's query string appended when
/// the link forwards queries (after `&` when the target already has a query, else after `?`).
/// A fragment in the target stays at the end.
pub fn location(long_url: &str, forward_query: bool, request_query: Option<&str>) -> String {
    let mut out = Vec::with_capacity(long_url.len() + request_query.map_or(0, |q| q.len() + 1));
    push_location(&mut out, long_url, forward_query, request_query);
    // Only ASCII pieces (a normalised URL and a forwardable query) are ever joined.
    String::from_utf8(out).unwrap_or_default()
}

/// [`location`], appended to a byte buffer (the response being written) without allocating.
pub fn push_location(out: &mut Vec<u8>, long_url: &str, forward_query: bool, request_query: Option<&str>) {
    let query = match request_query {
        Some(q) if forward_query && !q.is_empty() => q,
        _ => {
            out.extend_from_slice(long_url.as_bytes());
            return;
        }
    };
    let (base, fragment) = match long_url.find('#') {
        Some(i) => long_url.split_at(i),
        None => (long_url, ""),
    };
    out.extend_from_slice(base.as_bytes());
    if base.contains('?') {
        if !(base.ends_with('?') || base.ends_with('&')) {
            out.push(b'&');
        }
    } else {
        out.push(b'?');
    }
    out.extend_from_slice(query.as_bytes());
    out.extend_from_slice(fragment.as_bytes());
}

/// The `max-age` of a redirect: the configured value, never past `expires_at`.
pub fn max_age_seconds(configured: u64, expires_at: Option<UnixMillis>, now: UnixMillis) -> u64 {
    match expires_at {
        Some(e) => configured.min(((e - now).max(0) / 1000) as u64),
        None => configured,
    }
}

/// True when a request query string is safe to copy into a `Location` header: visible
/// ASCII only, no fragment marker.
pub fn query_is_forwardable(query: &str) -> bool {
    query.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b'#')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::RedirectKind;

    fn link(active: bool, expires_at: Option<i64>) -> Link {
        let mut l = Link::new_active(
            "abc".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            expires_at,
        );
        l.is_active = active;
        l
    }

    #[test]
    fn decision_table() {
        // (item, its version, the newest tombstone seen, now, verdict)
        let cases = [
            (None, 0, None, 100, StoreVerdict::NotFound),
            (None, 0, Some(2), 100, StoreVerdict::NotFound),
            (Some(link(true, None)), 1, None, 100, StoreVerdict::Redirect),
            (Some(link(true, Some(101))), 1, None, 100, StoreVerdict::Redirect),
            (Some(link(true, Some(100))), 1, None, 100, StoreVerdict::Gone),
            (Some(link(true, Some(50))), 1, None, 100, StoreVerdict::Gone),
            (Some(link(false, None)), 2, None, 100, StoreVerdict::Tombstone),
            (Some(link(false, Some(50))), 2, None, 100, StoreVerdict::Tombstone),
            // A lagging replica: the active version 1 beside the tombstone of version 2
            // already seen (after an edit, version 2 beside the tombstone of 3).
            (Some(link(true, None)), 1, Some(2), 100, StoreVerdict::Superseded),
            (Some(link(true, None)), 2, Some(3), 100, StoreVerdict::Superseded),
            (Some(link(true, Some(50))), 1, Some(2), 100, StoreVerdict::Superseded),
            // The replica has the delete: a tombstone as usual.
            (Some(link(false, None)), 2, Some(2), 100, StoreVerdict::Tombstone),
            // A tombstone older than the active version read does not hide it.
            (Some(link(true, None)), 3, Some(2), 100, StoreVerdict::Redirect),
            (Some(link(true, None)), 2, Some(2), 100, StoreVerdict::Redirect),
        ];
        for (item, version, seen, now, want) in cases {
            let item = item.map(|mut l| {
                l.version = version;
                l
            });
            assert_eq!(
                decide_redirect(item.as_ref(), seen, now),
                want,
                "{item:?} beside the tombstone {seen:?} at {now}"
            );
        }
    }

    #[test]
    fn location_table() {
        let cases = [
            ("https://e.com/a", false, Some("x=1"), "https://e.com/a"),
            ("https://e.com/a", true, None, "https://e.com/a"),
            ("https://e.com/a", true, Some(""), "https://e.com/a"),
            ("https://e.com/a", true, Some("x=1"), "https://e.com/a?x=1"),
            ("https://e.com/a?y=2", true, Some("x=1"), "https://e.com/a?y=2&x=1"),
            ("https://e.com/a?", true, Some("x=1"), "https://e.com/a?x=1"),
            ("https://e.com/a#top", true, Some("x=1"), "https://e.com/a?x=1#top"),
            ("https://e.com/a?y#top", true, Some("x=1"), "https://e.com/a?y&x=1#top"),
        ];
        for (target, fq, q, want) in cases {
            assert_eq!(location(target, fq, q), want, "{target} {fq} {q:?}");
        }
    }

    #[test]
    fn max_age_table() {
        assert_eq!(max_age_seconds(5, None, 0), 5);
        assert_eq!(max_age_seconds(5, Some(10_000), 0), 5);
        assert_eq!(max_age_seconds(5, Some(3_500), 0), 3);
        assert_eq!(max_age_seconds(5, Some(999), 0), 0);
        assert_eq!(max_age_seconds(5, Some(0), 10), 0);
    }

    #[test]
    fn forwardable_queries() {
        assert!(query_is_forwardable("a=1&b=%20"));
        assert!(!query_is_forwardable("a=1\r\nSet-Cookie: x"));
        assert!(!query_is_forwardable("a b"));
        assert!(!query_is_forwardable("a=é"));
    }
}
