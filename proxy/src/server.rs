//! The Pingora application of the redirect port. Like River's file server it never
//! proxies: it answers every request from the redirect path. It is a `ServerApp` over the
//! lean HTTP/1.1 loop of [`crate::http1`], so Pingora keeps the listeners, the server
//! lifecycle and graceful upgrades while a redirect costs a parse, a lookup and a write.

use crate::clicks::ClickQueue;
use crate::http1::{serve_connection, write_reply, Answerer, Head, Reply};
use crate::path::{RedirectPath, Resolution};
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::protocols::Stream;
use pingora::server::configuration::ServerConf;
use pingora::server::{ListenFds, RunArgs, Server, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::listening::Service as Listening;
use pingora::services::Service;
use rebound_core::code::is_valid_code;
use rebound_core::decision::{max_age_seconds, query_is_forwardable};

use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::time::Instant;

/// Answers `GET/HEAD /{code}`.
pub struct RedirectApp {
    pub path: Arc<RedirectPath>,
    pub clicks: Arc<ClickQueue>,
    /// `Cache-Control: max-age` of redirects, capped at expiry.
    pub max_age_secs: u64,
}

impl RedirectApp {
    /// Answers one request into `out`, recording the click of a GET redirect.
    async fn respond(&self, head: &Head<'_>, out: &mut Vec<u8>, keep_alive: bool) {
        let started = Instant::now();
        let m = &self.path.metrics;
        let is_get = head.method == "GET";
        if !is_get && head.method != "HEAD" {
            m.bad_method.inc();
            return write_reply(
                out,
                &Reply::Status(405),
                keep_alive,
                head.http10,
                self.path.clock.now_millis(),
            );
        }
        let code = match head.path.strip_prefix('/') {
            Some(c) if is_valid_code(c.as_bytes()) => c,
            _ => {
                m.bad_path.inc();
                return write_reply(
                    out,
                    &Reply::Status(404),
                    keep_alive,
                    head.http10,
                    self.path.clock.now_millis(),
                );
            }
        };
        let now = self.path.clock.now_millis();
        let status = match self.path.resolve_at(code, now).await {
            Resolution::Redirect(entry) => {
                if let Some(redirect) = entry.redirect() {
                    let reply = Reply::Redirect {
                        status: redirect.status(),
                        long_url: entry.long_url(),
                        forward_query: entry.forward_query(),
                        query: head.query.filter(|q| query_is_forwardable(q)),
                        max_age: max_age_seconds(self.max_age_secs, entry.expires_at(), now),
                    };
                    write_reply(out, &reply, keep_alive, head.http10, now);
                    m.redirects.inc();
                    if is_get {
                        self.clicks.record(&entry);
                    }
                    m.latency.observe(started.elapsed().as_secs_f64());
                    return;
                }
                m.not_found.inc();
                404
            }
            Resolution::NotFound => {
                m.not_found.inc();
                404
            }
            Resolution::Gone => {
                m.gone.inc();
                410
            }
            Resolution::Unavailable => {
                m.unavailable.inc();
                503
            }
        };
        write_reply(out, &Reply::Status(status), keep_alive, head.http10, now);
        m.latency.observe(started.elapsed().as_secs_f64());
    }
}

impl Answerer for RedirectApp {
    fn answer<'a>(
        &'a self,
        head: &'a Head<'a>,
        out: &'a mut Vec<u8>,
        keep_alive: bool,
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        self.respond(head, out, keep_alive)
    }
}

#[async_trait]
impl ServerApp for RedirectApp {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        serve_connection(self.as_ref(), stream, shutdown).await;
        None
    }
}

/// A listening service whose socket the caller bound already (so port 0 works and the
/// bound address is known before the server runs). Pingora takes the socket from its fd
/// table, the same path a graceful upgrade uses.
pub struct PreBound<A> {
    inner: Listening<A>,
    key: String,
    listener: Option<std::net::TcpListener>,
}

impl<A> PreBound<A> {
    pub fn new(mut inner: Listening<A>, listener: std::net::TcpListener) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        let key = listener.local_addr()?.to_string();
        inner.add_tcp(&key);
        Ok(PreBound {
            inner,
            key,
            listener: Some(listener),
        })
    }
}

#[async_trait]
impl<A: pingora::apps::ServerApp + Send + Sync + 'static> Service for PreBound<A> {
    async fn start_service(&mut self, fds: Option<ListenFds>, shutdown: ShutdownWatch, listeners_per_fd: usize) {
        if let (Some(fds), Some(l)) = (&fds, self.listener.take()) {
            fds.lock().add(self.key.clone(), l.into_raw_fd());
        }
        self.inner.start_service(fds, shutdown, listeners_per_fd).await
    }
    fn name(&self) -> &str {
        Service::name(&self.inner)
    }
    fn threads(&self) -> Option<usize> {
        Service::threads(&self.inner)
    }
}

/// Runs the redirect service on `listener` until `shutdown` says so; blocks the calling
/// thread, which must not be inside a tokio runtime. Graceful termination drains for
/// `grace_secs` and then gives tasks `drain_timeout_secs`.
pub fn run_redirect_server(
    listener: std::net::TcpListener,
    app: RedirectApp,
    threads: usize,
    shutdown: Box<dyn ShutdownSignalWatch>,
) -> std::io::Result<()> {
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(1),
        graceful_shutdown_timeout_seconds: Some(2),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    let service = Listening::new("rebound redirect".to_owned(), app);
    server.add_service(PreBound::new(service, listener)?);
    server.run(RunArgs {
        shutdown_signal: shutdown,
    });
    Ok(())
}

/// The process's signals for a server run: SIGTERM tells `on_terminate` and drains
/// gracefully; SIGINT exits at once.
pub struct ProcessSignals {
    pub on_terminate: tokio::sync::watch::Sender<bool>,
}

#[async_trait]
impl ShutdownSignalWatch for ProcessSignals {
    async fn recv(&self) -> pingora::server::ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            tracing::error!("cannot listen for signals");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM: draining");
                let _ = self.on_terminate.send(true);
                pingora::server::ShutdownSignal::GracefulTerminate
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: exiting now");
                std::process::exit(130);
            }
        }
    }
}
