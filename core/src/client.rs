//! Who the client is (docs/spec.md §13): the TCP peer, unless a proxy in front of Rebound
//! that the operator trusts says who it forwards for. Nothing is trusted by default.
//!
//! Two ways a proxy says it: the PROXY protocol, read by the edge before any byte of the
//! connection (a load balancer of layer 4), and the forwarding headers of each request
//! (`Forwarded`, RFC 7239, else `X-Forwarded-For`), read here from a peer in
//! [`TrustedNetworks`] (a proxy of layer 7). The headers are walked from the nearest hop
//! back, and the first address that is not a trusted proxy's is the client: whatever a
//! client writes into the headers itself sits further left and is never reached while a
//! trusted proxy appended after it.

use ipnet::IpNet;
use std::net::IpAddr;

/// The networks whose proxies are believed about the client they forward for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedNetworks(Vec<IpNet>);

impl TrustedNetworks {
    /// The networks `nets`.
    pub fn new(nets: Vec<IpNet>) -> TrustedNetworks {
        TrustedNetworks(nets)
    }

    /// One network as a setting writes it: a CIDR (`10.0.0.0/8`, `2001:db8::/32`) or an
    /// address alone (a network of one).
    pub fn parse_network(text: &str) -> Result<IpNet, String> {
        let text = text.trim();
        text.parse::<IpNet>()
            .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
            .map(|net| net.trunc())
            .map_err(|_| format!("{text:?} is not a network (`10.0.0.0/8`, `2001:db8::/32`) or an address"))
    }

    /// No network is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The networks, as configured.
    pub fn networks(&self) -> &[IpNet] {
        &self.0
    }

    /// Whether `ip` is in one of the networks (an IPv4-mapped IPv6 address as its IPv4
    /// address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }
}

/// `::ffff:a.b.c.d` as `a.b.c.d`, as a dual-stack socket reports an IPv4 peer.
pub fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The client of a request that arrived from `peer`: `peer` itself unless it is trusted;
/// then the nearest hop of the forwarding headers that is not trusted (the leftmost hop
/// when every one is). `forwarded` are the request's `Forwarded` values and
/// `x_forwarded_for` its `X-Forwarded-For` values, each in the order they came; `Forwarded`
/// wins when the request has one. A hop that is not an address (`unknown`, an obfuscated
/// name, garbage) ends the walk at the hop before it.
pub fn client_of<'a>(
    peer: IpAddr,
    trusted: &TrustedNetworks,
    forwarded: impl Iterator<Item = &'a [u8]>,
    x_forwarded_for: impl Iterator<Item = &'a [u8]>,
) -> IpAddr {
    let peer = unmapped(peer);
    if !trusted.contains(peer) {
        return peer;
    }
    let mut hops: Vec<Option<IpAddr>> = Vec::new();
    let mut has_forwarded = false;
    for value in forwarded {
        has_forwarded = true;
        hops.extend(split_list(value).map(forwarded_for));
    }
    if !has_forwarded {
        for value in x_forwarded_for {
            hops.extend(split_list(value).map(node_address));
        }
    }
    let mut client = peer;
    for hop in hops.into_iter().rev() {
        if !trusted.contains(client) {
            break;
        }
        match hop {
            Some(ip) => client = unmapped(ip),
            None => break,
        }
    }
    client
}

/// Whether a request from `peer` came to the first proxy over TLS, as a trusted proxy says
/// (`Forwarded: proto=https`, else `X-Forwarded-Proto: https`; the nearest hop's word).
/// Never for an untrusted peer.
pub fn forwarded_over_tls<'a>(
    peer: IpAddr,
    trusted: &TrustedNetworks,
    forwarded: impl Iterator<Item = &'a [u8]>,
    x_forwarded_proto: impl Iterator<Item = &'a [u8]>,
) -> bool {
    if !trusted.contains(peer) {
        return false;
    }
    let mut has_forwarded = false;
    let mut proto = None;
    for value in forwarded {
        has_forwarded = true;
        for element in split_list(value) {
            proto = parameter(element, b"proto").or(proto);
        }
    }
    if !has_forwarded {
        proto = x_forwarded_proto.flat_map(split_list).last().map(<[u8]>::to_vec);
    }
    proto.is_some_and(|p| p.eq_ignore_ascii_case(b"https"))
}

/// The items of a comma-separated header value, trimmed, empty ones left out. (A comma in
/// a quoted string of `Forwarded` would split it; no address contains one.)
fn split_list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|item| !item.is_empty())
}

/// The value of `name` among an element's `;`-separated pairs, unquoted.
fn parameter(element: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (key, value) = (pair[..eq].trim_ascii(), pair[eq + 1..].trim_ascii());
        if !key.eq_ignore_ascii_case(name) {
            return None;
        }
        let value = match value {
            [b'"', inner @ .., b'"'] => inner,
            v => v,
        };
        Some(value.to_vec())
    })
}

/// The address of one `Forwarded` element's `for=`: `192.0.2.60`, `"192.0.2.43:47011"`,
/// `"[2001:db8:cafe::17]:4711"`; `None` for `unknown`, an obfuscated name or no `for`.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    node_address(&parameter(element, b"for")?)
}

/// An address with or without its port: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:443`.
fn node_address(node: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(node).ok()?.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok
            .then(|| inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6))
            .flatten();
    }
    let (ip, port) = text.rsplit_once(':')?;
    (is_port(port))
        .then(|| ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4))
        .flatten()
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(nets: &[&str]) -> TrustedNetworks {
        TrustedNetworks::new(
            nets.iter()
                .map(|n| TrustedNetworks::parse_network(n).unwrap())
                .collect(),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_are_cidrs_or_addresses() {
        let t = trusted(&["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]);
        for (addr, inside) in [
            ("10.1.2.3", true),
            ("11.0.0.1", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("2001:db8::1", true),
            ("2001:db9::1", false),
            ("::ffff:10.9.9.9", true),
        ] {
            assert_eq!(t.contains(ip(addr)), inside, "{addr}");
        }
        // Host bits set are the network's.
        assert_eq!(
            TrustedNetworks::parse_network("10.1.2.3/8").unwrap().to_string(),
            "10.0.0.0/8"
        );
        for bad in ["", "10.0.0.0/33", "example.com", "10.0.0/8", "*"] {
            assert!(TrustedNetworks::parse_network(bad).is_err(), "{bad}");
        }
        assert!(TrustedNetworks::default().is_empty() && !TrustedNetworks::default().contains(ip("127.0.0.1")));
    }

    #[test]
    fn the_client_is_the_nearest_untrusted_hop() {
        let t = trusted(&["10.0.0.0/8"]);
        type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a str);
        let cases: &[Case] = &[
            // peer, Forwarded values, X-Forwarded-For values, the client
            ("203.0.113.9", &[], &["198.51.100.1"], "203.0.113.9"), // an untrusted peer: its headers are not read
            ("10.0.0.1", &[], &[], "10.0.0.1"),                     // a trusted peer without headers
            ("10.0.0.1", &[], &["198.51.100.1"], "198.51.100.1"),
            ("10.0.0.1", &[], &["198.51.100.1, 10.0.0.2"], "198.51.100.1"), // two trusted hops
            ("10.0.0.1", &[], &["1.1.1.1, 198.51.100.1"], "198.51.100.1"),  // the client wrote 1.1.1.1
            ("10.0.0.1", &[], &["1.1.1.1", "198.51.100.1"], "198.51.100.1"), // two header lines, in order
            ("10.0.0.1", &[], &["10.0.0.3, 10.0.0.2"], "10.0.0.3"),         // every hop trusted: the leftmost
            ("10.0.0.1", &[], &["unknown, 198.51.100.1"], "198.51.100.1"),
            ("10.0.0.1", &[], &["198.51.100.1, garbage"], "10.0.0.1"), // the walk stops at garbage
            ("10.0.0.1", &[], &["198.51.100.1:5555"], "198.51.100.1"),
            ("10.0.0.1", &[], &["[2001:db8::5]:443"], "2001:db8::5"),
            ("10.0.0.1", &[], &["2001:db8::5"], "2001:db8::5"),
            ("10.0.0.1", &[], &["::ffff:198.51.100.1"], "198.51.100.1"),
            ("::ffff:10.0.0.1", &[], &["198.51.100.1"], "198.51.100.1"),
            // Forwarded wins over X-Forwarded-For.
            ("10.0.0.1", &["for=198.51.100.2"], &["198.51.100.1"], "198.51.100.2"),
            (
                "10.0.0.1",
                &["for=\"[2001:db8:cafe::17]:4711\";proto=https"],
                &[],
                "2001:db8:cafe::17",
            ),
            (
                "10.0.0.1",
                &["For=\"192.0.2.43:47011\", for=10.0.0.2"],
                &[],
                "192.0.2.43",
            ),
            (
                "10.0.0.1",
                &["for=192.0.2.43;by=10.0.0.1, for=_hidden"],
                &[],
                "10.0.0.1",
            ),
            ("10.0.0.1", &["proto=https"], &["198.51.100.1"], "10.0.0.1"), // no `for`: no hop to believe
        ];
        for (peer, forwarded, xff, client) in cases {
            let got = client_of(
                ip(peer),
                &t,
                forwarded.iter().map(|v| v.as_bytes()),
                xff.iter().map(|v| v.as_bytes()),
            );
            assert_eq!(
                got,
                ip(client),
                "peer {peer}, Forwarded {forwarded:?}, X-Forwarded-For {xff:?}"
            );
        }
    }

    #[test]
    fn over_tls_only_when_a_trusted_proxy_says_so() {
        let t = trusted(&["10.0.0.0/8"]);
        let tls = |peer: &str, forwarded: &[&str], xfp: &[&str]| {
            forwarded_over_tls(
                ip(peer),
                &t,
                forwarded.iter().map(|v| v.as_bytes()),
                xfp.iter().map(|v| v.as_bytes()),
            )
        };
        assert!(tls("10.0.0.1", &[], &["https"]));
        assert!(tls("10.0.0.1", &[], &["HTTPS"]));
        assert!(!tls("10.0.0.1", &[], &["http"]));
        assert!(!tls("10.0.0.1", &[], &[]));
        assert!(!tls("203.0.113.9", &[], &["https"]));
        assert!(tls("10.0.0.1", &["for=1.2.3.4;proto=https"], &["http"]));
        assert!(!tls("10.0.0.1", &["for=1.2.3.4;proto=http"], &["https"]));
        // The nearest hop's word.
        assert!(!tls("10.0.0.1", &[], &["https, http"]));
    }
}
