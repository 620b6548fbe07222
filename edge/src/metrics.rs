//! Every metric of the edge, declared once: connections by port and protocol, refusals by
//! reason, TLS handshakes and certificate reloads, HTTP/2 streams.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// Why the edge ended a connection or refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The port already had its maximum of open connections.
    ConnectionLimit,
    /// A request head (or TLS handshake) did not arrive within the head timeout.
    HeadTimeout,
    /// A keep-alive connection stayed idle past the idle timeout.
    IdleTimeout,
    /// The peer stopped reading for longer than the write timeout.
    WriteTimeout,
    /// A head over the size or header-count limit (431).
    HeadTooLarge,
    /// A request HTTP/1 framing rules refuse (400), a missing, doubled or invalid `Host`
    /// included.
    BadRequest,
    /// A TLS handshake that failed.
    TlsHandshake,
    /// An HTTP/2 connection ended by a protocol error or a flood defence.
    H2Protocol,
    /// A request over TLS for another host than the one the client named by SNI (421,
    /// RFC 9110 §15.5.20); the connection stays open.
    Misdirected,
    /// A connection to a port that reads the PROXY protocol from a peer outside the trusted
    /// networks: closed before a byte is read.
    ProxyUntrusted,
    /// A connection to a port that reads the PROXY protocol whose first bytes are not a
    /// PROXY header (or one too long).
    ProxyMalformed,
}

impl Refusal {
    /// Every reason, in the order of the port's counters.
    pub const ALL: [Refusal; 11] = [
        Refusal::ConnectionLimit,
        Refusal::HeadTimeout,
        Refusal::IdleTimeout,
        Refusal::WriteTimeout,
        Refusal::HeadTooLarge,
        Refusal::BadRequest,
        Refusal::TlsHandshake,
        Refusal::H2Protocol,
        Refusal::Misdirected,
        Refusal::ProxyUntrusted,
        Refusal::ProxyMalformed,
    ];

    /// The metric label, also the error text.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection_limit",
            Refusal::HeadTimeout => "head_timeout",
            Refusal::IdleTimeout => "idle_timeout",
            Refusal::WriteTimeout => "write_timeout",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::BadRequest => "bad_request",
            Refusal::TlsHandshake => "tls_handshake",
            Refusal::H2Protocol => "h2_protocol",
            Refusal::Misdirected => "misdirected",
            Refusal::ProxyUntrusted => "proxy_untrusted",
            Refusal::ProxyMalformed => "proxy_malformed",
        }
    }
}

/// The edge's metric families, registered once per process.
#[derive(Clone)]
pub struct EdgeMetrics {
    open: IntGaugeVec,
    connections: IntCounterVec,
    refusals: IntCounterVec,
    handshakes: IntCounterVec,
    reloads: IntCounterVec,
    h2_streams: IntCounterVec,
}

impl EdgeMetrics {
    /// Declares the edge's metrics in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<EdgeMetrics> {
        let m = EdgeMetrics::unregistered()?;
        registry.register(Box::new(m.open.clone()))?;
        registry.register(Box::new(m.connections.clone()))?;
        registry.register(Box::new(m.refusals.clone()))?;
        registry.register(Box::new(m.handshakes.clone()))?;
        registry.register(Box::new(m.reloads.clone()))?;
        registry.register(Box::new(m.h2_streams.clone()))?;
        Ok(m)
    }

    fn unregistered() -> prometheus::Result<EdgeMetrics> {
        Ok(EdgeMetrics {
            open: IntGaugeVec::new(
                Opts::new("rebound_edge_open_connections", "Connections open now, by port."),
                &["port"],
            )?,
            connections: IntCounterVec::new(
                Opts::new(
                    "rebound_edge_connections_total",
                    "Connections served, by port and protocol (http1, h2); refused ones are in rebound_edge_refusals_total.",
                ),
                &["port", "protocol"],
            )?,
            refusals: IntCounterVec::new(
                Opts::new(
                    "rebound_edge_refusals_total",
                    "Connections closed or requests refused by an edge defence, by port and reason.",
                ),
                &["port", "reason"],
            )?,
            handshakes: IntCounterVec::new(
                Opts::new(
                    "rebound_edge_tls_handshakes_total",
                    "TLS handshakes, by port, outcome (full, resumed, failed) and protocol version.",
                ),
                &["port", "outcome", "version"],
            )?,
            reloads: IntCounterVec::new(
                Opts::new(
                    "rebound_edge_tls_reloads_total",
                    "Certificate and key reloads, by outcome (loaded, refused).",
                ),
                &["outcome"],
            )?,
            h2_streams: IntCounterVec::new(
                Opts::new("rebound_edge_h2_streams_total", "HTTP/2 streams (requests) served, by port."),
                &["port"],
            )?,
        })
    }

    /// The counters of one port, resolved once so that nothing is looked up per request.
    pub fn port(&self, port: &str) -> PortMetrics {
        let refusals = Refusal::ALL.map(|r| self.refusals.with_label_values(&[port, r.as_str()]));
        PortMetrics {
            open: self.open.with_label_values(&[port]),
            http1: self.connections.with_label_values(&[port, "http1"]),
            h2: self.connections.with_label_values(&[port, "h2"]),
            h2_streams: self.h2_streams.with_label_values(&[port]),
            refusals: std::sync::Arc::new(refusals),
            handshakes: self.handshakes.clone(),
            port: port.to_owned(),
        }
    }

    /// Counts a certificate reload.
    pub fn reload(&self, loaded: bool) {
        self.reloads
            .with_label_values(&[if loaded { "loaded" } else { "refused" }])
            .inc();
    }
}

/// One port's counters.
#[derive(Clone)]
pub struct PortMetrics {
    pub open: IntGauge,
    pub http1: IntCounter,
    pub h2: IntCounter,
    pub h2_streams: IntCounter,
    refusals: std::sync::Arc<[IntCounter; Refusal::ALL.len()]>,
    handshakes: IntCounterVec,
    port: String,
}

impl PortMetrics {
    /// Counters registered nowhere, for tests.
    pub fn detached() -> PortMetrics {
        EdgeMetrics::unregistered()
            .expect("metric names are valid")
            .port("test")
    }

    /// Counts one refusal.
    pub fn refused(&self, refusal: Refusal) {
        self.refusals[refusal as usize].inc();
    }

    /// The counter of one reason, to count on a request path without an index.
    pub(crate) fn refusal_counter(&self, refusal: Refusal) -> IntCounter {
        self.refusals[refusal as usize].clone()
    }

    /// How many refusals of this reason were counted.
    pub fn refusals(&self, refusal: Refusal) -> u64 {
        self.refusals[refusal as usize].get()
    }

    /// Counts a TLS handshake.
    pub fn handshake(&self, outcome: &str, version: &str) {
        self.handshakes.with_label_values(&[&self.port, outcome, version]).inc();
    }
}
