//! When the pending counts are due: rows written at most `rows_per_sec` on average, writing
//! at most `write_share` of the time, and no click held longer than `max_hold`.

use std::time::Duration;

/// How click persistence is paced (docs/architecture.md, "The cost bounds").
#[derive(Debug, Clone, Copy)]
pub struct ClickPacing {
    /// Under light load counts are written this often.
    pub every: Duration,
    /// Rows written per second, on average.
    pub rows_per_sec: u64,
    /// The most of the time spent writing: the next write starts no sooner than the
    /// last one's duration divided by this after the last one began.
    pub write_share: f64,
    /// The longest a click waits in memory.
    pub max_hold: Duration,
}

impl ClickPacing {
    /// How long until the counts of `codes` pending codes are due (zero: they are),
    /// `since_take` after the last take, whose write took `last_write`, their oldest click
    /// having waited `held`, as nothing else changes.
    pub(super) fn due_in(&self, codes: usize, since_take: Duration, last_write: Duration, held: Duration) -> Duration {
        let rows = Duration::from_secs_f64(codes as f64 / self.rows_per_sec.max(1) as f64);
        let time = last_write.div_f64(self.write_share.clamp(f64::MIN_POSITIVE, 1.0));
        let by_budget = self.every.max(rows).max(time).saturating_sub(since_take);
        by_budget.min(self.max_hold.saturating_sub(held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_due_when_their_rows_fit_the_budget_or_have_waited_the_longest_hold() {
        let pacing = ClickPacing {
            every: Duration::from_secs(1),
            rows_per_sec: 500,
            write_share: 0.01,
            max_hold: Duration::from_secs(60),
        };
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        // (codes pending, since the last take, its write took, oldest held, due)
        let table = [
            (10, s(0), ms(1), s(0), false),
            (10, ms(999), ms(1), s(0), false),
            (10, s(1), ms(1), s(0), true),     // light load: every second
            (5_000, s(9), ms(1), s(9), false), // 5,000 rows need 10 s of row budget
            (5_000, s(10), ms(1), s(10), true),
            (10, s(1), ms(50), s(1), false), // a 50 ms write at 1 %: 5 s of time budget
            (10, ms(4_999), ms(50), s(4), false),
            (10, s(5), ms(50), s(5), true),
            (5_000, s(10), s(1), s(10), false), // rows fit, time does not (100 s) ...
            (5_000, s(59), s(1), s(59), false),
            (5_000, s(20), s(1), s(60), true), // ... but no click waits over a minute
            (1_000_000, s(59), ms(1), s(59), false), // 2,000 s of row budget ...
            (1_000_000, s(10), ms(1), s(60), true), // ... and the same longest hold
        ];
        for (codes, since, wrote, held, want) in table {
            assert_eq!(
                pacing.due_in(codes, since, wrote, held).is_zero(),
                want,
                "{codes} codes, {since:?} after a take whose write took {wrote:?}, {held:?}"
            );
        }
        // (codes pending, since the last take, its write took, oldest held, due in)
        let table = [
            (10, ms(250), ms(1), s(0), ms(750)),
            (10, s(3), ms(1), s(3), s(0)),
            (5_000, s(4), ms(1), s(4), s(6)),  // the rows' budget
            (10, s(2), ms(50), s(2), s(3)),    // the time share
            (5_000, s(20), s(1), s(58), s(2)), // the longest hold comes first
            (1_000_000, s(10), ms(1), s(70), s(0)),
        ];
        for (codes, since, wrote, held, want) in table {
            assert_eq!(
                pacing.due_in(codes, since, wrote, held),
                want,
                "{codes} codes, {since:?}, {wrote:?}, {held:?}"
            );
        }
    }
}
