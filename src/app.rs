//! Assembles Rebound's processes from settings: opens the backends, binds the listeners,
//! runs until a shutdown signal. Bound addresses are printed on stdout so that whoever
//! started the process (a person, a test on port 0) knows where it listens.

use crate::listen::{bind_when_free, check_descriptor_budget, edge_limits, router_edge, serve_router};
use crate::process_metrics::register_process_metrics;
use anyhow::Context;
use rebound_control_plane::consumer::{run_click_consumer, watch_queue_depths, ConsumerCalls, DEPTH_EVERY};
use rebound_control_plane::metrics::ConsumerMetrics;
use rebound_control_plane::ControlPlane;
use rebound_core::config::{QueueChoice, Settings, StoreChoice};
use rebound_core::{Clock, SystemClock};
use rebound_dynamodb::DynamoStore;
use rebound_edge::tls::{watch_certificate, CertificateFiles, ReloadableCert};
use rebound_edge::{Edge, EdgeMetrics};
use rebound_proxy::clicks::{
    low_priority_runtime, run_click_shipper, ClickPacing, ClickQueue, ClickSink, ClickWriter, RollupsWithPending,
    StoreClickSink,
};
use rebound_proxy::distributed::{run_creation_feed, run_heartbeat, run_invalidation_listener, sync_embedded_filter};
use rebound_proxy::events::InProcessLinkEvents;
use rebound_proxy::issued::IssuedCodeGate;
use rebound_proxy::l1::L1;
use rebound_proxy::metrics::{ProxyMetrics, TierHealth};
use rebound_proxy::pages::{DeadEndTargets, DeadEnds};
use rebound_proxy::path::{InvalidationTrust, RedirectPath};
use rebound_proxy::server::{
    run_redirect_server, ProcessSignals, RedirectListener, RedirectPort, RedirectServer, Redirects,
};
use rebound_redis::acks::{AckMetrics, Acknowledgements};
use rebound_redis::{RedisBreakerState, RedisCache, RedisLinkEvents};
use rebound_sqlite::SqliteStore;
use rebound_sqs::{LazyClickQueue, SqsClickQueue};
use rebound_store::call_metrics::{
    AdapterMetrics, MeteredClickSink, MeteredLinkEvents, MeteredRecordCache, MeteredStore,
};
use rebound_store::{LinkEvents, NoLinkEvents, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The embedded store's file inside the data directory.
pub const DB_FILE: &str = "rebound.db";

/// Opens the configured store.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match &settings.store {
        StoreChoice::Sqlite => {
            let path = settings.data_dir.join(DB_FILE);
            let store = SqliteStore::open(&path)
                .with_context(|| format!("opening the embedded store at {}", path.display()))?;
            Ok(Arc::new(store))
        }
        StoreChoice::DynamoDb { table_prefix } => Ok(Arc::new(DynamoStore::new(
            DynamoStore::client_from_env().await,
            table_prefix.clone(),
        ))),
    }
}

/// The store with every call counted and timed under its adapter's name.
fn metered(store: Arc<dyn Store>, settings: &Settings, adapters: &AdapterMetrics) -> Arc<dyn Store> {
    let adapter = match settings.store {
        StoreChoice::Sqlite => "sqlite",
        StoreChoice::DynamoDb { .. } => "dynamodb",
    };
    Arc::new(MeteredStore::new(store, adapters, adapter))
}

/// Opens Redis when configured, and checks its settings with one connection: refused
/// credentials or an untrusted certificate stop the start with an error naming the
/// setting; an unreachable Redis does not (the cache connects when it can).
async fn open_redis(settings: &Settings) -> anyhow::Result<Option<Arc<RedisCache>>> {
    let Some(url) = settings.redis_url.as_deref() else {
        return Ok(None);
    };
    let cache = match &settings.redis_ca {
        Some(path) => {
            let pem = std::fs::read(path).with_context(|| format!("REBOUND_REDIS_CA: reading {}", path.display()))?;
            RedisCache::with_ca(url, &settings.redis_prefix, pem)?
        }
        None => RedisCache::new(url, &settings.redis_prefix).context("REBOUND_REDIS_URL")?,
    };
    match cache.check_settings().await? {
        None => tracing::info!("connected to Redis"),
        Some(why) => tracing::warn!(error = %why, "Redis is not reachable yet; connecting when it is"),
    }
    Ok(Some(Arc::new(cache)))
}

/// Opens the SQS click queue and its dead-letter queue when configured.
async fn open_queue(settings: &Settings) -> anyhow::Result<Option<(SqsClickQueue, SqsClickQueue)>> {
    match &settings.queue {
        QueueChoice::Embedded => Ok(None),
        QueueChoice::Sqs { queue_name } => {
            let client = SqsClickQueue::client_from_env().await;
            let open = |name: String| {
                let client = client.clone();
                async move {
                    SqsClickQueue::open(client, &name)
                        .await
                        .with_context(|| format!("opening the SQS queue {name} (run `rebound provision` first)"))
                }
            };
            Ok(Some((
                open(queue_name.clone()).await?,
                open(format!("{queue_name}-dlq")).await?,
            )))
        }
    }
}

use crate::listen::bind as std_bind;

/// Prints the initial operator key once, the first time a store without a configured
/// bootstrap key starts.
pub async fn announce_initial_key(settings: &Settings, store: &dyn Store, clock: &dyn Clock) -> anyhow::Result<()> {
    if settings.bootstrap_key.is_some() {
        return Ok(());
    }
    if let Some(key) = rebound_control_plane::ensure_initial_operator_key(store, clock).await? {
        println!("rebound: initial operator API key (shown once, keep it): {key}");
        println!("rebound:   export REBOUND_API_KEY={key}");
    }
    Ok(())
}

/// Resolves when SIGTERM (graceful) arrives. SIGINT exits the process at once.
pub async fn termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("SIGINT: exiting now");
            std::process::exit(130);
        }
    }
}

/// What `/readyz` checks: every listener bound and, on a proxy, the issued-code filter loaded.
#[derive(Clone, Default)]
pub struct Readiness {
    listeners_bound: Arc<AtomicBool>,
    bloom: Option<Arc<IssuedCodeGate>>,
    /// Gauges read at scrape time.
    bloom_codes: Option<prometheus::IntGauge>,
}

impl Readiness {
    fn bound(bloom: Option<Arc<IssuedCodeGate>>) -> Readiness {
        Readiness {
            listeners_bound: Arc::new(AtomicBool::new(true)),
            bloom,
            bloom_codes: None,
        }
    }

    fn with_gauge(mut self, gauge: prometheus::IntGauge) -> Readiness {
        self.bloom_codes = Some(gauge);
        self
    }

    fn refresh_gauges(&self) {
        if let (Some(bloom), Some(gauge)) = (&self.bloom, &self.bloom_codes) {
            gauge.set(bloom.aliases() as i64);
        }
    }

    fn is_ready(&self) -> bool {
        // A proxy whose filter was loaded once stays ready while the feed reconnects:
        // the filter is bypassed meanwhile, never wrong.
        self.listeners_bound.load(Ordering::Acquire) && self.bloom.as_ref().is_none_or(|b| b.was_loaded())
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
fn metrics_router(registry: prometheus::Registry, readiness: Readiness) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    let scrape_readiness = readiness.clone();
    // Each process builds one metrics router per registry: the name cannot be taken.
    let ready = crate::process_metrics::register_readiness_gauge(&registry).expect("rebound_ready is declared once");
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                scrape_readiness.refresh_gauges();
                ready.set(i64::from(scrape_readiness.is_ready()));
                async move {
                    let mut out = String::new();
                    match prometheus::TextEncoder::new().encode_utf8(&registry.gather(), &mut out) {
                        Ok(()) => (StatusCode::OK, [("content-type", prometheus::TEXT_FORMAT)], out),
                        Err(e) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [("content-type", "text/plain")],
                            e.to_string(),
                        ),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    if readiness.is_ready() {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
}

/// Waits for tasks to finish, at most `limit`.
async fn drain(tasks: Vec<JoinHandle<()>>, limit: Duration) {
    let all = async {
        for t in tasks {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(limit, all).await.is_err() {
        tracing::warn!("drain took too long; exiting");
    }
}

/// The link-event port of a control plane in its own process; with Redis, the task that
/// listens to the proxies' acknowledgements goes to `tasks`.
fn remote_events(
    redis: Option<Arc<RedisCache>>,
    settings: &Settings,
    clock: Arc<dyn Clock>,
    registry: &prometheus::Registry,
    tasks: &mut Vec<JoinHandle<()>>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Arc<dyn LinkEvents>> {
    let Some(cache) = redis else {
        return Ok(Arc::new(NoLinkEvents));
    };
    let acks = Acknowledgements::new(AckMetrics::register(registry).context("declaring metrics")?);
    tasks.push(tokio::spawn(acks.clone().listen(cache.clone(), stop)));
    let r = &settings.redirect;
    Ok(Arc::new(RedisLinkEvents {
        cache,
        clock,
        policy: r.cache_policy(),
        acks,
        invalidation_bound: Duration::from_millis(r.invalidation_timeout_ms + r.l1_ttl_ms),
    }))
}

/// `rebound control-plane`: the API on the configured store, and the click consumer when
/// clicks come over SQS, with health on the metrics port.
pub async fn run_control_plane(settings: Settings) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    register_process_metrics(&registry).context("declaring metrics")?;
    let adapters = AdapterMetrics::register(&registry).context("declaring metrics")?;
    let store = metered(open_store(&settings).await?, &settings, &adapters);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let redis = open_redis(&settings).await?;
    if let Some(cache) = &redis {
        RedisBreakerState::register(&registry, cache.clone()).context("declaring metrics")?;
    }
    let queue = open_queue(&settings).await?;
    announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
    check_descriptor_budget(&settings, 0, true)?;
    let api = TcpListener::from_std(std_bind(settings.api_addr, "API (api_addr)")?)?;
    let metrics = TcpListener::from_std(std_bind(settings.metrics_addr, "metrics (metrics_addr)")?)?;
    let visibility = Duration::from_secs(u64::from(settings.sqs_visibility_secs));
    let edge_metrics = EdgeMetrics::register(&registry).context("declaring metrics")?;
    let api_edge = router_edge(&settings, settings.edge.api_max_connections, edge_metrics.port("api"));
    let metrics_edge = router_edge(
        &settings,
        settings.edge.metrics_max_connections,
        edge_metrics.port("metrics"),
    );
    let (stop_tx, stop) = watch::channel(false);
    let mut tasks = Vec::new();
    let events: Arc<dyn LinkEvents> = Arc::new(MeteredLinkEvents::new(
        remote_events(redis, &settings, clock.clone(), &registry, &mut tasks, stop.clone())?,
        &adapters,
    ));
    let cp = ControlPlane::new(settings, store.clone(), events, clock).await?;
    cp.register_metrics(&registry).context("declaring metrics")?;
    let consumer_metrics = match &queue {
        Some(_) => Some(ConsumerMetrics::register(&registry).context("declaring metrics")?),
        None => None,
    };
    println!("rebound: API listening on {}", api.local_addr()?);
    println!("rebound: metrics listening on {}", metrics.local_addr()?);
    tasks.extend([
        tokio::spawn(serve_router(
            metrics,
            metrics_router(registry, Readiness::bound(None)),
            metrics_edge,
            stop.clone(),
        )),
        tokio::spawn(serve_router(api, rebound_control_plane::router(cp), api_edge, stop)),
    ]);
    if let (Some((queue, dead_letters)), Some(metrics)) = (queue, consumer_metrics) {
        let calls = ConsumerCalls::new(&adapters);
        tasks.push(tokio::spawn(watch_queue_depths(
            [("clicks", queue.clone()), ("dead_letter", dead_letters)],
            metrics.clone(),
            calls.clone(),
            DEPTH_EVERY,
            stop_tx.subscribe(),
        )));
        tasks.push(tokio::spawn(run_click_consumer(
            queue,
            store,
            visibility,
            metrics,
            calls,
            stop_tx.subscribe(),
        )));
    }
    termination().await;
    let _ = stop_tx.send(true);
    drain(tasks, Duration::from_secs(9)).await;
    Ok(())
}

/// `rebound provision`: creates the DynamoDB tables (with TTL) and the SQS queue and its
/// dead-letter queue when they are missing. Running it twice changes nothing.
pub async fn provision(settings: Settings) -> anyhow::Result<()> {
    let mut did_something = false;
    if let StoreChoice::DynamoDb { table_prefix } = &settings.store {
        let store = DynamoStore::new(DynamoStore::client_from_env().await, table_prefix.clone());
        let created = store.provision().await.context("creating the DynamoDB tables")?;
        for t in &created {
            println!("rebound: created table {t}");
        }
        if created.is_empty() {
            println!("rebound: DynamoDB tables with prefix {table_prefix:?} already exist");
        }
        did_something = true;
    }
    if let QueueChoice::Sqs { queue_name } = &settings.queue {
        let client = SqsClickQueue::client_from_env().await;
        let created = SqsClickQueue::provision(&client, queue_name, settings.sqs_visibility_secs)
            .await
            .context("creating the SQS queues")?;
        for q in &created {
            println!("rebound: created queue {q}");
        }
        if created.is_empty() {
            println!("rebound: SQS queue {queue_name:?} and its dead-letter queue already exist");
        }
        did_something = true;
    }
    if !did_something {
        println!("rebound: nothing to provision: the embedded store and queue need no set-up (set REBOUND_STORE=dynamodb and/or REBOUND_QUEUE=sqs)");
    }
    Ok(())
}

/// How a data plane process starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Take the redirect listeners over from the running process (`--upgrade`), which is
    /// then sent SIGQUIT; the API and metrics ports are bound as soon as it releases them.
    pub take_over: bool,
}

/// How click persistence is paced; `distributed` for `rebound proxy`.
fn click_pacing(r: &rebound_core::config::RedirectSettings, distributed: bool) -> ClickPacing {
    ClickPacing {
        every: Duration::from_millis(r.click_flush_ms),
        rows_per_sec: r.click_rows_per_sec,
        max_hold: r.click_max_hold(distributed),
    }
}

/// How long a process taking over waits for the old one to release the API and metrics ports.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(30);

/// The redirect data plane's parts, shared by the all-in-one and `rebound proxy`.
struct DataPlane {
    registry: prometheus::Registry,
    metrics: ProxyMetrics,
    adapters: AdapterMetrics,
    edge_metrics: EdgeMetrics,
    l1: Arc<L1>,
    bloom: Arc<IssuedCodeGate>,
    clicks: Arc<ClickQueue>,
    /// The redirect listeners (cleartext, then TLS when configured) and their edges.
    listeners: Vec<(RedirectListener, Edge)>,
    /// The certificate of the TLS listener, reloaded while it serves.
    certificate: Option<Arc<ReloadableCert>>,
}

impl DataPlane {
    /// Declares the metrics, builds the caches and binds (or, taking over, names) the
    /// redirect listeners.
    fn new(settings: &Settings, options: RunOptions, api: bool, clock: Arc<dyn Clock>) -> anyhow::Result<DataPlane> {
        let registry = prometheus::Registry::new();
        let metrics = ProxyMetrics::register(&registry).context("declaring metrics")?;
        let edge_metrics = EdgeMetrics::register(&registry).context("declaring metrics")?;
        let adapters = AdapterMetrics::register(&registry).context("declaring metrics")?;
        register_process_metrics(&registry).context("declaring metrics")?;
        check_descriptor_budget(settings, 1 + usize::from(settings.tls.is_some()), api)?;
        let listener = |addr: std::net::SocketAddr, what: &str| -> anyhow::Result<RedirectListener> {
            if options.take_over {
                Ok(RedirectListener::Inherited(addr.to_string()))
            } else {
                Ok(RedirectListener::Bound(std_bind(addr, what)?))
            }
        };
        let limits = edge_limits(settings, settings.edge.max_connections);
        let mut listeners = vec![(
            listener(settings.redirect_addr, "redirect (redirect_addr)")?,
            Edge::plain(limits.clone(), edge_metrics.port("redirect")),
        )];
        let mut certificate = None;
        if let Some(tls) = &settings.tls {
            let cert = ReloadableCert::load(CertificateFiles {
                cert: tls.cert.clone(),
                key: tls.key.clone(),
            })
            .context("loading the TLS certificate and key (REBOUND_TLS_CERT, REBOUND_TLS_KEY)")?;
            let config = cert.server_config().context("configuring TLS")?;
            listeners.push((
                listener(tls.addr, "redirect TLS (tls_addr)")?,
                Edge::tls(limits, edge_metrics.port("redirect_tls"), config),
            ));
            certificate = Some(cert);
        }
        Ok(DataPlane {
            clicks: Arc::new(ClickQueue::new(
                settings.redirect.click_queue_capacity,
                metrics.clone(),
                clock,
            )),
            l1: Arc::new(L1::new(settings.redirect.l1_capacity)),
            bloom: Arc::new(IssuedCodeGate::new(settings.redirect.l1_capacity.max(1_000_000) * 2)),
            registry,
            metrics,
            adapters,
            edge_metrics,
            listeners,
            certificate,
        })
    }

    /// Prints where the redirect listeners are.
    fn announce(&self) -> anyhow::Result<()> {
        for ((listener, _), what) in self.listeners.iter().zip(["redirect", "redirect TLS"]) {
            match listener {
                RedirectListener::Bound(l) => println!("rebound: {what} listening on {}", l.local_addr()?),
                RedirectListener::Inherited(addr) => println!("rebound: {what} listening on {addr}"),
            }
        }
        Ok(())
    }

    /// The background task that reloads the TLS certificate on SIGHUP or a changed file.
    /// Without TLS, SIGHUP has nothing to reload: it is logged instead of ending the
    /// process (its default action).
    fn certificate_watcher(&self, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
        match self.certificate.clone() {
            Some(cert) => tokio::spawn(watch_certificate(
                cert,
                self.edge_metrics.clone(),
                Duration::from_secs(1),
                stop,
            )),
            None => tokio::spawn(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let Ok(mut hangup) = signal(SignalKind::hangup()) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = hangup.recv() => tracing::info!("SIGHUP: no TLS certificate to reload"),
                        _ = stop.changed() => return,
                    }
                }
            }),
        }
    }

    /// The lookup tiers over `store`, with the configured cache lifetimes and store budget.
    fn path(&self, settings: &Settings, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> RedirectPath {
        let mut path = RedirectPath::new(
            self.l1.clone(),
            self.bloom.clone(),
            store,
            clock,
            self.metrics.clone(),
            Duration::from_millis(settings.redirect.store_budget_ms),
        );
        path.policy = settings.redirect.cache_policy();
        path
    }

    /// Runs the redirect server on this thread until SIGTERM or SIGQUIT (which also tell
    /// `stops.0`), then ships the last clicks (`stops.1`) and drains the background tasks.
    fn serve(
        self,
        settings: &Settings,
        options: RunOptions,
        runtime: &tokio::runtime::Runtime,
        path: RedirectPath,
        stops: (watch::Sender<bool>, watch::Sender<bool>),
        tasks: Vec<JoinHandle<()>>,
    ) -> anyhow::Result<()> {
        let (stop_tx, clicks_stop_tx) = stops;
        let r = &settings.redirect;
        let dead_ends = DeadEnds::new(&DeadEndTargets {
            not_found_url: r.not_found_url.clone(),
            expired_url: r.expired_url.clone(),
            root_url: r.root_url.clone(),
        })?;
        let redirects = Redirects::with_dead_ends(Arc::new(path), self.clicks.clone(), r.cache_max_age_secs, dead_ends);
        let listeners = self
            .listeners
            .into_iter()
            .map(|(listener, edge)| (listener, RedirectPort::new(redirects.clone(), edge)))
            .collect();
        run_redirect_server(
            RedirectServer {
                threads: redirect_threads(settings),
                upgrade_sock: settings.upgrade_sock_path(),
                take_over: options.take_over,
            },
            listeners,
            Box::new(ProcessSignals { on_terminate: stop_tx }),
        )?;
        // The redirect server has drained: ship the last clicks, let the API finish.
        let _ = clicks_stop_tx.send(true);
        runtime.block_on(drain(tasks, Duration::from_secs(5)));
        Ok(())
    }
}

fn redirect_threads(settings: &Settings) -> usize {
    match settings.redirect.threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
}

/// Serves a router on a port bound now, or, when taking over, as soon as the process being
/// upgraded releases it.
fn spawn_router(
    what: &'static str,
    addr: std::net::SocketAddr,
    bound: Option<TcpListener>,
    router: axum::Router,
    edge: Edge,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let listener = match bound {
            Some(l) => l,
            None => match bind_when_free(addr, what, TAKE_OVER_WAIT).await {
                Ok(l) => {
                    println!("rebound: {what} listening on {addr}");
                    l
                }
                Err(e) => {
                    tracing::error!(error = %e, "the {what} port was not released by the process being upgraded");
                    return;
                }
            },
        };
        serve_router(listener, router, edge, stop).await
    })
}

/// Binds a router's port now, unless taking over (then [`spawn_router`] binds it later).
fn bind_router_port(
    addr: std::net::SocketAddr,
    what: &str,
    options: RunOptions,
) -> anyhow::Result<Option<std::net::TcpListener>> {
    if options.take_over {
        Ok(None)
    } else {
        std_bind(addr, what).map(Some)
    }
}

/// `rebound`: the data plane, the control plane and click shipping in one process on the
/// embedded store. The redirect server runs on this thread (Pingora owns its runtimes);
/// everything else runs on `runtime`.
pub fn run_all_in_one(
    settings: Settings,
    options: RunOptions,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    if settings.store != StoreChoice::Sqlite {
        anyhow::bail!(
            "the all-in-one runs on the embedded store; for DynamoDB run `rebound proxy` and `rebound control-plane`"
        );
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let dp = DataPlane::new(&settings, options, true, clock.clone())?;
    let store = metered(runtime.block_on(open_store(&settings))?, &settings, &dp.adapters);
    TierHealth::register(&dp.registry, dp.bloom.clone(), None).context("declaring metrics")?;
    let api = bind_router_port(settings.api_addr, "API (api_addr)", options)?;
    let metrics_listener = bind_router_port(settings.metrics_addr, "metrics (metrics_addr)", options)?;

    let events: Arc<dyn LinkEvents> = Arc::new(InProcessLinkEvents {
        l1: dp.l1.clone(),
        issued: dp.bloom.clone(),
        clock: clock.clone(),
        policy: settings.redirect.cache_policy(),
    });
    let cp = runtime.block_on(async {
        announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
        // The stats add the clicks still pending in this process.
        let click_counts = Arc::new(RollupsWithPending {
            store: store.clone(),
            clicks: dp.clicks.clone(),
        });
        let cp = ControlPlane::with_click_counts(settings.clone(), store.clone(), click_counts, events, clock.clone())
            .await?;
        cp.register_metrics(&dp.registry).context("declaring metrics")?;
        anyhow::Ok(cp)
    })?;
    dp.announce()?;
    for (l, what) in [(&api, "API"), (&metrics_listener, "metrics")] {
        if let Some(l) = l {
            println!("rebound: {what} listening on {}", l.local_addr()?);
        }
    }

    let (stop_tx, stop) = watch::channel(false);
    let (clicks_stop_tx, clicks_stop) = watch::channel(false);
    let tasks = {
        let _enter = runtime.enter();
        let api = api.map(TcpListener::from_std).transpose()?;
        let metrics_listener = metrics_listener.map(TcpListener::from_std).transpose()?;
        let readiness = Readiness::bound(Some(dp.bloom.clone())).with_gauge(dp.metrics.bloom_loaded_codes.clone());
        let api_edge = router_edge(
            &settings,
            settings.edge.api_max_connections,
            dp.edge_metrics.port("api"),
        );
        let metrics_edge = router_edge(
            &settings,
            settings.edge.metrics_max_connections,
            dp.edge_metrics.port("metrics"),
        );
        let (loader_store, loader_bloom) = (store.clone(), dp.bloom.clone());
        let mut tasks = vec![
            spawn_router(
                "API",
                settings.api_addr,
                api,
                rebound_control_plane::router(cp),
                api_edge,
                stop.clone(),
            ),
            spawn_router(
                "metrics",
                settings.metrics_addr,
                metrics_listener,
                metrics_router(dp.registry.clone(), readiness),
                metrics_edge,
                stop.clone(),
            ),
            tokio::spawn(sync_embedded_filter(loader_bloom, loader_store, settings.api.code_key)),
            tokio::spawn(run_click_shipper(
                dp.clicks.clone(),
                ClickWriter {
                    runtime: low_priority_runtime("rebound-clicks").context("starting the click writer")?,
                    sink: Arc::new(StoreClickSink(store.clone())),
                },
                click_pacing(&settings.redirect, false),
                clicks_stop,
            )),
        ];
        tasks.push(dp.certificate_watcher(stop));
        tasks
    };

    let path = dp.path(&settings, store, clock);
    dp.serve(&settings, options, runtime, path, (stop_tx, clicks_stop_tx), tasks)
}

/// `rebound proxy`: a data plane alone, on a store shared with control planes in other
/// processes, with Redis as L2, invalidation channel and creation feed, and clicks over SQS.
pub fn run_proxy(settings: Settings, options: RunOptions, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    if settings.store == StoreChoice::Sqlite {
        anyhow::bail!(
            "`rebound proxy` needs a store shared with a separate control plane (REBOUND_STORE=dynamodb); \
             on the embedded SQLite store run `rebound` with no arguments, the all-in-one"
        );
    }
    let redis = runtime.block_on(open_redis(&settings))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let dp = DataPlane::new(&settings, options, false, clock.clone())?;
    let store = metered(runtime.block_on(open_store(&settings))?, &settings, &dp.adapters);
    if let Some(cache) = &redis {
        RedisBreakerState::register(&dp.registry, cache.clone()).context("declaring metrics")?;
    }
    let metrics_listener = bind_router_port(settings.metrics_addr, "metrics (metrics_addr)", options)?;
    dp.announce()?;
    if let Some(l) = &metrics_listener {
        println!("rebound: metrics listening on {}", l.local_addr()?);
    }

    let r = &settings.redirect;
    let trust = Arc::new(InvalidationTrust::new(
        Duration::from_millis(r.invalidation_timeout_ms),
        Duration::from_millis(r.l1_ttl_ms),
    ));
    let mut path = dp.path(&settings, store.clone(), clock.clone());
    path.trust = Some(trust.clone());
    let channel = redis.as_ref().map(|_| (trust.clone(), clock.clone()));
    TierHealth::register(&dp.registry, dp.bloom.clone(), channel).context("declaring metrics")?;
    if redis.is_none() {
        tracing::warn!("no REBOUND_REDIS_URL: no L2 and no invalidation channel, so L1 entries live at most l1_ttl and the issued-code filter is bypassed");
    }
    let sink: Arc<dyn ClickSink> = match &settings.queue {
        QueueChoice::Sqs { queue_name } => {
            let client = runtime.block_on(SqsClickQueue::client_from_env());
            Arc::new(MeteredClickSink::new(
                Arc::new(LazyClickQueue::new(client, queue_name.clone())),
                &dp.adapters,
                "sqs",
                "send_message_batch",
            ))
        }
        QueueChoice::Embedded => {
            tracing::warn!("REBOUND_QUEUE is not sqs: clicks are added to the rollups directly by this proxy");
            Arc::new(StoreClickSink(store.clone()))
        }
    };

    let (stop_tx, stop) = watch::channel(false);
    let (clicks_stop_tx, clicks_stop) = watch::channel(false);
    let tasks = {
        let _enter = runtime.enter();
        let metrics_listener = metrics_listener.map(TcpListener::from_std).transpose()?;
        // Without Redis the filter is never loaded (the creation feed loads it) and is
        // bypassed: readiness then waits only for the listeners.
        let readiness = Readiness::bound(redis.as_ref().map(|_| dp.bloom.clone()))
            .with_gauge(dp.metrics.bloom_loaded_codes.clone());
        let metrics_edge = router_edge(
            &settings,
            settings.edge.metrics_max_connections,
            dp.edge_metrics.port("metrics"),
        );
        let mut tasks = vec![
            spawn_router(
                "metrics",
                settings.metrics_addr,
                metrics_listener,
                metrics_router(dp.registry.clone(), readiness),
                metrics_edge,
                stop.clone(),
            ),
            tokio::spawn(run_click_shipper(
                dp.clicks.clone(),
                ClickWriter {
                    runtime: runtime.handle().clone(),
                    sink,
                },
                click_pacing(r, true),
                clicks_stop,
            )),
        ];
        tasks.push(dp.certificate_watcher(stop.clone()));
        if let Some(cache) = &redis {
            let l2 = Arc::new(MeteredRecordCache::new(cache.clone(), &dp.adapters));
            path = path.with_l2(l2, Duration::from_millis(r.l2_budget_ms), trust.clone());
            // This process's name in the proxies' registry and in its acknowledgements.
            let proxy: Arc<str> = Arc::from(format!("{:x}{:x}", clock.now_millis(), std::process::id()));
            tasks.push(tokio::spawn(run_invalidation_listener(
                cache.clone(),
                proxy.clone(),
                dp.l1.clone(),
                trust,
                clock.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(run_heartbeat(
                cache.clone(),
                proxy,
                clock.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(run_creation_feed(
                cache.clone(),
                dp.bloom.clone(),
                store,
                settings.api.code_key,
                stop,
            )));
        }
        tasks
    };

    dp.serve(&settings, options, runtime, path, (stop_tx, clicks_stop_tx), tasks)
}
