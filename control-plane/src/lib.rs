//! Rebound's control plane: the links API on axum (its HTTP contract is in docs/http.md).
//!
//! # Layout
//!
//! One service per resource, each holding only the ports and policies it needs; its HTTP
//! handlers are in `http/<resource>.rs` and reach it through axum's `FromRef` sub-states.
//! The services depend on each other in one direction: `names` ← `links` ← `domains`,
//! `threats`, `stats`; `keys` reads `names`.
//!
//! - this file: `ControlPlane`, the services assembled from the configuration and the
//!   adapters (and the router's state).
//! - `links`: the links service (create, import, edit, delete, takedown, a link's view).
//! - `domains`: the domains service (add, show, remove).
//! - `keys`: the keys service (make, revoke); `auth`: how a key is checked, who calls.
//! - `threats`: the abuse service (the threat lists in force, `threat_lists`; rescans that take links down,
//!   reinstatements, abuse reports); `threat_loader` reads the lists from their files and
//!   URLs, at start and on a schedule.
//! - `stats`: the stats service (daily clicks, breakdowns, the operators' summary).
//! - `reconcile`: pending propagations of deletes, takedowns and edits, finished under a
//!   lease by every control plane's reconciler.
//! - `names`: the domains' names every resource reads (which domain a request means, a
//!   link's short URL, the own-host rule).
//! - `http`: the router, the handlers by resource, the extractors, the OpenAPI document
//!   and the console.
//! - `home`: the writes that need uniqueness, forwarded to the home region.
//! - `aliases`, `indexes`, `kgs`, `ratelimit`: the alias index, the indexes of links by
//!   target host and domain, generated codes from leased counter blocks, rate limits.
//! - `config`, `error`, `metrics`: what the control plane is configured with, the one
//!   error type, every metric of the control plane and its click consumer.
//! - `consumer`: the click consumer of distributed mode (SQS → rollups).
#![forbid(unsafe_code)]

pub mod aliases;
pub mod auth;
pub mod config;
pub mod consumer;
mod domains;
pub mod error;
pub mod home;
mod http;
mod indexes;
mod keys;
pub mod kgs;
mod links;
pub mod metrics;
mod names;
pub mod ratelimit;
pub mod reconcile;
mod stats;
mod threat_lists;
pub mod threat_loader;
pub mod threats;

use axum::extract::FromRef;
use config::ControlPlaneConfig;
use rebound_core::generated::{
    key_from_hex, key_to_hex, store_permutation_key, CodeKeyMismatch, GeneratedCodes, CODE_KEY_SETTING, COUNTER,
};
use rebound_core::password::IDEMPOTENCY_KEY_SETTING;
use rebound_core::target::TargetPolicy;
use rebound_core::Clock;
use rebound_store::{ApiKeyRecord, LinkEvents, Role, RollupStore, Store, StoreError};
use std::sync::Arc;

pub use http::{openapi_json, router, router_forwarding};
pub use links::HASHES_AT_ONCE;

/// The key id of the operator key generated on first start when none is configured.
pub const INITIAL_OPERATOR_KEY_ID: &str = "initial-operator";

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("public_base_url: {0}")]
    PublicBase(rebound_core::target::TargetError),
    #[error("the store could not be read: {0}")]
    Store(#[from] StoreError),
    #[error("the stored code permutation key is malformed")]
    BadCodeKey,
    #[error("the stored idempotency password key (the store's setting {IDEMPOTENCY_KEY_SETTING}) is malformed")]
    BadIdempotencyKey,
    #[error(transparent)]
    CodeKey(#[from] CodeKeyMismatch),
    /// Another region generates codes from this slot's range: two regions on one slot would
    /// give the same codes.
    #[error(
        "region slot {slot} (REBOUND_REGION_SLOT) is held by region {holder:?} in this store, not by {region:?} \
         (REBOUND_REGION): each region needs a slot of its own, fixed for the life of the store"
    )]
    RegionSlotTaken { slot: u8, region: String, holder: String },
    /// Codes were generated, but no key was recorded: an earlier version recorded only the
    /// keys it generated, so they were generated under a configured key.
    #[error(
        "this store has generated codes but no recorded permutation key (the store's setting \
         {CODE_KEY_SETTING}): they were generated under the key configured then (REBOUND_CODE_KEY, or \
         api.code_key in the configuration file), and a new key would answer 404 for every one of them. \
         Configure that key again; this start records it"
    )]
    CodeKeyNotRecorded,
}

/// The store setting that records which region generates codes from region slot `slot`.
pub fn region_slot_setting(slot: u8) -> String {
    format!("region_slot_{slot}")
}

/// Records `region` as the holder of `slot` in the store on its first start there; refuses
/// a slot another region holds.
async fn claim_region_slot(store: &dyn Store, region: &str, slot: u8) -> Result<(), StartError> {
    let holder = store.get_or_init_setting(&region_slot_setting(slot), region).await?;
    if holder != region {
        return Err(StartError::RegionSlotTaken {
            slot,
            region: region.to_owned(),
            holder,
        });
    }
    Ok(())
}

/// The control plane: its services, assembled from the configuration and the adapters.
/// Cheap to clone (the services are shared); it is the router's state, from which each
/// handler takes only its own service.
#[derive(Clone)]
pub struct ControlPlane {
    config: Arc<ControlPlaneConfig>,
    names: Arc<names::DomainNames>,
    links: Arc<links::LinkService>,
    domains: Arc<domains::DomainService>,
    keys: Arc<keys::KeyService>,
    abuse: Arc<threats::AbuseService>,
    stats: Arc<stats::StatsService>,
    auth: Arc<auth::Authenticator>,
    bodies: http::extract::BodyLimits,
    metrics: metrics::ApiMetrics,
    propagations: reconcile::Propagations,
}

/// Each service is a sub-state of [`ControlPlane`] that handlers extract on its own.
macro_rules! sub_states {
    ($($field:ident: $ty:ty),* $(,)?) => {$(
        impl FromRef<ControlPlane> for $ty {
            fn from_ref(cp: &ControlPlane) -> $ty {
                cp.$field.clone()
            }
        }
    )*};
}

sub_states! {
    names: Arc<names::DomainNames>,
    links: Arc<links::LinkService>,
    domains: Arc<domains::DomainService>,
    keys: Arc<keys::KeyService>,
    abuse: Arc<threats::AbuseService>,
    stats: Arc<stats::StatsService>,
    auth: Arc<auth::Authenticator>,
    bodies: http::extract::BodyLimits,
}

impl ControlPlane {
    /// Assembles the services from their validated configuration and their adapters; the
    /// stats read the store's rollups.
    pub async fn new(
        config: ControlPlaneConfig,
        store: Arc<dyn Store>,
        events: Arc<dyn LinkEvents>,
        clock: Arc<dyn Clock>,
    ) -> Result<ControlPlane, StartError> {
        let click_counts: Arc<dyn RollupStore> = store.clone();
        Self::with_click_counts(config, store, click_counts, events, clock).await
    }

    /// As [`ControlPlane::new`], with the stats reading daily clicks from `click_counts`.
    pub async fn with_click_counts(
        config: ControlPlaneConfig,
        store: Arc<dyn Store>,
        click_counts: Arc<dyn RollupStore>,
        events: Arc<dyn LinkEvents>,
        clock: Arc<dyn Clock>,
    ) -> Result<ControlPlane, StartError> {
        let targets = TargetPolicy {
            max_bytes: config.api.max_target_bytes,
            refuse_mixed_script: config.api.refuse_mixed_script_for_keys,
            ..TargetPolicy::default()
        }
        .with_public_base(&config.public_base_url)
        .map_err(StartError::PublicBase)?
        .with_blocklist(&config.api.blocked_domains);
        let anonymous_targets = TargetPolicy {
            refuse_mixed_script: true,
            ..targets.clone()
        };
        let key = permutation_key(store.as_ref(), config.api.code_key).await?;
        let metrics = metrics::ApiMetrics::unregistered();
        let generated = GeneratedCodes::new(key);
        aliases::complete_the_index(store.as_ref(), &generated).await?;
        claim_region_slot(store.as_ref(), &config.api.region, config.api.region_slot).await?;
        let codes = kgs::KeyRangeLease::new(store.clone(), generated, config.api.kgs_block_size)
            .in_region_slot(config.api.region_slot)
            .counting_leases(metrics.kgs_leases())
            .announcing(events.clone());
        let propagations = reconcile::Propagations::new(
            store.clone(),
            events.clone(),
            clock.clone(),
            metrics::PropagationMetrics::unregistered(),
        );
        // The proxies' key for the cookies of password-protected links, made once.
        let candidate: [u8; 32] = rand::random();
        store
            .get_or_init_setting(rebound_core::password::UNLOCK_KEY_SETTING, &hex::encode(candidate))
            .await?;
        // The key of passwords' MACs in idempotency fingerprints, made once: every control
        // plane of the fleet fingerprints a replay alike.
        let candidate: [u8; 32] = rand::random();
        let idempotency_secret = store
            .get_or_init_setting(IDEMPOTENCY_KEY_SETTING, &hex::encode(candidate))
            .await?;
        let idempotency_secret = hex::decode(idempotency_secret)
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or(StartError::BadIdempotencyKey)?;
        let names = Arc::new(names::DomainNames::new(store.clone(), &config.public_base_url));
        let threat_lists = Arc::new(threat_lists::ThreatLists::default());
        let indexes = Arc::new(indexes::LinkIndexes::new(store.clone(), clock.clone()));
        let links = Arc::new(links::LinkService {
            settings: config.api.clone(),
            store: store.clone(),
            events,
            clock: clock.clone(),
            names: names.clone(),
            targets,
            anonymous_targets,
            codes,
            limiter: ratelimit::CreateRateLimiter::default(),
            threats: threat_lists.clone(),
            metrics: metrics.clone(),
            propagations: propagations.clone(),
            hashing: tokio::sync::Semaphore::new(HASHES_AT_ONCE),
            idempotency_secret,
        });
        let domains = Arc::new(domains::DomainService {
            store: store.clone(),
            clock: clock.clone(),
            names: names.clone(),
            links: links.clone(),
            indexes: indexes.clone(),
        });
        let keys = Arc::new(keys::KeyService {
            store: store.clone(),
            clock: clock.clone(),
            names: names.clone(),
        });
        let abuse = Arc::new(threats::AbuseService {
            store: store.clone(),
            clock: clock.clone(),
            names: names.clone(),
            links: links.clone(),
            indexes,
            threats: threat_lists,
            rescanning: tokio::sync::Mutex::new(()),
            reports_limiter: ratelimit::CreateRateLimiter::default(),
            metrics: metrics.clone(),
        });
        let stats = Arc::new(stats::StatsService {
            links: links.clone(),
            names: names.clone(),
            click_counts,
            breakdowns: rebound_store::breakdowns::breakdowns_of(store.clone()),
            clock,
        });
        let auth = Arc::new(auth::Authenticator {
            store,
            bootstrap_key_hash: config.bootstrap_key.as_deref().map(auth::hash_key),
        });
        let bodies = http::extract::BodyLimits {
            max_body_bytes: config.api.max_body_bytes,
            max_import_body_bytes: config.api.max_import_body_bytes,
            body_timeout: config.api.body_timeout,
        };
        Ok(ControlPlane {
            config: Arc::new(config),
            names,
            links,
            domains,
            keys,
            abuse,
            stats,
            auth,
            bodies,
            metrics,
            propagations,
        })
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ControlPlaneConfig {
        &self.config
    }

    /// The abuse service: the threat lists' loader installs lists and asks for rescans
    /// through it ([`threat_loader::run`]).
    pub fn abuse(&self) -> Arc<threats::AbuseService> {
        self.abuse.clone()
    }

    /// Declares the API's metrics (requests, writes, rate limits, KGS leases) and the
    /// reconciler's in `registry`.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        self.metrics.register(registry)?;
        self.propagations.metrics().register(registry)
    }

    /// The reconciler of pending propagations, to run beside the API
    /// ([`reconcile::Propagations::run`]).
    pub fn reconciler(&self) -> reconcile::Propagations {
        self.propagations.clone()
    }
}

/// The store's permutation key, fixed for the life of the store: the first start records the
/// configured key, or a generated one; every later start uses the recorded one, and a
/// configured key must equal it.
async fn permutation_key(store: &dyn Store, configured: Option<[u8; 16]>) -> Result<[u8; 16], StartError> {
    let stored = match store.read_setting(CODE_KEY_SETTING).await? {
        Some(stored) => stored,
        None => {
            if configured.is_none() && store.high_water(COUNTER).await? > 0 {
                return Err(StartError::CodeKeyNotRecorded);
            }
            let candidate = configured.unwrap_or_else(rand::random);
            // Two first starts at once: whichever records first wins, and the other is checked.
            store
                .get_or_init_setting(CODE_KEY_SETTING, &key_to_hex(&candidate))
                .await?
        }
    };
    let stored = key_from_hex(&stored).ok_or(StartError::BadCodeKey)?;
    Ok(store_permutation_key(configured, stored)?)
}

/// Creates the first operator key if the store has none by that id yet, and returns it
/// (to be printed once). Returns `None` when it was created before.
pub async fn ensure_initial_operator_key(store: &dyn Store, clock: &dyn Clock) -> Result<Option<String>, StoreError> {
    let key = auth::generate_key();
    let record = ApiKeyRecord {
        id: INITIAL_OPERATOR_KEY_ID.to_owned(),
        name: "initial operator key".to_owned(),
        role: Role::Operator,
        key_hash: auth::hash_key(&key),
        created_at: clock.now_millis(),
        revoked_at: None,
        domains: None,
    };
    match store.insert_key(&record).await {
        Ok(()) => Ok(Some(key)),
        Err(StoreError::AlreadyExists) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key each start runs with, over a sequence of starts on one store: the first
    /// records its key, configured or generated, and later ones use it or are refused.
    #[tokio::test]
    async fn the_permutation_key_is_fixed_by_the_first_start() {
        use rebound_store::{CounterStore, MemoryStore};
        let (a, b) = (*b"0123456789abcdef", *b"fedcba9876543210");
        // (configured key of each start, what it gets: Ok(Some(key)), Ok(None) for "the one
        // generated by the first start", or the refusal)
        type Start = (Option<[u8; 16]>, Result<Option<[u8; 16]>, &'static str>);
        let histories: &[&[Start]] = &[
            &[(None, Ok(None)), (None, Ok(None)), (Some(a), Err("CodeKey"))],
            &[
                (Some(a), Ok(Some(a))),
                (None, Ok(Some(a))),
                (Some(a), Ok(Some(a))),
                (Some(b), Err("CodeKey")),
            ],
        ];
        for history in histories {
            let store = MemoryStore::new();
            let mut generated = None;
            for (i, (configured, want)) in history.iter().enumerate() {
                let got = permutation_key(&store, *configured).await;
                match (want, got) {
                    (Ok(Some(k)), Ok(got)) => assert_eq!(got, *k, "start {i} of {history:?}"),
                    (Ok(None), Ok(got)) => assert_eq!(*generated.get_or_insert(got), got, "start {i}"),
                    (Err("CodeKey"), Err(StartError::CodeKey(_))) => {}
                    (want, got) => panic!("start {i} of {history:?}: want {want:?}, got {got:?}"),
                }
            }
        }
        // A store whose codes were generated under a key an earlier version did not record.
        let earlier = MemoryStore::new();
        earlier.lease_block(COUNTER, 100).await.unwrap();
        assert!(matches!(
            permutation_key(&earlier, None).await,
            Err(StartError::CodeKeyNotRecorded)
        ));
        assert_eq!(
            permutation_key(&earlier, Some(a)).await.unwrap(),
            a,
            "configured again: recorded"
        );
        assert_eq!(permutation_key(&earlier, None).await.unwrap(), a);
        // Malformed: refused, not replaced.
        let bad = MemoryStore::new();
        bad.get_or_init_setting(CODE_KEY_SETTING, "not hex").await.unwrap();
        assert!(matches!(permutation_key(&bad, None).await, Err(StartError::BadCodeKey)));
    }
}
