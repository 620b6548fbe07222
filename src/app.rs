//! Assembles Rebound's processes from settings: opens the backends, binds the listeners,
//! runs until a shutdown signal. Bound addresses are printed on stdout so that whoever
//! started the process (a person, a test on port 0) knows where it listens.

use anyhow::Context;
use rebound_control_plane::ControlPlane;
use rebound_core::cache::CachePolicy;
use rebound_core::config::{Settings, StoreChoice};
use rebound_core::{Clock, SystemClock};
use rebound_proxy::bloom::BloomGate;
use rebound_proxy::clicks::{run_click_shipper, ClickQueue, StoreClickSink};
use rebound_proxy::events::InProcessLinkEvents;
use rebound_proxy::l1::L1;
use rebound_proxy::metrics::ProxyMetrics;
use rebound_proxy::path::RedirectPath;
use rebound_proxy::server::{run_redirect_server, ProcessSignals, RedirectApp};
use rebound_store::{LinkEvents, NoLinkEvents, SqliteStore, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The embedded store's file inside the data directory.
pub const DB_FILE: &str = "rebound.db";

/// Opens the configured store.
pub fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match &settings.store {
        StoreChoice::Sqlite => {
            let path = settings.data_dir.join(DB_FILE);
            let store = SqliteStore::open(&path)
                .with_context(|| format!("opening the embedded store at {}", path.display()))?;
            Ok(Arc::new(store))
        }
        StoreChoice::DynamoDb { .. } => {
            anyhow::bail!("store = dynamodb: the DynamoDB adapter is not part of this build yet; use store = sqlite")
        }
    }
}

/// Binds `addr`, naming the setting when it fails.
pub async fn bind(addr: std::net::SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} listener on {addr}"))
}

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

/// What `/readyz` checks: every listener bound and, on a proxy, the Bloom filter loaded.
#[derive(Clone, Default)]
pub struct Readiness {
    listeners_bound: Arc<AtomicBool>,
    bloom: Option<Arc<BloomGate>>,
}

impl Readiness {
    fn is_ready(&self) -> bool {
        self.listeners_bound.load(Ordering::Acquire) && self.bloom.as_ref().is_none_or(|b| b.is_current())
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
fn metrics_router(registry: prometheus::Registry, readiness: Readiness) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut out = String::new();
                    let encoder = prometheus::TextEncoder::new();
                    match encoder.encode_utf8(&registry.gather(), &mut out) {
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

async fn serve_until(
    listener: TcpListener,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = stop.wait_for(|s| *s).await;
    })
    .await
}

fn std_bind(addr: std::net::SocketAddr, what: &str) -> anyhow::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).with_context(|| format!("binding the {what} listener on {addr}"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// `rebound control-plane`: the API on the configured store, with health on the metrics port.
pub async fn run_control_plane(settings: Settings) -> anyhow::Result<()> {
    let store = open_store(&settings)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
    let api = bind(settings.api_addr, "API (api_addr)").await?;
    let metrics = bind(settings.metrics_addr, "metrics (metrics_addr)").await?;
    let events: Arc<dyn LinkEvents> = Arc::new(NoLinkEvents);
    let cp = ControlPlane::new(settings, store, events, clock).await?;
    println!("rebound: API listening on {}", api.local_addr()?);
    println!("rebound: metrics listening on {}", metrics.local_addr()?);
    let readiness = Readiness::default();
    readiness.listeners_bound.store(true, Ordering::Release);
    let (stop_tx, stop_rx) = watch::channel(false);
    let metrics_task = tokio::spawn(serve_until(
        metrics,
        metrics_router(prometheus::Registry::new(), readiness),
        stop_rx.clone(),
    ));
    let mut api_stop = stop_rx;
    let api_task = tokio::spawn(rebound_control_plane::serve(api, cp, async move {
        let _ = api_stop.wait_for(|s| *s).await;
    }));
    termination().await;
    let _ = stop_tx.send(true);
    let drain = async {
        let _ = api_task.await;
        let _ = metrics_task.await;
    };
    if tokio::time::timeout(Duration::from_secs(9), drain).await.is_err() {
        tracing::warn!("drain took too long; exiting");
    }
    Ok(())
}

/// `rebound`: the data plane, the control plane and click shipping in one process on the
/// embedded store. The redirect server runs on this thread (Pingora owns its runtimes);
/// everything else runs on `runtime`.
pub fn run_all_in_one(settings: Settings, runtime: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    if settings.store != StoreChoice::Sqlite {
        anyhow::bail!(
            "the all-in-one runs on the embedded store; for DynamoDB run `rebound proxy` and `rebound control-plane`"
        );
    }
    let store = open_store(&settings)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let registry = prometheus::Registry::new();
    let metrics = ProxyMetrics::register(&registry).context("declaring metrics")?;
    let l1 = Arc::new(L1::new(settings.redirect.l1_capacity));
    let bloom = Arc::new(BloomGate::new(settings.redirect.l1_capacity.max(1_000_000) * 2));
    let policy = CachePolicy::default();

    let redirect = std_bind(settings.redirect_addr, "redirect (redirect_addr)")?;
    let api = std_bind(settings.api_addr, "API (api_addr)")?;
    let metrics_listener = std_bind(settings.metrics_addr, "metrics (metrics_addr)")?;
    let readiness = Readiness {
        listeners_bound: Arc::new(AtomicBool::new(true)),
        bloom: Some(bloom.clone()),
    };

    let events: Arc<dyn LinkEvents> = Arc::new(InProcessLinkEvents {
        l1: l1.clone(),
        bloom: bloom.clone(),
        clock: clock.clone(),
        policy,
    });
    let cp = runtime.block_on(async {
        announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
        anyhow::Ok(ControlPlane::new(settings.clone(), store.clone(), events, clock.clone()).await?)
    })?;
    println!("rebound: redirect listening on {}", redirect.local_addr()?);
    println!("rebound: API listening on {}", api.local_addr()?);
    println!("rebound: metrics listening on {}", metrics_listener.local_addr()?);

    let (api_stop_tx, api_stop) = watch::channel(false);
    let (clicks_stop_tx, clicks_stop) = watch::channel(false);
    let clicks = Arc::new(ClickQueue::new(settings.redirect.click_queue_capacity, metrics.clone()));
    let background = {
        let _enter = runtime.enter();
        let api = TcpListener::from_std(api)?;
        let metrics_listener = TcpListener::from_std(metrics_listener)?;
        let mut stop = api_stop.clone();
        let api_task = tokio::spawn(rebound_control_plane::serve(api, cp, async move {
            let _ = stop.wait_for(|s| *s).await;
        }));
        let metrics_task = tokio::spawn(serve_until(
            metrics_listener,
            metrics_router(registry, readiness),
            api_stop,
        ));
        let (loader_store, loader_bloom, gauge) = (store.clone(), bloom.clone(), metrics.bloom_loaded_codes.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            loop {
                match loader_bloom.load_from(loader_store.as_ref()).await {
                    Ok(n) => {
                        gauge.set(loader_bloom.codes() as i64);
                        tracing::info!(
                            codes = n,
                            ms = started.elapsed().as_millis() as u64,
                            "Bloom filter loaded"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "loading the Bloom filter failed; retrying (it is bypassed meanwhile)");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        });
        let shipper = tokio::spawn(run_click_shipper(
            clicks.clone(),
            Arc::new(StoreClickSink(store.clone())),
            Duration::from_millis(settings.redirect.click_flush_ms),
            clicks_stop,
        ));
        (api_task, metrics_task, shipper)
    };

    let path = RedirectPath::new(
        l1,
        bloom,
        store,
        clock,
        metrics,
        Duration::from_millis(settings.redirect.store_budget_ms),
    );
    let app = RedirectApp {
        path: Arc::new(path),
        clicks,
        max_age_secs: settings.redirect.cache_max_age_secs,
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    run_redirect_server(
        redirect,
        app,
        threads,
        Box::new(ProcessSignals {
            on_terminate: api_stop_tx,
        }),
    )?;

    // The redirect server has drained: ship the last clicks, let the API finish.
    let _ = clicks_stop_tx.send(true);
    let (api_task, metrics_task, shipper) = background;
    runtime.block_on(async {
        let drain = async {
            let _ = shipper.await;
            let _ = api_task.await;
            let _ = metrics_task.await;
        };
        if tokio::time::timeout(Duration::from_secs(5), drain).await.is_err() {
            tracing::warn!("drain took too long; exiting");
        }
    });
    Ok(())
}

/// `rebound proxy`: a data plane alone, which only makes sense on a store shared with a
/// control plane in another process.
pub fn run_proxy(settings: Settings) -> anyhow::Result<()> {
    match settings.store {
        StoreChoice::Sqlite => anyhow::bail!(
            "`rebound proxy` needs a store shared with a separate control plane (REBOUND_STORE=dynamodb); \
             on the embedded SQLite store run `rebound` with no arguments, the all-in-one"
        ),
        StoreChoice::DynamoDb { .. } => {
            anyhow::bail!("store = dynamodb: the DynamoDB adapter is not part of this build yet")
        }
    }
}
