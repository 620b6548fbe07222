//! Redis for the distributed mode: the L2 cache of cache records, written only through one
//! Lua script that refuses a lower version; the invalidation channel (pub/sub) with each
//! proxy's own keepalives and the registry of live proxies; and the creation feed (a
//! stream), so every proxy learns new aliases and the counter's high-water mark.
//!
//! Keys and channels all start with a configurable prefix (default `rebound:`):
//! `invalidations` (a stream: every invalidation, field `i`, so a proxy whose subscription
//! lapsed replays what it missed instead of emptying its L1),
//! `url:{code}` (a record: `"<version> <json>"`, TTL = `stale_until`, the JSON stamped by
//! the write script with the epoch it was written in, `{"e":<epoch>,…}`), `identity` (the
//! epoch: `"<replication id> <epoch>"`, see `IDENTITY` in `scripts`), `invalidate`
//! (`"<version> <code>"`), `alive:{proxy}` (each proxy's keepalives, heard by itself
//! alone), `acks` (`"<proxy> <version> <code>"`), the sorted set `proxies` (each proxy
//! scored by its last keepalive, in Redis's own time), and the stream `created` (field
//! `code` for a created link, field `hwm` for a KGS lease's high-water mark), and
//! `attempts:{key}` (a link's password attempts, the fleet's: see `attempts`).
//!
//! On a Redis Cluster the same names carry hash tags so that each script's keys share a
//! slot: the fleet's keys and channels under `{fleet}`, each record with the identity key
//! of its bucket under `{r<bucket>}` (`keys`); the channels are shard channels
//! (`SPUBLISH`, `SSUBSCRIBE`) of the fleet's slot (`topology`; docs/redis-cluster.md).
//!
//! # Layout
//!
//! - `connection`: [`RedisCache`], its connections with a breaker, TLS and AUTH, the
//!   start-up check of the settings ([`RedisSettingError`]), the key and channel names
//!   it is asked for.
//! - `keys`: the key and channel names, on one Redis and on a cluster (hash tags, buckets).
//! - `topology`: one Redis or a cluster: the connection type, the sharded subscription.
//! - `scripts`: the Lua scripts, and what each does.
//! - `codec`: the wire formats of invalidations, acknowledgements and records.
//! - `cache`: the L2 port ([`rebound_store::RecordCache`]).
//! - `channel`: the invalidation channel port: subscribe, keepalives and the registry, the
//!   replay of the log, acknowledgements.
//! - `feed`: the creation feed port.
//! - `attempts`: the fleet's budget of password attempts per link ([`rebound_store::AttemptBudget`]).
//! - `events`: [`RedisLinkEvents`], the control plane's side.
//! - `acks`: strict I1 across proxies, the deletes waiting for acknowledgements.
//! - `metrics`: [`RedisBreakerState`], the connection's own metrics.

pub mod acks;
mod attempts;
mod cache;
mod channel;
mod codec;
mod connection;
mod events;
mod feed;
mod keys;
mod metrics;
mod scripts;
mod topology;

pub use channel::RegistryRead;
pub use codec::{
    decode_ack, decode_invalidation, decode_message, decode_record, decode_stamped_record, encode_ack,
    encode_invalidation,
};
pub use connection::{RedisCache, RedisSettingError};
pub use events::RedisLinkEvents;
pub use keys::RECORD_BUCKETS;
pub use metrics::RedisBreakerState;
pub use topology::RedisConn;
