//! The distributed store on DynamoDB (or any DynamoDB-API endpoint, through the standard
//! AWS configuration). Every expression names its attributes through `#placeholders`, so
//! reserved words such as `day` and `name` never reach the parser.
//!
//! Tables (all named `<prefix><table>`; `provision` creates them):
//!
//! | table | key | what |
//! | --- | --- | --- |
//! | `links` | `code` | links; GSIs `by_owner` (`created_by`, `sort`), `by_time` (`list`, `sort`) and the sparse `pending` (`prop_shard`, `prop_until`: propagations pending); TTL `purge_at` |
//! | `idempotency` | `pk` = scope + key | first answers of creates; TTL `purge_at` |
//! | `keys` | `pk` = `hash#…` or `id#…` | API keys by hash (strongly consistent reads) and an id → hash pointer; also `acme#account`, `cert#<domain>`, `certlease#<domain>` and `acmechallenge#<token>` (ACME's account, certificates, order leases and HTTP-01 answers in flight), `domain#<name>` (a domain: its record and app links) and `default_app_links` |
//! | `counters` | `name` | the KGS counter (`ADD`; its value is the high-water mark) and settings |
//! | `aliases` | `code` | the alias index: every custom alias, recorded before its link |
//! | `rollups` | `code`, `day` | clicks per day (`ADD`) |
//! | `breakdowns` | `code`, `key` = dimension, day, region slot | people's clicks per value of a dimension (`breakdowns`) |
//! | `batches` | `id` | click batches already applied; TTL `purge_at` |
//! | `audit` | `code`, `seq` | audit events |
//!
//! # Layout
//!
//! - `store`: [`DynamoStore`], its client and table names, the SDK's errors read.
//! - `item`: links, keys and idempotency records as items, and typed attribute reads.
//! - `tables`: the tables and indexes `provision` creates.
//! - `links`: the links, idempotency records, the alias index and the propagations
//!   pending ([`rebound_store::LinkReads`], [`rebound_store::LinkStore`]).
//! - `keys`, `certs`, `domains`, `counters`, `clicks`, `breakdowns`, `audit`: the other
//!   ports, one each.

mod audit;
mod breakdowns;
mod certs;
mod clicks;
mod counters;
mod domains;
mod item;
mod keys;
mod links;
mod store;
mod tables;

pub use store::DynamoStore;
