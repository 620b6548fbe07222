//! Whether this proxy may trust its L1 (`InvalidationTrust`): the invalidation channel's
//! health as its own keepalives tell it, the epoch that keeps reads across a lapse out of
//! L1, and the log position up to which invalidations were applied.

use crate::l1::{L1Entry, L1};
use rebound_core::UnixMillis;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Whether this proxy may trust its L1: only while its own subscription is known to
/// deliver (a keepalive it sent within `timeout` has come back, with no end of the
/// subscription since). Otherwise entries live at most `l1_ttl`, and after a lapse L1 is
/// emptied when the next subscription is heard.
pub struct InvalidationTrust {
    timeout_ms: i64,
    l1_ttl_ms: i64,
    last_heard: AtomicI64,
    lapsed: AtomicBool,
    /// Moves at every lapse and every emptying of L1: a read in flight across a move may
    /// predate an invalidation that the gap swallowed, so its answer does not go into L1.
    epoch: AtomicU64,
    /// The channel's log positions the keepalives in flight returned, by send time.
    in_flight: Mutex<VecDeque<(UnixMillis, String)>>,
    /// The log position up to which every invalidation has been applied: the position of
    /// the last keepalive heard back.
    applied: Mutex<Option<String>>,
    /// Since the last lapse, what it swallowed was replayed from the log: L1 need not be
    /// emptied when the channel is heard again.
    replayed: AtomicBool,
}

impl InvalidationTrust {
    /// Starts untrusted: nothing has been heard yet.
    pub fn new(timeout: Duration, l1_ttl: Duration) -> InvalidationTrust {
        InvalidationTrust {
            timeout_ms: timeout.as_millis() as i64,
            l1_ttl_ms: l1_ttl.as_millis() as i64,
            last_heard: AtomicI64::new(i64::MIN / 2),
            lapsed: AtomicBool::new(true),
            epoch: AtomicU64::new(0),
            in_flight: Mutex::new(VecDeque::new()),
            applied: Mutex::new(None),
            replayed: AtomicBool::new(false),
        }
    }

    /// Notes the log position a keepalive sent at `sent` returned.
    pub fn sent(&self, sent: UnixMillis, position: String) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        // Keepalives not heard back within a few dozen are lost, and so are their positions.
        if in_flight.len() >= 64 {
            in_flight.pop_front();
        }
        in_flight.push_back((sent, position));
    }

    /// The log position up to which every invalidation has been applied, if known.
    pub fn applied_position(&self) -> Option<String> {
        self.applied.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What the last lapse swallowed has been replayed from the log into L1.
    pub fn replayed(&self) {
        self.replayed.store(true, Ordering::Release);
    }

    /// True while a keepalive sent within the timeout has come back, with no lapse since:
    /// every invalidation published before it was sent has been applied.
    pub fn is_trusted(&self, now: UnixMillis) -> bool {
        now - self.last_heard.load(Ordering::Acquire) <= self.timeout_ms
    }

    /// The subscription ended or went silent: invalidations sent from now on may be
    /// missed, so L1 is not trusted until the next subscription is heard, and then emptied.
    pub fn lapse(&self) {
        self.replayed.store(false, Ordering::Release);
        self.lapsed.store(true, Ordering::Release);
        self.last_heard.store(i64::MIN / 2, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// True from a lapse until the next subscription is heard.
    pub fn is_lapsed(&self) -> bool {
        self.lapsed.load(Ordering::Acquire)
    }

    /// The number of lapses and emptyings so far: a read compares it before and after.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Records this proxy's keepalive, sent at `sent` by its own clock, heard back on its
    /// subscription. After a lapse L1 is emptied first, unless what the lapse swallowed was
    /// replayed from the log: invalidations may have been missed. A keepalive that comes
    /// late on a subscription that never ended empties nothing: that subscription lost no
    /// message, it only delivered them late.
    pub fn heard(&self, sent: UnixMillis, l1: &L1) {
        if self.lapsed.swap(false, Ordering::AcqRel) && !self.replayed.swap(false, Ordering::AcqRel) {
            // Before the clear: a read still in flight must not fill L1 after it.
            self.epoch.fetch_add(1, Ordering::AcqRel);
            l1.clear();
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((at, position)) = in_flight.pop_front() {
            if at > sent {
                in_flight.push_front((at, position));
                break;
            }
            if at == sent {
                *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = Some(position);
            }
        }
        drop(in_flight);
        self.last_heard.fetch_max(sent, Ordering::AcqRel);
    }

    /// Whether `entry` may be used at `now`.
    #[inline]
    pub(crate) fn allows(&self, entry: &L1Entry, now: UnixMillis) -> bool {
        self.is_trusted(now) || now - entry.filled_at() <= self.l1_ttl_ms
    }

    /// Whether an active record read from `read_from` may answer at `now`: a delete that
    /// returned waited `timeout + l1_ttl` for this proxy unless it acknowledged, so a read
    /// younger than that, or one made while the channel stayed trusted (no lapse since,
    /// `epoch_kept`: the invalidation would have reached L1 first), cannot predate it.
    pub(crate) fn answer_is_current(&self, read_from: UnixMillis, now: UnixMillis, epoch_kept: bool) -> bool {
        (epoch_kept && self.is_trusted(now)) || now - read_from <= self.timeout_ms + self.l1_ttl_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::cache::CachePolicy;
    use rebound_core::{CacheRecord, Link, RedirectKind};

    fn record(code: &str, now: UnixMillis) -> CacheRecord {
        let link = Link::new_active(
            code.into(),
            format!("https://e.com/{code}"),
            RedirectKind::Found,
            false,
            0,
            "k".into(),
            None,
        );
        CacheRecord::active(&link, now, &CachePolicy::default())
    }

    #[test]
    fn an_entry_is_used_while_trusted_or_within_l1_ttl_of_its_fill() {
        let trust = InvalidationTrust::new(Duration::from_millis(2000), Duration::from_millis(1000));
        let entry = L1Entry::new("abc", record("abc", 10_000), 10_000);
        // (heard at, now, allowed): untrusted, the entry lives l1_ttl from its fill.
        assert!(trust.allows(&entry, 11_000));
        assert!(!trust.allows(&entry, 11_001));
        trust.heard(11_000, &L1::new(10));
        assert!(trust.allows(&entry, 13_000), "trusted: any age");
        assert!(!trust.allows(&entry, 13_001), "the keepalive is too old");
        trust.lapse();
        assert!(!trust.allows(&entry, 11_500), "a lapse ends the trust at once");
    }

    #[test]
    fn an_answer_is_current_when_young_or_read_while_the_channel_stayed_trusted() {
        let trust = InvalidationTrust::new(Duration::from_millis(2000), Duration::from_millis(1000));
        // Untrusted: only a read younger than timeout + l1_ttl.
        assert!(trust.answer_is_current(10_000, 13_000, true));
        assert!(!trust.answer_is_current(10_000, 13_001, true));
        // Trusted now, with no lapse since the read began: any age.
        trust.heard(13_000, &L1::new(10));
        assert!(trust.answer_is_current(10_000, 13_001, true));
        assert!(!trust.answer_is_current(10_000, 13_001, false), "the epoch moved");
    }

    #[test]
    fn l1_is_emptied_when_the_channel_comes_back() {
        let trust = InvalidationTrust::new(Duration::from_millis(2000), Duration::from_millis(1000));
        let l1 = L1::new(1000);
        let now = 1_000_000;
        trust.heard(now, &l1);
        l1.fill("keep", record("keep", now), now);
        assert_eq!(l1.len(), 1);
        trust.heard(now + 100, &l1);
        assert_eq!(l1.len(), 1, "a healthy channel keeps L1");
        let now = now + 10_000;
        trust.heard(now, &l1);
        assert_eq!(l1.len(), 1, "a subscription heard late, but never ended, lost nothing");
        trust.lapse();
        trust.heard(now, &l1);
        assert!(l1.is_empty(), "after a lapse, L1 is emptied");
    }
}
