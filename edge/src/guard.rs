//! [`GuardedIo`]: a connection's byte stream with its deadlines. A head that trickles, a
//! keep-alive connection left idle and a peer that stops reading each end the connection
//! with an error that hyper (or the TLS layer) passes up, which frees its buffers.
//!
//! One timer per connection, armed only when an operation would wait, and never further
//! out than the shortest limit; reads and writes only mark what happened, and the clock is
//! read once the connection waits. A busy connection costs one clock read per request and
//! no timer operation, an idle one a timer wake-up every few seconds.

use crate::metrics::{PortMetrics, Refusal};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The three deadlines of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub head: Duration,
    pub idle: Duration,
    pub write: Duration,
}

impl Timeouts {
    fn shortest(&self) -> Duration {
        self.head.min(self.idle).min(self.write)
    }
}

/// Told by the port's service that the request in progress has its head in full (hyper
/// parsed it and handed the request over): the head timeout stops counting for it, and
/// the wait for its answer (the body, the handler) is bounded by the idle timeout, as a
/// connection where no byte moves. Cleared by the answer's first bytes.
#[derive(Debug, Clone, Default)]
pub struct HeadArrived(Arc<AtomicBool>);

impl HeadArrived {
    /// The request in progress has its head in full.
    #[inline]
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn clear(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// A stream whose reads and writes fail once a deadline has passed.
pub struct GuardedIo<S> {
    inner: S,
    timeouts: Timeouts,
    metrics: PortMetrics,
    timer: Pin<Box<Sleep>>,
    armed_until: Option<Instant>,
    /// When the request not yet answered is due in full: its first byte's arrival plus
    /// the head timeout. (Deadlines are kept rather than the times they count from, so
    /// that checking them at every wait is comparisons, not additions.)
    head_due: Option<Instant>,
    /// When an idle connection is due to be closed: its last bytes moved plus the idle
    /// timeout.
    idle_due: Instant,
    /// When a write waiting for the peer to read fails: the start of the wait plus the
    /// write timeout.
    write_due: Option<Instant>,
    read_pending: bool,
    /// What happened since the clock was last read, stamped when the connection waits.
    unstamped: Unstamped,
    /// The waker the armed timer will wake.
    waker: Option<std::task::Waker>,
    refused: Option<Refusal>,
    head_arrived: HeadArrived,
}

/// Events not yet given a time.
#[derive(Debug, Default, Clone, Copy)]
struct Unstamped {
    moved: bool,
    head_started: bool,
    write_waits: bool,
}

impl<S> GuardedIo<S> {
    /// Guards `inner`, just accepted: its first head is due within the head timeout.
    pub fn new(inner: S, timeouts: Timeouts, metrics: PortMetrics) -> GuardedIo<S> {
        let now = Instant::now();
        GuardedIo {
            inner,
            timeouts,
            metrics,
            timer: Box::pin(tokio::time::sleep_until(now + timeouts.shortest())),
            armed_until: None,
            head_due: Some(now + timeouts.head),
            idle_due: now + timeouts.idle,
            write_due: None,
            read_pending: false,
            unstamped: Unstamped::default(),
            waker: None,
            refused: None,
            head_arrived: HeadArrived::default(),
        }
    }

    /// The handle the port's service marks when a request's head has arrived in full.
    pub fn head_arrived(&self) -> HeadArrived {
        self.head_arrived.clone()
    }

    /// The head deadline of the request in progress, unless its head has arrived.
    fn head_due_now(&self) -> Option<Instant> {
        self.head_due.filter(|_| !self.head_arrived.is_marked())
    }

    /// A request head is due from now on (after a TLS handshake, whose writes would
    /// otherwise count as an answer).
    pub fn expect_head(&mut self) {
        self.head_due = Some(Instant::now() + self.timeouts.head);
        self.unstamped.head_started = false;
    }

    /// Gives the events since the last reading of the clock the time `now` (a wait
    /// follows them within the same poll).
    fn stamp(&mut self, now: Instant) {
        let u = std::mem::take(&mut self.unstamped);
        if u.moved {
            self.idle_due = now + self.timeouts.idle;
        }
        if u.head_started && self.head_due.is_none() {
            self.head_due = Some(now + self.timeouts.head);
        }
        if u.write_waits && self.write_due.is_none() {
            self.write_due = Some(now + self.timeouts.write);
        }
    }

    /// Why the connection was cut, if it was.
    pub fn refused(&self) -> Option<Refusal> {
        self.refused
    }

    /// The deadline that has passed, if one has.
    fn expired(&self, now: Instant) -> Option<Refusal> {
        if self.write_due.is_some_and(|due| now >= due) {
            return Some(Refusal::WriteTimeout);
        }
        if self.read_pending {
            match self.head_due_now() {
                Some(due) if now >= due => return Some(Refusal::HeadTimeout),
                None if self.write_due.is_none() && now >= self.idle_due => return Some(Refusal::IdleTimeout),
                _ => {}
            }
        }
        None
    }

    /// The earliest deadline that applies now, never further than the shortest limit, so
    /// that a deadline starting later is never earlier than the armed timer.
    fn next_deadline(&self, now: Instant) -> Instant {
        let mut next = now + self.timeouts.shortest();
        if let Some(due) = self.write_due {
            next = next.min(due);
        }
        if self.read_pending {
            next = next.min(self.head_due_now().unwrap_or(self.idle_due));
        }
        next
    }

    /// Called when an operation would wait: fails it if a deadline has passed, otherwise
    /// makes sure the timer will wake the task by the next deadline.
    fn poll_deadlines<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        loop {
            let now = Instant::now();
            self.stamp(now);
            if let Some(refusal) = self.expired(now) {
                return Poll::Ready(Err(self.refuse(refusal)));
            }
            let next = self.next_deadline(now);
            let armed = matches!(self.armed_until, Some(at) if at <= next && at > now) && !self.timer.is_elapsed();
            if armed && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                // Armed for this task already: the timer will wake it.
                return Poll::Pending;
            }
            if !armed {
                self.timer.as_mut().reset(next);
                self.armed_until = Some(next);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => self.armed_until = None,
                Poll::Pending => {
                    if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        self.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn refuse(&mut self, refusal: Refusal) -> io::Error {
        if self.refused.is_none() {
            self.refused = Some(refusal);
            self.metrics.refused(refusal);
        }
        io::Error::new(io::ErrorKind::TimedOut, refusal.as_str())
    }

    fn check_refused(&self) -> io::Result<()> {
        match self.refused {
            Some(r) => Err(io::Error::new(io::ErrorKind::TimedOut, r.as_str())),
            None => Ok(()),
        }
    }

    fn wrote(&mut self) {
        // Bytes going out mean the request in progress was answered.
        self.head_due = None;
        self.head_arrived.clear();
        self.write_due = None;
        self.unstamped.head_started = false;
        self.unstamped.write_waits = false;
        self.unstamped.moved = true;
    }

    /// What a write that was polled means for the deadlines.
    fn after_write(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                self.wrote();
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.write_waits();
                self.poll_deadlines(cx)
            }
        }
    }

    fn write_waits(&mut self) {
        self.unstamped.write_waits = true;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for GuardedIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.check_refused()?;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.read_pending = false;
                if buf.filled().len() > before {
                    this.unstamped.moved = true;
                    if this.head_due.is_none() {
                        this.unstamped.head_started = true;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                this.read_pending = true;
                this.poll_deadlines(cx)
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GuardedIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.check_refused()?;
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.check_refused()?;
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.check_refused()?;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                this.write_due = None;
                this.unstamped.write_waits = false;
                Poll::Ready(r)
            }
            Poll::Pending => {
                this.write_waits();
                this.poll_deadlines(cx)
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.check_refused()?;
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => {
                this.write_waits();
                this.poll_deadlines(cx)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const LIMITS: Timeouts = Timeouts {
        head: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        write: Duration::from_secs(10),
    };

    fn guarded(inner: tokio::io::DuplexStream) -> (GuardedIo<tokio::io::DuplexStream>, PortMetrics) {
        let metrics = PortMetrics::detached();
        (GuardedIo::new(inner, LIMITS, metrics.clone()), metrics)
    }

    async fn read_err(io: &mut GuardedIo<tokio::io::DuplexStream>) -> (io::Error, Duration) {
        let started = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            match io.read(&mut buf).await {
                Ok(0) => panic!("eof"),
                Ok(_) => {}
                Err(e) => return (e, started.elapsed()),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_trickles_is_cut_at_the_head_timeout_counted_from_its_first_byte() {
        let (client, server) = tokio::io::duplex(1024);
        let (mut io, metrics) = guarded(server);
        // Answer nothing: one byte every 2 s never completes a head.
        let trickle = tokio::spawn(async move {
            let mut client = client;
            for _ in 0..20 {
                if client.write_all(b"G").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            client
        });
        let (err, after) = read_err(&mut io).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(io.refused(), Some(Refusal::HeadTimeout));
        assert_eq!(
            after,
            Duration::from_secs(10),
            "cut at the deadline, not moved by reads"
        );
        assert_eq!(metrics.refusals(Refusal::HeadTimeout), 1);
        drop(trickle);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_keep_alive_connection_is_cut_at_the_idle_timeout_and_an_answer_resets_the_head_deadline() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut io, _metrics) = guarded(server);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(io.read(&mut buf).await.unwrap() > 0);
        tokio::time::sleep(Duration::from_secs(9)).await;
        // The answer: from now on the connection is idle, not inside a head.
        io.write_all(b"HTTP/1.1 404 Not Found\r\n\r\n").await.unwrap();
        let (err, after) = read_err(&mut io).await;
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(io.refused(), Some(Refusal::IdleTimeout));
        assert_eq!(after, Duration::from_secs(60));
        drop(client);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_is_cut_at_the_write_timeout() {
        let (client, server) = tokio::io::duplex(64);
        let (mut io, metrics) = guarded(server);
        let started = Instant::now();
        let big = vec![b'x'; 4096];
        let err = loop {
            if let Err(e) = io.write_all(&big).await {
                break e;
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(io.refused(), Some(Refusal::WriteTimeout));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!(metrics.refusals(Refusal::WriteTimeout), 1);
        // Later operations fail at once.
        assert!(io.write_all(b"x").await.is_err());
        drop(client);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_never_cut() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut io, metrics) = guarded(server);
        let mut buf = [0u8; 64];
        for _ in 0..200 {
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            assert!(io.read(&mut buf).await.unwrap() > 0);
            io.write_all(b"HTTP/1.1 302 Found\r\n\r\n").await.unwrap();
            assert!(client.read(&mut buf).await.unwrap() > 0);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        assert!(io.refused().is_none());
        assert_eq!(metrics.refusals(Refusal::IdleTimeout), 0);
    }
}
