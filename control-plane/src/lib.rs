//! Rebound's control plane: the links API on axum (its HTTP contract is in docs/http.md).
//!
//! # Layout
//!
//! - this file: `ControlPlane` (the runtime: store, events, clock, policies), the
//!   router.
//! - `aliases`: the alias index, and its one-time backfill on a store made before it.
//! - `api`: the handlers and the OpenAPI document (the bodies are `rebound_api_types`).
//! - `audit`: reading a link's audit log.
//! - `auth`: API keys and who the caller is.
//! - `body`: the JSON body extractor (415, 413, 400 in the API's error shape).
//! - `config`: what the control plane is configured with (`ControlPlaneConfig`).
//! - `console`: the operator console at `/` (HTML, CSS and JavaScript in the binary).
//! - `consumer`: the click consumer of distributed mode (SQS → rollups).
//! - `domains`: which domain a request means, and the domains API.
//! - `error`: the one error type, and the error body.
//! - `kgs`: generated codes from leased counter blocks.
//! - `links`: the links service the handlers call (create, import, delete, takedown,
//!   daily clicks).
//! - `me`: who the caller's key is.
//! - `metrics`: every metric of the control plane and its click consumer.
//! - `qr`: a link's QR code as SVG.
//! - `ratelimit`: creation rate limits.
//! - `reconcile`: pending propagations of deletes, takedowns and edits, finished under a
//!   lease by every control plane's reconciler.
//! - `threats`: threat lists (creates and edits refused, rescans that take links down,
//!   restores) and abuse reports.
//! - `threat_loader`: the lists read from their files and URLs, at start and on a
//!   schedule, put in force here, and the rescan after a change.
#![forbid(unsafe_code)]

pub mod aliases;
mod api;
pub mod audit;
pub mod auth;
mod body;
pub mod config;
mod console;
pub mod consumer;
mod domains;
pub mod error;
pub mod home;
mod indexes;
pub mod kgs;
mod links;
pub mod me;
pub mod metrics;
mod qr;
pub mod ratelimit;
pub mod reconcile;
pub mod threat_loader;
pub mod threats;

use axum::Router;
use config::ControlPlaneConfig;
use rebound_core::generated::{
    key_from_hex, key_to_hex, store_permutation_key, CodeKeyMismatch, GeneratedCodes, CODE_KEY_SETTING, COUNTER,
};
use rebound_core::password::IDEMPOTENCY_KEY_SETTING;
use rebound_core::target::TargetPolicy;
use rebound_core::Clock;
use rebound_store::{ApiKeyRecord, LinkEvents, Role, RollupStore, Store, StoreError};
use std::sync::Arc;

pub use api::openapi_json;

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

/// The control plane's runtime: everything a handler needs.
pub struct ControlPlane {
    pub(crate) config: ControlPlaneConfig,
    pub(crate) store: Arc<dyn Store>,
    /// Where the stats read daily clicks: the store's rollups, or (all-in-one) the rollups
    /// plus the clicks still pending in the process.
    pub(crate) click_counts: Arc<dyn RollupStore>,
    pub(crate) events: Arc<dyn LinkEvents>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Targets of key holders.
    pub(crate) targets: TargetPolicy,
    /// Targets of anonymous callers: also never a mixed-script host.
    pub(crate) anonymous_targets: TargetPolicy,
    pub(crate) codes: kgs::KeyRangeLease,
    pub(crate) limiter: ratelimit::CreateRateLimiter,
    pub(crate) bootstrap_key_hash: Option<String>,
    pub(crate) metrics: metrics::ApiMetrics,
    /// Deletes' pending propagations: cleared by the API path, finished by the reconciler.
    pub(crate) propagations: reconcile::Propagations,
    /// The domains' names by id, and the default one's.
    pub(crate) domains: domains::Domains,
    /// The threat lists in force.
    pub(crate) threats: threats::ThreatLists,
    /// Held by the rescan under way: one at a time.
    pub(crate) rescanning: tokio::sync::Mutex<()>,
    /// Set once the store's indexes of active links by target host and by domain hold every
    /// link (see [`indexes`]); held while this control plane puts older links in them.
    pub(crate) links_indexed: tokio::sync::OnceCell<()>,
    /// Passwords hashed or checked at once, at most (each 19 MiB, tens of milliseconds).
    pub(crate) hashing: tokio::sync::Semaphore,
    /// The key of a password's MAC in idempotency fingerprints (the store's
    /// [`IDEMPOTENCY_KEY_SETTING`], made once for the fleet).
    pub(crate) idempotency_secret: Vec<u8>,
}

/// Passwords a control plane hashes at once, at most.
pub const HASHES_AT_ONCE: usize = 2;

impl ControlPlane {
    /// Assembles the runtime from its validated configuration and its adapters; the stats read the
    /// store's rollups.
    pub async fn new(
        config: ControlPlaneConfig,
        store: Arc<dyn Store>,
        events: Arc<dyn LinkEvents>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<ControlPlane>, StartError> {
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
    ) -> Result<Arc<ControlPlane>, StartError> {
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
        let bootstrap_key_hash = config.bootstrap_key.as_deref().map(auth::hash_key);
        let propagations = reconcile::Propagations::new(
            store.clone(),
            events.clone(),
            clock.clone(),
            metrics::PropagationMetrics::unregistered(),
        );
        let domains = domains::Domains::new(&config.public_base_url);
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
        Ok(Arc::new(ControlPlane {
            config,
            store,
            click_counts,
            events,
            clock,
            targets,
            anonymous_targets,
            codes,
            limiter: ratelimit::CreateRateLimiter::default(),
            bootstrap_key_hash,
            domains,
            metrics,
            propagations,
            threats: threats::ThreatLists::default(),
            rescanning: tokio::sync::Mutex::new(()),
            links_indexed: tokio::sync::OnceCell::new(),
            hashing: tokio::sync::Semaphore::new(HASHES_AT_ONCE),
            idempotency_secret,
        }))
    }

    /// Now, by its clock.
    pub fn now(&self) -> rebound_core::UnixMillis {
        self.clock.now_millis()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ControlPlaneConfig {
        &self.config
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

/// The API router.
pub fn router(cp: Arc<ControlPlane>) -> Router {
    router_forwarding(cp, None)
}

/// [`router`], outside the home region: the writes that need uniqueness are forwarded to
/// `home` (counted and timed here like the rest).
pub fn router_forwarding(cp: Arc<ControlPlane>, home: Option<Arc<dyn home::HomeRegion>>) -> Router {
    let metrics = cp.metrics.clone();
    let mut routes = api::routes();
    if let Some(home) = home {
        let forwarding = home::Forwarding {
            home,
            here: api::routes().with_state(cp.clone()),
            max_body_bytes: cp.config.api.max_body_bytes,
            max_import_body_bytes: cp.config.api.max_import_body_bytes,
            body_timeout: cp.config.api.body_timeout,
        };
        routes = routes.layer(axum::middleware::from_fn_with_state(
            forwarding,
            home::forward_unique_writes,
        ));
    }
    guard_panics(routes.merge(console::routes()).with_state(cp)).layer(axum::middleware::from_fn(
        move |request, next| metrics::count_request(metrics.clone(), request, next),
    ))
}

/// A handler that panics is answered 500 in the API's error shape, and logged, instead of
/// dropping the connection.
fn guard_panics(app: Router) -> Router {
    app.layer(tower_http::catch_panic::CatchPanicLayer::custom(error::panic_response))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_is_answered_500_in_the_error_shape() {
        let app = guard_panics(Router::new().route(
            "/boom",
            axum::routing::get(|| async {
                if true {
                    panic!("boom in a test handler");
                }
                "unreachable"
            }),
        ));
        let res = app
            .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(res.headers()["cache-control"], "no-store");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "internal");
        assert_eq!(
            v["error"]["message"], "internal error",
            "the panic message stays in the log"
        );
    }

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
