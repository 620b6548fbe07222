//! Rebound's storage ports: the traits the planes call and the records they exchange. The
//! adapters are crates of their own (`rebound-sqlite`, `rebound-dynamodb`, `rebound-redis`,
//! `rebound-sqs`); only the binary wires them in, their calls counted and timed by the
//! decorators of `rebound-metering`.
//!
//! # Layout
//!
//! - this file: the store traits, shaped after DynamoDB's semantics (conditional put,
//!   conditional versioned update, atomic add, one transaction for link + idempotency
//!   record, point get, paged listing by owner), split by what each consumer calls
//!   (`LinkReads` is all the data plane reads; `LinkStore` adds the control plane's
//!   writes; keys, counters, rollups and the audit log apart), their records and errors.
//! - `cache`: the L2 of cache records (`RecordCache`) and its in-memory fake.
//! - `fleet`: what a data plane hears from the others and from the control plane: the
//!   invalidation channel with its keepalives and registry, and the creation feed
//!   (`InvalidationChannel`, `CreationFeed`), with in-memory fakes.
//! - `clicks`: where a data plane ships its click batches (`ClickSink`), and where the
//!   consumer receives them from the queue (`ClickInbox`, with an in-memory fake).
//! - `click_stream`: where a data plane sends each click as an event, for a warehouse
//!   (`ClickStreamSink`, with an in-memory fake).
//! - `certs`, `domains`: what ACME gave the fleet, and the domains it serves links on.
//! - `events`: the port through which the control plane tells the data plane's caches
//!   about creates and deletes (`LinkEvents`, `NoLinkEvents`, and `RecordedLinkEvents`
//!   for tests).
//! - `memory`: an in-memory fake with fault injection, for unit tests.
//! - `conformance`: the contract every adapter must pass, run against each of them.
//! - `testing` (feature `test-util`): AWS configuration for local test servers.
#![forbid(unsafe_code)]

pub mod breakdowns;
pub mod cache;
pub mod certs;
pub mod click_stream;
pub mod clicks;
#[cfg(any(test, feature = "test-util"))]
pub mod conformance;
pub mod domains;
pub mod events;
pub mod fleet;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
#[cfg(feature = "test-util")]
pub mod testing;

use async_trait::async_trait;
use rebound_core::link::Deletion;
use rebound_core::{Day, Link, LinkEdit, UnixMillis};
use std::ops::Range;

pub use breakdowns::{BreakdownStore, Dimension, DimensionAdd, DimensionBatch, ValueClicks};
#[cfg(any(test, feature = "test-util"))]
pub use cache::MemoryRecordCache;
pub use cache::{L2Read, RecordCache};
#[cfg(any(test, feature = "test-util"))]
pub use clicks::MemoryInbox;
pub use clicks::{BreakdownSink, ClickInbox, ClickSink, InboxMessage, QueueDepth, QueuedBatch};
pub use events::{EventError, FanOutLinkEvents, LinkEvents, NoLinkEvents};
pub use fleet::{AttemptBudget, ChannelMessage, CreationFeed, FeedEntry, InvalidationChannel};
#[cfg(any(test, feature = "test-util"))]
pub use memory::MemoryStore;

/// What can go wrong in a store call. Callers match on the conditional outcomes; the rest
/// is classified once, where the response is chosen.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional insert found the key already there.
    #[error("the item already exists")]
    AlreadyExists,
    /// The idempotency key of a create is already recorded.
    #[error("the idempotency key is already recorded")]
    IdempotencyKeyExists,
    /// A conditional update found another version.
    #[error("the item changed (version condition failed)")]
    ConditionFailed,
    /// The item does not exist.
    #[error("no such item")]
    NotFound,
    /// A listing cursor that this store did not issue.
    #[error("the cursor is not valid")]
    BadCursor,
    /// The counter has no values left.
    #[error("the code counter is exhausted")]
    Exhausted,
    /// The store could not be reached or did not answer in time: `what` names it ("Redis",
    /// "DynamoDB"), `source` tells why, kept whole as its client said it (a
    /// `redis::RedisError`, an SDK error with its own causes, an `io::Error`, or a text).
    /// Printed alone it names only what is down; [`rebound_core::Causes`] (or anyhow's `{:#}`, or
    /// tracing's `error = &e as &dyn Error`) prints the why after it.
    #[error("{what} is unavailable")]
    Unavailable {
        what: &'static str,
        #[source]
        source: BoxError,
    },
    /// The store answered with something this code cannot read.
    #[error("the store returned a malformed item: {0}")]
    Corrupt(String),
    /// The call failed because of this program, not the store (a bad statement, a type
    /// this code mapped wrongly, a panicked store task): a bug, not an outage.
    #[error("the store call is faulty: {0}")]
    Internal(String),
}

/// The cause an error keeps: any error of a client or of the system, or a text.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl StoreError {
    /// `what` is unavailable because of `cause`: the client's error, kept whole, or a text
    /// when there is no error to keep (`"switched off"`).
    pub fn unavailable(what: &'static str, cause: impl Into<BoxError>) -> StoreError {
        StoreError::Unavailable {
            what,
            source: cause.into(),
        }
    }
}

/// The role an API key grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Creates links and manages its own.
    Creator,
    /// Manages every link, takes links down and manages keys.
    Operator,
}

impl Role {
    /// The role's name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Creator => "creator",
            Role::Operator => "operator",
        }
    }
    /// Parses `creator` or `operator`.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "creator" => Some(Role::Creator),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }
}

/// An API key as stored: never the key itself, only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// Hex SHA-256 of the key.
    pub key_hash: String,
    pub created_at: UnixMillis,
    pub revoked_at: Option<UnixMillis>,
    /// The domains (canonical names) the key may create and see links on; `None`: every
    /// domain. An operator key is never scoped.
    pub domains: Option<Vec<String>>,
}

/// The first answer to a create with an `Idempotency-Key`, kept so a retry gets it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The API key id (or `anonymous:<ip>`) the idempotency key belongs to.
    pub scope: String,
    pub key: String,
    /// Hash of the request body, to refuse the same key with another body.
    pub request_hash: String,
    pub status: u16,
    pub body: String,
    pub created_at: UnixMillis,
    /// After this the key may be used again.
    pub expires_at: UnixMillis,
}

/// One audit log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub at: UnixMillis,
    pub actor: String,
    /// `takedown`, `delete`, `edit`, `propagated` (a reconciler finished a pending
    /// propagation), `key_create`, `key_revoke`.
    pub action: String,
    pub code: Option<String>,
    pub reason: Option<String>,
    /// `ok`, `invalidate_failed`, `already_down`.
    pub outcome: String,
    /// What changed, as JSON text: an edit's `{"old": {...}, "new": {...}}` with the fields
    /// it changed.
    pub detail: Option<String>,
}

/// Clicks to add to one (code, day) rollup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickAdd {
    pub code: String,
    pub day: Day,
    /// Redirects to people.
    pub clicks: u64,
    /// Redirects to link unfurlers and crawlers, and answers to `HEAD`: answered as
    /// usual, counted apart.
    pub bot_clicks: u64,
}

/// The clicks of one link on one day: people's and bots' (see [`ClickAdd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Clicks {
    pub clicks: u64,
    pub bot_clicks: u64,
}

impl Clicks {
    /// `clicks` by people, none by bots.
    pub const fn people(clicks: u64) -> Clicks {
        Clicks { clicks, bot_clicks: 0 }
    }

    pub const fn new(clicks: u64, bot_clicks: u64) -> Clicks {
        Clicks { clicks, bot_clicks }
    }

    pub fn is_zero(&self) -> bool {
        self.clicks == 0 && self.bot_clicks == 0
    }
}

impl std::ops::AddAssign for Clicks {
    fn add_assign(&mut self, other: Clicks) {
        self.clicks += other.clicks;
        self.bot_clicks += other.bot_clicks;
    }
}

/// A batch of rollup adds, applied at most once per `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClickBatch {
    /// Unique per batch; a batch whose id was applied before is skipped.
    pub id: String,
    pub adds: Vec<ClickAdd>,
}

/// Most adds in one batch (DynamoDB's transaction limit, less the batch marker).
pub const MAX_BATCH_ADDS: usize = 99;

/// Whether a click batch was applied now or had been before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchOutcome {
    Applied,
    AlreadyApplied,
}

/// A change durable in the store that every cache has not yet been told about:
/// "propagate version `version` of link `code`". Written in the same conditional write as
/// the change (a delete, a takedown or an edit), removed once the propagation succeeded. One per link: a newer version replaces an older one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Propagation {
    pub code: String,
    pub version: u64,
    /// The control plane working on it until `lease_until`; nobody after that.
    pub lease_owner: String,
    pub lease_until: UnixMillis,
}

/// Who works on a pending propagation, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropagationLease {
    pub owner: String,
    pub until: UnixMillis,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPage {
    pub links: Vec<Link>,
    /// Present when more links follow.
    pub next_cursor: Option<String>,
}

impl LinkPage {
    /// A page from up to `limit + 1` links read newest first: the extra one only tells
    /// that more follow, and the cursor points after the last one kept.
    pub fn from_overfetch(mut links: Vec<Link>, limit: usize) -> LinkPage {
        let more = links.len() > limit;
        links.truncate(limit);
        let next_cursor = if more {
            links.last().map(|l| {
                ListCursor {
                    created_at: l.created_at,
                    code: l.code.clone(),
                }
                .encode()
            })
        } else {
            None
        };
        LinkPage { links, next_cursor }
    }
}

/// Where a read of an index of links continues: after (`key`, `code`), the index's own key
/// (a host key, a domain id) and the link's. Not shown to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexCursor {
    pub key: String,
    pub code: String,
}

impl IndexCursor {
    /// A page of an index from up to `limit + 1` links read in its order, `key_of` giving
    /// each one's index key: the cursor points after the last one kept.
    pub fn page(mut links: Vec<Link>, limit: usize, key_of: impl Fn(&Link) -> String) -> LinkPage {
        let more = links.len() > limit;
        links.truncate(limit);
        let next_cursor = match more {
            true => links.last().map(|l| {
                IndexCursor {
                    key: key_of(l),
                    code: l.code.clone(),
                }
                .encode()
            }),
            false => None,
        };
        LinkPage { links, next_cursor }
    }

    pub fn encode(&self) -> String {
        format!("{}\t{}", self.key, self.code)
    }

    /// Reads a cursor [`IndexCursor::encode`] wrote.
    pub fn decode(s: &str) -> Result<IndexCursor, StoreError> {
        let (key, code) = s.split_once('\t').ok_or(StoreError::BadCursor)?;
        Ok(IndexCursor {
            key: key.to_owned(),
            code: code.to_owned(),
        })
    }
}

/// Where a listing continues: after (`created_at`, `code`) in newest-first order (`code` is
/// the link's key, which carries its domain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub created_at: UnixMillis,
    pub code: String,
}

impl ListCursor {
    /// The opaque text handed to clients.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.code)
    }
    /// Reads a cursor that [`ListCursor::encode`] wrote.
    pub fn decode(s: &str) -> Result<ListCursor, StoreError> {
        let (at, code) = s.split_once('.').ok_or(StoreError::BadCursor)?;
        let created_at = at.parse::<i64>().map_err(|_| StoreError::BadCursor)?;
        if !rebound_core::domain::is_valid_key(code) || created_at < 0 {
            return Err(StoreError::BadCursor);
        }
        Ok(ListCursor {
            created_at,
            code: code.to_owned(),
        })
    }
}

/// What the data plane reads of the store: a link by code, and what tells which codes can
/// exist without reading the links (the counter's high-water mark, the alias index, and the
/// settings naming the permutation key and whether the index is complete).
#[async_trait]
pub trait LinkReads: Send + Sync {
    /// Point read.
    async fn get_link(&self, code: &str) -> Result<Option<Link>, StoreError>;
    /// The counter's high-water mark (strongly consistent): every value ever leased from
    /// `counter` is below it; 0 when nothing was ever leased. It only grows.
    async fn high_water(&self, counter: &str) -> Result<u64, StoreError>;
    /// Codes recorded in the alias index, in pages of at most `limit`; `after` is the last
    /// code of the previous page (an adapter may page in its own order). Never a read of
    /// the links themselves.
    async fn list_aliases(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, StoreError>;
    /// The stored value of setting `name`, if any (strongly consistent; never writes).
    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError>;
}

/// Links by code: the reads, and the control plane's writes and listings.
#[async_trait]
pub trait LinkStore: LinkReads {
    /// Conditional insert of a new link, with the idempotency record in the same
    /// transaction when given. `AlreadyExists` when the code is taken,
    /// `IdempotencyKeyExists` when the key is recorded (and unexpired); nothing is written then.
    async fn insert_link(&self, link: &Link, idempotency: Option<&IdempotencyRecord>) -> Result<(), StoreError>;
    /// Records `alias` in the alias index (idempotent). Called before the alias's link is
    /// inserted, so an alias that exists is always indexed; an entry whose insert then
    /// failed only costs a data plane a store read.
    async fn record_alias(&self, alias: &str) -> Result<(), StoreError>;
    /// Conditional insert of many links (a bulk import): one outcome per link, in order;
    /// a taken code is `AlreadyExists` for that link alone. The outer error means nothing
    /// is known to be written.
    async fn insert_links(&self, links: &[Link]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(links.len());
        for link in links {
            match self.insert_link(link, None).await {
                Err(e @ StoreError::Unavailable { .. }) if outcomes.is_empty() => return Err(e),
                other => outcomes.push(other),
            }
        }
        Ok(outcomes)
    }
    /// Conditional versioned update: marks the link inactive if it is still at
    /// `expected_version`, bumping the version, and in the same write records the
    /// propagation of the new version pending, leased to `lease` (the writer propagates it
    /// at once; nobody else before `lease.until`). Returns the new record;
    /// `ConditionFailed` when the version moved, `NotFound` when there is no such link;
    /// nothing is written then.
    async fn deactivate_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError>;
    /// [`LinkStore::deactivate_link_pending`] with a lease already expired: any control
    /// plane's reconciler propagates it.
    async fn deactivate_link(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
    ) -> Result<Link, StoreError> {
        let lease = PropagationLease {
            owner: deletion.by.clone(),
            until: deletion.at,
        };
        self.deactivate_link_pending(code, expected_version, deletion, &lease)
            .await
    }
    /// Conditional versioned update of an active link: applies `edit` if the link is still
    /// active at `expected_version`, bumping the version, and in the same write records the
    /// propagation of the new version pending, leased to `lease` (as
    /// [`LinkStore::deactivate_link_pending`] does). Returns the new record;
    /// `ConditionFailed` when the version moved or the link is down, `NotFound` when there
    /// is no such link; nothing is written then.
    async fn edit_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        edit: &LinkEdit,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError>;
    /// Conditional versioned update of a link that is down: active again at the next
    /// version, without its deletion record ([`Link::restored`]; an operator undoing a
    /// threat list's takedown), with its propagation pending as an edit's. `ConditionFailed`
    /// when the version moved or the link is active, `NotFound` when there is none.
    async fn restore_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError>;
    /// Pending propagations whose lease has expired at `now`, oldest lease first, at most
    /// `limit`: a read of the pending records alone (an index), never of the links.
    async fn pending_propagations(&self, now: UnixMillis, limit: usize) -> Result<Vec<Propagation>, StoreError>;
    /// Takes, renews or (with `lease.until <= now`) gives back the lease on the pending
    /// propagation of `code` at `version`, with a conditional write: it must be pending at
    /// that version with its lease expired at `now` or held by `lease.owner`. Returns the
    /// link as stored; `ConditionFailed` otherwise (finished, replaced by a newer version,
    /// or leased by another).
    async fn lease_propagation(
        &self,
        code: &str,
        version: u64,
        lease: &PropagationLease,
        now: UnixMillis,
    ) -> Result<Link, StoreError>;
    /// Removes the pending propagation of `code` if it is at `version`; `ConditionFailed`
    /// when none is (finished already, or a newer version is pending).
    async fn finish_propagation(&self, code: &str, version: u64) -> Result<(), StoreError>;
    /// Newest first; only `owner`'s links when given. `BadCursor` for a cursor not issued here.
    async fn list_links(&self, owner: Option<&str>, limit: usize, cursor: Option<&str>)
        -> Result<LinkPage, StoreError>;
    /// The active links whose target's host key ([`rebound_core::threat::host_key`]) starts
    /// with `prefix`: the links on a host and its subdomains, or on an address. Read through
    /// the store's index of active links by target host (a sparse index: a deleted or taken
    /// down link leaves it, a restored one comes back, an edit moves it), never a read of
    /// every link; expired links are in it until purged. `limit` per page, in host-key order
    /// (links under one key in any order); `BadCursor` for a cursor not issued here.
    async fn links_by_target_host(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError>;
    /// The active links of the domain `id` (their keys carry it), through the store's
    /// per-domain index, in key order; paged as [`LinkStore::links_by_target_host`].
    async fn links_on_domain(&self, id: &str, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError>;
    /// The active links that have rules (docs/spec.md §14), through the store's sparse
    /// index of them (a link without rules is not in it; an edit that adds or removes
    /// rules moves it), never a read of every link: what a rescan of the threat lists
    /// checks the rules' targets of. Paged as [`LinkStore::links_by_target_host`]; a page
    /// may be short, or empty, before the last (the cursor is `None` after the last).
    async fn links_with_rules(&self, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError>;
    /// Puts up to `limit` links from `cursor` (`None`: the start) that were written before
    /// the two indexes above existed into them; the cursor to go on from, `None` once every
    /// link is indexed. A store that indexes its older links itself (when it opens) has
    /// nothing to do.
    async fn index_older_links(&self, _cursor: Option<&str>, _limit: usize) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    /// The recorded answer for an idempotency key, if unexpired at `now`.
    async fn get_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: UnixMillis,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;
}

/// API keys, stored hashed.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Conditional insert by id; `AlreadyExists` when the id is taken.
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;
    /// The key whose hash is `key_hash`, revoked or not.
    async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// Marks a key revoked (idempotent). `NotFound` when there is no such key.
    async fn revoke_key(&self, id: &str, at: UnixMillis) -> Result<ApiKeyRecord, StoreError>;
}

/// Named 64-bit counters leased in blocks, and small named settings.
#[async_trait]
pub trait CounterStore: Send + Sync {
    /// Atomically adds `size` to the counter and returns the block it covered.
    async fn lease_block(&self, counter: &str, size: u64) -> Result<Range<u64>, StoreError>;
    /// The stored value of `name`, writing `candidate` first if there is none (conditional put).
    async fn get_or_init_setting(&self, name: &str, candidate: &str) -> Result<String, StoreError>;
}

/// Per-day click rollups.
#[async_trait]
pub trait RollupStore: Send + Sync {
    /// Adds every count of the batch with atomic adds, at most once per batch id.
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError>;
    /// Applies several batches (one flush); stores that can make it one transaction do.
    async fn apply_click_batches(&self, batches: &[ClickBatch]) -> Result<Vec<BatchOutcome>, StoreError> {
        let mut outcomes = Vec::with_capacity(batches.len());
        for b in batches {
            outcomes.push(self.apply_clicks(b).await?);
        }
        Ok(outcomes)
    }
    /// The daily counts of `code` from `from` through `to` that are not both zero, in day
    /// order.
    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, Clicks)>, StoreError>;
    /// Its breakdowns (docs/spec.md §13), when it keeps them; none by default.
    fn breakdowns(&self) -> Option<&dyn BreakdownStore> {
        None
    }
}

/// The audit log of takedowns and other operator actions.
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Appends one event.
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError>;
    /// Events about `code`, oldest first.
    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError>;
}

/// Everything a control plane or data plane needs from one backend.
pub trait Store:
    LinkStore + KeyStore + CounterStore + RollupStore + AuditLog + certs::CertificateStore + domains::DomainStore
{
}
impl<
        T: LinkStore + KeyStore + CounterStore + RollupStore + AuditLog + certs::CertificateStore + domains::DomainStore,
    > Store for T
{
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::Causes;
    use std::error::Error;

    /// An error with a cause of its own, like an SDK error ("service error" and, below it,
    /// what the service said).
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_outage_keeps_its_cause_whole_and_prints_it_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let cases: [(StoreError, &str, &str); 3] = [
            (
                StoreError::unavailable("Redis", io()),
                "Redis is unavailable",
                "Redis is unavailable: refused",
            ),
            (
                StoreError::unavailable("DynamoDB", Outer(io())),
                "DynamoDB is unavailable",
                "DynamoDB is unavailable: outer: refused",
            ),
            (
                StoreError::unavailable("the memory store", "switched off"),
                "the memory store is unavailable",
                "the memory store is unavailable: switched off",
            ),
        ];
        for (e, alone, with_causes) in cases {
            assert_eq!(e.to_string(), alone);
            assert_eq!(Causes(&e).to_string(), with_causes);
            assert!(e.source().is_some(), "{alone}");
        }
        let e = StoreError::unavailable("DynamoDB", Outer(io()));
        let outer = e.source().and_then(|s| s.downcast_ref::<Outer>()).unwrap();
        assert_eq!(outer.0.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_cause_that_repeats_the_text_before_it_is_printed_once() {
        /// Prints its cause's text as its own and returns it as its source too.
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Echo(#[source] std::io::Error);
        let e = StoreError::unavailable("Redis", Echo(std::io::Error::other("reset")));
        assert_eq!(Causes(&e).to_string(), "Redis is unavailable: reset");
    }
}
