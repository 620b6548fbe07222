//! The redirect data plane as a library: [`DataPlane::build`] makes its parts from the
//! settings (metrics, L1, the issued-code filter, the click queue, the edges and the TLS
//! certificate), [`DataPlane::run`] serves them on listeners the caller bound, with the
//! adapters the caller opened, until `shutdown` resolves. The all-in-one and
//! `rebound proxy` are this with different adapters; so are the in-process tests.

use crate::config::{COUNTRY_HEADER, GEOIP_DATABASE};
use crate::listen::{bind, edge_limits, router_edge, with_proxy_protocol, RouterPort};
use crate::metrics_port::{metrics_router, Readiness};
use crate::process_metrics::ProcessRegistry;
use crate::settings::{AcmeSettings, ClickStreamSettings, ProxiedPort, RedirectSettings, Settings};
use crate::signals::{drain, log_hangups};
use anyhow::Context;
use rebound_acme::{AcmeMetrics, Challenges, FleetTlsAlpn, Issuer, IssuerConfig, Outcome};
use rebound_core::Clock;
use rebound_edge::acme::ChallengeCerts;
use rebound_edge::sni::SniResolver;
use rebound_edge::tls::{watch_certificate, CertificateFiles, ReloadableCert};
use rebound_edge::Edge;
use rebound_metering::{MeteredAttemptBudget, MeteredRecordCache};
use rebound_proxy::capture::Capture;
use rebound_proxy::clicks::{
    run_click_shipper, run_click_stream, ClickPacing, ClickQueue, ClickStream, ClickWriter, RollupsWithPending,
};
use rebound_proxy::distributed::{run_creation_feed, run_invalidation_listener, run_keepalive, sync_embedded_filter};
use rebound_proxy::domain_watch::DomainWatch;
use rebound_proxy::domains::{DomainRoutes, UnknownHost};
use rebound_proxy::events::InProcessLinkEvents;
use rebound_proxy::geoip::{watch_country_db, CountryDb};
use rebound_proxy::issued::IssuedCodeGate;
use rebound_proxy::l1::L1;
use rebound_proxy::metrics::{ProxyMetrics, TierHealth};
use rebound_proxy::pages::{DeadEndTargets, DeadEnds};
use rebound_proxy::path::{InvalidationTrust, RedirectPath};
use rebound_proxy::server::{
    run_redirect_server, AcmeAnswers, RedirectListener, RedirectPort, RedirectServer, Redirects, Shutdown,
};
use rebound_proxy::targeting::Targeting;
use rebound_redis::RedisCache;
use rebound_store::certs::CertificateStore;
use rebound_store::click_stream::ClickStreamSink;
use rebound_store::domains::DomainStore;
use rebound_store::{Dimension, LinkEvents, LinkReads, RollupStore};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The listeners of a data plane: the redirect port, its TLS twin when configured, and the
/// metrics port.
pub struct DataPlaneListeners {
    pub redirect: RedirectListener,
    pub tls: Option<RedirectListener>,
    pub metrics: RouterPort,
}

impl DataPlaneListeners {
    /// Binds the configured addresses, or, taking over from a running process, names the
    /// redirect listeners to inherit and binds the metrics port once it is released.
    pub fn bind(settings: &Settings, take_over: bool) -> anyhow::Result<DataPlaneListeners> {
        let redirect = |addr: std::net::SocketAddr, what: &str| -> anyhow::Result<RedirectListener> {
            match take_over {
                true => Ok(RedirectListener::Inherited(addr.to_string())),
                false => Ok(RedirectListener::Bound(bind(addr, what)?)),
            }
        };
        Ok(DataPlaneListeners {
            redirect: redirect(settings.redirect_addr, "redirect (redirect_addr)")?,
            tls: match &settings.tls {
                Some(tls) => Some(redirect(tls.addr, "redirect TLS (tls_addr)")?),
                None => None,
            },
            metrics: RouterPort::bind(settings.metrics_addr, "metrics (metrics_addr)", take_over)?,
        })
    }

    /// Prints where the redirect listeners are.
    pub fn announce_redirect(&self) -> anyhow::Result<()> {
        let listeners = std::iter::once(&self.redirect).chain(self.tls.as_ref());
        for (listener, what) in listeners.zip(["redirect", "redirect TLS"]) {
            match listener {
                RedirectListener::Bound(l) => println!("rebound: {what} listening on {}", l.local_addr()?),
                RedirectListener::Inherited(addr) => println!("rebound: {what} listening on {addr}"),
            }
        }
        Ok(())
    }
}

/// How this data plane hears of creates and deletes, and whether it has an L2.
pub enum Fleet {
    /// The all-in-one: the control plane in this process tells L1 and the filter directly.
    InProcess,
    /// A proxy with Redis: L2, the invalidation channel (with keepalives and
    /// acknowledgements) and the creation feed.
    Redis(Arc<RedisCache>),
    /// A proxy without Redis: no L2 and no channel, so L1 entries live at most `l1_ttl`
    /// and the filter is bypassed.
    Alone,
}

/// What a data plane runs on, opened by the caller.
pub struct DataPlaneAdapters {
    /// Where links are read (counted and timed by the caller).
    pub store: Arc<dyn LinkReads>,
    /// Where clicks are written, and on which runtime.
    pub clicks: ClickWriter,
    pub fleet: Fleet,
    /// The home region's replica, read before a 404 (docs/regions.md); none in the home
    /// region or a fleet of one.
    pub home: Option<Arc<dyn LinkReads>>,
    /// Where ACME's account and certificates are kept, for the whole fleet.
    pub certificates: Arc<dyn CertificateStore>,
    /// The fleet's domains besides the default one.
    pub domains: Arc<dyn DomainStore>,
    /// Where each click goes as an event, when `clicks.kinesis_stream` is set.
    pub stream: Option<Arc<dyn ClickStreamSink>>,
}

/// The TLS port's certificates over ACME: the settings, the answers to validations in
/// flight, the certificates by SNI and the metrics.
struct Acme {
    settings: AcmeSettings,
    challenges: Arc<Challenges>,
    /// TLS-ALPN-01 validations of this process and, from the store, of the others.
    fleet: Arc<FleetTlsAlpn>,
    resolver: Arc<SniResolver>,
    metrics: AcmeMetrics,
}

/// How often a process looks at the store for certificates due and for certificates another
/// process ordered (the issuer's round): a certificate issued elsewhere is served here
/// within this.
const ACME_ROUND: Duration = Duration::from_secs(15);

/// The data plane's parts, built from the settings.
pub struct DataPlane {
    redirect: RedirectSettings,
    threads: usize,
    upgrade_sock: std::path::PathBuf,
    /// The configured key of the code permutation, if any: checked against the store's, which
    /// is the one codes are read with.
    code_key: Option<[u8; 16]>,
    clock: Arc<dyn Clock>,
    metrics: ProcessRegistry,
    proxy_metrics: ProxyMetrics,
    l1: Arc<L1>,
    issued: Arc<IssuedCodeGate>,
    clicks: Arc<ClickQueue>,
    /// The edges of the redirect listener and of its TLS twin, and of the metrics port.
    edge: Edge,
    tls_edge: Option<Edge>,
    metrics_edge: Edge,
    /// The proxies believed about the client (`edge.trusted_networks`).
    trusted: rebound_core::client::TrustedNetworks,
    /// The certificate of the TLS listener, reloaded while it serves.
    certificate: Option<Arc<ReloadableCert>>,
    acme: Option<Acme>,
    /// The default domain: the host of `public_base_url`.
    default_host: String,
    /// The country database of the breakdowns, when one is configured (read at start).
    countries: Option<Arc<CountryDb>>,
    /// The click stream's queue and linger, when it is on.
    click_stream: Option<ClickStreamSettings>,
}

/// How often the country database's file is looked at for a change.
const COUNTRY_DB_POLL: Duration = Duration::from_secs(10);

impl DataPlane {
    /// Declares the data plane's metrics in `metrics`, builds the caches and the edges, and
    /// loads the TLS certificate when one is configured.
    pub fn build(settings: &Settings, metrics: ProcessRegistry, clock: Arc<dyn Clock>) -> anyhow::Result<DataPlane> {
        let proxy_metrics = ProxyMetrics::register(&metrics.registry).context("declaring metrics")?;
        let limits = edge_limits(settings, settings.edge.max_connections);
        let (tls_edge, certificate, acme) = match &settings.tls {
            Some(tls) => {
                let cert = match &tls.files {
                    Some(files) => Some(
                        ReloadableCert::load(CertificateFiles {
                            cert: files.cert.clone(),
                            key: files.key.clone(),
                        })
                        .context("loading the TLS certificate and key (REBOUND_TLS_CERT, REBOUND_TLS_KEY)")?,
                    ),
                    None => None,
                };
                let (server_tls, acme) = match (&settings.acme, &cert) {
                    // The domains' certificates by SNI, the files' for every other name.
                    (Some(acme), _) => {
                        let challenges = Challenges::new();
                        let resolver = SniResolver::new(
                            cert.clone().map(|c| c as Arc<dyn rustls::server::ResolvesServerCert>),
                            Some(challenges.clone() as Arc<dyn ChallengeCerts>),
                        );
                        let fleet = FleetTlsAlpn::new(challenges.clone(), clock.clone());
                        let acme = Acme {
                            settings: acme.clone(),
                            challenges,
                            fleet: fleet.clone(),
                            metrics: AcmeMetrics::register(&metrics.registry).context("declaring metrics")?,
                            resolver: resolver.clone(),
                        };
                        let tls = resolver.server_tls().context("configuring TLS")?.answering_acme(fleet);
                        (tls, Some(acme))
                    }
                    (None, Some(cert)) => (cert.server_tls().context("configuring TLS")?, None),
                    (None, None) => anyhow::bail!("tls_addr without a certificate: set tls_cert and tls_key"),
                };
                let edge = with_proxy_protocol(
                    Edge::tls(limits.clone(), metrics.edge.port("redirect_tls"), server_tls),
                    settings,
                    ProxiedPort::RedirectTls,
                );
                (Some(edge), cert, acme)
            }
            None => (None, None, None),
        };
        let r = &settings.redirect;
        // Read at start: a file that cannot be read stops it (a new one that cannot is
        // logged and the old one kept).
        let countries = match &r.geoip_database {
            Some(path) if r.breakdowns.contains(&Dimension::Country) => {
                Some(Arc::new(CountryDb::open(path).with_context(|| {
                    format!("{} ({})", GEOIP_DATABASE.name(), path.display())
                })?))
            }
            _ => None,
        };
        Ok(DataPlane {
            countries,
            click_stream: settings.click_stream.clone(),
            clicks: Arc::new(
                ClickQueue::new(r.click_queue_capacity, proxy_metrics.clone(), clock.clone())
                    .breaking_down(&r.breakdowns),
            ),
            l1: Arc::new(L1::new(r.l1_capacity)),
            issued: Arc::new(IssuedCodeGate::new(r.l1_capacity.max(1_000_000) * 2)),
            edge: with_proxy_protocol(
                Edge::plain(limits, metrics.edge.port("redirect")),
                settings,
                ProxiedPort::Redirect,
            ),
            metrics_edge: router_edge(
                settings,
                settings.edge.metrics_max_connections,
                metrics.edge.port("metrics"),
            ),
            tls_edge,
            trusted: settings.edge.trusted_networks.clone(),
            certificate,
            acme,
            default_host: url::Url::parse(&settings.public_base_url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
            redirect: r.clone(),
            threads: match r.threads {
                0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
                n => n,
            },
            upgrade_sock: settings.upgrade_sock_path(),
            code_key: settings.api.code_key,
            clock,
            metrics,
            proxy_metrics,
        })
    }

    /// The link events of a control plane in this process: creates and deletes reach L1
    /// and the filter directly.
    pub fn in_process_events(&self) -> Arc<dyn LinkEvents> {
        Arc::new(InProcessLinkEvents {
            l1: self.l1.clone(),
            issued: self.issued.clone(),
            clock: self.clock.clone(),
            policy: self.redirect.cache_policy(),
        })
    }

    /// Daily clicks from `rollups` plus those still pending in this process, for the stats
    /// of a control plane in this process.
    pub fn clicks_with_pending(&self, rollups: Arc<dyn RollupStore>) -> Arc<dyn RollupStore> {
        Arc::new(RollupsWithPending {
            store: rollups,
            clicks: self.clicks.clone(),
        })
    }

    /// Serves the redirect listeners (on this thread: Pingora owns their runtimes) and the
    /// metrics port, the click shipper and the fleet's tasks (on `runtime`), until
    /// `shutdown` resolves; then drains the connections, ships the last clicks and stops
    /// the tasks. The thread must not be inside a tokio runtime.
    pub fn run(
        self,
        adapters: DataPlaneAdapters,
        listeners: DataPlaneListeners,
        shutdown: impl Future<Output = Shutdown> + Send + 'static,
        runtime: &tokio::runtime::Runtime,
    ) -> anyhow::Result<()> {
        let DataPlaneAdapters {
            store,
            clicks,
            fleet,
            home,
            certificates,
            domains,
            stream,
        } = adapters;
        let r = &self.redirect;
        // Every dimension switched off: no breakdowns, and no summary either (nothing of who
        // clicked is written; the totals are, as ever).
        let mut clicks = clicks;
        if r.breakdowns.is_empty() {
            clicks.breakdowns = None;
        }
        let breakdowns = clicks.breakdowns.is_some();
        // Each click as an event too: people's clicks go on to the breakdowns where they are on.
        let stream = match (&self.click_stream, stream) {
            (Some(s), Some(sink)) => {
                tracing::info!(stream = %s.stream, "click stream: each click is sent to Kinesis as an event");
                Some((
                    Arc::new(ClickStream::new(
                        s.queue_capacity,
                        breakdowns,
                        self.proxy_metrics.clone(),
                    )),
                    sink,
                    s.linger,
                ))
            }
            _ => None,
        };
        let mut path = RedirectPath::new(
            self.l1.clone(),
            self.issued.clone(),
            store.clone(),
            self.clock.clone(),
            self.proxy_metrics.clone(),
            Duration::from_millis(r.store_budget_ms),
        );
        path.policy = r.cache_policy();
        path.home = home;
        let trust = Arc::new(InvalidationTrust::new(
            Duration::from_millis(r.invalidation_timeout_ms),
            Duration::from_millis(r.l1_ttl_ms),
        ));
        if !matches!(fleet, Fleet::InProcess) {
            path.trust = Some(trust.clone());
        }
        let channel = matches!(fleet, Fleet::Redis(_)).then(|| (trust.clone(), self.clock.clone()));
        TierHealth::register(&self.metrics.registry, self.issued.clone(), channel).context("declaring metrics")?;
        // Without Redis a proxy's filter is never loaded (the creation feed loads it) and
        // is bypassed: readiness then waits only for the listeners.
        let readiness = Readiness::bound((!matches!(fleet, Fleet::Alone)).then(|| self.issued.clone()))
            .with_gauge(self.proxy_metrics.bloom_loaded_codes.clone());
        let pacing = click_pacing(r, !matches!(fleet, Fleet::InProcess));
        let routes = Arc::new(DomainRoutes::new(
            &self.default_host,
            match r.serve_unknown_hosts {
                true => UnknownHost::DefaultDomain,
                false => UnknownHost::NotFound,
            },
        ));
        let acme_domains = self
            .acme
            .as_ref()
            .map(|a| (a.settings.domains.clone(), watch::channel(a.settings.domains.clone())));
        let (acme_tx, acme_rx) = match acme_domains {
            Some((configured, (tx, rx))) => (Some((configured, tx)), Some(rx)),
            None => (None, None),
        };
        let domain_watch = DomainWatch {
            routes: routes.clone(),
            store: domains.clone(),
            changes: store.clone(),
            acme: acme_tx,
            routed: self.proxy_metrics.domains_routed.clone(),
            installed: Default::default(),
        };
        // Routed before the port serves: a domain's link answers from the first request.
        if let Err(e) = runtime.block_on(domain_watch.sync()) {
            tracing::warn!(error = %rebound_core::Causes(&e), "cannot read the domains at start; only the default domain is routed until they are read");
        }
        let domain_watch = Arc::new(domain_watch);
        routes.resync_with(domain_watch.clone());

        let (stop_tx, stop) = watch::channel(false);
        let (clicks_stop_tx, clicks_stop) = watch::channel(false);
        // The fleet's tasks run until the redirect server has drained: a proxy still
        // serving keeps its invalidations coming and stays in the registry.
        let (fleet_stop_tx, fleet_stop) = watch::channel(false);
        let mut fleet_tasks = Vec::new();
        let mut leaving = None;
        let tasks = {
            let _enter = runtime.enter();
            let mut tasks = vec![
                listeners.metrics.serve(
                    "metrics",
                    metrics_router(self.metrics.registry.clone(), readiness),
                    self.metrics_edge.clone(),
                    None,
                    stop.clone(),
                )?,
                tokio::spawn(run_click_shipper(
                    self.clicks.clone(),
                    clicks,
                    pacing,
                    clicks_stop.clone(),
                )),
                self.certificate_watcher(stop.clone()),
            ];
            if let Some((queue, sink, linger)) = &stream {
                tasks.push(tokio::spawn(run_click_stream(
                    queue.clone(),
                    sink.clone(),
                    routes.clone(),
                    *linger,
                    clicks_stop,
                )));
            }
            tasks.push(tokio::spawn(domain_watch.run(stop.clone())));
            if let Some(countries) = &self.countries {
                tasks.push(tokio::spawn(watch_country_db(
                    countries.clone(),
                    COUNTRY_DB_POLL,
                    self.proxy_metrics.country_db_reloads.clone(),
                    stop.clone(),
                )));
            }
            if let (Some(acme), Some(list)) = (&self.acme, acme_rx) {
                acme.fleet.read_from(certificates.clone());
                tasks.push(run_acme(
                    acme,
                    certificates.clone(),
                    domains,
                    list,
                    self.clock.clone(),
                    stop.clone(),
                )?);
            }
            match fleet {
                Fleet::InProcess => tasks.push(tokio::spawn(sync_embedded_filter(self.issued.clone(), store, self.code_key))),
                Fleet::Redis(cache) => {
                    let l2 = Arc::new(MeteredRecordCache::new(cache.clone(), &self.metrics.adapters));
                    path = path.with_l2(l2, Duration::from_millis(r.l2_budget_ms), trust.clone());
                    // Password attempts per link: one budget for the fleet.
                    let attempts = MeteredAttemptBudget::new(cache.clone(), &self.metrics.adapters);
                    path = path.with_attempt_budget(Arc::new(attempts));
                    // This process's name in the proxies' registry and in its acknowledgements.
                    let proxy: Arc<str> =
                        Arc::from(format!("{:x}{:x}", self.clock.now_millis(), std::process::id()));
                    fleet_tasks.push(tokio::spawn(run_invalidation_listener(
                        cache.clone(),
                        proxy.clone(),
                        self.l1.clone(),
                        trust.clone(),
                        self.clock.clone(),
                        // Trust lapses after the timeout without a keepalive; a subscription
                        // silent for twice as long is taken for half-open and replaced (a
                        // shorter blip then costs no emptying of L1: nothing was lost).
                        Duration::from_millis(2 * r.invalidation_timeout_ms),
                        fleet_stop.clone(),
                    )));
                    fleet_tasks.push(tokio::spawn(run_keepalive(
                        cache.clone(),
                        proxy.clone(),
                        trust,
                        self.clock.clone(),
                        fleet_stop.clone(),
                    )));
                    fleet_tasks.push(tokio::spawn(run_creation_feed(
                        cache.clone(),
                        self.issued.clone(),
                        store,
                        self.code_key,
                        fleet_stop,
                    )));
                    leaving = Some((cache, proxy));
                }
                Fleet::Alone => tracing::warn!(
                    "no REBOUND_REDIS_URL: no L2 and no invalidation channel, so L1 entries live at most l1_ttl and the issued-code filter is bypassed"
                ),
            }
            tasks
        };

        let dead_ends = DeadEnds::new(&DeadEndTargets {
            not_found_url: r.not_found_url.clone(),
            expired_url: r.expired_url.clone(),
            root_url: r.root_url.clone(),
        })?;
        // People's clicks are broken down where a store keeps the breakdowns; every click's
        // dimensions go to the click stream, bots' included.
        let capture = match breakdowns || stream.is_some() {
            true => Capture::new(&r.breakdowns, self.countries.clone(), r.country_header.name()),
            false => None,
        };
        let capture = match stream {
            Some(_) => capture.map(Capture::with_bots),
            None => capture,
        };
        match &capture {
            Some(c) if r.breakdowns.contains(&Dimension::Country) && !c.captures_country() => tracing::info!(
                "breakdowns: no country, for neither {} nor {} is set",
                GEOIP_DATABASE.name(),
                COUNTRY_HEADER.name()
            ),
            _ if !r.breakdowns.is_empty() && !breakdowns => {
                tracing::info!("breakdowns: none here, for the store the clicks go to keeps none")
            }
            _ => {}
        }
        let redirects = Redirects::answering(
            Arc::new(path),
            self.clicks.clone(),
            r.cache_max_age_secs,
            dead_ends,
            self.acme.as_ref().map(|a| AcmeAnswers {
                local: a.challenges.clone(),
                shared: certificates,
            }),
            routes,
        )
        .trusting(self.trusted)
        .targeting(Targeting::new(self.countries.clone(), r.country_header.name()))
        .capturing(capture)
        .streaming(stream.map(|(queue, _, _)| queue));
        let take_over = matches!(listeners.redirect, RedirectListener::Inherited(_));
        let mut ports = vec![(listeners.redirect, RedirectPort::new(redirects.clone(), self.edge))];
        if let (Some(listener), Some(edge)) = (listeners.tls, self.tls_edge) {
            ports.push((listener, RedirectPort::new(redirects, edge)));
        }
        run_redirect_server(
            RedirectServer {
                threads: self.threads,
                upgrade_sock: self.upgrade_sock,
                take_over,
            },
            ports,
            async move {
                let how = shutdown.await;
                let _ = stop_tx.send(true);
                how
            },
        )?;
        // The redirect server has drained: leave the registry (the next delete need not wait
        // for this proxy), ship the last clicks, stop the tasks.
        let _ = clicks_stop_tx.send(true);
        let _ = fleet_stop_tx.send(true);
        runtime.block_on(async {
            drain(fleet_tasks, Duration::from_secs(1)).await;
            if let Some((channel, proxy)) = leaving {
                let left = tokio::time::timeout(Duration::from_secs(1), channel.deregister(&proxy)).await;
                if !matches!(left, Ok(Ok(()))) {
                    tracing::warn!("could not leave the proxies' registry; deletes wait for this proxy until its registration ages out");
                }
            }
            drain(tasks, Duration::from_secs(5)).await
        });
        Ok(())
    }

    /// The background task that reloads the TLS certificate on SIGHUP or a changed file,
    /// or, without TLS, logs SIGHUP.
    fn certificate_watcher(&self, stop: watch::Receiver<bool>) -> JoinHandle<()> {
        match self.certificate.clone() {
            Some(cert) => tokio::spawn(watch_certificate(
                cert,
                self.metrics.edge.clone(),
                Duration::from_secs(1),
                stop,
            )),
            None => tokio::spawn(log_hangups(stop)),
        }
    }
}

/// Orders and renews the certificates of the domains `domains` holds (`acme.domains` and the
/// fleet's domains with `certificate: acme`; one process of the fleet at a time, through the
/// store's lease) and serves what the store holds, every [`ACME_ROUND`] and whenever the
/// list changes, until `stop`. Each order's failure (or success after one) is recorded on
/// its domain, for the API and the console.
fn run_acme(
    acme: &Acme,
    store: Arc<dyn CertificateStore>,
    records: Arc<dyn DomainStore>,
    domains: watch::Receiver<Vec<String>>,
    clock: Arc<dyn Clock>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let s = &acme.settings;
    // This process in the store's leases: unique in the fleet.
    let owner = format!("{:x}-{:x}", clock.now_millis(), std::process::id());
    let mut config = IssuerConfig::new(&s.directory_url, &owner);
    config.acme_roots_pem = match &s.ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading acme.ca (REBOUND_ACME_CA) at {}", path.display()))?,
        ),
        None => None,
    };
    config.contact = s.contact.iter().cloned().collect();
    config.prefer = s.challenge;
    config.check_every = ACME_ROUND;
    let issuer = Issuer::new(config, store, acme.challenges.clone(), acme.metrics.clone());
    let resolver = acme.resolver.clone();
    Ok(tokio::spawn(async move {
        let at = clock.clone();
        let report = |outcomes: Vec<(String, Outcome)>| {
            let (records, now) = (records.clone(), at.now_millis());
            async move { record_outcomes(records.as_ref(), &outcomes, now).await }
        };
        issuer.run_reporting(domains, Some(resolver), clock, stop, report).await
    }))
}

/// Records on each domain of the store what its order did: a failure with its reason, or a
/// certificate issued or renewed (clearing an earlier failure). A domain not in the store
/// (`acme.domains` only) or not ordered this round is left as it is.
async fn record_outcomes(records: &dyn DomainStore, outcomes: &[(String, Outcome)], now: rebound_core::UnixMillis) {
    for (name, outcome) in outcomes {
        let error = match outcome {
            // With its causes: the CA's problem document says why.
            Outcome::Failed(e) => Some(rebound_core::Causes(e).to_string()),
            Outcome::Issued { .. } | Outcome::Renewed { .. } => None,
            Outcome::NotDue { .. } | Outcome::LeasedElsewhere | Outcome::BackingOff { .. } => continue,
        };
        let result = async {
            let Some(mut domain) = records.get_domain(name).await? else {
                return Ok(());
            };
            domain.certificate_error = error.clone();
            domain.certificate_attempt_at = Some(now);
            match records.update_domain(&domain).await {
                Err(rebound_store::StoreError::NotFound) => Ok(()),
                other => other,
            }
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(domain = %name, error = %rebound_core::Causes(&e), "cannot record the certificate's state on its domain");
        }
    }
}

/// How click persistence is paced; `distributed` for a proxy (whose control plane's stats
/// do not see what it holds).
fn click_pacing(r: &RedirectSettings, distributed: bool) -> ClickPacing {
    ClickPacing {
        every: Duration::from_millis(r.click_flush_ms),
        rows_per_sec: r.click_rows_per_sec,
        write_share: r.click_write_share,
        max_hold: r.click_max_hold(distributed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_acme::AcmeError;
    use rebound_core::domain::{CertificateSource, Domain, DomainPages};
    use rebound_store::MemoryStore;

    #[tokio::test]
    async fn an_order_that_fails_is_recorded_on_its_domain_until_one_succeeds() {
        let store = MemoryStore::new();
        let domain = Domain {
            name: "go.acme.test".into(),
            id: "1".into(),
            created_at: 0,
            created_by: "op".into(),
            certificate: CertificateSource::Acme,
            pages: DomainPages::default(),
            certificate_error: None,
            certificate_attempt_at: None,
            app_links: Default::default(),
        };
        store.insert_domain(&domain).await.unwrap();
        let failed = |detail: &str| {
            Outcome::Failed(AcmeError::Validation {
                domain: "go.acme.test".into(),
                detail: detail.into(),
            })
        };
        let outcomes = vec![
            ("go.acme.test".to_owned(), failed("no A record")),
            // A configured name with no domain record: nothing to record, nothing created.
            ("sho.rt.test".to_owned(), failed("refused")),
        ];
        record_outcomes(&store, &outcomes, 1_000).await;
        let now = store.get_domain("go.acme.test").await.unwrap().unwrap();
        assert_eq!(
            now.certificate_error.as_deref(),
            Some("validation of go.acme.test failed: no A record")
        );
        assert_eq!(now.certificate_attempt_at, Some(1_000));
        assert!(store.get_domain("sho.rt.test").await.unwrap().is_none());
        // Not ordered this round: left as it is.
        record_outcomes(&store, &[("go.acme.test".to_owned(), Outcome::LeasedElsewhere)], 2_000).await;
        assert_eq!(store.get_domain("go.acme.test").await.unwrap().unwrap(), now);
        record_outcomes(
            &store,
            &[("go.acme.test".to_owned(), Outcome::Issued { not_after: 9_000 })],
            3_000,
        )
        .await;
        let now = store.get_domain("go.acme.test").await.unwrap().unwrap();
        assert_eq!((now.certificate_error, now.certificate_attempt_at), (None, Some(3_000)));
    }
}
