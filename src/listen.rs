//! The ports a process serves outside Pingora (the API and metrics ports): binding them,
//! the edge limits of every port from the settings, an axum router served through the
//! edge (the same deadlines, caps and lingering close as the redirect port), and the check
//! that all the ports' connection caps fit under the open-file limit.

use crate::config::{API_MAX_CONNECTIONS, MAX_CONNECTIONS, METRICS_MAX_CONNECTIONS};
use crate::settings::{ProxiedPort, Settings};
use anyhow::Context;
use axum::Router;
use hyper::body::Incoming;
use rebound_core::client::TrustedNetworks;
use rebound_edge::{Edge, EdgeLimits, PortMetrics};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The limits of a port with `max_connections`, from the edge settings.
pub fn edge_limits(settings: &Settings, max_connections: usize) -> EdgeLimits {
    let e = &settings.edge;
    EdgeLimits {
        head_timeout: Duration::from_millis(e.head_timeout_ms),
        idle_timeout: Duration::from_millis(e.idle_timeout_ms),
        write_timeout: Duration::from_millis(e.write_timeout_ms),
        max_connections,
        max_head_bytes: e.max_head_bytes,
        max_headers: e.max_headers,
        h2c: e.h2c,
        h2_max_concurrent_streams: e.h2_max_concurrent_streams,
        ..EdgeLimits::default()
    }
}

/// The edge of the API port (HTTP/1 only) or of the metrics port.
pub fn router_edge(settings: &Settings, max_connections: usize, metrics: PortMetrics) -> Edge {
    Edge::plain(
        EdgeLimits {
            h2c: false,
            ..edge_limits(settings, max_connections)
        },
        metrics,
    )
}

/// `edge`, reading a PROXY header on every connection when `port` is one of
/// `edge.proxy_protocol`, from `edge.trusted_networks` only.
pub fn with_proxy_protocol(edge: Edge, settings: &Settings, port: ProxiedPort) -> Edge {
    if !settings.edge.reads_proxy_protocol(port) {
        return edge;
    }
    let trusted = settings.edge.trusted_networks.clone();
    edge.reading_proxy_protocol(Arc::new(move |peer| trusted.contains(peer)))
}

/// Whose forwarding headers a port reads: `edge.trusted_networks`', unless its
/// connections start with a PROXY header (the client is the header's then, and a layer-4
/// balancer passes whatever headers the client wrote).
pub fn forwarding_trust(settings: &Settings, port: ProxiedPort) -> Option<Arc<TrustedNetworks>> {
    let trusted = &settings.edge.trusted_networks;
    (!trusted.is_empty() && !settings.edge.reads_proxy_protocol(port)).then(|| Arc::new(trusted.clone()))
}

/// Raises the open-file limit and checks that every port's cap fits under it with room
/// for the rest of the process, so that a flood on one port leaves the others answering.
pub fn check_descriptor_budget(settings: &Settings, redirect_listeners: usize, api: bool) -> anyhow::Result<()> {
    let limit = rebound_edge::fd_limit::raise_open_file_limit().context("reading RLIMIT_NOFILE")?;
    let e = &settings.edge;
    let caps = (e.max_connections * redirect_listeners
        + if api { e.api_max_connections } else { 0 }
        + e.metrics_max_connections) as u64;
    if !rebound_edge::fd_limit::caps_fit(caps, limit) {
        anyhow::bail!(
            "{} x {redirect_listeners} redirect listener(s) + {} + {} = {caps} connections, \
             plus {} descriptors kept for the process, exceed the open-file limit of {limit}: \
             lower the caps or raise the hard limit (ulimit -Hn)",
            MAX_CONNECTIONS.name(),
            API_MAX_CONNECTIONS.key,
            METRICS_MAX_CONNECTIONS.key,
            rebound_edge::fd_limit::RESERVED_DESCRIPTORS
        );
    }
    Ok(())
}

/// Binds `addr`, naming the setting when it fails.
pub fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).with_context(|| format!("binding the {what} listener on {addr}"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Binds `addr` as soon as the process being upgraded has released it (it does on
/// SIGQUIT), trying for at most `wait`.
pub async fn bind_when_free(addr: SocketAddr, what: &str, wait: Duration) -> anyhow::Result<tokio::net::TcpListener> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("binding the {what} listener on {addr}")),
        }
    }
}

/// An axum router as the hyper service of one connection from `peer` (the client a PROXY
/// header named, on a port that reads them).
#[derive(Clone)]
pub struct RouterService {
    router: Router,
    peer: SocketAddr,
    /// Whose forwarding headers are read, if anyone's.
    forwarding: Option<Arc<TrustedNetworks>>,
}

impl hyper::service::Service<http::Request<Incoming>> for RouterService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        use tower::ServiceExt;
        let mut req = req.map(axum::body::Body::new);
        // The handlers' `ConnectInfo` is the client: the peer, or whom a trusted proxy
        // forwards for (docs/spec.md §13).
        let client = match &self.forwarding {
            Some(trusted) => {
                let headers = req.headers();
                let client = rebound_core::client::client_of(
                    self.peer.ip(),
                    trusted,
                    headers.get_all(http::header::FORWARDED).iter().map(|v| v.as_bytes()),
                    headers.get_all("x-forwarded-for").iter().map(|v| v.as_bytes()),
                );
                SocketAddr::new(client, self.peer.port())
            }
            None => self.peer,
        };
        req.extensions_mut().insert(axum::extract::ConnectInfo(client));
        let router = self.router.clone();
        Box::pin(async move { router.oneshot(req).await })
    }
}

/// Serves `router` on `listener` through `edge` until `stop` turns true, then lets the
/// open connections finish; the forwarding headers of `forwarding`'s peers are read.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    router: Router,
    edge: Edge,
    forwarding: Option<Arc<TrustedNetworks>>,
    stop: watch::Receiver<bool>,
) {
    rebound_edge::serve_listener(
        listener,
        edge,
        move |peer| RouterService {
            router: router.clone(),
            peer,
            forwarding: forwarding.clone(),
        },
        stop,
    )
    .await
}

/// How long a process taking over waits for the old one to release the API and metrics ports.
const TAKE_OVER_WAIT: Duration = Duration::from_secs(30);

/// The listener of an API or metrics port: bound now, or, when this process takes over
/// from a running one, bound as soon as that one releases the address.
pub enum RouterPort {
    Bound(std::net::TcpListener),
    WhenFree(SocketAddr),
}

impl RouterPort {
    /// Binds `addr` now, unless taking over (then it is bound when free).
    pub fn bind(addr: SocketAddr, what: &str, take_over: bool) -> anyhow::Result<RouterPort> {
        match take_over {
            true => Ok(RouterPort::WhenFree(addr)),
            false => bind(addr, what).map(RouterPort::Bound),
        }
    }

    /// Prints where it listens, when bound.
    pub fn announce(&self, what: &str) -> anyhow::Result<()> {
        if let RouterPort::Bound(l) = self {
            println!("rebound: {what} listening on {}", l.local_addr()?);
        }
        Ok(())
    }

    /// Serves `router` through `edge` until `stop` (see [`serve_router`]), reading the
    /// forwarding headers of `forwarding`'s peers. Must be called inside a tokio runtime.
    pub fn serve(
        self,
        what: &'static str,
        router: Router,
        edge: Edge,
        forwarding: Option<Arc<TrustedNetworks>>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let addr = match self {
            RouterPort::Bound(l) => {
                let listener = tokio::net::TcpListener::from_std(l)?;
                return Ok(tokio::spawn(serve_router(listener, router, edge, forwarding, stop)));
            }
            RouterPort::WhenFree(addr) => addr,
        };
        Ok(tokio::spawn(async move {
            let listener = match bind_when_free(addr, what, TAKE_OVER_WAIT).await {
                Ok(l) => {
                    println!("rebound: {what} listening on {addr}");
                    l
                }
                Err(e) => {
                    tracing::error!(error = %e, "the {what} port was not released by the process being upgraded");
                    return;
                }
            };
            serve_router(listener, router, edge, forwarding, stop).await
        }))
    }
}
