//! The embedded store: one SQLite file in WAL mode, and a second beside it for the click
//! rollups. One writer connection per file serialises its writes (SQLite allows one writer
//! per file anyway); a few reader connections, with the clicks file attached, serve point
//! reads concurrently. Every call runs on tokio's blocking pool of the calling runtime.
//!
//! # Layout
//!
//! - `store`: [`SqliteStore`], its files and connections, the error classification.
//! - `schema`: both files' schemas, and the one-time move of the rollups to their file.
//! - `links`: the links, idempotency records, the alias index and the propagations
//!   pending ([`rebound_store::LinkReads`], [`rebound_store::LinkStore`]).
//! - `keys`, `counters`, `clicks`, `audit`: the other ports, one each.

mod audit;
mod certs;
mod clicks;
mod counters;
mod domains;
mod error;
mod keys;
mod links;
mod schema;
mod store;

pub use store::{clicks_file, SqliteStore};
