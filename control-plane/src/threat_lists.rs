//! The threat lists in force: the index creates and edits are checked against (by the
//! links service), the lists' states for operators, and what the last rescan did. The
//! abuse service (`threats`) installs them and rescans; nothing here reads a store.

use rebound_core::threat::ThreatIndex;
use rebound_core::UnixMillis;
use std::sync::{Arc, RwLock};

/// One list as last loaded, for operators and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListState {
    pub name: String,
    /// `urlhaus`, `phishtank`, `openphish` or `domains`.
    pub format: String,
    /// The file or URL it is read from.
    pub source: String,
    /// Entries in force (from the last load that succeeded).
    pub entries: usize,
    /// Lines or entries the last good load left out.
    pub skipped: usize,
    /// When the entries in force were loaded; none: never.
    pub loaded_at: Option<UnixMillis>,
    /// Why the last attempt failed, if it did (the entries before it stay in force).
    pub error: Option<String>,
}

/// What the last rescan did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RescanOutcome {
    pub at: UnixMillis,
    /// Host keys looked up in the index of links by target host (one per new entry's host).
    pub looked_up: u64,
    /// Links read.
    pub scanned: u64,
    /// Active links that matched a list.
    pub matched: u64,
    /// Of those, taken down now.
    pub taken_down: u64,
    /// Of those, left up: an operator restored them before.
    pub allowed: u64,
    /// Takedowns that failed (retried at the next rescan).
    pub failed: u64,
    pub millis: u64,
}

/// The threat lists in force and their state.
#[derive(Default)]
pub struct ThreatLists {
    index: RwLock<Arc<ThreatIndex>>,
    lists: RwLock<Vec<ListState>>,
    pub(crate) last_rescan: RwLock<Option<RescanOutcome>>,
    /// The index the last rescan with no failure was made against: the next looks up only
    /// the entries added since. None: every entry is looked up (after a start).
    pub(crate) rescanned: RwLock<Option<Arc<ThreatIndex>>>,
}

impl ThreatLists {
    /// The name of the first list holding `target` (as `TargetPolicy::validate` returns it).
    pub fn find(&self, target: &str) -> Option<String> {
        let index = self.index.read().unwrap_or_else(|e| e.into_inner()).clone();
        index.find(target).map(str::to_owned)
    }

    /// Puts `index` (built from every list's entries in force) in force.
    pub(crate) fn install_index(&self, index: ThreatIndex) {
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(index);
    }

    pub(crate) fn install_states(&self, lists: Vec<ListState>) {
        *self.lists.write().unwrap_or_else(|e| e.into_inner()) = lists;
    }

    /// The lists' states.
    pub fn lists(&self) -> Vec<ListState> {
        self.lists.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn index(&self) -> Arc<ThreatIndex> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
