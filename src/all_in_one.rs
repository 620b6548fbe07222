//! The all-in-one assembled: one data plane and one control plane on one store, with the
//! link events (leases, creates, deletes) and the pending click counts carried in process.
//! `app::run_all_in_one` gives it the SQLite store, the system clock, the bound ports, a
//! low-priority runtime for the click writes and the signals; `tests/in_process.rs` gives
//! it the in-memory store, a manual clock and a channel, so both run this wiring.

use crate::backends::{announce_initial_key, open_click_stream};
use crate::control_plane::{Announce, ControlPlaneAdapters, ControlPlaneListeners, ControlPlaneProcess};
use crate::data_plane::{DataPlane, DataPlaneAdapters, DataPlaneListeners, Fleet};
use crate::listen::RouterPort;
use crate::process_metrics::ProcessRegistry;
use crate::settings::Settings;
use anyhow::Context;
use rebound_core::Clock;
use rebound_proxy::clicks::{ClickWriter, LowPriority, StoreBreakdownSink, StoreClickSink};
use rebound_proxy::server::Shutdown;
use rebound_store::click_stream::ClickStreamSink;
use rebound_store::Store;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;

/// The ports of an all-in-one: the data plane's (redirect, TLS, metrics) and the API.
pub struct AllInOneListeners {
    pub data: DataPlaneListeners,
    pub api: RouterPort,
}

/// Both planes, built and not yet serving.
pub struct AllInOne {
    data: DataPlane,
    control: ControlPlaneProcess,
    store: Arc<dyn Store>,
    /// The click stream, when `clicks.kinesis_stream` is set.
    stream: Option<Arc<dyn ClickStreamSink>>,
}

impl AllInOne {
    /// Builds both planes on `store`; a first start without a bootstrap key prints the
    /// operator key it generated.
    pub async fn build(
        settings: &Settings,
        metrics: ProcessRegistry,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<AllInOne> {
        let data = DataPlane::build(settings, metrics.clone(), clock.clone())?;
        announce_initial_key(settings, store.as_ref(), clock.as_ref()).await?;
        let adapters = ControlPlaneAdapters {
            store: store.clone(),
            clock,
            announce: Announce::InProcess(data.in_process_events()),
            // The stats add the clicks still pending in this process.
            click_counts: Some(data.clicks_with_pending(store.clone())),
            click_queue: None,
        };
        let control = ControlPlaneProcess::build(settings, &metrics, adapters).await?;
        let stream = open_click_stream(settings, &metrics.adapters).await;
        Ok(AllInOne {
            data,
            control,
            store,
            stream,
        })
    }

    /// Serves until `shutdown` resolves. Then the API stops taking connections, the
    /// redirect listeners drain, the last clicks are written (on `click_writes`, and at
    /// shutdown on `runtime`), and the API finishes what it was answering. The redirect
    /// server runs on the calling thread; everything else on `runtime`.
    pub fn run(
        self,
        listeners: AllInOneListeners,
        click_writes: LowPriority,
        shutdown: impl Future<Output = Shutdown> + Send + 'static,
        runtime: &tokio::runtime::Runtime,
    ) -> anyhow::Result<()> {
        let AllInOne {
            data,
            control,
            store,
            stream,
        } = self;
        let (stop_tx, mut stop) = watch::channel(false);
        let api = runtime.spawn(control.run(
            ControlPlaneListeners {
                api: listeners.api,
                metrics: None,
            },
            async move {
                let _ = stop.changed().await;
            },
        ));
        let adapters = DataPlaneAdapters {
            store: store.clone(),
            clicks: ClickWriter {
                runtime: click_writes.runtime,
                cpu: click_writes.cpu,
                sink: Arc::new(StoreClickSink(store.clone())),
                breakdowns: StoreBreakdownSink::of(store.clone()),
            },
            fleet: Fleet::InProcess,
            home: None,
            certificates: store.clone(),
            domains: store,
            stream,
        };
        let shutdown = async move {
            let how = shutdown.await;
            let _ = stop_tx.send(true);
            how
        };
        data.run(adapters, listeners.data, shutdown, runtime)?;
        // The redirect server has drained and the last clicks are shipped: let the API finish.
        // An error is reported once, by whoever ran the process.
        match runtime.block_on(api) {
            Ok(result) => result.context("the API stopped"),
            Err(e) => Err(anyhow::anyhow!("the API task failed: {e}")),
        }
    }
}
