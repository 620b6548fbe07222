//! Rebound's processes, each assembled from the planes (`data_plane`, `control_plane`)
//! and the backends the settings choose (`backends`): the all-in-one, `rebound proxy`,
//! `rebound control-plane` and `rebound provision`. Bound addresses are printed on stdout
//! so that whoever started the process (a person, a test on port 0) knows where it listens.

use crate::all_in_one::{AllInOne, AllInOneListeners};
use crate::backends::{
    announce_initial_key, metered, open_click_stream, open_home_store, open_queue, open_redis, open_store, store_place,
    DataDirLock,
};
use crate::control_plane::{Announce, ControlPlaneAdapters, ControlPlaneListeners, ControlPlaneProcess};
use crate::data_plane::{DataPlane, DataPlaneAdapters, DataPlaneListeners, Fleet};
use crate::listen::{check_descriptor_budget, RouterPort};
use crate::process_metrics::ProcessRegistry;
use crate::settings::{QueueChoice, Settings, StoreChoice};
use crate::signals::stop_requested;
use anyhow::Context;
use rebound_core::Causes;
use rebound_core::{Clock, SystemClock};
use rebound_dynamodb::DynamoStore;
use rebound_metering::MeteredClickSink;
use rebound_proxy::clicks::{low_priority_runtime, ClickSink, ClickWriter, StoreBreakdownSink, StoreClickSink};
use rebound_proxy::issued::{stored_permutation_key, SyncError};
use rebound_redis::RedisBreakerState;
use rebound_sqs::{LazyClickQueue, SqsClickQueue};
use rebound_store::BreakdownSink;
use std::sync::Arc;

/// How a data plane process starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Take the redirect listeners over from the running process (`--upgrade`), which is
    /// then sent SIGQUIT; the API and metrics ports are bound as soon as it releases them.
    pub take_over: bool,
}

/// `rebound`: the data plane, the control plane and click shipping in one process on the
/// embedded store, whose data directory it holds (a process taking over holds it once the
/// previous one exits). The redirect server runs on this thread (Pingora owns its runtimes);
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
    // Held until this function returns, after the drain.
    let _data_dir = match options.take_over {
        true => DataDirLock::take_over(&settings.data_dir)?,
        false => DataDirLock::hold(&settings.data_dir)?,
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = ProcessRegistry::new().context("declaring metrics")?;
    check_descriptor_budget(&settings, 1 + usize::from(settings.tls.is_some()), true)?;
    let listeners = DataPlaneListeners::bind(&settings, options.take_over)?;
    let api_port = RouterPort::bind(settings.api_addr, "API (api_addr)", options.take_over)?;
    let store = metered(runtime.block_on(open_store(&settings))?, &settings, &metrics.adapters);
    let all_in_one = runtime
        .block_on(AllInOne::build(&settings, metrics, store, clock))
        .with_context(|| format!("starting on {}", store_place(&settings)))?;
    let stop = stop_requested(true, runtime.handle());
    listeners.announce_redirect()?;
    api_port.announce("API")?;
    listeners.metrics.announce("metrics")?;
    let click_writes = low_priority_runtime("rebound-clicks").context("starting the click writer")?;
    all_in_one.run(
        AllInOneListeners {
            data: listeners,
            api: api_port,
        },
        click_writes,
        stop,
        runtime,
    )
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
    let metrics = ProcessRegistry::new().context("declaring metrics")?;
    check_descriptor_budget(&settings, 1 + usize::from(settings.tls.is_some()), false)?;
    let listeners = DataPlaneListeners::bind(&settings, options.take_over)?;
    let dp = DataPlane::build(&settings, metrics.clone(), clock)?;
    let store = metered(runtime.block_on(open_store(&settings))?, &settings, &metrics.adapters);
    check_code_key(&settings, store.as_ref(), runtime)?;
    if let Some(cache) = &redis {
        RedisBreakerState::register(&metrics.registry, cache.clone()).context("declaring metrics")?;
    }
    let stop = stop_requested(true, runtime.handle());
    listeners.announce_redirect()?;
    listeners.metrics.announce("metrics")?;
    // Breakdowns go where the click rows go: to the queue, or to the store.
    let (sink, breakdowns): (Arc<dyn ClickSink>, _) = match &settings.queue {
        QueueChoice::Sqs { queue_name } => {
            let client = runtime.block_on(SqsClickQueue::client_from_env());
            let queue = Arc::new(MeteredClickSink::new(
                Arc::new(LazyClickQueue::new(client, queue_name.clone())),
                &metrics.adapters,
                "sqs",
                "send_message_batch",
            ));
            (queue.clone(), Some(queue as Arc<dyn BreakdownSink>))
        }
        QueueChoice::Embedded => {
            tracing::warn!("REBOUND_QUEUE is not sqs: clicks are added to the rollups directly by this proxy");
            (
                Arc::new(StoreClickSink(store.clone())),
                StoreBreakdownSink::of(store.clone()),
            )
        }
    };
    let adapters = DataPlaneAdapters {
        store: store.clone(),
        clicks: ClickWriter {
            runtime: runtime.handle().clone(),
            // The proxy's writes share its runtime (and send to SQS): their wall time.
            cpu: None,
            sink,
            breakdowns,
        },
        fleet: match redis {
            Some(cache) => Fleet::Redis(cache),
            None => Fleet::Alone,
        },
        home: runtime.block_on(open_home_store(&settings, &metrics.adapters)),
        certificates: store.clone(),
        domains: store,
        stream: runtime.block_on(open_click_stream(&settings, &metrics.adapters)),
    };
    dp.run(adapters, listeners, stop, runtime)
}

/// A proxy's start: a configured permutation key other than the one the control planes
/// recorded stops it. A store that cannot tell yet does not; the filter checks again when it
/// syncs, and stays bypassed (safe) on a mismatch.
fn check_code_key(
    settings: &Settings,
    store: &dyn rebound_store::LinkReads,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<()> {
    // The timer needs the runtime: made inside it.
    let check = async {
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stored_permutation_key(store, settings.api.code_key),
        )
        .await
    };
    match runtime.block_on(check) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(SyncError::CodeKey(e))) => Err(e).with_context(|| format!("starting on {}", store_place(settings))),
        Ok(Err(e)) => {
            tracing::warn!(error = %Causes(&e), "the code key could not be checked at start; the issued-code filter checks it when it syncs");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(
                "the store did not answer in 10 s; the issued-code filter checks the code key when it syncs"
            );
            Ok(())
        }
    }
}

/// `rebound control-plane`: the API on the configured store (holding its data directory
/// when it is the embedded one), and the click consumer when clicks come over SQS, with
/// health on the metrics port.
pub async fn run_control_plane(settings: Settings) -> anyhow::Result<()> {
    let _data_dir = match settings.store {
        StoreChoice::Sqlite => Some(DataDirLock::hold(&settings.data_dir)?),
        StoreChoice::DynamoDb { .. } => None,
    };
    let metrics = ProcessRegistry::new().context("declaring metrics")?;
    let store = metered(open_store(&settings).await?, &settings, &metrics.adapters);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let redis = open_redis(&settings).await?;
    if let Some(cache) = &redis {
        RedisBreakerState::register(&metrics.registry, cache.clone()).context("declaring metrics")?;
    }
    let peers = crate::regions::open_peers(&settings).await?;
    if redis.is_none() && !peers.is_empty() {
        use crate::config::{PEER_REGIONS, REDIS_URL};
        anyhow::bail!(
            "{} is set without {}: a region's own Redis comes first",
            PEER_REGIONS.var.unwrap_or(PEER_REGIONS.key),
            REDIS_URL.var.unwrap_or(REDIS_URL.key)
        );
    }
    let click_queue = open_queue(&settings).await?;
    announce_initial_key(&settings, store.as_ref(), clock.as_ref()).await?;
    check_descriptor_budget(&settings, 0, true)?;
    let listeners = ControlPlaneListeners {
        api: RouterPort::bind(settings.api_addr, "API (api_addr)", false)?,
        metrics: Some(RouterPort::bind(
            settings.metrics_addr,
            "metrics (metrics_addr)",
            false,
        )?),
    };
    let adapters = ControlPlaneAdapters {
        store,
        clock,
        announce: match redis {
            Some(local) => Announce::Redis { local, peers },
            None => Announce::Nowhere,
        },
        click_counts: None,
        click_queue,
    };
    let cp = ControlPlaneProcess::build(&settings, &metrics, adapters)
        .await
        .with_context(|| format!("starting on {}", store_place(&settings)))?;
    let stop = stop_requested(false, &tokio::runtime::Handle::current());
    listeners.api.announce("API")?;
    if let Some(port) = &listeners.metrics {
        port.announce("metrics")?;
    }
    cp.run(listeners, async {
        stop.await;
    })
    .await
}

/// `rebound provision`: creates the DynamoDB tables (with TTL), the SQS queue and its
/// dead-letter queue, and the click stream's Kinesis stream, when they are missing. Running it twice changes nothing.
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
    if let Some(click_stream) = &settings.click_stream {
        let client = rebound_kinesis::client_from_env().await;
        let name = &click_stream.stream;
        let created = rebound_kinesis::KinesisClickStream::provision(&client, name)
            .await
            .with_context(|| format!("creating the Kinesis stream {name}"))?;
        match created {
            true => println!("rebound: created Kinesis stream {name}"),
            false => println!("rebound: Kinesis stream {name:?} already exists"),
        }
        did_something = true;
    }
    if !did_something {
        println!("rebound: nothing to provision: the embedded store and queue need no set-up (set REBOUND_STORE=dynamodb, REBOUND_QUEUE=sqs and/or REBOUND_KINESIS_STREAM)");
    }
    Ok(())
}
