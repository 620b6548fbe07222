//! Timestamps (Unix milliseconds), UTC days, and the clocks that give them.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use time::{Date, OffsetDateTime};

/// Milliseconds since the Unix epoch, UTC.
pub type UnixMillis = i64;

const MILLIS_PER_DAY: i64 = 86_400_000;

/// Something that tells the time. The real one reads the system clock; tests use [`ManualClock`].
pub trait Clock: Send + Sync + 'static {
    /// Now, in Unix milliseconds.
    fn now_millis(&self) -> UnixMillis;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// On Linux, libc's `clock_gettime` through rustix (its libc backend: the raw one's
    /// own vDSO lookup crashes under valgrind). Every redirect reads the clock once, and
    /// std's `SystemTime::now().duration_since(UNIX_EPOCH)` adds a checked subtraction and
    /// a `u128` product to the same call: about 160 instructions a read under callgrind.
    #[cfg(target_os = "linux")]
    #[inline]
    fn now_millis(&self) -> UnixMillis {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        now.tv_sec * 1000 + now.tv_nsec / 1_000_000
    }

    #[cfg(not(target_os = "linux"))]
    fn now_millis(&self) -> UnixMillis {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        now.as_millis() as i64
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock stopped at `millis`.
    pub fn at(millis: UnixMillis) -> Self {
        ManualClock(Arc::new(AtomicI64::new(millis)))
    }
    /// Moves the clock forward by `millis`.
    pub fn advance(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
    /// Sets the clock to `millis`.
    pub fn set(&self, millis: UnixMillis) {
        self.0.store(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> UnixMillis {
        self.0.load(Ordering::SeqCst)
    }
}

/// A UTC calendar day, as days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(pub i32);

impl Day {
    /// The first day the API accepts: 0000-01-01, the smallest `YYYY-MM-DD`.
    pub const MIN: Day = Day(-719_528);
    /// The last day the API accepts: 9999-12-31, the largest `YYYY-MM-DD`.
    pub const MAX: Day = Day(2_932_896);

    /// The UTC day that contains `millis`.
    pub fn of_millis(millis: UnixMillis) -> Day {
        Day(millis.div_euclid(MILLIS_PER_DAY) as i32)
    }

    /// Parses `YYYY-MM-DD` (four digits, no sign): a day from [`Day::MIN`] to [`Day::MAX`].
    pub fn parse(s: &str) -> Option<Day> {
        if !s.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let format = time::macros::format_description!("[year]-[month]-[day]");
        let date = Date::parse(s, &format).ok()?;
        Some(Day::from_date(date))
    }

    fn from_date(date: Date) -> Day {
        let epoch = time::macros::date!(1970 - 01 - 01);
        Day((date - epoch).whole_days() as i32)
    }

    /// The day `n` days later (earlier when negative), saturating at the ends of `i32`.
    pub fn plus(self, n: i32) -> Day {
        Day(self.0.saturating_add(n))
    }

    /// True from [`Day::MIN`] to [`Day::MAX`]: the days `YYYY-MM-DD` can name.
    pub fn is_supported(self) -> bool {
        (Day::MIN..=Day::MAX).contains(&self)
    }

    /// The day as `YYYY-MM-DD`; empty for a day outside what the calendar library holds
    /// (never a panic: callers check [`Day::is_supported`] first).
    pub fn to_iso(self) -> String {
        let format = time::macros::format_description!("[year]-[month]-[day]");
        OffsetDateTime::UNIX_EPOCH
            .date()
            .checked_add(time::Duration::days(i64::from(self.0)))
            .and_then(|date| date.format(&format).ok())
            .unwrap_or_default()
    }
}

/// Formats a timestamp as RFC 3339 UTC with millisecond precision, e.g. `2026-11-30T12:00:00.000Z`.
pub fn to_rfc3339(millis: UnixMillis) -> String {
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .map(|t| t.format(&format).unwrap_or_default())
        .unwrap_or_default()
}

/// Parses an RFC 3339 timestamp (any offset) to Unix milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<UnixMillis> {
    let t = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_what_std_reads() {
        let std_now = || {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap().as_millis() as i64
        };
        for _ in 0..100 {
            let (before, ours, after) = (std_now(), SystemClock.now_millis(), std_now());
            assert!(before <= ours && ours <= after, "{before} {ours} {after}");
        }
    }

    #[test]
    fn day_table() {
        let cases: &[(&str, Option<i32>)] = &[
            ("1970-01-01", Some(0)),
            ("1970-01-02", Some(1)),
            ("2026-11-30", Some(20_787)),
            ("1969-12-31", Some(-1)),
            ("2026-02-30", None),
            ("2026-1-5", None),
            ("yesterday", None),
            ("", None),
            ("0000-01-01", Some(Day::MIN.0)),
            ("9999-12-31", Some(Day::MAX.0)),
            ("-9999-01-01", None),
            ("-0001-12-31", None),
            ("+2026-01-01", None),
            ("10000-01-01", None),
        ];
        for (s, want) in cases {
            assert_eq!(Day::parse(s).map(|d| d.0), *want, "{s}");
            if let Some(d) = want {
                assert_eq!(Day(*d).to_iso(), *s);
            }
        }
    }

    #[test]
    fn days_outside_the_calendar_never_panic() {
        assert_eq!(Day::MIN.plus(-29).to_iso(), "-0001-12-03");
        assert!(!Day::MIN.plus(-1).is_supported() && !Day::MAX.plus(1).is_supported());
        assert!(Day::MIN.is_supported() && Day::MAX.is_supported());
        for d in [Day(i32::MIN), Day(i32::MAX), Day(-5_000_000), Day(5_000_000)] {
            assert_eq!(d.to_iso(), "", "{d:?}");
        }
        assert_eq!(Day(i32::MAX).plus(1), Day(i32::MAX));
    }

    #[test]
    fn day_of_millis_is_utc() {
        assert_eq!(Day::of_millis(0), Day(0));
        assert_eq!(Day::of_millis(MILLIS_PER_DAY - 1), Day(0));
        assert_eq!(Day::of_millis(MILLIS_PER_DAY), Day(1));
        assert_eq!(Day::of_millis(-1), Day(-1));
    }

    #[test]
    fn rfc3339_round_trip() {
        let t = parse_rfc3339("2026-11-30T12:00:00Z").unwrap();
        assert_eq!(to_rfc3339(t), "2026-11-30T12:00:00.000Z");
        assert_eq!(parse_rfc3339("2026-11-30T13:00:00+01:00"), Some(t));
        assert_eq!(parse_rfc3339("2026-11-30"), None);
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }

    #[test]
    fn manual_clock_moves_when_told() {
        let c = ManualClock::at(1000);
        let c2 = c.clone();
        c.advance(500);
        assert_eq!(c2.now_millis(), 1500);
        c.set(7);
        assert_eq!(c2.now_millis(), 7);
    }
}
