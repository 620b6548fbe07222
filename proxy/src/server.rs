//! The Pingora application of the redirect port. Like River's file server it never
//! proxies: it reads the request, answers from the redirect path, and hands the connection
//! back for keep-alive. It is a bare `HttpServerApp`, the leanest entry into Pingora that
//! keeps its listeners, connection handling and server lifecycle.

use crate::clicks::{Click, ClickQueue};
use crate::path::{RedirectPath, Resolution};
use async_trait::async_trait;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use pingora::server::configuration::ServerConf;
use pingora::server::{ListenFds, RunArgs, Server, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::listening::Service as Listening;
use pingora::services::Service;
use rebound_core::code::is_valid_code;
use rebound_core::decision::{location, max_age_seconds, query_is_forwardable};
use rebound_core::{CacheState, Day};
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::time::Instant;

/// Seconds an idle keep-alive connection is kept.
const KEEPALIVE_SECS: u64 = 60;

/// Answers `GET/HEAD /{code}`.
pub struct RedirectApp {
    pub path: Arc<RedirectPath>,
    pub clicks: Arc<ClickQueue>,
    /// `Cache-Control: max-age` of redirects, capped at expiry.
    pub max_age_secs: u64,
}

/// A response to write: status and headers, always with an empty body.
struct Answer {
    status: u16,
    location: Option<String>,
    cache_control: CacheControl,
}

enum CacheControl {
    MaxAge(u64),
    NoStore,
}

impl Answer {
    fn plain(status: u16) -> Answer {
        Answer {
            status,
            location: None,
            cache_control: CacheControl::NoStore,
        }
    }

    fn header(&self) -> pingora::Result<ResponseHeader> {
        let mut h = ResponseHeader::build(self.status, Some(5))?;
        if let Some(l) = &self.location {
            h.insert_header("Location", l.as_str())?;
        }
        match self.cache_control {
            CacheControl::MaxAge(s) => h.insert_header("Cache-Control", format!("public, max-age={s}"))?,
            CacheControl::NoStore => h.insert_header("Cache-Control", "no-store")?,
        }
        match self.status {
            405 => h.insert_header("Allow", "GET, HEAD")?,
            503 => h.insert_header("Retry-After", "1")?,
            _ => {}
        }
        // An explicit empty body keeps the connection reusable.
        h.insert_header("Content-Length", "0")?;
        Ok(h)
    }
}

impl RedirectApp {
    /// Decides the answer to one request, and the click it makes (GET redirects only).
    async fn answer(&self, method: &http::Method, path: &str, query: Option<&str>) -> (Answer, Option<Click>) {
        let m = &self.path.metrics;
        let is_get = *method == http::Method::GET;
        if !is_get && *method != http::Method::HEAD {
            m.bad_method.inc();
            return (Answer::plain(405), None);
        }
        let code = match path.strip_prefix('/') {
            Some(c) if is_valid_code(c.as_bytes()) => c,
            _ => {
                m.bad_path.inc();
                return (Answer::plain(404), None);
            }
        };
        match self.path.resolve(code).await {
            Resolution::Redirect(entry) => {
                let CacheState::Active {
                    long_url,
                    redirect,
                    forward_query,
                } = &entry.record.state
                else {
                    m.not_found.inc();
                    return (Answer::plain(404), None);
                };
                let now = self.path.clock.now_millis();
                let query = query.filter(|q| query_is_forwardable(q));
                let answer = Answer {
                    status: redirect.status(),
                    location: Some(location(long_url, *forward_query, query)),
                    cache_control: CacheControl::MaxAge(max_age_seconds(
                        self.max_age_secs,
                        entry.record.expires_at,
                        now,
                    )),
                };
                m.redirects.inc();
                let click = is_get.then(|| Click {
                    code: entry.code.clone(),
                    day: Day::of_millis(now),
                });
                (answer, click)
            }
            Resolution::NotFound => {
                m.not_found.inc();
                (Answer::plain(404), None)
            }
            Resolution::Gone => {
                m.gone.inc();
                (Answer::plain(410), None)
            }
            Resolution::Unavailable => {
                m.unavailable.inc();
                (Answer::plain(503), None)
            }
        }
    }
}

#[async_trait]
impl HttpServerApp for RedirectApp {
    async fn process_new_http(
        self: &Arc<Self>,
        mut http: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        match http.read_request().await {
            Ok(true) => {}
            _ => return None,
        }
        let started = Instant::now();
        http.set_keepalive(if *shutdown.borrow() { None } else { Some(KEEPALIVE_SECS) });
        let (answer, click) = {
            let req = http.req_header();
            self.answer(&req.method, req.uri.path(), req.uri.query()).await
        };
        let header = match answer.header() {
            Ok(h) => h,
            Err(_) => Answer::plain(500).header().ok()?,
        };
        if http.write_response_header(Box::new(header)).await.is_err() {
            return None;
        }
        if let Some(click) = click {
            self.clicks.record(click);
        }
        self.path.metrics.latency.observe(started.elapsed().as_secs_f64());
        let persistent = HttpPersistentSettings::for_session(&http);
        match http.finish().await {
            Ok(reusable) => reusable.map(|s| ReusedHttpStream::from_reusable_stream(s, persistent)),
            Err(_) => None,
        }
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
