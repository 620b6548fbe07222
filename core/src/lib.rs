//! Rebound's shared core: everything the data plane and the control plane must agree on.
//!
//! # Layout
//!
//! - `code`: the short-code rule and the reserved words.
//! - `base62`: fixed-width base62 for generated codes.
//! - `permute`: the keyed Feistel permutation that turns counter values into codes.
//! - `generated`: counter value → generated code (the KGS) and back (the data plane's
//!   check that a code can have been issued).
//! - `domain`: domains, their ids, and link keys that carry them.
//! - `app_links`: a domain's app links (Apple's app-site-association, Android's asset
//!   links): their paths, shapes and bounds.
//! - `link`: the stored link record and its redirect kind.
//! - `cache`: the cache record (Redis `url:{code}` and L1) and how it is judged.
//! - `decision`: the pure redirect decision of a store read, and response details.
//! - `target`: validation and normalisation of target URLs.
//! - `password`: password-protected links: the Argon2id hash, its check, the signed cookie.
//! - `threat`: public threat feeds (URLhaus, PhishTank, OpenPhish, host lists) read into
//!   entries, and the index that matches normalised targets against them.
//! - `rules`: rules on a link (country, OS, device, language, splits) and how a proxy
//!   evaluates them.
//! - `time`: timestamps, UTC days and clocks.
//! - `client`: who the client is: the peer, or what a trusted proxy in front says.
//! - `dimensions`: a click's dimensions (country, referrer host, device and families,
//!   campaign) and the parsing of those that need no table.
//! - `error`: [`Causes`], how every crate prints an error with its causes.
//!
//! Nothing here does I/O: no sockets, no files, no runtime.
#![forbid(unsafe_code)]

pub mod app_links;
pub mod base62;
pub mod cache;
pub mod client;
pub mod code;
pub mod decision;
pub mod dimensions;
pub mod domain;
pub mod error;
pub mod generated;
pub mod link;
pub mod password;
pub mod permute;
pub mod rules;
pub mod target;
pub mod threat;
pub mod time;

pub use cache::{CacheRecord, CacheState, CachedVerdict};
pub use code::{CodeError, RESERVED_WORDS};
pub use decision::{decide_redirect, StoreVerdict};
pub use error::Causes;
pub use link::{Link, LinkEdit, RedirectKind};
pub use time::{Clock, Day, ManualClock, SystemClock, UnixMillis};
