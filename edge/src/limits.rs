//! The limits one listening port enforces on its connections: plain data, with the
//! defaults of docs/spec.md §3a, written only here (the binary's settings refer to them). Every
//! limit has a counter for what it refused (see `metrics`).

use std::time::Duration;

/// What one port allows a connection to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeLimits {
    /// A request head (and, on TLS, the handshake) must arrive within this, counted from its
    /// first byte (or from the accept for the first request).
    pub head_timeout: Duration,
    /// A keep-alive connection with no request in progress is closed after this.
    pub idle_timeout: Duration,
    /// A connection whose peer stops reading is closed after a write has waited this long.
    pub write_timeout: Duration,
    /// Open connections on the port; one more is closed at once.
    pub max_connections: usize,
    /// Largest request head (request line and headers) in bytes; over it: 431. Also the cap
    /// of what one HTTP/1 connection buffers, answers queued for a client that does not read
    /// included (at least 8,192, hyper's floor).
    pub max_head_bytes: usize,
    /// Most header fields in a request; over it: 431.
    pub max_headers: usize,
    /// Whether the cleartext port also speaks HTTP/2 with prior knowledge (h2c).
    pub h2c: bool,
    /// Concurrent HTTP/2 streams per connection.
    pub h2_max_concurrent_streams: u32,
    /// Largest HTTP/2 header list (decoded), CONTINUATION frames included.
    pub h2_max_header_list_bytes: u32,
    /// HTTP/2 streams reset by the client before they were answered, pending at once (the
    /// rapid-reset defence).
    pub h2_max_pending_resets: usize,
    /// HTTP/2 streams this server may reset because of client errors before it sends
    /// GOAWAY.
    pub h2_max_local_error_resets: usize,
    /// Bytes an HTTP/2 connection buffers for a client that does not read.
    pub h2_max_send_buffer: usize,
    /// After a refused request the connection is closed cleanly: what the client still sends
    /// is read and discarded for at most this long (lingering close).
    pub lingering_time: Duration,
    /// … and at most this long between two reads while lingering.
    pub lingering_timeout: Duration,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        EdgeLimits {
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_connections: 8_192,
            max_head_bytes: 8 * 1024,
            max_headers: 100,
            h2c: true,
            h2_max_concurrent_streams: 128,
            h2_max_header_list_bytes: 16 * 1024,
            h2_max_pending_resets: 20,
            h2_max_local_error_resets: 1024,
            h2_max_send_buffer: 64 * 1024,
            lingering_time: Duration::from_secs(5),
            lingering_timeout: Duration::from_secs(2),
        }
    }
}

/// hyper refuses a connection buffer under this.
pub const MIN_CONNECTION_BUFFER: usize = 8 * 1024;
