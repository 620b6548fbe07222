//! The edge: what serves HTTP on a port that faces the internet, shared by the redirect
//! port (inside Pingora), the API port and the metrics port.
//!
//! # Layout
//!
//! - `limits`: `EdgeLimits`, every defence of a port as a setting with its default.
//! - `conn`: `Edge`, one accepted connection served by hyper (HTTP/1.1, HTTP/2, TLS)
//!   with the connection cap and a lingering close; `serve_listener` for tokio listeners
//!   (`serve_listener_spread` spreading connections over runtimes).
//! - `host`: the `Host` check (RFC 9112 §3.2) every HTTP/1 request passes on every port.
//! - `guard`: `GuardedIo`, the head, idle and write deadlines of a connection.
//! - `proxy_protocol`: the PROXY protocol header a layer-4 balancer writes before a
//!   connection's first byte, read from trusted peers only.
//! - `tls`: rustls configuration and the certificate that reloads without a restart.
//! - `sni`: `SniResolver`, each domain's certificate by SNI, and TLS-ALPN-01 answers.
//! - `acme`: the ACME challenges a port answers (HTTP-01 paths, TLS-ALPN-01 handshakes)
//!   and the ports the issuer answers them through.
//! - `metrics`: every metric of the edge.
//! - `fd_limit`: the open-file limit and the check that the ports' caps fit under it.
#![forbid(unsafe_code)]

pub mod acme;
pub mod conn;
pub mod fd_limit;
pub mod guard;
pub mod host;
pub mod limits;
pub mod metrics;
pub mod proxy_protocol;
pub mod sni;
pub mod tls;

pub use conn::{serve_listener, serve_listener_spread, Edge, PortBody, PortService, ProxyTrust};
pub use guard::GuardedIo;
pub use limits::EdgeLimits;
pub use metrics::{EdgeMetrics, PortMetrics, Refusal};
