//! The PROXY protocol (HAProxy's, versions 1 and 2, as AWS NLB, HAProxy and Envoy send it):
//! a load balancer of layer 4 writes who the client is before the connection's first byte
//! (before a TLS ClientHello too). A port configured for it reads the header from peers it
//! trusts only: any other peer is closed before a byte is read, and a header that is not
//! one is closed too, each counted (`proxy_untrusted`, `proxy_malformed`). The header is
//! parsed by the `ppp` crate; this file reads it off the socket (in pieces, within the head
//! timeout) and keeps what followed it for the connection.

use ppp::v1;
use ppp::v2;
use ppp::{HeaderResult, PartialResult};
use std::io;
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest header read: a version 1 line is at most 107 bytes; a version 2 header is 16
/// bytes and its addresses and TLVs (AWS adds its VPC endpoint's id, a few dozen bytes).
pub const MAX_HEADER_BYTES: usize = 16 + 1024;

/// The two signatures a header starts with.
const V1_START: &[u8] = b"PROXY ";
const V2_START: &[u8] = v2::PROTOCOL_PREFIX;

/// Why a connection's PROXY header was not read.
#[derive(Debug)]
pub enum HeaderError {
    /// Not a PROXY header, or one too long.
    Malformed,
    /// The connection failed or ended first (its deadline included).
    Io(io::Error),
}

/// What a PROXY header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The client's address and port; `None` when the header names none (v1 `UNKNOWN`, v2 `LOCAL`
    /// from the balancer's own health checks, or an address family other than IP): the
    /// connection is then the peer's own.
    pub source: Option<SocketAddr>,
    /// The bytes read after the header: the start of the connection's traffic.
    pub rest: Vec<u8>,
}

/// Reads a PROXY header (either version) from the start of `io`, however it is split into
/// packets, and the bytes after it that came with it.
pub async fn read_header<I: AsyncRead + Unpin>(io: &mut I) -> Result<ProxyHeader, HeaderError> {
    let mut buf = Vec::with_capacity(256);
    loop {
        let room = MAX_HEADER_BYTES + 1 - buf.len();
        let n = (&mut *io)
            .take(room as u64)
            .read_buf(&mut buf)
            .await
            .map_err(HeaderError::Io)?;
        if n == 0 {
            return Err(HeaderError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        // What cannot become a header is refused at once, not read to the limit.
        let could_be = |sig: &[u8]| {
            let n = buf.len().min(sig.len());
            buf[..n] == sig[..n]
        };
        if !could_be(V1_START) && !could_be(V2_START) {
            return Err(HeaderError::Malformed);
        }
        let parsed = HeaderResult::parse(&buf);
        if parsed.is_incomplete() {
            if buf.len() > MAX_HEADER_BYTES {
                return Err(HeaderError::Malformed);
            }
            continue;
        }
        let (len, source) = match parsed {
            HeaderResult::V1(Ok(h)) => (h.header.len(), v1_source(&h.addresses)),
            HeaderResult::V2(Ok(h)) => (h.len(), v2_source(h.command, &h.addresses)),
            _ => return Err(HeaderError::Malformed),
        };
        return Ok(ProxyHeader {
            source,
            rest: buf[len..].to_vec(),
        });
    }
}

fn v1_source(addresses: &v1::Addresses) -> Option<SocketAddr> {
    match addresses {
        v1::Addresses::Tcp4(a) => Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port)),
        v1::Addresses::Tcp6(a) => Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port)),
        v1::Addresses::Unknown => None,
    }
}

fn v2_source(command: v2::Command, addresses: &v2::Addresses) -> Option<SocketAddr> {
    match (command, addresses) {
        (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
            Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
        }
        (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
            Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A version 2 header for `source` → `destination`, with `tlv` after the addresses.
    fn v2_header(source: std::net::SocketAddr, destination: std::net::SocketAddr, tlv: &[u8]) -> Vec<u8> {
        let mut h = V2_START.to_vec();
        h.push(0x21); // version 2, PROXY
        let addresses: Vec<u8> = match (source, destination) {
            (std::net::SocketAddr::V4(s), std::net::SocketAddr::V4(d)) => {
                h.push(0x11); // TCP over IPv4
                [
                    &s.ip().octets()[..],
                    &d.ip().octets(),
                    &s.port().to_be_bytes(),
                    &d.port().to_be_bytes(),
                ]
                .concat()
            }
            (std::net::SocketAddr::V6(s), std::net::SocketAddr::V6(d)) => {
                h.push(0x21); // TCP over IPv6
                [
                    &s.ip().octets()[..],
                    &d.ip().octets(),
                    &s.port().to_be_bytes(),
                    &d.port().to_be_bytes(),
                ]
                .concat()
            }
            _ => panic!("one family"),
        };
        h.extend(((addresses.len() + tlv.len()) as u16).to_be_bytes());
        h.extend(addresses);
        h.extend(tlv);
        h
    }

    async fn read(pieces: &[&[u8]]) -> Result<ProxyHeader, HeaderError> {
        let (mut client, mut server) = tokio::io::duplex(4096);
        let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for piece in pieces {
                client.write_all(&piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            // Closed once written: what was written stays readable.
        });
        let got = read_header(&mut server).await;
        writer.await.unwrap();
        got
    }

    #[tokio::test]
    async fn both_versions_and_what_follows_them() {
        let v4 = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let v2_4 = v2_header(v4("203.0.113.7:51000"), v4("10.0.0.5:443"), &[]);
        let v2_6 = v2_header(
            v4("[2001:db8::7]:51000"),
            v4("[2001:db8::1]:443"),
            &[0x04, 0x00, 0x01, 0x00],
        );
        assert_eq!(
            read(&[&v2_6]).await.unwrap().source,
            Some(v4("[2001:db8::7]:51000")),
            "the port too"
        );
        let mut v2_local = V2_START.to_vec();
        v2_local.extend([0x20, 0x00, 0x00, 0x00]);
        type Case<'a> = (Vec<Vec<u8>>, Option<&'a str>, &'a [u8]);
        let cases: Vec<Case> = vec![
            (
                vec![b"PROXY TCP4 203.0.113.7 10.0.0.5 51000 80\r\nGET /".to_vec()],
                Some("203.0.113.7"),
                b"GET /",
            ),
            (
                vec![b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 80\r\n".to_vec()],
                Some("2001:db8::7"),
                b"",
            ),
            (
                vec![b"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\n".to_vec()],
                None,
                b"GET / HTTP/1.1\r\n",
            ),
            (
                vec![[&v2_4[..], b"\x16\x03\x01"].concat()],
                Some("203.0.113.7"),
                b"\x16\x03\x01",
            ),
            (vec![v2_6.clone()], Some("2001:db8::7"), b""),
            (vec![[&v2_local[..], b"GET"].concat()], None, b"GET"),
            // Split across packets, at every kind of place.
            (
                vec![
                    b"PRO".to_vec(),
                    b"XY TCP4 203.0.113.7 10.0".to_vec(),
                    b".0.5 51000 80\r".to_vec(),
                    b"\nX".to_vec(),
                ],
                Some("203.0.113.7"),
                b"X",
            ),
            (
                vec![v2_4[..5].to_vec(), v2_4[5..17].to_vec(), v2_4[17..].to_vec()],
                Some("203.0.113.7"),
                b"",
            ),
        ];
        for (pieces, source, rest) in cases {
            let slices: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
            let got = read(&slices).await.unwrap_or_else(|e| panic!("{pieces:?}: {e:?}"));
            assert_eq!(
                got.source.map(|s| s.ip()),
                source.map(|s| s.parse().unwrap()),
                "{pieces:?}"
            );
            assert_eq!(got.rest, rest, "{pieces:?}");
        }
    }

    #[tokio::test]
    async fn what_is_not_a_header_is_refused() {
        let long_v2 = {
            let mut h = V2_START.to_vec();
            h.extend([0x21, 0x11]);
            h.extend(((MAX_HEADER_BYTES) as u16).to_be_bytes());
            h.extend(vec![0u8; MAX_HEADER_BYTES]);
            h
        };
        for bad in [
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
            b"PROXY TCP4 not-an-address 10.0.0.5 51000 80\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.7 10.0.0.5 51000\r\n".to_vec(),
            [
                b"PROXY TCP4 203.0.113.7 10.0.0.5 51000 80".as_slice(),
                &[b' '; 100],
                b"\r\n",
            ]
            .concat(),
            [V2_START, &[0x31, 0x11, 0, 12], &[0; 12]].concat(), // version 3
            long_v2,
        ] {
            assert!(matches!(read(&[&bad]).await, Err(HeaderError::Malformed)), "{bad:?}");
        }
        // A connection that ends inside a header is an I/O error, not a header.
        assert!(matches!(read(&[b"PROXY TCP4 203.0"]).await, Err(HeaderError::Io(_))));
    }
}
