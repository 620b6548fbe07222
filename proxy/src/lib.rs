//! Rebound's data plane: `GET/HEAD /{code}` answered from memory almost always.
//!
//! # Layout
//!
//! - `server`: the hyper service that answers requests, the Pingora application that
//!   hands connections to the edge (`rebound_edge`), and how the server is run (pre-bound
//!   or inherited listeners, signals, upgrade).
//! - `path`: the lookup tiers: L1 → L2 (Redis, when configured) → issued-code filter → store,
//!   one flight per code over L2 and the store, and the stale-on-failure rule.
//! - `l1`: the in-process cache with the never-a-lower-version fill rule.
//! - `issued`: the issued-code filter (the counter's high-water mark and the alias
//!   filter) and when it may be trusted.
//! - `flight`: single-flight, one store read per code however many requests miss.
//! - `clicks`: clicks counted on L1 entries, the lock-free click queue, the paced
//!   shipper and its sinks (store or SQS), and the stats that add pending clicks.
//! - `trust`: whether L1 may be trusted, from the invalidation channel's own keepalives.
//! - `distributed`: the Redis tasks: invalidation listener, keepalives, creation feed.
//! - `events`: the link-event port carried in process (all-in-one).
//! - `metrics`: every metric of the data plane.
//! - `domains`: which domain a request is for, by its host (docs/spec.md §11).
//! - `domain_watch`: the fleet's domains read from the store into those routes and into
//!   the names ACME orders for, again whenever the store's change counter moves.
//! - `visitor`: whether a redirect's click is a person's or a bot's (docs/spec.md §12), and
//!   its agent's device class, browser and OS families (§13), remembered per thread.
//! - `geoip`: the country of a client address, from a MaxMind-format database file
//!   reloaded when it changes (docs/spec.md §13).
//! - `capture`: what a redirect captures of who clicked: the visitor and, with breakdowns
//!   on, the click's dimensions (§13).
//! - `pages`: the prebuilt 404, 410 and `/` answers (static pages, or configured redirects).
//! - `app_links`: a domain's app links documents (`/.well-known/…`), prebuilt answers
//!   (docs/spec.md §14).
// Two exceptions: `server::RedirectService::listener`, adopting the listening socket an
// upgrade hands over by its descriptor number, and `thin_text`, reading back as text the
// bytes it was made from a `&str`. `l1` forbids it outright.
#![deny(unsafe_code)]

pub mod app_links;
pub mod capture;
pub mod clicks;
pub mod config;
pub mod distributed;
pub mod domain_watch;
pub mod domains;
pub mod events;
pub mod flight;
pub mod geoip;
pub mod issued;
pub mod l1;
pub mod metrics;
pub mod pages;
pub mod path;
pub mod server;
pub mod targeting;
mod thin_text;
pub mod trust;
pub mod unlock;
pub mod visitor;
