//! One accepted connection, served by hyper: HTTP/1.1 (and 1.0) or HTTP/2 (ALPN `h2` on
//! TLS, prior knowledge on cleartext), inside the port's defences. hyper parses and frames
//! every request (RFC 9112: conflicting lengths, transfer codings, oversized heads); this
//! file adds what a server on the internet needs around it: the connection cap, the
//! deadlines of [`GuardedIo`], the `Host` check of every HTTP/1 request and, over TLS, the
//! check that each request is for the host named by SNI (`host`), the HTTP/2 flood limits,
//! and a clean (lingering) close.
//!
//! hyper-util's `auto::Builder` does the protocol choice too, but it never hands the
//! stream back, and a lingering close needs it: after a refused request the rest of what
//! the client sent has to be read and dropped, or the kernel answers it with a reset that
//! can destroy the response before the client has read it. So the choice is made here
//! (ALPN, or a look at the first bytes for the HTTP/2 preface) and the HTTP/1 connection is
//! run with `poll_without_shutdown` and taken apart afterwards.

use crate::guard::{GuardedIo, HeadArrived, Timeouts};
use crate::host::{Checked, HostChecked, SniCheck};
use crate::limits::{EdgeLimits, MIN_CONNECTION_BUFFER};
use crate::metrics::{PortMetrics, Refusal};
use crate::tls::ServerTls;
use bytes::Bytes;
use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::LazyConfigAcceptor;
use tokio_util::task::TaskTracker;

/// How long an HTTP/1 connection still waits for its first request once the port shuts
/// down (Pingora gives connections one second of grace and two more before it stops).
const FIRST_REQUEST_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a port serves with: a hyper service answering requests with a body of bytes, cloned
/// per HTTP/2 stream and sent between threads. Implemented for every such service; it only
/// names the bounds every serving function needs.
pub trait PortService<B>:
    Service<Request<Incoming>, Response = Response<B>, Future: Send + Unpin + 'static, Error: Into<BoxError>>
    + Clone
    + Send
    + Sync
    + Unpin
    + 'static
{
}

impl<S, B> PortService<B> for S where
    S: Service<Request<Incoming>, Response = Response<B>, Future: Send + Unpin + 'static, Error: Into<BoxError>>
        + Clone
        + Send
        + Sync
        + Unpin
        + 'static
{
}

/// The body of a port's answers; its default is the empty body of the edge's own answers.
pub trait PortBody: Body<Data = Bytes, Error: Into<BoxError>> + Default + Send + 'static {}

impl<B> PortBody for B where B: Body<Data = Bytes, Error: Into<BoxError>> + Default + Send + 'static {}

/// Whom a port believes about the client a PROXY header names: the peers it accepts one
/// from (the load balancers' networks).
pub type ProxyTrust = Arc<dyn Fn(std::net::IpAddr) -> bool + Send + Sync>;

/// A listening port's connection handling: its limits, counters, connection slots and TLS.
#[derive(Clone)]
pub struct Edge {
    limits: Arc<EdgeLimits>,
    metrics: PortMetrics,
    slots: Arc<Semaphore>,
    tls: Option<ServerTls>,
    /// Set when every connection starts with a PROXY header: who may send one.
    proxy_protocol: Option<ProxyTrust>,
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

impl Edge {
    /// A cleartext port (HTTP/1, and h2c when the limits allow it).
    pub fn plain(limits: EdgeLimits, metrics: PortMetrics) -> Edge {
        Edge::new(limits, metrics, None)
    }

    /// A TLS port: HTTP/2 when the client offers `h2` by ALPN, HTTP/1.1 otherwise.
    pub fn tls(limits: EdgeLimits, metrics: PortMetrics, tls: ServerTls) -> Edge {
        Edge::new(limits, metrics, Some(tls))
    }

    /// Whether it serves TLS (its connections came over TLS).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    fn new(limits: EdgeLimits, metrics: PortMetrics, tls: Option<ServerTls>) -> Edge {
        let mut h1 = http1::Builder::new();
        if tls.is_some() {
            // One buffer per answer, so that it goes out as one TLS record: TLS streams
            // write every slice of a vectored write as a record of its own.
            h1.writev(false);
        }
        h1.timer(TokioTimer::new())
            // Deadlines are GuardedIo's: hyper's header timer also runs while a keep-alive
            // connection is idle, so it cannot tell a slow head from an idle connection.
            .header_read_timeout(None)
            .max_buf_size(limits.max_head_bytes.max(MIN_CONNECTION_BUFFER))
            .max_header_size(limits.max_head_bytes)
            .half_close(false)
            .keep_alive(true);
        if limits.max_headers != 100 {
            // 100 is hyper's default, parsed on the stack; any other value costs a heap
            // allocation per request.
            h1.max_headers(limits.max_headers);
        }
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(limits.h2_max_concurrent_streams)
            .max_header_list_size(limits.h2_max_header_list_bytes)
            .max_pending_accept_reset_streams(limits.h2_max_pending_resets)
            .max_local_error_reset_streams(limits.h2_max_local_error_resets)
            .max_send_buf_size(limits.h2_max_send_buffer);
        Edge {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            limits: Arc::new(limits),
            metrics,
            tls,
            proxy_protocol: None,
            h1,
            h2,
        }
    }

    /// Every connection starts with a PROXY header (version 1 or 2, before a TLS ClientHello
    /// too) from a peer `trusts` accepts: the client it names is the connection's. Any other
    /// peer is closed before a byte is read, and a header that is not one is closed too,
    /// each counted ([`Refusal::ProxyUntrusted`], [`Refusal::ProxyMalformed`]).
    pub fn reading_proxy_protocol(mut self, trusts: ProxyTrust) -> Edge {
        self.proxy_protocol = Some(trusts);
        self
    }

    /// Whether its connections start with a PROXY header.
    pub fn reads_proxy_protocol(&self) -> bool {
        self.proxy_protocol.is_some()
    }

    /// Serves one accepted stream until it closes. When `shutdown` turns true the
    /// connection finishes the request in progress (answered with `Connection: close`, or
    /// an HTTP/2 GOAWAY) and closes. A port that reads the PROXY protocol needs the peer:
    /// [`Edge::serve_accepted`].
    ///
    /// The connection's own future ([`Edge::serve_guarded`]'s), not one wrapped in
    /// another `async` layer.
    pub fn serve<'a, I, S, B>(
        &'a self,
        io: I,
        service: S,
        shutdown: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + 'a
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        let open = self.open();
        let io = GuardedIo::new(io, self.timeouts(), self.metrics.clone());
        self.serve_guarded(open, io, Vec::new(), service, shutdown)
    }

    /// [`Edge::serve`] for a stream accepted from `peer`, its service made by
    /// `make_service` for the client: the peer, or on a port that reads the PROXY
    /// protocol, the client its header names (the peer when it names none: a balancer's
    /// own health check).
    pub async fn serve_accepted<I, S, B>(
        &self,
        io: I,
        peer: std::net::SocketAddr,
        make_service: impl FnOnce(std::net::SocketAddr) -> S,
        shutdown: watch::Receiver<bool>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        let Some(trusts) = &self.proxy_protocol else {
            return self.serve(io, make_service(peer), shutdown).await;
        };
        let Some(open) = self.open() else { return };
        let mut io = GuardedIo::new(io, self.timeouts(), self.metrics.clone());
        if !trusts(peer.ip()) {
            self.metrics.refused(Refusal::ProxyUntrusted);
            return;
        }
        match crate::proxy_protocol::read_header(&mut io).await {
            Ok(header) => {
                let service = make_service(header.source.unwrap_or(peer));
                self.serve_guarded(Some(open), io, header.rest, service, shutdown).await
            }
            Err(crate::proxy_protocol::HeaderError::Malformed) => self.metrics.refused(Refusal::ProxyMalformed),
            // Closed, or cut by the head deadline (counted by the guard).
            Err(crate::proxy_protocol::HeaderError::Io(_)) => {}
        }
    }

    /// A connection slot, and the open connection counted until the guard drops; `None`
    /// over the cap (counted).
    fn open(&self) -> Option<(tokio::sync::OwnedSemaphorePermit, OpenConnection<'_>)> {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            // Over the cap: closed at once, before a byte is read.
            self.metrics.refused(Refusal::ConnectionLimit);
            return None;
        };
        self.metrics.open.inc();
        Some((slot, OpenConnection(&self.metrics)))
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            head: self.limits.head_timeout,
            idle: self.limits.idle_timeout,
            write: self.limits.write_timeout,
        }
    }

    /// Serves a guarded stream; `early` are bytes already read from it (after a PROXY
    /// header), the start of its traffic.
    async fn serve_guarded<I, S, B>(
        &self,
        open: Option<(tokio::sync::OwnedSemaphorePermit, OpenConnection<'_>)>,
        io: GuardedIo<I>,
        early: Vec<u8>,
        service: S,
        shutdown: watch::Receiver<bool>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        // Over the connection cap: closed at once (counted by `open`).
        let Some(_open) = open else { return };
        let head_arrived = io.head_arrived();
        let mut io = io;
        match &self.tls {
            None => {
                let (h2, prefix) = if self.limits.h2c {
                    match read_preface(&mut io, early).await {
                        Ok(seen) => seen,
                        Err(_) => return,
                    }
                } else {
                    (false, early)
                };
                let io = Prefixed::new(prefix, io);
                if h2 {
                    self.serve_h2(io, service, shutdown, None).await
                } else {
                    self.serve_h1(io, service, shutdown, head_arrived, None).await
                }
            }
            Some(server_tls) if early.is_empty() => {
                self.serve_tls(server_tls, io, head_arrived, service, shutdown).await
            }
            // The ClientHello came with the PROXY header: read first.
            Some(server_tls) => {
                let io = Prefixed::new(early, io);
                self.serve_tls(server_tls, io, head_arrived, service, shutdown).await
            }
        }
    }

    /// A TLS connection's handshake, then its requests.
    async fn serve_tls<G, S, B>(
        &self,
        server_tls: &ServerTls,
        io: G,
        head_arrived: HeadArrived,
        service: S,
        shutdown: watch::Receiver<bool>,
    ) where
        G: AsyncRead + AsyncWrite + ExpectHead + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        // The configuration is chosen from the ClientHello (the cipher suite order, or
        // a TLS-ALPN-01 validation's own).
        let handshake = async {
            let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await?;
            let Some(config) = server_tls.config_for_start(&start).await else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a TLS-ALPN-01 validation with no answer here",
                ));
            };
            start.into_stream(config).await
        };
        let accepted = tokio::time::timeout(self.limits.head_timeout, handshake).await;
        let mut tls = match accepted {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                if e.kind() != io::ErrorKind::TimedOut {
                    self.metrics.refused(Refusal::TlsHandshake);
                }
                self.metrics.handshake("failed", "none");
                return;
            }
            Err(_) => {
                self.metrics.refused(Refusal::HeadTimeout);
                self.metrics.handshake("failed", "none");
                return;
            }
        };
        let (io, session) = tls.get_mut();
        io.expect_head();
        let version = match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "1.2",
            _ => "other",
        };
        let outcome = match session.handshake_kind() {
            Some(rustls::HandshakeKind::Resumed) => "resumed",
            _ => "full",
        };
        self.metrics.handshake(outcome, version);
        if session.alpn_protocol() == Some(crate::acme::ACME_TLS_ALPN) {
            // A TLS-ALPN-01 validation (RFC 8737): the handshake was the answer;
            // no HTTP follows.
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
            return;
        }
        // Copied out of the session (one small allocation per connection that sent
        // a name): the session is the stream's, which hyper takes.
        let sni = session
            .server_name()
            .map(|name| SniCheck::new(name, self.metrics.refusal_counter(Refusal::Misdirected)));
        if session.alpn_protocol() == Some(b"h2") {
            self.serve_h2(tls, service, shutdown, sni).await
        } else {
            self.serve_h1(tls, service, shutdown, head_arrived, sni).await
        }
    }

    async fn serve_h1<I, S, B>(
        &self,
        io: I,
        service: S,
        shutdown: watch::Receiver<bool>,
        head_arrived: HeadArrived,
        sni: Option<SniCheck>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        self.metrics.http1.inc();
        let service = HostChecked {
            inner: service,
            refused: self.metrics.refusal_counter(Refusal::BadRequest),
            head_arrived,
            sni,
        };
        let mut conn = self.h1.serve_connection(TokioIo::new(io), service);
        // Told to close, hyper drops at once a connection it has not read a byte from; one
        // accepted just before the listener stopped would lose the request already on its
        // way (and a cleartext one whose first bytes the h2c look has read). So the close
        // is asked for `FIRST_REQUEST_GRACE` after the shutdown: a request read by then is
        // answered (with `Connection: close`), an idle connection is closed.
        let mut shutdown = ShutdownSignal::new(shutdown);
        let mut closing = shutdown.asked();
        let mut close_soon = closing.then(|| Box::pin(tokio::time::sleep(FIRST_REQUEST_GRACE)));
        let result = std::future::poll_fn(|cx| loop {
            if let Poll::Ready(r) = conn.poll_without_shutdown(cx) {
                return Poll::Ready(r);
            }
            if !closing && shutdown.poll(cx).is_ready() {
                closing = true;
                close_soon = Some(Box::pin(tokio::time::sleep(FIRST_REQUEST_GRACE)));
            }
            match close_soon.as_mut().map(|sleep| sleep.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => {
                    close_soon = None;
                    Pin::new(&mut conn).graceful_shutdown();
                }
                _ => return Poll::Pending,
            }
        })
        .await;
        if let Err(e) = &result {
            // hyper has answered 431 or 400 already; the rest is for the counters.
            if e.is_parse_too_large() {
                self.metrics.refused(Refusal::HeadTooLarge);
            } else if e.is_parse() || e.is_parse_status() {
                self.metrics.refused(Refusal::BadRequest);
            }
        }
        let io = conn.into_parts().io.into_inner();
        linger(io, &self.limits).await;
    }

    async fn serve_h2<I, S, B>(&self, io: I, service: S, shutdown: watch::Receiver<bool>, sni: Option<SniCheck>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: PortService<B>,
        B: PortBody,
    {
        self.metrics.h2.inc();
        let service = CountStreams {
            inner: service,
            streams: self.metrics.h2_streams.clone(),
            sni,
        };
        let conn = self.h2.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut shutdown = ShutdownSignal::new(shutdown);
        let mut closing = shutdown.asked();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        let result = std::future::poll_fn(|cx| loop {
            if let Poll::Ready(r) = conn.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            if closing || shutdown.poll(cx).is_pending() {
                return Poll::Pending;
            }
            closing = true;
            conn.as_mut().graceful_shutdown();
        })
        .await;
        if let Err(e) = result {
            if !caused_by_io(&e) {
                self.metrics.refused(Refusal::H2Protocol);
            }
        }
    }
}

/// The port's shutdown as one connection sees it. A watch's `changed()` takes, at every
/// poll, a lock that all the connections of the process share; this one leaves the task's
/// waker with the watch at its first poll, then reads the watch's version (an atomic load)
/// at each poll until it moves. (A task's waker stays the same while it lives.)
struct ShutdownSignal {
    wait: Pin<Box<dyn Future<Output = ()> + Send>>,
    version: watch::Receiver<bool>,
    waiting: bool,
}

impl ShutdownSignal {
    fn new(shutdown: watch::Receiver<bool>) -> ShutdownSignal {
        let mut waits = shutdown.clone();
        ShutdownSignal {
            // A dropped sender ends the wait too: nobody can keep the port open any more.
            wait: Box::pin(async move {
                let _ = waits.wait_for(|asked| *asked).await;
            }),
            version: shutdown,
            waiting: false,
        }
    }

    /// Whether the shutdown was asked already.
    fn asked(&self) -> bool {
        *self.version.borrow()
    }

    /// Ready once the shutdown is asked.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waiting && !self.version.has_changed().unwrap_or(true) {
            return Poll::Pending;
        }
        self.version.mark_unchanged();
        self.waiting = true;
        self.wait.as_mut().poll(cx)
    }
}

/// Keeps the open-connections gauge right however the connection ends.
struct OpenConnection<'a>(&'a PortMetrics);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open.dec();
    }
}

fn caused_by_io(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Reads until the bytes seen either differ from the HTTP/2 preface or are all of it.
async fn read_preface<I: AsyncRead + Unpin>(io: &mut I, early: Vec<u8>) -> io::Result<(bool, Vec<u8>)> {
    let mut buf = early;
    buf.reserve(1024);
    loop {
        // What came before (after a PROXY header) is looked at first; more is read while it
        // is a part of the preface.
        let undecided = buf.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&buf);
        if undecided && io.read_buf(&mut buf).await? == 0 {
            return Ok((false, buf));
        }
        let seen = buf.len().min(H2_PREFACE.len());
        if buf[..seen] != H2_PREFACE[..seen] {
            return Ok((false, buf));
        }
        if seen == H2_PREFACE.len() {
            return Ok((true, buf));
        }
    }
}

/// Closes a connection so that the answer reaches the client: send FIN, then read and drop
/// what the client still sends until it closes too, for a bounded time.
async fn linger<I: AsyncRead + AsyncWrite + Unpin>(mut io: I, limits: &EdgeLimits) {
    if io.shutdown().await.is_err() {
        return;
    }
    let until = tokio::time::Instant::now() + limits.lingering_time;
    let mut sink = [0u8; 512];
    loop {
        let wait = until.min(tokio::time::Instant::now() + limits.lingering_timeout);
        match tokio::time::timeout_at(wait, io.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

/// A stream whose first bytes were already read (to choose the protocol).
/// A stream under a connection's deadlines, maybe wrapped: told when a request head is due
/// from (after a TLS handshake).
trait ExpectHead {
    fn expect_head(&mut self);
}

impl<I> ExpectHead for GuardedIo<I> {
    fn expect_head(&mut self) {
        GuardedIo::expect_head(self)
    }
}

impl<I: ExpectHead> ExpectHead for Prefixed<I> {
    fn expect_head(&mut self) {
        self.inner.expect_head()
    }
}

pub struct Prefixed<I> {
    prefix: Vec<u8>,
    at: usize,
    inner: I,
}

impl<I> Prefixed<I> {
    pub fn new(prefix: Vec<u8>, inner: I) -> Prefixed<I> {
        Prefixed { prefix, at: 0, inner }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Counts HTTP/2 streams as they are dispatched and, on a TLS connection with SNI, answers
/// 421 to a stream for another host (the connection and its other streams go on) and gives
/// a stream that names no host the SNI name as its `Host`.
#[derive(Clone)]
struct CountStreams<S> {
    inner: S,
    streams: prometheus::IntCounter,
    sni: Option<SniCheck>,
}

impl<S, B, ReqBody> Service<Request<ReqBody>> for CountStreams<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>, Future: Unpin>,
    B: Default,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Checked<S::Future, Response<B>>;
    fn call(&self, mut req: Request<ReqBody>) -> Self::Future {
        self.streams.inc();
        if let Some(misdirected) = self.sni.as_ref().and_then(|sni| sni.admit(&mut req)) {
            return Checked::Refused(std::future::ready(misdirected));
        }
        Checked::Served(self.inner.call(req))
    }
}

/// Accepts connections on a tokio listener and serves each with `edge`, until `shutdown`
/// turns true; then waits for open connections to finish. Each connection is served on the
/// runtime of the accept loop. For the ports that are not Pingora's (the API and metrics
/// ports).
pub async fn serve_listener<S, B>(
    listener: tokio::net::TcpListener,
    edge: Edge,
    make_service: impl Fn(std::net::SocketAddr) -> S + Send + Sync + 'static,
    shutdown: watch::Receiver<bool>,
) where
    S: PortService<B>,
    B: PortBody,
{
    serve_listener_spread(listener, edge, make_service, shutdown, tokio::runtime::Handle::current).await
}

/// Spawns `serve` of `stream` on `runtime`, its socket moved to that runtime's reactor when
/// it is not the one it was accepted on (`here`), the task counted by `open`.
fn spawn_on<F, Fut>(
    open: &TaskTracker,
    runtime: &tokio::runtime::Handle,
    here: tokio::runtime::Id,
    stream: tokio::net::TcpStream,
    serve: F,
) where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if runtime.id() == here {
        tokio::spawn(open.track_future(serve(stream)));
        return;
    }
    // Registered with this runtime's reactor: moved to the other one's, inside it.
    match stream.into_std() {
        Ok(stream) => {
            runtime.spawn(open.track_future(async move {
                match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => serve(stream).await,
                    Err(e) => tracing::warn!(error = %e, "cannot move a connection to its runtime"),
                }
            }));
        }
        Err(e) => tracing::warn!(error = %e, "cannot move a connection to its runtime"),
    }
}

/// [`serve_listener`], each connection served on the runtime `pick_runtime` chooses for it
/// (its socket then moves to that runtime's reactor): with one single-threaded runtime per
/// core, as Pingora runs a service without work stealing, a connection lives on one thread
/// from its first byte to its last, and no request pays for a scheduler shared between
/// threads.
pub async fn serve_listener_spread<S, B>(
    listener: tokio::net::TcpListener,
    edge: Edge,
    make_service: impl Fn(std::net::SocketAddr) -> S + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
    pick_runtime: impl Fn() -> tokio::runtime::Handle,
) where
    S: PortService<B>,
    B: PortBody,
{
    let here = tokio::runtime::Handle::current().id();
    // Made in the connection's task, for the client the connection is from: the peer, or
    // the client its PROXY header names.
    let make_service = Arc::new(make_service);
    // Counts the connections still open, and nothing else: a finished connection's task is
    // freed as it ends (a JoinSet would keep each one until joined).
    let open = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let runtime = pick_runtime();
                let shutdown = shutdown.clone();
                // Each connection's task is `Edge::serve`'s future itself, unless the port
                // reads PROXY headers: then the service is made once the header is read.
                if edge.reads_proxy_protocol() {
                    let (edge, make) = (edge.clone(), make_service.clone());
                    spawn_on(&open, &runtime, here, stream, move |stream| async move {
                        edge.serve_accepted(stream, peer, &*make, shutdown).await
                    });
                } else {
                    let (edge, service) = (edge.clone(), make_service(peer));
                    spawn_on(&open, &runtime, here, stream, move |stream| async move {
                        edge.serve(stream, service, shutdown).await
                    });
                }
            }
            Err(e) => {
                // Out of descriptors or a connection reset before accept: back off briefly
                // rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    open.close();
    open.wait().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_shutdown_signal_is_pending_until_asked_and_ready_once_asked_or_abandoned() {
        let poll = |signal: &mut ShutdownSignal| signal.poll(&mut Context::from_waker(std::task::Waker::noop()));
        let (tx, rx) = watch::channel(false);
        let mut signal = ShutdownSignal::new(rx.clone());
        assert!(!signal.asked());
        for _ in 0..3 {
            assert!(poll(&mut signal).is_pending(), "nothing asked yet");
        }
        tx.send(true).unwrap();
        assert!(signal.asked());
        assert!(
            poll(&mut signal).is_ready(),
            "the version moved: the wait is polled and done"
        );

        let mut abandoned = ShutdownSignal::new(rx);
        assert!(poll(&mut abandoned).is_ready(), "asked before its first poll");
        let (tx, rx) = watch::channel(false);
        let mut abandoned = ShutdownSignal::new(rx);
        assert!(poll(&mut abandoned).is_pending());
        drop(tx);
        assert!(poll(&mut abandoned).is_ready(), "nobody left to keep the port open");
    }

    #[tokio::test]
    async fn an_http_1_request_without_one_valid_host_is_refused_400_counted_and_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let metrics = PortMetrics::detached();
        let edge = Edge::plain(EdgeLimits::default(), metrics.clone());
        let service = hyper::service::service_fn(|_req: Request<Incoming>| {
            std::future::ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))))
        });
        let heads: [&[u8]; 4] = [
            b"GET /a HTTP/1.1\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET /a HTTP/1.1\r\nHost: a..b\r\n\r\n",
            b"GET /a HTTP/1.0\r\nHost: a/b\r\n\r\n",
        ];
        for head in heads {
            let (mut client, server) = tokio::io::duplex(4096);
            let (_tx, rx) = watch::channel(false);
            let served = tokio::spawn({
                let (edge, service) = (edge.clone(), service);
                async move { edge.serve(server, service, rx).await }
            });
            // The request after it is never answered: the connection closes after the 400.
            client
                .write_all(&[head, b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"].concat())
                .await
                .unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            let answer = String::from_utf8_lossy(&answer);
            assert_eq!(answer.get(8..25), Some(" 400 Bad Request\r"), "{answer}");
            assert_eq!(
                answer.matches("HTTP/1.").count(),
                1,
                "one answer, then closed: {answer}"
            );
            drop(client);
            served.await.unwrap();
        }
        assert_eq!(metrics.refusals(Refusal::BadRequest), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_slower_than_the_head_timeout_is_answered_and_a_slow_head_still_cut() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let metrics = PortMetrics::detached();
        let limits = EdgeLimits::default();
        let slow = limits.head_timeout * 3 / 2;
        assert!(slow < limits.idle_timeout);
        let edge = Edge::plain(limits.clone(), metrics.clone());
        let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
            Box::pin(async move {
                tokio::time::sleep(slow).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
            })
        });
        let (mut client, server) = tokio::io::duplex(4096);
        let (_tx, rx) = watch::channel(false);
        let served = tokio::spawn({
            let edge = edge.clone();
            async move { edge.serve(server, service, rx).await }
        });
        let asked = tokio::time::Instant::now();
        client.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = vec![0u8; 1024];
        let n = client.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("done"),
            "{answer:?}"
        );
        assert!(asked.elapsed() >= slow, "answered when the handler was done");
        assert_eq!(metrics.refusals(Refusal::HeadTimeout), 0);
        // The next request's head is timed again from its first byte.
        client.write_all(b"GET /a HTTP/1.1\r\nHo").await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 0, "a trickling head is cut");
        assert_eq!(metrics.refusals(Refusal::HeadTimeout), 1);
        served.await.unwrap();
    }

    /// A TLS port whose certificate names `a.example` and 127.0.0.1; the certificate, for
    /// the client to trust.
    fn tls_port(metrics: &PortMetrics) -> (Edge, rustls::pki_types::CertificateDer<'static>) {
        use crate::sni::tests::{certified, self_signed};
        let pair = self_signed(&["a.example", "127.0.0.1"]);
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(certified(&pair)));
        let tls = ServerTls::new(&rustls::crypto::aws_lc_rs::default_provider(), resolver, &[]).unwrap();
        (Edge::tls(EdgeLimits::default(), metrics.clone(), tls), pair.2)
    }

    /// A service answering "ok", and how many requests it saw.
    fn counting_service() -> (impl PortService<Full<Bytes>>, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let service = hyper::service::service_fn({
            let seen = seen.clone();
            move |_req: Request<Incoming>| {
                seen.fetch_add(1, Ordering::Relaxed);
                std::future::ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))))
            }
        });
        (service, seen)
    }

    /// Connects to `edge` as a client asking for `name` (an IP address sends no SNI) with
    /// `alpn`: the client's stream, and the task serving the connection.
    async fn connect_tls<S: PortService<Full<Bytes>>>(
        edge: &Edge,
        service: S,
        root: &rustls::pki_types::CertificateDer<'static>,
        name: &str,
        alpn: &[&[u8]],
    ) -> (
        tokio_rustls::client::TlsStream<tokio::io::DuplexStream>,
        tokio::task::JoinHandle<()>,
    ) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (tx, rx) = watch::channel(false);
        let served = tokio::spawn({
            let edge = edge.clone();
            // The sender lives as long as the connection: dropped, it would be a shutdown.
            async move {
                edge.serve(server, service, rx).await;
                drop(tx);
            }
        });
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let tls = crate::sni::tests::connector(&[root], alpn)
            .connect(name, client)
            .await
            .unwrap();
        (tls, served)
    }

    /// Sends `heads` on one HTTP/1 connection (the last one closes it); each answer's head,
    /// status first.
    async fn h1_answers<I: AsyncRead + AsyncWrite + Unpin>(io: &mut I, heads: &[&str]) -> Vec<String> {
        io.write_all(heads.concat().as_bytes()).await.unwrap();
        let mut answers = Vec::new();
        io.read_to_end(&mut answers).await.unwrap();
        String::from_utf8(answers)
            .unwrap()
            .split("HTTP/1.1 ")
            .skip(1)
            .map(|answer| answer.to_ascii_lowercase())
            .collect()
    }

    #[tokio::test]
    async fn over_tls_an_http_1_request_for_another_host_than_the_sni_name_is_refused_421_and_counted() {
        let metrics = PortMetrics::detached();
        let (edge, root) = tls_port(&metrics);
        let (service, seen) = counting_service();
        let (mut tls, served) = connect_tls(&edge, service, &root, "a.example", &[b"http/1.1"]).await;
        let answers = h1_answers(
            &mut tls,
            &[
                "GET /a HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: b.example\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: A.Example.:443\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                "GET https://b.example/a HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            ],
        )
        .await;
        let statuses: Vec<&str> = answers.iter().map(|a| &a[..3]).collect();
        // Every request answered on the one connection: a 421 does not close it.
        assert_eq!(statuses, ["200", "421", "200", "421", "421", "200"], "{answers:?}");
        for refused in answers.iter().filter(|a| a.starts_with("421")) {
            assert!(refused.contains("\r\ncache-control: no-store\r\n"), "{refused}");
            assert!(refused.contains("\r\ncontent-length: 0\r\n"), "{refused}");
            assert!(refused.ends_with("\r\n\r\n"), "no body: {refused}");
        }
        drop(tls);
        served.await.unwrap();
        assert_eq!(metrics.refusals(Refusal::Misdirected), 3);
        assert_eq!(metrics.refusals(Refusal::BadRequest), 0);
        assert_eq!(seen.load(Ordering::Relaxed), 3, "the service never saw a 421");
    }

    #[tokio::test]
    async fn over_tls_an_http_2_stream_for_another_host_than_the_sni_name_is_refused_421_and_the_next_served() {
        let metrics = PortMetrics::detached();
        let (edge, root) = tls_port(&metrics);
        let (service, seen) = counting_service();
        let (tls, served) = connect_tls(&edge, service, &root, "a.example", &[b"h2"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (client, conn) = h2::client::handshake(tls).await.unwrap();
        let driven = tokio::spawn(conn);
        let get = |authority: &str| Request::get(format!("https://{authority}/a")).body(()).unwrap();
        let mut client = client.ready().await.unwrap();
        let (wrong, _) = client.send_request(get("b.example"), true).unwrap();
        let mut client = client.ready().await.unwrap();
        let (right, _) = client.send_request(get("A.example:443"), true).unwrap();
        let body = |res: Response<h2::RecvStream>| async move {
            let mut body = res.into_body();
            let mut bytes = Vec::new();
            while let Some(data) = body.data().await {
                bytes.extend_from_slice(&data.unwrap());
            }
            bytes
        };

        let wrong = wrong.await.unwrap();
        assert_eq!(wrong.status(), http::StatusCode::MISDIRECTED_REQUEST);
        assert_eq!(wrong.headers()[http::header::CACHE_CONTROL], "no-store");
        assert_eq!(body(wrong).await, b"");
        let right = right.await.unwrap();
        assert_eq!(right.status(), http::StatusCode::OK);
        assert_eq!(body(right).await, b"ok");

        drop(client);
        driven.await.unwrap().unwrap();
        served.await.unwrap();
        assert_eq!(metrics.refusals(Refusal::Misdirected), 1);
        assert_eq!(metrics.refusals(Refusal::H2Protocol), 0);
        assert_eq!(metrics.h2_streams.get(), 2);
        assert_eq!(seen.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn over_tls_without_sni_any_host_is_served() {
        let metrics = PortMetrics::detached();
        let (edge, root) = tls_port(&metrics);
        let (service, seen) = counting_service();
        let (mut tls, served) = connect_tls(&edge, service, &root, "127.0.0.1", &[b"http/1.1"]).await;
        let answers = h1_answers(
            &mut tls,
            &[
                "GET /a HTTP/1.1\r\nHost: b.example\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n",
                "GET /a HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            ],
        )
        .await;
        let statuses: Vec<&str> = answers.iter().map(|a| &a[..3]).collect();
        assert_eq!(statuses, ["200", "200", "200"], "{answers:?}");
        drop(tls);
        served.await.unwrap();
        assert_eq!(metrics.refusals(Refusal::Misdirected), 0);
        assert_eq!(seen.load(Ordering::Relaxed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_connection_serves_until_the_shutdown_then_closes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let edge = Edge::plain(EdgeLimits::default(), PortMetrics::detached());
        let (mut client, server) = tokio::io::duplex(4096);
        let (tx, rx) = watch::channel(false);
        let service = hyper::service::service_fn(|_req: Request<Incoming>| {
            std::future::ready(Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))))
        });
        let served = tokio::spawn(async move { edge.serve(server, service, rx).await });
        let mut buf = vec![0u8; 1024];
        for _ in 0..3 {
            client.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let n = client.read(&mut buf).await.unwrap();
            let answer = String::from_utf8_lossy(&buf[..n]);
            assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
        }
        let asked = tokio::time::Instant::now();
        tx.send(true).unwrap();
        // Idle once the grace is over: closed then (the clock is paused), long before the
        // keep-alive limit would have closed it.
        assert_eq!(client.read(&mut buf).await.unwrap(), 0, "closed after the shutdown");
        assert_eq!(asked.elapsed(), FIRST_REQUEST_GRACE);
        served.await.unwrap();
    }
}
