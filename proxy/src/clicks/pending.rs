//! The counts taken off the queue and not yet written: the dirty entries, whose counts still
//! live on them, and the takes being written, with what a stats read needs to stay exact.

use crate::l1::L1Entry;
use crate::metrics::ProxyMetrics;
use rebound_core::Day;
use rebound_store::Clicks;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The counts taken off the queue and not yet written: the dirty entries (counts still
/// live on them) and the takes being written. Behind one lock, held briefly: the shipper
/// drains into it every few milliseconds, a writer marks its progress per group of rows, a
/// stats read looks one code up.
#[derive(Default)]
pub struct Unpersisted {
    state: Mutex<Pending>,
    pub(super) hasher: ahash::RandomState,
    /// Woken when a group of rows has been written.
    pub(super) written: Notify,
}

impl Unpersisted {
    pub(super) fn lock(&self) -> MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) struct Pending {
    /// Entries with clicks counted since the last take. A code can have two (each fill of a
    /// code is a new entry, and the old one may still hold clicks).
    pub(super) dirty: DirtyEntries,
    /// Bots' clicks since the last take: they are not counted on the entry (whose one
    /// word holds people's count and the CLOCK bit) but here, off the queue of bots'
    /// clicks, an entry's run of clicks in one row.
    pub(super) bots: Vec<(L1Entry, u64)>,
    /// The UTC day the dirty counts are for.
    pub(super) day: Day,
    /// When the oldest dirty count came off the queue.
    pub(super) oldest: Option<Instant>,
    /// Taken counts not yet written, oldest first.
    pub(super) takes: VecDeque<Take>,
    next_take: u64,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            dirty: DirtyEntries::default(),
            bots: Vec::new(),
            day: Day(0),
            oldest: None,
            takes: VecDeque::new(),
            next_take: 0,
        }
    }
}

/// The dirty entries, in the order they came off the queue, each with a byte of its code's
/// hash: a stats read compares that byte and looks into an entry only when it matches
/// (1 in 256), so a million pending codes are scanned in well under a millisecond. Nine
/// bytes a pending code, where a hash table of the handles took 9 bytes a bucket at a load
/// between 7/16 and 7/8 (18.9 bytes a code at a million); a take hands the list over whole,
/// so a burst's memory goes with it.
#[derive(Default)]
pub(super) struct DirtyEntries {
    entries: Vec<L1Entry>,
    tags: Vec<u8>,
}

impl DirtyEntries {
    fn tag(hash: u64) -> u8 {
        (hash >> 56) as u8
    }

    fn push(&mut self, hash: u64, entry: L1Entry) {
        self.entries.push(entry);
        self.tags.push(Self::tag(hash));
    }

    /// The entries of `code` (whose hash is `hash`).
    fn of_code<'a>(&'a self, hash: u64, code: &'a str) -> impl Iterator<Item = &'a L1Entry> + 'a {
        let tag = Self::tag(hash);
        self.tags
            .iter()
            .zip(&self.entries)
            .filter(move |(t, e)| **t == tag && e.code() == code)
            .map(|(_, e)| e)
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn into_entries(self) -> impl Iterator<Item = L1Entry> {
        self.entries.into_iter()
    }
}

/// One code's counts in a take: people's clicks and bots'.
pub(super) struct Row {
    pub(super) entry: L1Entry,
    pub(super) clicks: Clicks,
}

/// Counts taken at once, all for one day: one row per code, in code order.
pub(super) struct Take {
    pub(super) id: u64,
    pub(super) day: Day,
    /// When its oldest count came off the queue.
    oldest: Instant,
    pub(super) rows: Vec<Row>,
    /// `rows[..done]` are written (or failed); `rows[done..writing]` are being written.
    pub(super) done: usize,
    pub(super) writing: usize,
}

impl Take {
    fn row_of(&self, code: &str) -> Option<usize> {
        self.rows
            .binary_search_by(|r| r.entry.code_bytes().cmp(code.as_bytes()))
            .ok()
    }
}

/// What a stats read saw pending for one code before it read the rollups.
pub(super) struct Snapshot {
    pub(super) counts: Vec<(Day, Clicks)>,
    /// The rows of the code not yet being written then: (take, row).
    unwritten: Vec<(u64, usize)>,
    next_take: u64,
}

impl Pending {
    pub(super) fn add_dirty(&mut self, hasher: &ahash::RandomState, entry: L1Entry) {
        self.dirty.push(hasher.hash_one(entry.code()), entry);
    }

    /// One bot's click on `entry`: added to the last row when it is the same entry (a
    /// crawler's run on one link), a row of its own otherwise.
    pub(super) fn add_bot(&mut self, entry: L1Entry) {
        match self.bots.last_mut() {
            Some((last, n)) if last.is_same(&entry) => *n += 1,
            _ => self.bots.push((entry, 1)),
        }
    }

    /// Whether nothing was counted since the last take.
    pub(super) fn is_clean(&self) -> bool {
        self.dirty.is_empty() && self.bots.is_empty()
    }

    /// The codes (at most) counted since the last take: the rows a take would make.
    pub(super) fn dirty_codes(&self) -> usize {
        self.dirty.len() + self.bots.len()
    }

    pub(super) fn is_being_written(&self, code: &str) -> bool {
        self.takes
            .iter()
            .any(|t| t.row_of(code).is_some_and(|i| (t.done..t.writing).contains(&i)))
    }

    pub(super) fn snapshot(&self, code: &str, hash: u64, from: Day, to: Day) -> Snapshot {
        let in_range = |d: Day| from <= d && d <= to;
        let mut counts = Vec::new();
        if in_range(self.day) {
            let people: u64 = self.dirty.of_code(hash, code).map(|e| e.clicks()).sum();
            let bots: u64 = self.bots.iter().filter(|(e, _)| e.code() == code).map(|(_, n)| n).sum();
            counts.push((self.day, Clicks::new(people, bots)));
        }
        let mut unwritten = Vec::new();
        for t in &self.takes {
            if let Some(i) = t.row_of(code).filter(|&i| i >= t.writing) {
                unwritten.push((t.id, i));
                if in_range(t.day) {
                    counts.push((t.day, t.rows[i].clicks));
                }
            }
        }
        Snapshot {
            counts,
            unwritten,
            next_take: self.next_take,
        }
    }

    /// True when no row the snapshot counted as pending has been written since, and no
    /// take has happened (its rows could have been written meanwhile).
    pub(super) fn untouched_since(&self, snapshot: &Snapshot) -> bool {
        self.next_take == snapshot.next_take
            && snapshot
                .unwritten
                .iter()
                .all(|&(id, i)| self.takes.iter().find(|t| t.id == id).is_some_and(|t| t.writing <= i))
    }

    /// Takes the counts of the dirty entries (each at most once: an entry is queued again
    /// only after its count was taken) and the bots' counts, one row per code in code
    /// order: none when there are none, unless `breakdowns` (their counts, which the take's
    /// write hands over, are pending).
    pub(super) fn take(&mut self, metrics: &ProxyMetrics, now: Instant, breakdowns: bool) -> Option<u64> {
        let mut clicks = 0;
        // Sized once: grown as it filled, a take of 1,000,000 codes also held the 12 MiB
        // vector it grew from.
        let mut rows: Vec<Row> = Vec::with_capacity(self.dirty.len() + self.bots.len());
        rows.extend(std::mem::take(&mut self.dirty).into_entries().filter_map(|entry| {
            let n = entry.take_clicks();
            clicks += n;
            (n > 0).then_some(Row {
                entry,
                clicks: Clicks::people(n),
            })
        }));
        let mut bot_clicks = 0;
        rows.extend(std::mem::take(&mut self.bots).into_iter().map(|(entry, n)| {
            bot_clicks += n;
            Row {
                entry,
                clicks: Clicks::new(0, n),
            }
        }));
        let oldest = self.oldest.take().unwrap_or(now);
        metrics.clicks_queued.inc_by(clicks);
        metrics.bot_clicks_queued.inc_by(bot_clicks);
        if rows.is_empty() && !breakdowns {
            return None;
        }
        // Code order: in SQLite each transaction then touches a few neighbouring B-tree
        // pages instead of a page per row (measured: a million rows in under 2 s instead
        // of about 16). One row per code: a DynamoDB transaction refuses two operations
        // on one item.
        rows.sort_unstable_by(|a, b| a.entry.code_bytes().cmp(b.entry.code_bytes()));
        rows.dedup_by(|later, kept| {
            let same = later.entry.code_bytes() == kept.entry.code_bytes();
            if same {
                kept.clicks += later.clicks;
            }
            same
        });
        let id = self.next_take;
        self.next_take += 1;
        self.takes.push_back(Take {
            id,
            day: self.day,
            oldest,
            rows,
            done: 0,
            writing: 0,
        });
        Some(id)
    }

    /// Sets the gauges: codes pending and the age of the oldest pending click.
    pub(super) fn report(&self, metrics: &ProxyMetrics, now: Instant) {
        let taken: usize = self.takes.iter().map(|t| t.rows.len() - t.done).sum();
        metrics.click_pending_codes.set((self.dirty_codes() + taken) as i64);
        let oldest = self.takes.iter().map(|t| t.oldest).chain(self.oldest).min();
        metrics
            .click_persist_lag
            .set(oldest.map_or(0.0, |o| (now - o).as_secs_f64()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::test_util::entry;

    #[test]
    fn a_code_is_found_among_the_dirty_entries_by_its_tag_then_its_code() {
        let mut dirty = DirtyEntries::default();
        let h = 0xab00_0000_0000_0001;
        let (first, other, refilled) = (entry("aaa"), entry("bbb"), entry("aaa"));
        first.count_click();
        refilled.count_click();
        refilled.count_click();
        dirty.push(h, first);
        dirty.push(h, other); // the same tag: a byte of another code's hash can match
        dirty.push(h, refilled); // a later fill of aaa, while the first still has a click
        let of = |hash: u64, code: &str| dirty.of_code(hash, code).map(|e| e.clicks()).collect::<Vec<_>>();
        assert_eq!(of(h, "aaa"), vec![1, 2], "both entries of aaa, not bbb's");
        assert_eq!(of(h, "bbb"), vec![0]);
        assert_eq!(
            of(0xcd00_0000_0000_0001, "aaa"),
            Vec::<u64>::new(),
            "another tag is not looked into"
        );
        assert_eq!(dirty.len(), 3);
        assert_eq!(dirty.into_entries().count(), 3);
    }
}
