//! Public threat lists: the feeds' formats read into entries ([`parse_feed`]), and the index
//! that tells which list, if any, holds a target ([`ThreatIndex`]). Fetching the feeds, their
//! schedule and the takedowns belong to the callers; nothing here does I/O.
//!
//! Matching, on targets normalised by [`TargetPolicy::validate`]:
//! - A host entry (the `domains` format) matches that host and every subdomain of it:
//!   `evil.example` matches `evil.example` and `a.b.evil.example`, not `notevil.example`.
//!   Addresses compare as [`HostIdentity`]s: `[::ffff:10.1.2.3]` is `10.1.2.3`.
//! - A URL entry (URLhaus, PhishTank, OpenPhish) matches that URL only. Both sides are
//!   normalised as `validate` does, then lose the fragment and a trailing dot of the host;
//!   scheme, port, path and query must then be equal. So `http://evil.example/` matches
//!   `http://evil.example` and nothing under it: phishing pages sit on shared hosts
//!   (`*.web.app`, `*.weebly.com`) whose other pages the feed does not accuse, and blocking
//!   a whole host is the `domains` format's job.
//! - When several lists match, the answer is the first in the order the index was built.

use crate::target::{HostIdentity, TargetPolicy};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::Host;

/// Longest URL entry kept, in bytes: longer than any target a deployment should accept.
pub const MAX_FEED_URL_BYTES: usize = 16 * 1024;

/// How much of a feed's start is searched for a NUL byte, the mark of binary data.
const BINARY_SNIFF_BYTES: usize = 1024;

/// The URL's column in URLhaus rows (`id,dateadded,url,…`), from 0.
const URLHAUS_URL_COLUMN: usize = 2;

/// The format of a threat feed, as the public feeds publish it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeedFormat {
    /// URLhaus CSV (`csv_recent`): `#` comments, then quoted rows whose third column is the URL.
    Urlhaus,
    /// PhishTank `online-valid.json`: an array of objects, each with a `url`.
    Phishtank,
    /// OpenPhish: one URL per line.
    Openphish,
    /// One host per line, or hosts-file lines (`0.0.0.0 evil.example`), with `#` comments.
    Domains,
}

impl FeedFormat {
    /// Every format, in the order the configuration documents them.
    pub const ALL: [FeedFormat; 4] = [
        FeedFormat::Urlhaus,
        FeedFormat::Phishtank,
        FeedFormat::Openphish,
        FeedFormat::Domains,
    ];

    /// The format of a configuration name: `urlhaus`, `phishtank`, `openphish` or `domains`.
    pub fn parse(name: &str) -> Option<FeedFormat> {
        FeedFormat::ALL.into_iter().find(|format| format.as_str() == name)
    }

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            FeedFormat::Urlhaus => "urlhaus",
            FeedFormat::Phishtank => "phishtank",
            FeedFormat::Openphish => "openphish",
            FeedFormat::Domains => "domains",
        }
    }
}

impl fmt::Display for FeedFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a feed was not loaded. Messages say what was wrong and never echo the feed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    #[error("the {0} feed is empty")]
    Empty(FeedFormat),
    #[error("the {0} feed is binary data, not text (still compressed?)")]
    Binary(FeedFormat),
    #[error("the {0} feed is an HTML or XML page, not the feed (an error or sign-in page?)")]
    Markup(FeedFormat),
    #[error("the phishtank feed is not JSON: a syntax error at line {line}, column {column}")]
    NotJson { line: usize, column: usize },
    #[error("the phishtank feed's JSON ends early, at line {line}, column {column} (a truncated download?)")]
    TruncatedJson { line: usize, column: usize },
    #[error(
        "the phishtank feed is JSON but not an array of objects with a string \"url\" \
         (line {line}, column {column})"
    )]
    NotPhishtank { line: usize, column: usize },
    #[error("the {format} feed has no usable entry ({skipped} lines or entries unreadable)")]
    NoUsableEntries { format: FeedFormat, skipped: usize },
}

/// The entries of one feed, normalised for matching, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedFeed {
    urls: Vec<Box<str>>,
    hosts: Vec<HostIdentity>,
    skipped: usize,
}

impl ParsedFeed {
    /// The URL entries, as [`TargetPolicy::validate`] writes them, without the fragment.
    pub fn urls(&self) -> impl ExactSizeIterator<Item = &str> {
        self.urls.iter().map(|url| &**url)
    }

    /// The host entries; each stands for that host and all its subdomains.
    pub fn hosts(&self) -> &[HostIdentity] {
        &self.hosts
    }

    /// Lines or entries left out: unreadable, or no usable entry (a single label, this machine).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// URL and host entries together.
    pub fn len(&self) -> usize {
        self.urls.len() + self.hosts.len()
    }

    /// True when the feed holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads a feed. Bad lines are skipped and counted; a body that is not the format is an error.
/// An empty body is an error (a failed download looks like one); comments alone, or `[]`,
/// are a list with no entries.
pub fn parse_feed(format: FeedFormat, bytes: &[u8]) -> Result<ParsedFeed, FeedError> {
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(bytes);
    check_is_text(format, body)?;
    let mut feed = FeedReader::new();
    match format {
        FeedFormat::Urlhaus => feed.read_urlhaus(body),
        FeedFormat::Phishtank => feed.read_phishtank(body)?,
        FeedFormat::Openphish => feed.read_openphish(body),
        FeedFormat::Domains => feed.read_domains(body),
    }
    feed.finish(format)
}

fn check_is_text(format: FeedFormat, body: &[u8]) -> Result<(), FeedError> {
    let Some(first) = body.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(FeedError::Empty(format));
    };
    let gzip = body.starts_with(&[0x1f, 0x8b]);
    let bzip2 = body.starts_with(b"BZh") && body.get(4..10) == Some(b"1AY&SY".as_slice());
    if gzip || bzip2 || body[..body.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return Err(FeedError::Binary(format));
    }
    if *first == b'<' {
        return Err(FeedError::Markup(format));
    }
    Ok(())
}

/// The entries of a feed as they are read.
struct FeedReader {
    policy: TargetPolicy,
    urls: Vec<Box<str>>,
    hosts: Vec<HostIdentity>,
    skipped: usize,
}

#[derive(serde::Deserialize)]
struct PhishtankEntry {
    url: Option<String>,
}

impl FeedReader {
    fn new() -> FeedReader {
        FeedReader {
            policy: TargetPolicy {
                max_bytes: MAX_FEED_URL_BYTES,
                ..TargetPolicy::default()
            },
            urls: Vec::new(),
            hosts: Vec::new(),
            skipped: 0,
        }
    }

    fn read_urlhaus(&mut self, body: &[u8]) {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .comment(Some(b'#'))
            .from_reader(body);
        let mut row = csv::ByteRecord::new();
        loop {
            match reader.read_byte_record(&mut row) {
                Ok(false) => break,
                Ok(true) => match row.get(URLHAUS_URL_COLUMN).map(std::str::from_utf8) {
                    Some(Ok(url)) => self.add_url(url),
                    _ => self.skipped += 1,
                },
                // Reading from memory, no I/O error comes; any other is one row's, and is passed.
                Err(e) if e.is_io_error() => break,
                Err(_) => self.skipped += 1,
            }
        }
    }

    fn read_phishtank(&mut self, body: &[u8]) -> Result<(), FeedError> {
        let entries: Vec<PhishtankEntry> = serde_json::from_slice(body).map_err(|e| {
            let (line, column) = (e.line(), e.column());
            match e.classify() {
                serde_json::error::Category::Eof => FeedError::TruncatedJson { line, column },
                serde_json::error::Category::Data => FeedError::NotPhishtank { line, column },
                _ => FeedError::NotJson { line, column },
            }
        })?;
        for entry in entries {
            match entry.url {
                Some(url) => self.add_url(&url),
                None => self.skipped += 1,
            }
        }
        Ok(())
    }

    fn read_openphish(&mut self, body: &[u8]) {
        for line in text_lines(body) {
            match line.map(str::trim) {
                Ok("") => {}
                Ok(url) => self.add_url(url),
                Err(_) => self.skipped += 1,
            }
        }
    }

    fn read_domains(&mut self, body: &[u8]) {
        for line in text_lines(body) {
            let Ok(line) = line else {
                self.skipped += 1;
                continue;
            };
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let Some(first) = words.next() else { continue };
            match words.next() {
                None => self.add_host(first),
                Some(name) if is_sinkhole(first) => {
                    self.add_host(name);
                    words.for_each(|name| self.add_host(name));
                }
                // A hosts-file line that maps a name to a real address blocks nothing.
                Some(_) => self.skipped += 1,
            }
        }
    }

    fn add_url(&mut self, raw: &str) {
        match self.policy.validate(raw.trim()).ok().and_then(url_key_owned) {
            Some(key) => self.urls.push(key.into_boxed_str()),
            None => self.skipped += 1,
        }
    }

    fn add_host(&mut self, word: &str) {
        // Lists write IPv6 addresses bare; `HostIdentity::parse` reads them in brackets.
        let identity = match word.parse::<Ipv6Addr>() {
            Ok(v6) => Ok(ip_identity(IpAddr::V6(v6))),
            Err(_) => HostIdentity::parse(word),
        };
        match identity {
            Ok(HostIdentity::Name(name)) if name.contains('.') => self.hosts.push(HostIdentity::Name(name)),
            Ok(HostIdentity::Ip(ip)) => self.hosts.push(HostIdentity::Ip(ip)),
            // Unreadable; a single label, which would block a whole top-level domain; or this
            // machine, as hosts files' headers list it (`127.0.0.1 localhost`).
            _ => self.skipped += 1,
        }
    }

    fn finish(mut self, format: FeedFormat) -> Result<ParsedFeed, FeedError> {
        self.urls.sort_unstable();
        self.urls.dedup();
        self.hosts.sort_unstable_by(|a, b| host_order(a).cmp(&host_order(b)));
        self.hosts.dedup();
        if self.urls.is_empty() && self.hosts.is_empty() && self.skipped > 0 {
            return Err(FeedError::NoUsableEntries {
                format,
                skipped: self.skipped,
            });
        }
        Ok(ParsedFeed {
            urls: self.urls,
            hosts: self.hosts,
            skipped: self.skipped,
        })
    }
}

/// Lines without their line ending; a line that is not UTF-8 is an error of its own.
fn text_lines(body: &[u8]) -> impl Iterator<Item = Result<&str, std::str::Utf8Error>> {
    body.split(|b| *b == b'\n')
        .map(|line| std::str::from_utf8(line.strip_suffix(b"\r").unwrap_or(line)))
}

/// An address that means "nowhere" in a hosts file: 0.0.0.0, 127.0.0.1, ::1 and the like.
fn is_sinkhole(word: &str) -> bool {
    word.parse::<IpAddr>()
        .is_ok_and(|ip| ip_identity(ip) == HostIdentity::Loopback)
}

fn ip_identity(ip: IpAddr) -> HostIdentity {
    HostIdentity::of(&match ip {
        IpAddr::V4(v4) => Host::<&str>::Ipv4(v4),
        IpAddr::V6(v6) => Host::Ipv6(v6),
    })
}

fn host_order(host: &HostIdentity) -> (Option<&str>, Option<IpAddr>) {
    match host {
        HostIdentity::Name(name) => (Some(name), None),
        HostIdentity::Ip(ip) => (None, Some(*ip)),
        HostIdentity::Loopback => (None, None),
    }
}

/// A normalised URL's host as the index compares it.
enum IndexHost<'a> {
    /// Lower-case punycode without the trailing dot.
    Name(&'a str),
    Ip(IpAddr),
    /// This machine, or a host that is no host: no host entry matches it.
    Neither,
}

/// Reads a host as the URL parser writes it (a name, a dotted IPv4 address or a bracketed
/// IPv6 one), without allocating.
fn index_host(host: &str) -> IndexHost<'_> {
    let ip = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<Ipv6Addr>().map(IpAddr::V6)
    } else if let Ok(v4) = host.parse::<Ipv4Addr>() {
        Ok(IpAddr::V4(v4))
    } else {
        return IndexHost::Name(host.strip_suffix('.').unwrap_or(host));
    };
    match ip.map(ip_identity) {
        Ok(HostIdentity::Ip(ip)) => IndexHost::Ip(ip),
        _ => IndexHost::Neither,
    }
}

/// Where the host of a normalised http(s) URL lies: the URL parser writes `scheme://host`,
/// then the port, the path, the query and the fragment, each if any.
fn host_span(url: &str) -> Option<(usize, usize)> {
    let start = if url.starts_with("https://") {
        8
    } else if url.starts_with("http://") {
        7
    } else {
        return None;
    };
    let rest = &url[start..];
    let len = match rest.starts_with('[') {
        true => rest.find(']')? + 1,
        false => rest.find([':', '/', '?', '#']).unwrap_or(rest.len()),
    };
    (len > 0).then_some((start, start + len))
}

/// The key of a normalised URL: without its fragment, its host without a trailing dot, and an
/// IPv4 address written as IPv6 written as IPv4. A prefix of `url` unless the host changes.
fn url_key(url: &str, (start, end): (usize, usize)) -> Cow<'_, str> {
    let host = &url[start..end];
    let key_end = url[end..].find('#').map_or(url.len(), |i| end + i);
    let canonical_host = match index_host(host) {
        IndexHost::Ip(IpAddr::V4(v4)) if host.starts_with('[') => v4.to_string(),
        IndexHost::Name(name) if name.len() != host.len() => name.to_owned(),
        _ => return Cow::Borrowed(&url[..key_end]),
    };
    Cow::Owned(format!("{}{canonical_host}{}", &url[..start], &url[end..key_end]))
}

fn url_key_owned(mut url: String) -> Option<String> {
    let span = host_span(&url)?;
    match url_key(&url, span) {
        Cow::Borrowed(key) => {
            let len = key.len();
            url.truncate(len);
            Some(url)
        }
        Cow::Owned(key) => Some(key),
    }
}

/// What one list brought to a [`ThreatIndex`], for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCounts {
    /// The list's name, as given to [`ThreatIndex::build`].
    pub name: String,
    /// Its URL entries, each once.
    pub urls: usize,
    /// Its host entries, each once.
    pub hosts: usize,
    /// Lines or entries its feed left out.
    pub skipped: usize,
}

/// The entries of several named lists, to match targets against all of them at once.
#[derive(Debug, Default)]
pub struct ThreatIndex {
    lists: Vec<ListCounts>,
    // Each entry once, with the position of the first list that holds it.
    urls: HashMap<Box<str>, u32>,
    names: HashMap<Box<str>, u32>,
    addresses: HashMap<IpAddr, u32>,
}

impl ThreatIndex {
    /// The index of `lists`, in order: an entry in several lists answers with the first.
    pub fn build(lists: impl IntoIterator<Item = (String, ParsedFeed)>) -> ThreatIndex {
        let mut index = ThreatIndex::default();
        for (position, (name, feed)) in lists.into_iter().enumerate() {
            let list = u32::try_from(position).expect("fewer than 2^32 lists");
            index.lists.push(ListCounts {
                name,
                urls: feed.urls.len(),
                hosts: feed.hosts.len(),
                skipped: feed.skipped,
            });
            index.urls.reserve(feed.urls.len());
            for url in feed.urls {
                index.urls.entry(url).or_insert(list);
            }
            for host in feed.hosts {
                match host {
                    HostIdentity::Name(name) => {
                        index.names.entry(name.into_boxed_str()).or_insert(list);
                    }
                    HostIdentity::Ip(ip) => {
                        index.addresses.entry(ip).or_insert(list);
                    }
                    // `parse_feed` keeps none: a threat list does not block this machine.
                    HostIdentity::Loopback => {}
                }
            }
        }
        index.urls.shrink_to_fit();
        index.names.shrink_to_fit();
        index.addresses.shrink_to_fit();
        index
    }

    /// The name of the first list matching `target`, a URL as [`TargetPolicy::validate`]
    /// returns it (another spelling may be missed), or `None`.
    pub fn find(&self, target: &str) -> Option<&str> {
        let span = host_span(target)?;
        let mut first = None;
        if !self.urls.is_empty() {
            first = earliest(first, self.urls.get(&*url_key(target, span)));
        }
        match index_host(&target[span.0..span.1]) {
            // Entries have two labels or more: the last label alone is not looked up.
            IndexHost::Name(mut suffix) if !self.names.is_empty() => {
                while let Some(dot) = suffix.find('.') {
                    first = earliest(first, self.names.get(suffix));
                    suffix = &suffix[dot + 1..];
                }
            }
            IndexHost::Ip(ip) => first = earliest(first, self.addresses.get(&ip)),
            _ => {}
        }
        first.map(|list| self.lists[list as usize].name.as_str())
    }

    /// Distinct entries across all lists.
    pub fn len(&self) -> usize {
        self.urls.len() + self.names.len() + self.addresses.len()
    }

    /// True when no list brought an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each list's counts, in the order given to [`ThreatIndex::build`].
    pub fn lists(&self) -> &[ListCounts] {
        &self.lists
    }
}

impl ThreatIndex {
    /// What a rescan after the lists went from `before` to `self` must look up in the index
    /// of links by target host: the [`host_key`] prefix of every entry `self` holds and
    /// `before` did not (a URL entry's host, for the URL is matched afterwards with
    /// [`ThreatIndex::find`]), each once, sorted. Every entry when `before` is `None` (no
    /// rescan made yet). Entries dropped need nothing: the links they matched are down.
    pub fn host_keys_added_since(&self, before: Option<&ThreatIndex>) -> Vec<String> {
        let mut keys = std::collections::BTreeSet::new();
        for url in self.urls.keys() {
            if before.is_some_and(|b| b.urls.contains_key(url)) {
                continue;
            }
            if let Some(key) = host_key(url) {
                keys.insert(key);
            }
        }
        for name in self.names.keys() {
            if !before.is_some_and(|b| b.names.contains_key(name)) {
                keys.insert(name_key(name));
            }
        }
        for ip in self.addresses.keys() {
            if !before.is_some_and(|b| b.addresses.contains_key(ip)) {
                keys.insert(address_key(*ip));
            }
        }
        keys.into_iter().collect()
    }
}

/// The key the stores index an active link under by its target's host (the index a rescan
/// reads instead of every link, docs/spec.md §12): a name's labels in reverse order, each followed
/// by a dot (`a.evil.example` → `example.evil.a.`), so that the links on a host and on
/// every subdomain of it are the keys that start with the host's key; an address in
/// brackets (`[203.0.113.7]`, an IPv4-mapped IPv6 address as its IPv4). `None` for a target
/// that is not a normalised http(s) URL, or whose host is this machine: no list holds it.
pub fn host_key(target: &str) -> Option<String> {
    let (start, end) = host_span(target)?;
    match index_host(&target[start..end]) {
        IndexHost::Name(name) if !name.is_empty() => Some(name_key(name)),
        IndexHost::Ip(ip) => Some(address_key(ip)),
        _ => None,
    }
}

fn name_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len() + 1);
    for label in name.rsplit('.') {
        key.push_str(label);
        key.push('.');
    }
    key
}

fn address_key(ip: IpAddr) -> String {
    format!("[{ip}]")
}

/// The part of a [`host_key`] that a store partitions its index by, when it must
/// (DynamoDB's key condition reads one partition): a name's last two labels (`example.evil`
/// for every host under `evil.example`), a name of one label that label, an address whole.
/// Every key that starts with the key of a name of two labels or more, or with the key of
/// a URL entry's host, has the same zone as that key; host entries have two labels or more
/// ([`ThreatIndex::find`] never matches one label alone). `None` for what is not a key.
pub fn host_key_zone(key: &str) -> Option<&str> {
    if key.starts_with('[') {
        return key.ends_with(']').then_some(key);
    }
    let first = key.find('.')?;
    match key[first + 1..].find('.') {
        Some(second) => Some(&key[..first + 1 + second]),
        None => Some(&key[..first]),
    }
}

/// The least string greater than every string that starts with `prefix` (a key range's
/// end, exclusive): `prefix` with its last character's successor. Keys are ASCII.
pub fn host_key_prefix_end(prefix: &str) -> String {
    let mut end = prefix.to_owned();
    match end.pop() {
        Some(last) => end.push(char::from_u32(last as u32 + 1).unwrap_or(char::MAX)),
        None => end.push(char::MAX),
    }
    end
}

fn earliest(found: Option<u32>, other: Option<&u32>) -> Option<u32> {
    match (found, other) {
        (Some(a), Some(&b)) => Some(a.min(b)),
        (a, b) => a.or(b.copied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_keys_put_a_host_and_its_subdomains_under_one_prefix() {
        let cases: &[(&str, Option<&str>)] = &[
            ("https://evil.example/p", Some("example.evil.")),
            ("https://a.b.evil.example:8443/p?q#f", Some("example.evil.b.a.")),
            ("http://evil.example./", Some("example.evil.")),
            ("http://203.0.113.7/x", Some("[203.0.113.7]")),
            ("http://[::ffff:203.0.113.7]/x", Some("[203.0.113.7]")),
            ("http://[2001:db8::1]:80/", Some("[2001:db8::1]")),
            ("http://127.0.0.1/", None),
            ("ftp://evil.example/", None),
        ];
        for (target, key) in cases {
            assert_eq!(host_key(target).as_deref(), *key, "{target}");
        }
        let sub = host_key("https://a.evil.example/").unwrap();
        let other = host_key("https://notevil.example/").unwrap();
        assert!(sub.starts_with("example.evil."));
        assert!(!other.starts_with("example.evil."));
        let zones: &[(&str, Option<&str>)] = &[
            ("example.evil.b.a.", Some("example.evil")),
            ("example.evil.", Some("example.evil")),
            ("intranet.", Some("intranet")),
            ("nodot", None),
            ("[203.0.113.7]", Some("[203.0.113.7]")),
        ];
        for (key, zone) in zones {
            assert_eq!(host_key_zone(key), *zone, "{key}");
        }
        assert_eq!(host_key_prefix_end("example.evil."), "example.evil/");
        assert!(host_key_prefix_end("example.evil.").as_str() > "example.evil.zzz.");
    }

    #[test]
    fn the_host_keys_a_list_change_looks_up_are_its_new_entries_alone() {
        let index = |hosts: &str, urls: &str| {
            let mut lists = vec![(
                "d".to_owned(),
                parse_feed(FeedFormat::Domains, hosts.as_bytes()).unwrap(),
            )];
            if !urls.is_empty() {
                lists.push((
                    "u".to_owned(),
                    parse_feed(FeedFormat::Openphish, urls.as_bytes()).unwrap(),
                ));
            }
            ThreatIndex::build(lists)
        };
        let a = index("w.example\nx.example\n203.0.113.9\n", "https://phish.web.app/login\n");
        let b = index("x.example\n", "");
        assert_eq!(
            a.host_keys_added_since(None),
            vec!["[203.0.113.9]", "app.web.phish.", "example.w.", "example.x."]
        );
        assert_eq!(b.host_keys_added_since(Some(&a)), Vec::<String>::new());
        assert_eq!(
            a.host_keys_added_since(Some(&b)),
            vec!["[203.0.113.9]", "app.web.phish.", "example.w."]
        );
        assert_eq!(a.host_keys_added_since(Some(&a)), Vec::<String>::new());
    }

    /// The shape of `https://urlhaus.abuse.ch/downloads/csv_recent/` (made-up ids and hosts).
    const URLHAUS: &str = r#"################################################################
# abuse.ch URLhaus Database Dump (CSV - recent URLs only)      #
# Last updated: 2026-12-05 06:05:11 (UTC)                      #
#                                                              #
# Terms Of Use: https://urlhaus.abuse.ch/api/                  #
# For questions please contact urlhaus [at] abuse.ch           #
################################################################
#
# id,dateadded,url,url_status,last_online,threat,tags,urlhaus_link,reporter
"3901544","2026-12-05 06:05:11","http://198.51.100.23:45873/i","online","2026-12-05 06:05:11","malware_download","32-bit,elf,mips,Mozi","https://urlhaus.abuse.ch/url/3901544/","geenensp"
"3901543","2026-12-05 06:01:40","https://dl.files-cdn.example/a44f43f1-dc49-4a45-b725-33106ce13f94","offline","","malware_download","ClearFake","https://urlhaus.abuse.ch/url/3901543/","anonymous"
"3901542","2026-12-05 05:58:02","http://Pagos-Banc0.example","online","2026-12-05 05:58:02","malware_download","exe","https://urlhaus.abuse.ch/url/3901542/","anon"
"3901541","2026-12-05 05:51:29","http://203.0.113.208:50583/bin.sh","online","2026-12-05 05:51:29","malware_download","None","https://urlhaus.abuse.ch/url/3901541/","aLittleBitGrey"
"3901540","2026-12-05 05:47:14","http://198.51.100.23:45873/i","offline","","malware_download","32-bit,elf,mips,Mozi","https://urlhaus.abuse.ch/url/3901540/","geenensp"
"3901539","2026-12-05 05:40:00","hxxp://defanged.example/x","online","","malware_download","None","https://urlhaus.abuse.ch/url/3901539/","anon"
"3901538","2026-12-05 05:39:00"
"#;

    /// The shape of PhishTank's `online-valid.json`: one line, `\/` escapes, ids as numbers
    /// or strings (made-up entries).
    const PHISHTANK: &str = r#"[{"phish_id":9012345,"url":"https:\/\/secure-login-verify.web.app\/","phish_detail_url":"http:\/\/www.phishtank.com\/phish_detail.php?phish_id=9012345","submission_time":"2026-12-05T03:23:46+00:00","verified":"yes","verification_time":"2026-12-05T03:26:44+00:00","online":"yes","details":[{"ip_address":"198.51.100.100","cidr_block":"198.51.100.0\/24","announcing_network":"54113","rir":"arin","country":"US","detail_time":"2026-12-05T03:26:22+00:00"}],"target":"Other"},{"phish_id":"9012344","url":"http:\/\/bank.example.co\/Login\/index.php?session=a1b2#top","phish_detail_url":"http:\/\/www.phishtank.com\/phish_detail.php?phish_id=9012344","submission_time":"2026-12-05T03:20:00+00:00","verified":"yes","verification_time":"2026-12-05T03:21:00+00:00","online":"yes","details":[],"target":"Bank of Example"},{"phish_id":9012343,"url":"www.no-scheme.example\/login","phish_detail_url":"http:\/\/www.phishtank.com\/phish_detail.php?phish_id=9012343","submission_time":"2026-12-05T03:10:00+00:00","verified":"yes","verification_time":"2026-12-05T03:11:00+00:00","online":"yes","details":[],"target":"Other"},{"phish_id":9012342,"phish_detail_url":"http:\/\/www.phishtank.com\/phish_detail.php?phish_id=9012342","verified":"yes","online":"yes","target":"Other"}]"#;

    /// OpenPhish's `feed.txt`: one URL per line.
    const OPENPHISH: &str = "https://secure-login-verify.web.app/\n\
        http://203.0.113.7/wp-content/plugins/office365/login.php\n\
        \n\
        https://example-support.weebly.com/\n\
        hxxp://defanged.example/\n\
        http://bücher.example/signin\r\n\
        https://example-support.weebly.com/\n";

    /// The head of a hosts-file blocklist (StevenBlack/hosts' shape).
    const HOSTS: &str = "# Title: StevenBlack/hosts\n\
        #\n\
        127.0.0.1 localhost\n\
        127.0.0.1 local\n\
        255.255.255.255 broadcasthost\n\
        ::1 localhost\n\
        fe80::1%lo0 localhost\n\
        0.0.0.0 0.0.0.0\n\
        \n\
        # Start of entries\n\
        0.0.0.0 evil.example\n\
        0.0.0.0 ads.tracker.example # ad server\n\
        127.0.0.1 Malware.EXAMPLE.\n\
        0.0.0.0 a.example\tb.example\n\
        0.0.0.0 evil.example\n";

    /// A plain list: one host per line.
    const DOMAINS: &str = "# phishing domains, one per line\n\
        evil.example\n\
        EVIL.example\n\
        bücher.example   # trailing comment\n\
        10.1.2.3\n\
        2001:db8::7\n\
        [2001:DB8::8]\n\
        not a host line\n\
        ||adblock.example^\n\
        http://url.example/\n\
        com\n";

    fn name(n: &str) -> HostIdentity {
        HostIdentity::Name(n.into())
    }

    fn ip(text: &str) -> HostIdentity {
        HostIdentity::Ip(text.parse().unwrap())
    }

    #[test]
    fn format_names() {
        for format in FeedFormat::ALL {
            assert_eq!(FeedFormat::parse(format.as_str()), Some(format));
            assert_eq!(format.to_string(), format.as_str());
        }
        for (text, want) in [
            ("urlhaus", Some(FeedFormat::Urlhaus)),
            ("phishtank", Some(FeedFormat::Phishtank)),
            ("openphish", Some(FeedFormat::Openphish)),
            ("domains", Some(FeedFormat::Domains)),
            ("URLhaus", None),
            ("hosts", None),
            ("", None),
        ] {
            assert_eq!(FeedFormat::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn each_format_is_read_with_bad_lines_skipped_and_counted() {
        // Format, body, the URL entries, the host entries, the lines or entries skipped.
        type Case<'a> = (FeedFormat, &'a str, &'a [&'a str], &'a [HostIdentity], usize);
        let cases: &[Case] = &[
            (
                FeedFormat::Urlhaus,
                URLHAUS,
                &[
                    "http://198.51.100.23:45873/i",
                    "http://203.0.113.208:50583/bin.sh",
                    "http://pagos-banc0.example/",
                    "https://dl.files-cdn.example/a44f43f1-dc49-4a45-b725-33106ce13f94",
                ],
                &[],
                2,
            ),
            (
                FeedFormat::Urlhaus,
                &URLHAUS.replace('\n', "\r\n"),
                &[
                    "http://198.51.100.23:45873/i",
                    "http://203.0.113.208:50583/bin.sh",
                    "http://pagos-banc0.example/",
                    "https://dl.files-cdn.example/a44f43f1-dc49-4a45-b725-33106ce13f94",
                ],
                &[],
                2,
            ),
            (
                FeedFormat::Phishtank,
                PHISHTANK,
                &[
                    "http://bank.example.co/Login/index.php?session=a1b2",
                    "https://secure-login-verify.web.app/",
                ],
                &[],
                2,
            ),
            (FeedFormat::Phishtank, "[]", &[], &[], 0),
            (
                FeedFormat::Openphish,
                OPENPHISH,
                &[
                    "http://203.0.113.7/wp-content/plugins/office365/login.php",
                    "http://xn--bcher-kva.example/signin",
                    "https://example-support.weebly.com/",
                    "https://secure-login-verify.web.app/",
                ],
                &[],
                1,
            ),
            (
                FeedFormat::Domains,
                HOSTS,
                &[],
                &[
                    name("a.example"),
                    name("ads.tracker.example"),
                    name("b.example"),
                    name("evil.example"),
                    name("malware.example"),
                ],
                // localhost twice, local, broadcasthost, fe80::1%lo0, 0.0.0.0 as a name.
                6,
            ),
            (
                FeedFormat::Domains,
                DOMAINS,
                &[],
                &[
                    ip("10.1.2.3"),
                    ip("2001:db8::7"),
                    ip("2001:db8::8"),
                    name("evil.example"),
                    name("xn--bcher-kva.example"),
                ],
                4,
            ),
            (
                FeedFormat::Openphish,
                &format!(
                    "https://a.example/\nhttps://b.example/{}\n",
                    "x".repeat(MAX_FEED_URL_BYTES)
                ),
                &["https://a.example/"],
                &[],
                1,
            ),
            (FeedFormat::Domains, "# nothing listed today\n", &[], &[], 0),
            (FeedFormat::Urlhaus, "#\n# id,dateadded,url\n", &[], &[], 0),
            (
                FeedFormat::Openphish,
                "\u{feff}https://bom.example/\n",
                &["https://bom.example/"],
                &[],
                0,
            ),
        ];
        for (format, body, urls, hosts, skipped) in cases {
            let feed = parse_feed(*format, body.as_bytes()).unwrap_or_else(|e| panic!("{format}: {e}"));
            assert_eq!(feed.urls().collect::<Vec<_>>(), *urls, "{format}");
            assert_eq!(feed.hosts(), *hosts, "{format}");
            assert_eq!(feed.skipped(), *skipped, "{format}");
            assert_eq!(feed.len(), urls.len() + hosts.len(), "{format}");
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped() {
        let body = b"https://a.example/\nhttps://b.example/\xff\nhttps://c.example/\n";
        let feed = parse_feed(FeedFormat::Openphish, body).unwrap();
        assert_eq!(feed.len(), 2);
        assert_eq!(feed.skipped(), 1);
        let feed = parse_feed(FeedFormat::Domains, b"a.example\n\xfe.example\n").unwrap();
        assert_eq!(feed.hosts(), [name("a.example")]);
        assert_eq!(feed.skipped(), 1);
    }

    #[test]
    fn a_body_that_is_not_the_format_is_an_error() {
        let html = "<!DOCTYPE html>\n<html><head><title>Just a moment...</title></head></html>";
        let one_url_per_line = "https://a.example/x\nhttps://b.example/y\n";
        let cases: &[(FeedFormat, &[u8], FeedError)] = &[
            (FeedFormat::Openphish, b"", FeedError::Empty(FeedFormat::Openphish)),
            (FeedFormat::Domains, b" \r\n\n", FeedError::Empty(FeedFormat::Domains)),
            (
                FeedFormat::Phishtank,
                b"\xEF\xBB\xBF",
                FeedError::Empty(FeedFormat::Phishtank),
            ),
            (
                FeedFormat::Phishtank,
                html.as_bytes(),
                FeedError::Markup(FeedFormat::Phishtank),
            ),
            (
                FeedFormat::Urlhaus,
                b"\n  <?xml version=\"1.0\"?><Error>AccessDenied</Error>",
                FeedError::Markup(FeedFormat::Urlhaus),
            ),
            (
                FeedFormat::Domains,
                html.as_bytes(),
                FeedError::Markup(FeedFormat::Domains),
            ),
            (
                FeedFormat::Phishtank,
                b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xed\x9d",
                FeedError::Binary(FeedFormat::Phishtank),
            ),
            (
                FeedFormat::Openphish,
                b"BZh91AY&SY\xb3\x1e\x8c\x9d",
                FeedError::Binary(FeedFormat::Openphish),
            ),
            (
                FeedFormat::Domains,
                b"\xff\xfee\x00v\x00i\x00l\x00",
                FeedError::Binary(FeedFormat::Domains),
            ),
            (
                FeedFormat::Phishtank,
                br#"[{"phish_id":1,"url":"https:\/\/a.example\/"},{"phish_id":2,"#,
                FeedError::TruncatedJson { line: 1, column: 60 },
            ),
            (
                FeedFormat::Phishtank,
                b"phish_id,url,phish_detail_url\n1,https://a.example/,x",
                FeedError::NotJson { line: 1, column: 1 },
            ),
            (
                FeedFormat::Phishtank,
                br#"{"errortext":"You must supply an app key"}"#,
                FeedError::NotPhishtank { line: 1, column: 0 },
            ),
            (
                FeedFormat::Phishtank,
                br#"["https://a.example/"]"#,
                FeedError::NotPhishtank { line: 1, column: 21 },
            ),
            (
                FeedFormat::Phishtank,
                br#"[{"url":7}]"#,
                FeedError::NotPhishtank { line: 1, column: 9 },
            ),
            (
                FeedFormat::Urlhaus,
                one_url_per_line.as_bytes(),
                FeedError::NoUsableEntries {
                    format: FeedFormat::Urlhaus,
                    skipped: 2,
                },
            ),
            (
                FeedFormat::Openphish,
                b"evil.example\nbad.example\n",
                FeedError::NoUsableEntries {
                    format: FeedFormat::Openphish,
                    skipped: 2,
                },
            ),
            (
                FeedFormat::Urlhaus,
                PHISHTANK.as_bytes(),
                FeedError::NoUsableEntries {
                    format: FeedFormat::Urlhaus,
                    skipped: 1,
                },
            ),
            (
                FeedFormat::Domains,
                PHISHTANK.as_bytes(),
                FeedError::NoUsableEntries {
                    format: FeedFormat::Domains,
                    skipped: 1,
                },
            ),
            (
                FeedFormat::Domains,
                one_url_per_line.as_bytes(),
                FeedError::NoUsableEntries {
                    format: FeedFormat::Domains,
                    skipped: 2,
                },
            ),
        ];
        for (format, body, want) in cases {
            assert_eq!(parse_feed(*format, body).as_ref(), Err(want), "{format}: {body:?}");
        }
    }

    #[test]
    fn errors_never_echo_the_feed() {
        let long = "x".repeat(1 << 20);
        let bodies = [
            (FeedFormat::Phishtank, format!("[\"{long}\"]")),
            (FeedFormat::Phishtank, format!("{{\"{long}\"")),
            (FeedFormat::Phishtank, format!("{long}]")),
            (FeedFormat::Openphish, format!("{long}\n{long}")),
            (FeedFormat::Urlhaus, format!("\"1\",\"2\",\"{long}\"")),
            (FeedFormat::Domains, format!("<p>{long}")),
        ];
        for (format, body) in bodies {
            let message = parse_feed(format, body.as_bytes()).unwrap_err().to_string();
            assert!(message.len() < 160 && !message.contains("xxx"), "{format}: {message}");
        }
    }

    fn normalised(raw: &str) -> String {
        TargetPolicy::default().validate(raw).unwrap()
    }

    fn index(lists: &[(&str, FeedFormat, &str)]) -> ThreatIndex {
        ThreatIndex::build(
            lists
                .iter()
                .map(|(name, format, body)| (name.to_string(), parse_feed(*format, body.as_bytes()).unwrap())),
        )
    }

    #[test]
    fn matching_rules() {
        let threats = index(&[
            (
                "urls",
                FeedFormat::Openphish,
                "HTTP://Login.Bank.example:80/Verify/?step=1#frag\n\
                 https://secure-login-verify.web.app\n\
                 http://bücher.example/ä\n\
                 http://[::ffff:203.0.113.9]/gate.php\n\
                 http://evil.example./dot\n",
            ),
            (
                "domains",
                FeedFormat::Domains,
                "evil.example\n0x0a.1.2.3\nphish.example.\n2001:db8::1\n",
            ),
            ("second", FeedFormat::Domains, "login.bank.example\nevil.example\n"),
        ]);
        let cases: &[(&str, Option<&str>)] = &[
            // A host entry: the host and its subdomains, not a look-alike.
            ("https://evil.example/", Some("domains")),
            ("https://EVIL.example./x?y", Some("domains")),
            ("https://a.b.evil.example/x", Some("domains")),
            ("http://evil.example:8080/", Some("domains")),
            ("https://notevil.example/", None),
            ("https://evil.example.com/", None),
            ("https://evil.examples/", None),
            ("https://example/", None),
            ("http://phish.example./x", Some("domains")),
            ("http://x.phish.example/", Some("domains")),
            // Addresses in any spelling.
            ("http://10.1.2.3/x", Some("domains")),
            ("http://0x0a.1.2.3/x", Some("domains")),
            ("http://167838211/", Some("domains")),
            ("http://10.1.515/", Some("domains")),
            ("http://[::ffff:10.1.2.3]/", Some("domains")),
            ("http://10.1.2.4/", None),
            ("http://10.1.2.3.example/", None),
            ("http://[2001:db8:0::1]:8443/", Some("domains")),
            ("http://[2001:db8::2]/", None),
            // A URL entry: that URL after normalisation, whatever its fragment.
            ("http://login.bank.example/Verify/?step=1", Some("urls")),
            ("HTTP://LOGIN.BANK.EXAMPLE:80/Verify/?step=1", Some("urls")),
            ("http://login.bank.example./Verify/?step=1", Some("urls")),
            ("http://login.bank.example/Verify/?step=1#other", Some("urls")),
            // Another path, query or scheme is only the host entry of a later list.
            ("http://login.bank.example/verify/?step=1", Some("second")),
            ("http://login.bank.example/Verify?step=1", Some("second")),
            ("http://login.bank.example/Verify/?step=2", Some("second")),
            ("https://login.bank.example/Verify/?step=1", Some("second")),
            ("https://bank.example/Verify/?step=1", None),
            // A bare host entry is that URL alone.
            ("https://secure-login-verify.web.app", Some("urls")),
            ("https://secure-login-verify.web.app/", Some("urls")),
            ("https://secure-login-verify.web.app/#x", Some("urls")),
            ("https://secure-login-verify.web.app/other", None),
            ("https://secure-login-verify.web.app/?x=1", None),
            ("http://secure-login-verify.web.app/", None),
            ("https://other.web.app/", None),
            // Percent-encoding and punycode as the URL parser writes them.
            ("http://bücher.example/ä", Some("urls")),
            ("http://xn--bcher-kva.example/%C3%A4", Some("urls")),
            ("http://BÜCHER.example/ä#top", Some("urls")),
            ("http://bücher.example/a", None),
            // An IPv4 address written as IPv6 in the entry, or in the target.
            ("http://203.0.113.9/gate.php", Some("urls")),
            ("http://[::ffff:cb00:7109]/gate.php", Some("urls")),
            ("http://203.0.113.9/other.php", None),
            // The URL entry of the first list wins over the host entry of a later one.
            ("http://evil.example/dot", Some("urls")),
            ("http://evil.example./dot#x", Some("urls")),
        ];
        for (raw, want) in cases {
            let target = normalised(raw);
            assert_eq!(threats.find(&target), *want, "{raw} (normalised {target})");
        }
    }

    #[test]
    fn the_first_list_in_the_order_given_answers() {
        let a = ("a", FeedFormat::Domains, "evil.example\n");
        let b = ("b", FeedFormat::Openphish, "https://www.evil.example/login\n");
        let c = ("c", FeedFormat::Domains, "www.evil.example\n");
        let target = normalised("https://www.evil.example/login");
        for (lists, want) in [
            (vec![a, b, c], "a"),
            (vec![b, a, c], "b"),
            (vec![c, b, a], "c"),
            (vec![c, a], "c"),
            (vec![a, c], "a"),
        ] {
            assert_eq!(index(&lists).find(&target), Some(want), "{lists:?}");
        }
    }

    #[test]
    fn a_target_that_is_no_http_url_matches_nothing() {
        let threats = index(&[
            ("d", FeedFormat::Domains, "evil.example\n0.0.0.0 localhost.example\n"),
            ("u", FeedFormat::Openphish, "http://evil.example/\n"),
        ]);
        for target in [
            "",
            "evil.example",
            "ftp://evil.example/",
            "http://",
            "https:///x",
            "http://[evil.example/",
            "http://localhost/",
            "http://127.0.0.1/",
        ] {
            assert_eq!(threats.find(target), None, "{target:?}");
        }
    }

    #[test]
    fn counts_per_list_and_in_all() {
        let threats = index(&[
            ("openphish", FeedFormat::Openphish, OPENPHISH),
            ("hosts", FeedFormat::Domains, HOSTS),
            ("domains", FeedFormat::Domains, DOMAINS),
            ("urlhaus", FeedFormat::Urlhaus, URLHAUS),
        ]);
        let counts: Vec<_> = threats
            .lists()
            .iter()
            .map(|l| (l.name.as_str(), l.urls, l.hosts, l.skipped))
            .collect();
        assert_eq!(
            counts,
            [
                ("openphish", 4, 0, 1),
                ("hosts", 0, 5, 6),
                ("domains", 0, 5, 4),
                ("urlhaus", 4, 0, 2)
            ]
        );
        // evil.example is in two lists; the URLs are distinct.
        assert_eq!(threats.len(), 4 + 5 + 4 + 4);
        assert!(!threats.is_empty());
        assert!(ThreatIndex::build([]).is_empty());
        assert_eq!(ThreatIndex::build([]).find("https://evil.example/"), None);
    }
}
