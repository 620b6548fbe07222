//! The control plane as a library: [`ControlPlaneProcess::build`] makes the API's runtime from
//! the settings and the adapters the caller opened (and declares its metrics);
//! [`ControlPlaneProcess::run`] serves the API (and, alone in its process, the metrics port) on
//! listeners the caller bound, with the click consumer when clicks come over SQS and the
//! reconciler of pending propagations (also in the all-in-one: cheap, and it clears what a
//! crash left pending), until `shutdown` resolves.

use crate::listen::{forwarding_trust, router_edge, with_proxy_protocol, RouterPort};
use crate::metrics_port::{metrics_router, Readiness};
use crate::process_metrics::ProcessRegistry;
use crate::regions::HttpHome;
use crate::settings::ProxiedPort;
use crate::settings::Settings;
use crate::signals::drain;
use anyhow::Context;
use rebound_control_plane::consumer::{run_click_consumer, watch_queue_depths, ConsumerCalls, DEPTH_EVERY};
use rebound_control_plane::home::HomeRegion;
use rebound_control_plane::metrics::ConsumerMetrics;
use rebound_core::Clock;
use rebound_edge::Edge;
use rebound_metering::{MeteredLinkEvents, RegionPropagationMetrics, RegionTimedLinkEvents};
use rebound_redis::acks::{AckMetrics, Acknowledgements};
use rebound_redis::{RedisCache, RedisLinkEvents};
use rebound_store::{ClickInbox, FanOutLinkEvents, LinkEvents, NoLinkEvents, RollupStore, Store};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long the API's connections and the consumer get to finish after `shutdown`.
const DRAIN_LIMIT: Duration = Duration::from_secs(9);

/// Where creates and deletes are announced.
pub enum Announce {
    /// To a data plane in this process (`DataPlane::in_process_events`).
    InProcess(Arc<dyn LinkEvents>),
    /// To the proxies over Redis: the write-through, the creation feed, the invalidation
    /// and its acknowledgements; with `peers`, the same over every other region's Redis
    /// (docs/regions.md).
    Redis {
        local: Arc<RedisCache>,
        /// Every other region's name and Redis.
        peers: Vec<(String, Arc<RedisCache>)>,
    },
    /// Nowhere (no Redis): proxies' L1 entries expire after `l1_ttl`.
    Nowhere,
}

/// What a control plane runs on, opened by the caller.
pub struct ControlPlaneAdapters {
    /// The store (counted and timed by the caller).
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub announce: Announce,
    /// Where the stats read daily clicks; none: the store's rollups.
    pub click_counts: Option<Arc<dyn RollupStore>>,
    /// The click queue and its dead-letter queue (SQS), consumed into the rollups here.
    pub click_queue: Option<(Arc<dyn ClickInbox>, Arc<dyn ClickInbox>)>,
}

/// The listeners of a control plane: the API port and, when it is alone in its process,
/// the metrics port.
pub struct ControlPlaneListeners {
    pub api: RouterPort,
    pub metrics: Option<RouterPort>,
}

/// The click consumer's parts.
struct Consumer {
    queue: Arc<dyn ClickInbox>,
    dead_letters: Arc<dyn ClickInbox>,
    store: Arc<dyn RollupStore>,
    visibility: Duration,
    metrics: ConsumerMetrics,
    calls: ConsumerCalls,
}

/// The control plane's parts, built from the settings.
pub struct ControlPlaneProcess {
    api: rebound_control_plane::ControlPlane,
    registry: prometheus::Registry,
    api_edge: Edge,
    /// Whose forwarding headers the API port reads.
    api_forwarding: Option<Arc<rebound_core::client::TrustedNetworks>>,
    metrics_edge: Edge,
    /// With Redis: the proxies' acknowledgements in each region, listened to while it runs.
    acks: Vec<(Arc<Acknowledgements>, Arc<RedisCache>)>,
    consumer: Option<Consumer>,
    /// Outside the home region: where unique writes are forwarded.
    home: Option<Arc<dyn HomeRegion>>,
    /// The threat lists to load, if any.
    threats: Option<crate::settings::ThreatSettings>,
}

impl ControlPlaneProcess {
    /// Builds the API's runtime on `adapters` and declares its metrics in `metrics`.
    pub async fn build(
        settings: &Settings,
        metrics: &ProcessRegistry,
        adapters: ControlPlaneAdapters,
    ) -> anyhow::Result<ControlPlaneProcess> {
        let ControlPlaneAdapters {
            store,
            clock,
            announce,
            click_counts,
            click_queue,
        } = adapters;
        let registry = &metrics.registry;
        let mut acks = Vec::new();
        // Each region's share of a delete, declared by every kind of control plane (one
        // region alone too), so the dashboard's panels and the alerts read 0, not no data.
        let propagation = RegionPropagationMetrics::register(registry).context("declaring metrics")?;
        let events: Arc<dyn LinkEvents> = match announce {
            // The all-in-one: its one region's share is the in-process invalidation.
            Announce::InProcess(events) => {
                Arc::new(RegionTimedLinkEvents::new(events, &propagation, &settings.api.region))
            }
            Announce::Redis { local, peers } => {
                // One set of acknowledgement metrics for every region's waits; each
                // region's propagation timed under its name.
                let ack_metrics = AckMetrics::register(registry).context("declaring metrics")?;
                let r = &settings.redirect;
                let mut region = |name: &str, cache: Arc<RedisCache>| -> Arc<dyn LinkEvents> {
                    let listener = Acknowledgements::new(ack_metrics.clone());
                    acks.push((listener.clone(), cache.clone()));
                    let events = Arc::new(RedisLinkEvents {
                        cache,
                        clock: clock.clone(),
                        policy: r.cache_policy(),
                        acks: listener,
                        invalidation_bound: Duration::from_millis(r.invalidation_timeout_ms + r.l1_ttl_ms),
                        l1_ttl: Duration::from_millis(r.l1_ttl_ms),
                    });
                    Arc::new(RegionTimedLinkEvents::new(events, &propagation, name))
                };
                let here = region(&settings.api.region, local);
                let events: Arc<dyn LinkEvents> = match peers.is_empty() {
                    true => here,
                    false => {
                        let mut regions = vec![(settings.api.region.clone(), here)];
                        for (name, peer) in peers {
                            let events = region(&name, peer);
                            regions.push((name, events));
                        }
                        Arc::new(FanOutLinkEvents::new(regions))
                    }
                };
                Arc::new(MeteredLinkEvents::new(events, &metrics.adapters))
            }
            Announce::Nowhere => {
                // Nothing is told, so nothing is timed: the series stay at 0.
                propagation.declare(&settings.api.region);
                Arc::new(MeteredLinkEvents::new(Arc::new(NoLinkEvents), &metrics.adapters))
            }
        };
        let home: Option<Arc<dyn HomeRegion>> = match &settings.home_region_url {
            Some(url) => {
                // A forwarded delete waits for every region's proxies, as one made here would.
                let r = &settings.redirect;
                let limit = Duration::from_millis(r.invalidation_timeout_ms + r.l1_ttl_ms) + Duration::from_secs(5);
                let home = HttpHome::new(url, limit).context("the home region's control plane (home_region_url)")?;
                tracing::info!(%url, "unique writes are forwarded to the home region");
                Some(Arc::new(home))
            }
            None => None,
        };
        let config = settings.control_plane();
        let api = match click_counts {
            Some(counts) => {
                rebound_control_plane::ControlPlane::with_click_counts(config, store.clone(), counts, events, clock)
                    .await?
            }
            None => rebound_control_plane::ControlPlane::new(config, store.clone(), events, clock).await?,
        };
        api.register_metrics(registry).context("declaring metrics")?;
        let consumer = match click_queue {
            Some((queue, dead_letters)) => Some(Consumer {
                queue,
                dead_letters,
                store,
                visibility: Duration::from_secs(u64::from(settings.sqs_visibility_secs)),
                metrics: ConsumerMetrics::register(registry).context("declaring metrics")?,
                calls: ConsumerCalls::new(&metrics.adapters),
            }),
            None => None,
        };
        Ok(ControlPlaneProcess {
            api,
            registry: registry.clone(),
            api_edge: with_proxy_protocol(
                router_edge(settings, settings.edge.api_max_connections, metrics.edge.port("api")),
                settings,
                ProxiedPort::Api,
            ),
            api_forwarding: forwarding_trust(settings, ProxiedPort::Api),
            metrics_edge: router_edge(
                settings,
                settings.edge.metrics_max_connections,
                metrics.edge.port("metrics"),
            ),
            acks,
            consumer,
            home,
            threats: Some(settings.threats.clone()).filter(|t| !t.lists.is_empty()),
        })
    }

    /// Serves until `shutdown` resolves, then lets the open requests and the consumer
    /// finish (at most 9 s). Must be called inside a tokio runtime.
    pub async fn run(self, listeners: ControlPlaneListeners, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let (stop_tx, stop) = watch::channel(false);
        let mut tasks = Vec::new();
        for (acks, cache) in self.acks {
            tasks.push(tokio::spawn(acks.listen(cache, stop.clone())));
        }
        if let Some(port) = listeners.metrics {
            let router = metrics_router(self.registry, Readiness::bound(None));
            tasks.push(port.serve("metrics", router, self.metrics_edge, None, stop.clone())?);
        }
        tasks.push(tokio::spawn(self.api.reconciler().run(stop.clone())));
        if let Some(threats) = self.threats {
            // Rescanned in the home region only: its takedowns reach every region.
            let rescan = self.home.is_none();
            tasks.push(tokio::spawn(rebound_control_plane::threat_loader::run(
                self.api.abuse(),
                threats,
                rescan,
                stop.clone(),
            )));
        }
        let router = rebound_control_plane::router_forwarding(self.api, self.home);
        tasks.push(
            listeners
                .api
                .serve("API", router, self.api_edge, self.api_forwarding, stop.clone())?,
        );
        if let Some(c) = self.consumer {
            tasks.push(tokio::spawn(watch_queue_depths(
                [("clicks", c.queue.clone()), ("dead_letter", c.dead_letters)],
                c.metrics.clone(),
                c.calls.clone(),
                DEPTH_EVERY,
                stop.clone(),
            )));
            tasks.push(tokio::spawn(run_click_consumer(
                c.queue,
                c.store,
                c.visibility,
                c.metrics,
                c.calls,
                stop,
            )));
        }
        shutdown.await;
        let _ = stop_tx.send(true);
        drain(tasks, DRAIN_LIMIT).await;
        Ok(())
    }
}
