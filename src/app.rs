//! Assembles Rebound's processes from settings: opens the backends, binds the listeners,
//! runs until a shutdown signal. Bound addresses are printed on stdout so that whoever
//! started the process (a person, a test on port 0) knows where it listens.

use anyhow::Context;
use rebound_control_plane::ControlPlane;
use rebound_core::config::{Settings, StoreChoice};
use rebound_core::{Clock, SystemClock};
use rebound_store::{LinkEvents, NoLinkEvents, SqliteStore, Store};
use std::sync::Arc;
use tokio::net::TcpListener;

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

/// `rebound control-plane`: the API (and, later, the click consumer) on the configured store.
pub async fn run_control_plane(settings: Settings) -> anyhow::Result<()> {
    let store = open_store(&settings)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
    let api = bind(settings.api_addr, "API (api_addr)").await?;
    let health = bind(settings.metrics_addr, "metrics (metrics_addr)").await?;
    let events: Arc<dyn LinkEvents> = Arc::new(NoLinkEvents);
    let cp = ControlPlane::new(settings, store, events, clock).await?;
    println!("rebound: API listening on {}", api.local_addr()?);
    println!("rebound: metrics listening on {}", health.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stop_health = stop_rx.clone();
    let health_task = tokio::spawn(async move {
        let router = health_router();
        axum_serve(health, router, async move {
            let _ = stop_health.changed().await;
        })
        .await
    });
    let mut stop_api = stop_rx;
    let api_task = tokio::spawn(rebound_control_plane::serve(api, cp, async move {
        let _ = stop_api.changed().await;
    }));
    termination().await;
    let _ = stop_tx.send(true);
    let drain = async {
        let _ = api_task.await;
        let _ = health_task.await;
    };
    if tokio::time::timeout(std::time::Duration::from_secs(9), drain)
        .await
        .is_err()
    {
        tracing::warn!("drain took too long; exiting");
    }
    Ok(())
}

fn health_router() -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }))
}

async fn axum_serve(
    listener: TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}
