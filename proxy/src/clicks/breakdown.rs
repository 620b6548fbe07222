//! People's clicks by link, dimension and value between two takes (docs/spec.md §13).
//!
//! The redirect path hands each person's click with its [`Dimensions`] (inline values, no
//! allocation: core's `dimensions`) to a bounded queue of its own
//! ([`super::ClickQueue::record_with`]); the shipper adds them up here when it drains, and
//! a take hands the sums to the breakdown store after the take's click rows.

/// foldhash (hashbrown's default): std's SipHash made the counting about 1,500
/// instructions a click under callgrind (benches/results/2026-12-06e-callgrind-breakdowns.md).
use crate::l1::L1Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use rebound_core::dimensions::{Dimensions, Referrer};
use rebound_store::breakdowns::OTHER;
use rebound_store::{Dimension, DimensionAdd};
use std::hash::BuildHasher;

/// Calls `each` with every dimension `click` has a value of, and the value as the
/// breakdowns name it, as bytes: no UTF-8 check of each value on each click (the values
/// are built from text, and read back as text once per take).
fn each_bytes(click: &Dimensions, mut each: impl FnMut(Dimension, &[u8])) {
    if let Some(country) = &click.country {
        each(Dimension::Country, country.as_str().as_bytes());
    }
    match &click.referrer {
        Some(Referrer::Host(host)) => each(Dimension::Referrer, host.as_bytes()),
        Some(other) => each(Dimension::Referrer, other.as_str().as_bytes()),
        None => {}
    }
    if let Some(agent) = &click.agent {
        each(Dimension::Device, agent.device.as_str().as_bytes());
        each(Dimension::Browser, agent.browser.as_bytes());
        each(Dimension::Os, agent.os.as_bytes());
    }
    if let Some(campaign) = &click.campaign {
        for (dimension, value) in [
            (Dimension::UtmSource, &campaign.source),
            (Dimension::UtmMedium, &campaign.medium),
            (Dimension::UtmCampaign, &campaign.campaign),
        ] {
            if let Some(value) = value {
                each(dimension, value.as_bytes());
            }
        }
    }
    if let Some(decided) = &click.rule {
        each(Dimension::Rule, decided.label().as_bytes());
    }
}

/// No value of a dimension in a [`Profile`]: the click has none, or it is not counted.
const NONE: u32 = u32::MAX;

/// A click's values, one per dimension (in [`Dimension::ALL`]'s order), each as its index in
/// [`BreakdownCounts::by_index`], or [`NONE`].
type Profile = [u32; Dimension::ALL.len()];

/// The clicks on one entry with one profile since the last take.
#[derive(Debug)]
struct Slot {
    /// Held until the take (an evicted entry's memory with it): its address is the slot's
    /// key, its code is read once, at the take.
    entry: L1Entry,
    profile: u32,
    /// Saturates: 4,294,967,295 clicks of one entry and profile between two takes (at most
    /// `clicks.max_hold_ms` apart) is 71 million a second for a minute.
    clicks: u32,
}

/// Slots a tally holds at most: a click that would need another is not counted in the
/// breakdowns (`rebound_breakdown_clicks_dropped_total`; the totals count it). 7/8 of 2^21,
/// so that the table never grows past 2,097,152 buckets (17 bytes each: 34 MiB). A table of
/// 1,000,000 codes clicked with one profile each between two takes and 800,000 more fits.
const MAX_SLOTS: usize = 1_835_008;

/// Profiles a tally holds at most (36 bytes and an index each): beyond, as [`MAX_SLOTS`].
const MAX_PROFILES: usize = 1 << 20;

/// Values a tally holds at most (their bytes, up to 64, and two indices each); a click's
/// value beyond counts as [`OTHER`].
const MAX_VALUES: usize = 1 << 18;

/// What a tally holds at most: [`MAX_SLOTS`], [`MAX_PROFILES`], [`MAX_VALUES`] (smaller in
/// tests).
#[derive(Debug, Clone, Copy)]
struct Limits {
    slots: usize,
    profiles: usize,
    values: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            slots: MAX_SLOTS,
            profiles: MAX_PROFILES,
            values: MAX_VALUES,
        }
    }
}

fn slot_hash(entry: &L1Entry, profile: u32) -> u64 {
    entry.address_hash() ^ rebound_core::rules::mix(u64::from(profile))
}

fn profile_hash(profile: &Profile) -> u64 {
    let mut h = 0u64;
    for v in profile {
        h = rebound_core::rules::mix(h ^ u64::from(*v));
    }
    h
}

/// Items held once each, by index (what a slot and a profile name), and found again by a
/// hash: the values and the profiles counted since the last take.
#[derive(Debug)]
struct Interned<T> {
    by_index: Vec<T>,
    /// Indices into `by_index`, by the item's hash.
    index: HashTable<u32>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned {
            by_index: Vec::new(),
            index: HashTable::new(),
        }
    }
}

impl<T> Interned<T> {
    #[inline]
    fn get(&self, at: u32) -> &T {
        &self.by_index[at as usize]
    }

    /// The index of the item `is` recognises, whose hash is `hash`; if none, `make`'s, added
    /// when fewer than `most` are held, else `None`. `hash_of` hashes a held item.
    fn find_or_add(
        &mut self,
        hash: u64,
        is: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
        hash_of: impl Fn(&T) -> u64,
        most: usize,
    ) -> Option<u32> {
        let by_index = &self.by_index;
        if let Some(&at) = self.index.find(hash, |&at| is(&by_index[at as usize])) {
            return Some(at);
        }
        if self.by_index.len() >= most {
            return None;
        }
        let at = self.by_index.len() as u32;
        self.by_index.push(make());
        let by_index = &self.by_index;
        self.index
            .insert_unique(hash, at, |&held| hash_of(&by_index[held as usize]));
        Some(at)
    }
}

/// What a click's values make: a profile, none (no dimension counted), or none for a tally
/// that holds as many profiles as it may.
enum Profiled {
    Id(u32),
    Nothing,
    Full,
}

/// People's clicks by entry and profile since the last take; made into clicks by code,
/// dimension and value at the take.
///
/// A click is counted once, in the slot of its entry and its profile (the values of all its
/// dimensions, interned), not once per dimension: a code's clicks between two takes mostly
/// share one or a few profiles, and a slot is 16 bytes. Counted per code and dimension (a
/// map of codes to a sorted vector of counts), the all-in-one held 344 MiB after every code
/// of 1,000,000 was requested, against 239 MiB so and 207 with the one-word L1 handle
/// (`benches/results/2026-12-07h-breakdown-memory.md`).
#[derive(Debug, Default)]
pub(super) struct BreakdownCounts {
    slots: HashTable<Slot>,
    /// The profiles counted since the last take, each once.
    profiles: Interned<Profile>,
    /// The values counted since the last take, each once, by its bytes.
    values: Interned<Box<[u8]>>,
    /// Hashes the values (foldhash, hashbrown's default).
    hasher: DefaultHashBuilder,
    /// Per dimension, the index of the value it counted last: a click's values mostly
    /// repeat the last click's (one browser, one referrer), and comparing the bytes is
    /// cheaper than hashing them (`intern`: 541 of the counter's 1,242 instructions a click
    /// under callgrind, benches/results/2026-12-07f-callgrind-breakdown-last-values.md).
    /// Only a hint: a value is reused only where its bytes are equal.
    last: [Option<u32>; Dimension::ALL.len()],
    /// The profile counted last: the same kind of hint.
    last_profile: Option<u32>,
    /// The click counted last into a profile, the dimensions counted then, and that
    /// profile: a click equal to it (most repeat the last one's values: one visitor, or one
    /// kind of visitor), counted by the same dimensions, takes the profile without naming
    /// each value again. Exact, not a hint: the values and profiles it named stay as they
    /// are until the take, which empties it with them.
    last_click: Option<(Dimensions, [bool; Dimension::ALL.len()], u32)>,
    /// People's clicks counted (one with no dimension counted fills no slot).
    clicks: u64,
    limits: Limits,
}

impl BreakdownCounts {
    /// Adds one click of `entry`'s code; false when the tally is full and it was not
    /// counted ([`MAX_SLOTS`]). Most clicks repeat values, a profile and a slot already
    /// counted, and allocate nothing.
    pub(super) fn add(
        &mut self,
        entry: L1Entry,
        dimensions: &Dimensions,
        counted: &[bool; Dimension::ALL.len()],
    ) -> bool {
        let id = match &self.last_click {
            Some((last, by, id)) if by == counted && last == dimensions => *id,
            _ => match self.profile_of(dimensions, counted) {
                Profiled::Id(id) => {
                    self.last_click = Some((dimensions.clone(), *counted, id));
                    id
                }
                Profiled::Nothing => {
                    self.clicks += 1;
                    return true;
                }
                Profiled::Full => return false,
            },
        };
        let full = self.slots.len() >= self.limits.slots;
        let hash = slot_hash(&entry, id);
        match self
            .slots
            .find_mut(hash, |s| s.profile == id && s.entry.is_same(&entry))
        {
            Some(slot) => slot.clicks = slot.clicks.saturating_add(1),
            None if full => return false,
            None => {
                self.slots.insert_unique(
                    hash,
                    Slot {
                        entry,
                        profile: id,
                        clicks: 1,
                    },
                    |s| slot_hash(&s.entry, s.profile),
                );
            }
        }
        self.clicks += 1;
        true
    }

    /// The profile of a click's `dimensions` (those `counted`), interned.
    fn profile_of(&mut self, dimensions: &Dimensions, counted: &[bool; Dimension::ALL.len()]) -> Profiled {
        let (values, hasher, last) = (&mut self.values, &self.hasher, &mut self.last);
        let most_values = self.limits.values;
        let mut profile = [NONE; Dimension::ALL.len()];
        each_bytes(dimensions, |dimension, value| {
            let d = dimension as usize;
            if !counted[d] {
                return;
            }
            profile[d] = match last[d] {
                Some(at) if values.by_index.get(at as usize).is_some_and(|held| **held == *value) => at,
                _ => {
                    let at = intern(values, hasher, value, most_values);
                    last[d] = Some(at);
                    at
                }
            };
        });
        if profile == [NONE; Dimension::ALL.len()] {
            return Profiled::Nothing;
        }
        let id = match self.last_profile {
            Some(at) if *self.profiles.get(at) == profile => at,
            _ => {
                // A full tally adds no profile: one would need a slot too.
                let full = self.slots.len() >= self.limits.slots;
                let most = if full { 0 } else { self.limits.profiles };
                let found = self.profiles.find_or_add(
                    profile_hash(&profile),
                    |held| *held == profile,
                    || profile,
                    profile_hash,
                    most,
                );
                match found {
                    Some(at) => at,
                    None => return Profiled::Full,
                }
            }
        };
        self.last_profile = Some(id);
        Profiled::Id(id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.clicks == 0
    }

    /// Empty counts with these' limits.
    fn emptied(&self) -> BreakdownCounts {
        BreakdownCounts {
            limits: self.limits,
            ..BreakdownCounts::default()
        }
    }

    /// Bytes held on the heap (tables, keys, vectors), as allocated: what pending
    /// breakdowns cost between two takes (the entries they hold are the L1's).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        // A table's buckets: a power of two, at most 7/8 of them full (hashbrown).
        let table = |capacity: usize, entry: usize| match capacity {
            0 => 0,
            c if c < 8 => (c + 1).next_power_of_two() * (entry + 1),
            c => (c * 8 / 7).next_power_of_two() * (entry + 1),
        };
        let interned = |i_capacity: usize, held: usize, item: usize| table(i_capacity, 4) + held * item;
        table(self.slots.capacity(), std::mem::size_of::<Slot>())
            + interned(
                self.profiles.index.capacity(),
                self.profiles.by_index.capacity(),
                std::mem::size_of::<Profile>(),
            )
            + interned(
                self.values.index.capacity(),
                self.values.by_index.capacity(),
                std::mem::size_of::<Box<[u8]>>(),
            )
            + self.values.by_index.iter().map(|v| v.len()).sum::<usize>()
    }

    /// The counts of `day`, moved out and sorted by code, to be made into adds a few codes
    /// at a time ([`SortedCounts::adds_into`]), and the people's clicks they count; these
    /// are then empty. The sort is of the slots (16 bytes each), not of their adds: made
    /// whole, the adds of every code of 1,000,000 clicked (a `DimensionAdd` of two strings
    /// for each of a code's values) took the all-in-one from 200 MiB to 556 at the take
    /// (`benches/results/2026-12-07i-breakdown-take-memory.md`).
    fn take_sorted(&mut self, day: rebound_core::Day) -> (SortedCounts, u64) {
        let empty = self.emptied();
        let BreakdownCounts {
            slots,
            profiles,
            values,
            clicks,
            ..
        } = std::mem::replace(self, empty);
        let mut slots: Vec<Slot> = slots.into_iter().collect();
        slots.sort_unstable_by(|a, b| a.entry.code().cmp(b.entry.code()));
        let sorted = SortedCounts {
            day,
            slots,
            next: 0,
            profiles,
            values,
            held: Vec::new(),
            scratch: Vec::new(),
        };
        (sorted, clicks)
    }

    /// Every add of `day` at once, in (code, dimension, value) order, and the clicks they
    /// count (the tests' view of a take).
    #[cfg(test)]
    pub(super) fn take(&mut self, day: rebound_core::Day) -> (Vec<DimensionAdd>, u64) {
        let (mut sorted, clicks) = self.take_sorted(day);
        let mut adds = Vec::new();
        sorted.adds_into(&mut adds, usize::MAX);
        (adds, clicks)
    }
}

/// One day's counts of a take, their slots sorted by code: made into adds a few codes at a
/// time, so that a take's adds are never all held at once.
#[derive(Debug)]
struct SortedCounts {
    day: rebound_core::Day,
    slots: Vec<Slot>,
    /// `slots[..next]` were made into adds.
    next: usize,
    profiles: Interned<Profile>,
    values: Interned<Box<[u8]>>,
    /// A code's adds made and not yet handed out: they did not fit the last call's room.
    held: Vec<DimensionAdd>,
    /// One dimension's (value, clicks) of a code.
    scratch: Vec<(u32, u64)>,
}

impl SortedCounts {
    /// Appends the adds of the next codes, in (code, dimension, value) order, while `adds`
    /// has room for all of a code's within `most` (one code's at least: a code's adds are
    /// never split). False when none were left.
    ///
    /// A code's values of a dimension beyond the store's bound for a link's day count as
    /// [`OTHER`] (memory is bounded by the tally's own bounds): those it keeps are the ones
    /// first counted since the last take by any code (the values' interned order), as the
    /// store keeps a day's first; for a code alone, its own first.
    fn adds_into(&mut self, adds: &mut Vec<DimensionAdd>, most: usize) -> bool {
        let before = adds.len();
        loop {
            if self.held.is_empty() {
                if self.next == self.slots.len() {
                    break;
                }
                self.make_next_code();
            }
            if adds.len() > before && adds.len() + self.held.len() > most {
                break;
            }
            adds.append(&mut self.held);
        }
        adds.len() > before
    }

    /// Makes the adds of the code of `slots[next]` (of every entry it had: two fills of a
    /// code add up) into `held`.
    fn make_next_code(&mut self) {
        let code = self.slots[self.next].entry.code();
        let end = self.next + self.slots[self.next..].partition_point(|s| s.entry.code() == code);
        let (slots, day) = (&self.slots[self.next..end], self.day);
        let (profiles, values, scratch, held) = (&self.profiles, &self.values, &mut self.scratch, &mut self.held);
        for (d, &dimension) in Dimension::ALL.iter().enumerate() {
            scratch.clear();
            scratch.extend(slots.iter().filter_map(|s| {
                let value = profiles.get(s.profile)[d];
                (value != NONE).then_some((value, u64::from(s.clicks)))
            }));
            if scratch.is_empty() {
                continue;
            }
            scratch.sort_unstable_by_key(|&(value, _)| value);
            let add = |value: String, clicks: u64| DimensionAdd {
                code: code.to_owned(),
                day,
                dimension,
                value,
                clicks,
            };
            let mut other = 0;
            // In the order the values were first counted.
            for (kept, run) in scratch.chunk_by(|a, b| a.0 == b.0).enumerate() {
                let n = run.iter().map(|c| c.1).sum();
                match kept < dimension.values_per_day() {
                    true => held.push(add(String::from_utf8_lossy(values.get(run[0].0)).into_owned(), n)),
                    false => other += n,
                }
            }
            if other > 0 {
                held.push(add(OTHER.to_owned(), other));
            }
        }
        held.sort_unstable_by(|a, b| (a.dimension, &a.value).cmp(&(b.dimension, &b.value)));
        // A kept value spelled as the bound's own (a campaign named "(other)"): one add.
        held.dedup_by(|later, first| {
            let same = later.dimension == first.dimension && later.value == first.value;
            if same {
                first.clicks += later.clicks;
            }
            same
        });
        self.next = end;
    }
}

/// People's clicks by dimension off the breakdowns' queue, not yet handed to a write:
/// counted by their counter ([`super::ClickQueue::count_breakdowns`], on the shipper's
/// runtime) a chunk at a time, behind a lock of their own.
#[derive(Debug)]
pub(super) struct Tally {
    counts: BreakdownCounts,
    /// The UTC day `counts` are for.
    day: rebound_core::Day,
    /// Earlier days' counts, set aside whole when the day changed.
    ready: Vec<(BreakdownCounts, rebound_core::Day)>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            counts: BreakdownCounts::default(),
            day: rebound_core::Day(0),
            ready: Vec::new(),
        }
    }
}

/// A tally's counts, taken whole: sorted once the tally's lock is let go
/// ([`Taken::into_adds`]).
pub(super) struct Taken(Vec<(BreakdownCounts, rebound_core::Day)>);

impl Taken {
    /// Every day's counts as adds to be made a group at a time, and the people's clicks
    /// they count.
    pub(super) fn into_adds(self) -> BreakdownAdds {
        let mut adds = BreakdownAdds {
            days: std::collections::VecDeque::new(),
            clicks: 0,
        };
        for (mut counts, day) in self.0 {
            let (sorted, n) = counts.take_sorted(day);
            adds.days.push_back(sorted);
            adds.clicks += n;
        }
        adds
    }
}

/// A take's breakdowns, made into adds a group of codes at a time
/// ([`BreakdownAdds::next_group`]): each day's in (code, dimension, value) order, the
/// earlier day first.
#[derive(Debug)]
pub(super) struct BreakdownAdds {
    days: std::collections::VecDeque<SortedCounts>,
    clicks: u64,
}

impl BreakdownAdds {
    /// The people's clicks the adds count.
    pub(super) fn clicks(&self) -> u64 {
        self.clicks
    }

    /// Whether there is an add to make (clicks with no dimension counted make none).
    pub(super) fn has_adds(&self) -> bool {
        self.days.iter().any(|d| !d.slots.is_empty())
    }

    /// The adds of the next codes: at most `most` unless one code alone has more (a code's
    /// adds are never split), and empty only once every add was handed out.
    pub(super) fn next_group(&mut self, most: usize) -> Vec<DimensionAdd> {
        let mut adds = Vec::new();
        while let Some(day) = self.days.front_mut() {
            if day.adds_into(&mut adds, most) {
                break;
            }
            self.days.pop_front();
        }
        adds
    }

    /// Every add at once, and the clicks they count (the tests' view of a take).
    #[cfg(test)]
    pub(super) fn all(mut self) -> (Vec<DimensionAdd>, u64) {
        let mut all = Vec::new();
        loop {
            let group = self.next_group(usize::MAX);
            if group.is_empty() {
                return (all, self.clicks);
            }
            all.extend(group);
        }
    }
}

impl Tally {
    /// A tally that holds at most `slots` slots (tests of a full one).
    #[cfg(test)]
    pub(super) fn limited(slots: usize) -> Tally {
        let mut tally = Tally::default();
        tally.counts.limits.slots = slots;
        tally
    }
    /// Counts one click of `entry`'s code, made on `today`: the counts of an earlier day are
    /// set aside whole first, so that each click counts for the day it was counted on. False
    /// when the tally is full and the click was not counted.
    pub(super) fn add(
        &mut self,
        today: rebound_core::Day,
        entry: L1Entry,
        dimensions: &Dimensions,
        counted: &[bool; Dimension::ALL.len()],
    ) -> bool {
        if self.day != today {
            if !self.counts.is_empty() {
                let empty = self.counts.emptied();
                let counts = std::mem::replace(&mut self.counts, empty);
                self.ready.push((counts, self.day));
            }
            self.day = today;
        }
        self.counts.add(entry, dimensions, counted)
    }

    /// Every day's counts, moved out (the tables, not their adds: a write that takes them
    /// holds the lock only that long, and the counter never waits on a write made at the
    /// lowest CPU priority); the tally is then empty.
    pub(super) fn take(&mut self) -> Taken {
        let mut days = std::mem::take(&mut self.ready);
        if !self.counts.is_empty() {
            let empty = self.counts.emptied();
            days.push((std::mem::replace(&mut self.counts, empty), self.day));
        }
        Taken(days)
    }
}

/// The index of `value` among the values counted since the last take, added if new (once
/// `most` are held, a new value is counted as [`OTHER`]).
fn intern(values: &mut Interned<Box<[u8]>>, hasher: &DefaultHashBuilder, value: &[u8], most: usize) -> u32 {
    let add = |values: &mut Interned<Box<[u8]>>, value: &[u8], most: usize| {
        values.find_or_add(
            hasher.hash_one(value),
            |held| **held == *value,
            || value.into(),
            |held| hasher.hash_one(&**held),
            most,
        )
    };
    add(values, value, most)
        .or_else(|| add(values, OTHER.as_bytes(), usize::MAX))
        .expect("no bound on (other)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::dimensions::{
        cdn_country, AgentFamilies, Campaign, CampaignValue, Country, DeviceClass, Family, Label, Referrer,
    };

    /// `code`'s entry: the same one for each call on this thread, as the L1 would hand out.
    fn e(code: &str) -> L1Entry {
        thread_local! {
            static ENTRIES: std::cell::RefCell<std::collections::HashMap<String, L1Entry>> = Default::default();
        }
        ENTRIES.with(|m| {
            m.borrow_mut()
                .entry(code.to_owned())
                .or_insert_with(|| crate::clicks::test_util::entry(code))
                .clone()
        })
    }

    /// The adds as (code, dimension, value, clicks).
    fn rows(adds: &[DimensionAdd]) -> Vec<(&str, Dimension, &str, u64)> {
        adds.iter()
            .map(|a| (a.code.as_str(), a.dimension, a.value.as_str(), a.clicks))
            .collect()
    }

    fn click(country: &[u8], referrer: &str, browser: &str) -> Dimensions {
        Dimensions {
            country: Some(cdn_country(country)),
            referrer: Some(Referrer::Host(Label::truncated(referrer))),
            agent: Some(AgentFamilies {
                device: DeviceClass::Mobile,
                browser: Family::truncated(browser),
                os: Family::truncated("iOS"),
            }),
            campaign: None,
            rule: None,
        }
    }

    #[test]
    fn a_click_names_each_dimension_it_has() {
        let mut seen = Vec::new();
        let c = Dimensions {
            campaign: Some(Box::new(Campaign {
                source: Some(CampaignValue::truncated("news")),
                medium: None,
                campaign: Some(CampaignValue::truncated("spring")),
            })),
            referrer: Some(Referrer::Direct),
            ..click(b"DE", "x", "Safari")
        };
        each_bytes(&c, |d, v| seen.push((d, String::from_utf8(v.to_vec()).unwrap())));
        let want = [
            (Dimension::Country, "DE"),
            (Dimension::Referrer, "direct"),
            (Dimension::Device, "mobile"),
            (Dimension::Browser, "Safari"),
            (Dimension::Os, "iOS"),
            (Dimension::UtmSource, "news"),
            (Dimension::UtmCampaign, "spring"),
        ];
        assert_eq!(seen, want.map(|(d, v)| (d, v.to_owned())));
        let mut unknown = Vec::new();
        let c = Dimensions {
            country: Some(Country::UNKNOWN),
            ..Dimensions::default()
        };
        each_bytes(&c, |d, v| unknown.push((d, String::from_utf8(v.to_vec()).unwrap())));
        assert_eq!(unknown, vec![(Dimension::Country, "unknown".to_owned())]);
        let mut none = Vec::new();
        each_bytes(&Dimensions::default(), |d, _| none.push(d));
        assert!(none.is_empty(), "every dimension off: nothing counted");
    }

    #[test]
    fn a_tally_counts_each_click_for_the_day_it_was_counted_on() {
        use rebound_core::Day;
        let every = [true; Dimension::ALL.len()];
        let mut tally = Tally::default();
        tally.add(Day(7), e("abc"), &click(b"DE", "x.example", "Safari"), &every);
        tally.add(Day(7), e("abc"), &click(b"DE", "x.example", "Safari"), &every);
        // Past midnight: day 7's counts are set aside whole, day 8's start empty.
        tally.add(Day(8), e("abc"), &click(b"FR", "x.example", "Safari"), &every);
        let (adds, clicks) = tally.take().into_adds().all();
        assert_eq!(clicks, 3);
        let countries: Vec<_> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Country)
            .map(|a| (a.day, a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(countries, vec![(Day(7), "DE", 2), (Day(8), "FR", 1)]);
        assert_eq!(
            adds.iter().filter(|a| a.day == Day(7)).count(),
            5,
            "one add per dimension"
        );
        assert_eq!(tally.take().into_adds().all(), (Vec::new(), 0), "taken whole");
    }

    #[test]
    fn a_takes_adds_are_made_a_few_whole_codes_at_a_time_in_order() {
        use rebound_core::Day;
        let every = [true; Dimension::ALL.len()];
        // 200 codes on day 3, each with one to three profiles (5 to 9 adds), and 30 on
        // day 4; each filled in another order than its code's.
        let fill = || {
            let mut tally = Tally::default();
            for (day, codes) in [(Day(3), 200), (Day(4), 30)] {
                for i in (0..codes).rev() {
                    let code = format!("g{:03}", (i * 7) % codes);
                    for p in 0..1 + i % 3 {
                        let referrer = format!("r{p}.example");
                        tally.add(
                            day,
                            e(&code),
                            &click(b"DE", &referrer, ["Chrome", "Safari"][p % 2]),
                            &every,
                        );
                    }
                }
            }
            tally.take().into_adds()
        };
        let (all, clicks) = fill().all();
        let want: usize = [200, 30]
            .iter()
            .map(|&n| (0..n).map(|i| 1 + i % 3).sum::<usize>())
            .sum();
        assert_eq!(clicks, want as u64);
        let mut adds = fill();
        let mut groups = Vec::new();
        loop {
            let group = adds.next_group(40);
            if group.is_empty() {
                break;
            }
            assert!(group.len() <= 40, "{}", group.len());
            groups.push(group);
        }
        for pair in groups.windows(2) {
            let (last, first) = (pair[0].last().unwrap(), &pair[1][0]);
            assert!(
                (last.day, &last.code) != (first.day, &first.code),
                "{} split",
                first.code
            );
        }
        assert_eq!(groups.concat(), all, "the same adds as made at once");
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| (a.day, &a.code, a.dimension, &a.value).cmp(&(b.day, &b.code, b.dimension, &b.value)));
        assert_eq!(all, sorted, "in (day, code, dimension, value) order");
        // One code's adds alone past the room asked for: handed out whole.
        let mut adds = fill();
        let first = adds.next_group(1);
        assert_eq!(first.len(), 5);
        assert!(first.iter().all(|a| a.code == "g000"));
    }

    #[test]
    fn a_click_like_the_last_takes_its_profile_until_the_take_only() {
        let every = [true; Dimension::ALL.len()];
        let (a, c) = (click(b"DE", "a.example", "Chrome"), click(b"JP", "c.example", "Safari"));
        let mut counts = BreakdownCounts::default();
        // `c` is profile 0, `a` profile 1; `a` again is counted from the last click.
        for (code, dims) in [("x", &c), ("x", &a), ("y", &a), ("y", &a)] {
            assert!(counts.add(e(code), dims, &every));
        }
        let (adds, clicks) = counts.take(rebound_core::Day(1));
        assert_eq!(clicks, 4);
        let countries: Vec<_> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Country)
            .map(|a| (a.code.as_str(), a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(countries, vec![("x", "DE", 1), ("x", "JP", 1), ("y", "DE", 2)]);
        // After the take `a` is the first profile again: the last click's index (1) is the
        // emptied tally's no more.
        counts.add(e("z"), &a, &every);
        let (adds, clicks) = counts.take(rebound_core::Day(2));
        assert_eq!(clicks, 1);
        assert_eq!(
            rows(&adds),
            vec![
                ("z", Dimension::Country, "DE", 1),
                ("z", Dimension::Referrer, "a.example", 1),
                ("z", Dimension::Device, "mobile", 1),
                ("z", Dimension::Browser, "Chrome", 1),
                ("z", Dimension::Os, "iOS", 1),
            ]
        );
    }

    #[test]
    fn a_codes_values_beyond_the_stores_bound_count_as_other_in_memory_too() {
        let mut counts = BreakdownCounts::default();
        let bound = Dimension::Referrer.values_per_day();
        for i in 0..bound + 30 {
            counts.add(
                e("abc"),
                &click(b"DE", &format!("h{i}.example"), "Chrome"),
                &[true; Dimension::ALL.len()],
            );
        }
        // A value held already still counts as itself.
        counts.add(
            e("abc"),
            &click(b"DE", "h3.example", "Chrome"),
            &[true; Dimension::ALL.len()],
        );
        let (adds, clicks) = counts.take(rebound_core::Day(1));
        assert_eq!(clicks, bound as u64 + 31);
        let referrers: Vec<(&str, u64)> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Referrer)
            .map(|a| (a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(referrers.len(), bound + 1, "{referrers:?}");
        assert!(referrers.contains(&(OTHER, 30)));
        assert!(referrers.contains(&("h3.example", 2)));
        assert_eq!(referrers.iter().map(|(_, n)| n).sum::<u64>(), bound as u64 + 31);
    }

    #[test]
    fn pending_breakdowns_hold_little_per_code() {
        let mut counts = BreakdownCounts::default();
        let codes = 20_000;
        let every = [true; Dimension::ALL.len()];
        let c = Dimensions {
            country: None,
            referrer: Some(Referrer::Direct),
            ..click(b"DE", "x", "Chrome")
        };
        // Another visitor of every tenth code: a second profile.
        let other = click(b"FR", "news.example", "Firefox");
        for i in 0..codes {
            let code = format!("c{i:06}");
            counts.add(e(&code), &c, &every);
            counts.add(e(&code), &c, &every);
            if i % 10 == 0 {
                counts.add(e(&code), &other, &every);
            }
        }
        // Four counts a code (referrer, device, browser, OS) in one slot of 16 bytes, in a
        // table of 32,768 buckets (28 bytes a code); counted per code and dimension (a vector
        // of counts a code) this test allowed 160 (reckoning the table by its capacity, not
        // its buckets), and in nine maps a code they held about 1 KiB.
        let per_code = counts.heap_bytes() / codes;
        assert!(per_code < 32, "{per_code} bytes a code");
        let (adds, clicks) = counts.take(rebound_core::Day(1));
        // The second profile's country, referrer and browser are values of their own; its
        // device and OS add to the first's.
        assert_eq!(adds.len(), 4 * codes + 3 * codes / 10);
        assert_eq!(clicks, 2 * codes as u64 + codes as u64 / 10);
        assert_eq!(adds[0].code, "c000000");
        assert_eq!(adds[0].dimension, Dimension::Country);
        assert_eq!((adds[0].value.as_str(), adds[0].clicks), ("FR", 1));
        let referrers: Vec<_> = adds
            .iter()
            .filter(|a| a.code == "c000000" && a.dimension == Dimension::Referrer)
            .map(|a| (a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(referrers, vec![("direct", 2), ("news.example", 1)]);
        assert!(counts.heap_bytes() < 1024, "a take empties them");
    }

    #[test]
    fn two_fills_of_one_code_add_up_as_one() {
        // An edit or an eviction then a miss fills the code again: another entry.
        let (first, second) = (
            crate::clicks::test_util::entry("dup"),
            crate::clicks::test_util::entry("dup"),
        );
        assert!(!first.is_same(&second));
        assert_eq!(std::mem::size_of::<Slot>(), 16);
        let every = [true; Dimension::ALL.len()];
        let mut counts = BreakdownCounts::default();
        for entry in [&first, &second, &second] {
            assert!(counts.add(entry.clone(), &click(b"DE", "a.example", "Chrome"), &every));
        }
        counts.add(first.clone(), &click(b"JP", "a.example", "Chrome"), &every);
        let (adds, clicks) = counts.take(rebound_core::Day(2));
        assert_eq!(clicks, 4);
        assert_eq!(
            rows(&adds),
            vec![
                ("dup", Dimension::Country, "DE", 3),
                ("dup", Dimension::Country, "JP", 1),
                ("dup", Dimension::Referrer, "a.example", 4),
                ("dup", Dimension::Device, "mobile", 4),
                ("dup", Dimension::Browser, "Chrome", 4),
                ("dup", Dimension::Os, "iOS", 4),
            ]
        );
    }

    #[test]
    fn a_full_tally_counts_into_what_it_holds_and_drops_the_rest() {
        let every = [true; Dimension::ALL.len()];
        let mut counts = BreakdownCounts {
            limits: Limits {
                slots: 2,
                profiles: 2,
                values: 6,
            },
            ..BreakdownCounts::default()
        };
        let de = click(b"DE", "a.example", "Chrome");
        assert!(counts.add(e("a"), &de, &every));
        assert!(counts.add(e("b"), &de, &every));
        // Two slots held: a third code is not counted, the two held still are.
        assert!(!counts.add(e("c"), &de, &every));
        assert!(counts.add(e("a"), &de, &every));
        // A new profile on a held code needs a slot too.
        assert!(!counts.add(e("a"), &click(b"JP", "a.example", "Chrome"), &every));
        let (adds, clicks) = counts.take(rebound_core::Day(2));
        assert_eq!(clicks, 3);
        let countries: Vec<_> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Country)
            .map(|a| (a.code.as_str(), a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(countries, vec![("a", "DE", 2), ("b", "DE", 1)]);
        // Room for six values: a seventh counts as `(other)`.
        let mut counts = BreakdownCounts {
            limits: Limits {
                slots: 10,
                profiles: 10,
                values: 6,
            },
            ..BreakdownCounts::default()
        };
        for referrer in ["a.example", "b.example", "c.example", "b.example"] {
            assert!(counts.add(e("c"), &click(b"DE", referrer, "Chrome"), &every));
        }
        let (adds, _) = counts.take(rebound_core::Day(2));
        let referrers: Vec<_> = adds
            .iter()
            .filter(|a| a.dimension == Dimension::Referrer)
            .map(|a| (a.value.as_str(), a.clicks))
            .collect();
        assert_eq!(referrers, vec![(OTHER, 1), ("a.example", 1), ("b.example", 2)]);
    }

    #[test]
    fn counts_add_up_per_code_dimension_and_value_and_a_take_empties_them() {
        let mut counts = BreakdownCounts::default();
        for (code, country) in [("abc", b"DE"), ("abc", b"DE"), ("abc", b"JP"), ("xyz", b"DE")] {
            counts.add(
                e(code),
                &click(country, "news.example", "Chrome"),
                &[true; Dimension::ALL.len()],
            );
        }
        // The OS off: left out.
        let mut no_os = [true; Dimension::ALL.len()];
        no_os[Dimension::Os as usize] = false;
        counts.add(e("xyz"), &click(b"DE", "news.example", "Chrome"), &no_os);
        let (adds, clicks) = counts.take(rebound_core::Day(9));
        assert_eq!(clicks, 5);
        assert!(counts.is_empty());
        assert_eq!(
            rows(&adds),
            vec![
                ("abc", Dimension::Country, "DE", 2),
                ("abc", Dimension::Country, "JP", 1),
                ("abc", Dimension::Referrer, "news.example", 3),
                ("abc", Dimension::Device, "mobile", 3),
                ("abc", Dimension::Browser, "Chrome", 3),
                ("abc", Dimension::Os, "iOS", 3),
                ("xyz", Dimension::Country, "DE", 2),
                ("xyz", Dimension::Referrer, "news.example", 2),
                ("xyz", Dimension::Device, "mobile", 2),
                ("xyz", Dimension::Browser, "Chrome", 2),
                ("xyz", Dimension::Os, "iOS", 1),
            ]
        );
        assert!(adds.iter().all(|a| a.day == rebound_core::Day(9)));
    }

    #[test]
    fn values_counted_through_the_last_ones_add_up_as_interned_ones() {
        // Repeats, alternations and values that take another's place after a take (the last
        // values' indices then name other values or none): every count as a naive sum says.
        let every = [true; Dimension::ALL.len()];
        let referrers = [
            "a.example",
            "b.example",
            "a.example",
            "a.example",
            "c.example",
            "b.example",
        ];
        let browsers = ["Chrome", "Chrome", "Safari", "Chrome", "Firefox", "Safari"];
        let mut counts = BreakdownCounts::default();
        for round in 0..3 {
            let mut want = std::collections::BTreeMap::new();
            for i in 0..60 {
                let (code, referrer, browser) = match round {
                    // After the first take, the values come in another order.
                    1 => (["r", "s"][i % 2], referrers[(i * 5) % 6], browsers[(i + 3) % 6]),
                    _ => (["r", "s", "t"][i % 3], referrers[i % 6], browsers[(i / 2) % 6]),
                };
                counts.add(e(code), &click(b"DE", referrer, browser), &every);
                for (dimension, value) in [
                    (Dimension::Country, "DE"),
                    (Dimension::Referrer, referrer),
                    (Dimension::Device, "mobile"),
                    (Dimension::Browser, browser),
                    (Dimension::Os, "iOS"),
                ] {
                    *want
                        .entry((code.to_owned(), dimension, value.to_owned()))
                        .or_insert(0u64) += 1;
                }
            }
            let (adds, clicks) = counts.take(rebound_core::Day(1));
            assert_eq!(clicks, 60);
            let got: std::collections::BTreeMap<_, _> = adds
                .into_iter()
                .map(|a| ((a.code.to_string(), a.dimension, a.value), a.clicks))
                .collect();
            assert_eq!(got, want, "round {round}");
        }
    }
}
