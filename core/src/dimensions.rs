//! A click's dimensions (docs/spec.md §13): country, referrer host, device class with browser
//! and OS families, and campaign, each derived from a request's bytes into a small bounded
//! value. What a value is made from (the address, the whole User-Agent, the referrer's path
//! and query) is never part of it: a dimension holds only what is counted.
//!
//! The User-Agent's families come from a parser in the data plane (`proxy/src/visitor.rs`),
//! the country from a database or a CDN header (`proxy/src/geoip.rs`); what is parsed here
//! is what needs no table: the referrer's host, the `utm_*` parameters, the CDN header.

use std::fmt;
use url::form_urlencoded;

/// Text of at most `N` bytes (`N` ≤ 255) held inline: a dimension's value, never an
/// allocation, so a click carries it by copy.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label<const N: usize> {
    len: u8,
    bytes: [u8; N],
}

impl<const N: usize> Label<N> {
    const FITS: () = assert!(N <= u8::MAX as usize, "a label's length is one byte");

    /// `text`, cut to its longest prefix of at most `N` bytes that ends on a character.
    pub fn truncated(text: &str) -> Label<N> {
        let () = Self::FITS;
        let mut end = text.len().min(N);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; N];
        bytes[..end].copy_from_slice(&text.as_bytes()[..end]);
        Label { len: end as u8, bytes }
    }

    /// The bytes of the text (no UTF-8 check: what a hash of it needs).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).expect("a label is built from a str")
    }
}

impl<const N: usize> fmt::Debug for Label<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for Label<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a click came from, by country: an ISO 3166-1 alpha-2 code, Tor (a CDN's verdict),
/// or unknown. Two bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country([u8; 2]);

impl Country {
    /// No database entry, no header, or a value that is not a country.
    pub const UNKNOWN: Country = Country(*b"--");
    /// Cloudflare's `T1`: the visitor came over Tor, from no country.
    pub const TOR: Country = Country(*b"T1");

    /// A database's or a header's two letters, in either case. `XX` (Cloudflare's "no
    /// country") and `ZZ` (ISO's user-assigned "unknown") are unknown, as is anything that
    /// is not two ASCII letters; other codes are kept as sent (`EU` and `AP`, which old
    /// databases give for whole regions, included).
    pub fn from_code(code: &[u8]) -> Country {
        match code {
            [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
                match [a.to_ascii_uppercase(), b.to_ascii_uppercase()] {
                    [b'X', b'X'] | [b'Z', b'Z'] => Country::UNKNOWN,
                    code => Country(code),
                }
            }
            _ => Country::UNKNOWN,
        }
    }

    /// The code of a known country.
    pub fn code(&self) -> Option<&str> {
        match *self {
            Country::UNKNOWN | Country::TOR => None,
            _ => Some(self.as_str()),
        }
    }

    /// The two letters of a known country's code, without a UTF-8 check.
    #[inline]
    pub fn letters(&self) -> Option<[u8; 2]> {
        match *self {
            Country::UNKNOWN | Country::TOR => None,
            _ => Some(self.0),
        }
    }

    /// As a breakdown shows it: the code, `tor` or `unknown`.
    pub fn as_str(&self) -> &str {
        match *self {
            Country::UNKNOWN => "unknown",
            Country::TOR => "tor",
            _ => std::str::from_utf8(&self.0).expect("two ASCII letters"),
        }
    }
}

impl fmt::Debug for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The country a trusted CDN says the visitor is in: `CloudFront-Viewer-Country` or
/// `CF-IPCountry` (two letters; Cloudflare also sends `XX` for none and `T1` for Tor).
pub fn cdn_country(value: &[u8]) -> Country {
    match value.trim_ascii() {
        b"T1" | b"t1" => Country::TOR,
        code => Country::from_code(code),
    }
}

/// The longest referrer host kept (a DNS label's limit is 63 bytes; a longer name is
/// almost always generated, and counted as `unknown`).
pub const REFERRER_HOST_MAX: usize = 64;

/// Where the visitor followed the link from, by host alone.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Referrer {
    /// No `Referer` (typed, bookmarked, an app, or a page whose policy sends none).
    Direct,
    /// The host of an `http`/`https` referrer: lower-case ASCII as browsers send it
    /// (internationalised names in punycode), without port, user or trailing dot; `www.`
    /// kept (`www.example.com` and `example.com` are counted apart, as sent).
    Host(Label<REFERRER_HOST_MAX>),
    /// A `Referer` that is not an absolute `http`/`https` URL with a host of at most
    /// [`REFERRER_HOST_MAX`] bytes (`android-app://…`, a bare path, garbage).
    Unknown,
}

impl Referrer {
    /// As a breakdown shows it: `direct`, the host, or `unknown`.
    pub fn as_str(&self) -> &str {
        match self {
            Referrer::Direct => "direct",
            Referrer::Host(host) => host.as_str(),
            Referrer::Unknown => "unknown",
        }
    }
}

/// The referrer host of a request whose `Referer` header is `referer` (see [`Referrer`]).
/// Parsed by hand, not with `url::Url` (which allocates the whole URL to read one part):
/// the scheme, then the authority up to the first `/`, `?` or `#`, then user and port
/// dropped; the host must be a name of letters, digits, `-`, `_` and `.`, or a bracketed
/// IPv6 address. An empty header is `direct` (it says nothing); a host spelled `direct` or
/// `unknown` is `unknown`, so that a value means one thing.
pub fn referrer_host(referer: Option<&[u8]>) -> Referrer {
    match referrer_authority(referer) {
        Ok(authority) => referrer_of_authority(authority),
        Err(referrer) => referrer,
    }
}

/// The first step of [`referrer_host`]: the authority (`user@host:port`) of an `http`/`https`
/// `Referer`, or the referrer it already is (`direct`, `unknown`). A caller that remembers
/// [`referrer_of_authority`]'s answers by authority reads a header in two scans of it.
pub fn referrer_authority(referer: Option<&[u8]>) -> Result<&[u8], Referrer> {
    let Some(referer) = referer else {
        return Err(Referrer::Direct);
    };
    let referer = referer.trim_ascii();
    if referer.is_empty() {
        return Err(Referrer::Direct);
    }
    let rest = strip_scheme(referer).ok_or(Referrer::Unknown)?;
    // memchr's three-byte search, not a loop over the bytes (and the scheme compared as one
    // word): this function cost 253 instructions a redirect with Hacker News's `Referer`
    // under callgrind, and with both the click's capture fell by 123
    // (benches/results/2026-12-06o-callgrind-rules-language.md).
    let authority_end = memchr::memchr3(b'/', b'?', b'#', rest).unwrap_or(rest.len());
    Ok(&rest[..authority_end])
}

/// The second step of [`referrer_host`]: the referrer an authority names.
pub fn referrer_of_authority(authority: &[u8]) -> Referrer {
    let host_port = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = match host_without_port(host_port) {
        Some(host) => host,
        None => return Referrer::Unknown,
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    if host.is_empty() || host.len() > REFERRER_HOST_MAX {
        return Referrer::Unknown;
    }
    let mut lower = [0u8; REFERRER_HOST_MAX];
    for (to, &from) in lower.iter_mut().zip(host) {
        *to = from.to_ascii_lowercase();
    }
    let lower = &lower[..host.len()];
    if lower == b"direct" || lower == b"unknown" {
        return Referrer::Unknown;
    }
    // Every byte was checked to be ASCII.
    Referrer::Host(Label::truncated(std::str::from_utf8(lower).expect("ASCII")))
}

fn strip_scheme(url: &[u8]) -> Option<&[u8]> {
    // The first eight bytes as one word, the scheme's letters lower-cased (0x20 set on the
    // letters' bytes only: a byte is `t` or `T` exactly when it is `t` with the bit set):
    // one comparison, not one per byte.
    let word = |n: usize, letters: u64| {
        let mut bytes = [0u8; 8];
        bytes[..n].copy_from_slice(&url[..n]);
        u64::from_le_bytes(bytes) | letters
    };
    // 0x20 in each of the first 5 (`https`) or 4 (`http`) bytes.
    const HTTPS: u64 = 0x20_2020_2020;
    const HTTP: u64 = 0x2020_2020;
    if url.len() >= 8 && word(8, HTTPS) == u64::from_le_bytes(*b"https://") {
        Some(&url[8..])
    } else if url.len() >= 7 && word(7, HTTP) == u64::from_le_bytes(*b"http://\0") {
        Some(&url[7..])
    } else {
        None
    }
}

/// The host of `host[:port]` when every byte of it is a host's, else `None`.
fn host_without_port(host_port: &[u8]) -> Option<&[u8]> {
    let (host, port) = if host_port.first() == Some(&b'[') {
        let close = host_port.iter().position(|&b| b == b']')?;
        let inner = &host_port[1..close];
        if inner.is_empty() || !inner.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        (&host_port[..=close], &host_port[close + 1..])
    } else {
        let colon = host_port.iter().position(|&b| b == b':').unwrap_or(host_port.len());
        let host = &host_port[..colon];
        if !host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return None;
        }
        (host, &host_port[colon..])
    };
    match port {
        [] => Some(host),
        [b':', digits @ ..] if digits.iter().all(u8::is_ascii_digit) => Some(host),
        _ => None,
    }
}

/// The longest `utm_*` value kept, in bytes; a longer one is cut on a character.
pub const CAMPAIGN_VALUE_MAX: usize = 64;

/// One `utm_*` value.
pub type CampaignValue = Label<CAMPAIGN_VALUE_MAX>;

/// The campaign a link was shared in, from the request's `utm_*` parameters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Campaign {
    pub source: Option<CampaignValue>,
    pub medium: Option<CampaignValue>,
    pub campaign: Option<CampaignValue>,
}

/// `utm_source`, `utm_medium` and `utm_campaign` of a request's query: percent- and
/// `+`-decoded (`application/x-www-form-urlencoded`, invalid UTF-8 replaced), spaces at
/// either end trimmed, then cut to [`CAMPAIGN_VALUE_MAX`] bytes. The first occurrence of a
/// name wins (as `URLSearchParams.get` answers) even when it is refused: a value that is
/// empty or holds a control character is none. Names are matched exactly (`UTM_SOURCE`
/// is another parameter, as for the analytics tools that defined them). A query without
/// `utm` (or none) is not parsed at all: `None`, which is a byte to answer, where an empty
/// `Campaign` (three inline values) made and moved whole cost the capture about 55
/// instructions a click under callgrind (benches/results/2026-12-07s-callgrind-campaign-guard.md).
#[inline]
pub fn campaign(query: Option<&str>) -> Option<Campaign> {
    query.filter(|q| q.contains("utm")).map(parse_campaign)
}

/// [`campaign`]'s parse of a query that holds `utm`.
#[inline(never)]
fn parse_campaign(query: &str) -> Campaign {
    let mut found = Campaign::default();
    let (mut source, mut medium, mut campaign) = (false, false, false);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let (seen, slot) = match &*name {
            "utm_source" => (&mut source, &mut found.source),
            "utm_medium" => (&mut medium, &mut found.medium),
            "utm_campaign" => (&mut campaign, &mut found.campaign),
            _ => continue,
        };
        if std::mem::replace(seen, true) {
            continue;
        }
        let value = value.trim_matches(' ');
        if !value.is_empty() && !value.chars().any(char::is_control) {
            *slot = Some(CampaignValue::truncated(value));
        }
        if source && medium && campaign {
            break;
        }
    }
    found
}

/// The kind of device a click came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DeviceClass {
    Desktop,
    Mobile,
    Tablet,
    /// Consoles, TVs, scripts, bots, and agents no rule recognises.
    Other,
}

impl DeviceClass {
    /// As a breakdown shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceClass::Desktop => "desktop",
            DeviceClass::Mobile => "mobile",
            DeviceClass::Tablet => "tablet",
            DeviceClass::Other => "other",
        }
    }
}

/// The longest browser or OS family kept, in bytes (the parser's names are shorter).
pub const FAMILY_MAX: usize = 24;

/// A browser or OS family (`Chrome`, `Samsung Internet`, `iOS`, `Other`).
pub type Family = Label<FAMILY_MAX>;

/// What a User-Agent says about the device, and nothing else of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AgentFamilies {
    pub device: DeviceClass,
    pub browser: Family,
    pub os: Family,
}

impl AgentFamilies {
    /// No User-Agent, or one no rule recognises.
    pub fn other() -> AgentFamilies {
        AgentFamilies {
            device: DeviceClass::Other,
            browser: Family::truncated("Other"),
            os: Family::truncated("Other"),
        }
    }
}

/// Which rule decided an answer, as `by=rule` counts it: `default` (no rule matched, the
/// link's own target), `N` (rule N, 1-based) or `N/V` (variant V of rule N's split).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Decided {
    /// 0: no rule; else the rule's position, 1-based.
    pub rule: u8,
    /// 0: not a split; else the variant's position, 1-based.
    pub variant: u8,
}

impl Decided {
    pub const DEFAULT: Decided = Decided { rule: 0, variant: 0 };

    /// As `by=rule` shows it. Inline: no allocation.
    pub fn label(&self) -> Label<8> {
        let mut buf = [0u8; 8];
        let text: &str = match (self.rule, self.variant) {
            (0, _) => "default",
            (r, 0) => write_num(&mut buf, r, None),
            (r, v) => write_num(&mut buf, r, Some(v)),
        };
        Label::truncated(text)
    }
}

/// `rule` or `rule/variant` in decimal, written digit by digit: the breakdowns' counter
/// labels every click of a link with rules, and `write!` took 570 instructions a click
/// under callgrind (benches/results/2026-12-07d-callgrind-rules-margin.md).
fn write_num(buf: &mut [u8; 8], rule: u8, variant: Option<u8>) -> &str {
    fn push(buf: &mut [u8; 8], at: usize, n: u8) -> usize {
        let digits = [n / 100, n / 10 % 10, n % 10];
        let skip = match n {
            0..=9 => 2,
            10..=99 => 1,
            _ => 0,
        };
        let written = &digits[skip..];
        for (to, d) in buf[at..].iter_mut().zip(written) {
            *to = b'0' + d;
        }
        at + written.len()
    }
    let mut len = push(buf, 0, rule);
    if let Some(v) = variant {
        buf[len] = b'/';
        len = push(buf, len + 1, v);
    }
    std::str::from_utf8(&buf[..len]).expect("digits")
}

/// A click's dimensions; `None` where the dimension is switched off (and, for the campaign,
/// where the query names none). The campaign is boxed: most clicks have none, and inline its
/// three values were 200 of the 330 bytes every click copied (measured under callgrind,
/// benches/results/2026-12-06e-callgrind-breakdowns.md).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Dimensions {
    pub country: Option<Country>,
    pub referrer: Option<Referrer>,
    pub agent: Option<AgentFamilies>,
    pub campaign: Option<Box<Campaign>>,
    /// Which of the link's rules chose the target; only for a link with rules.
    pub rule: Option<Decided>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_cut_on_a_character_never_inside_one() {
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("abc", "abc"),
            ("abcd", "abcd"),
            ("abcde", "abcd"),
            // "é" is two bytes: the cut at 4 would split it.
            ("abcé", "abc"),
            ("ééé", "éé"),
        ];
        for &(text, want) in cases {
            assert_eq!(Label::<4>::truncated(text).as_str(), want, "{text:?}");
        }
    }

    #[test]
    fn a_country_is_two_upper_case_letters_or_unknown_or_tor() {
        let cases: &[(&[u8], &str, Option<&str>)] = &[
            (b"US", "US", Some("US")),
            (b"de", "DE", Some("DE")),
            (b"gB", "GB", Some("GB")),
            (b"EU", "EU", Some("EU")),
            (b"XX", "unknown", None),
            (b"xx", "unknown", None),
            (b"ZZ", "unknown", None),
            (b"T1", "tor", None),
            (b" FR ", "FR", Some("FR")),
            (b"", "unknown", None),
            (b"U", "unknown", None),
            (b"USA", "unknown", None),
            (b"U1", "unknown", None),
            (b"--", "unknown", None),
            (b"\xc3\xa9A", "unknown", None),
        ];
        for &(header, shown, code) in cases {
            let country = cdn_country(header);
            assert_eq!(country.as_str(), shown, "{:?}", String::from_utf8_lossy(header));
            assert_eq!(country.code(), code, "{:?}", String::from_utf8_lossy(header));
        }
        // Only a CDN header means Tor by T1; a database's T1 is not a country.
        assert_eq!(Country::from_code(b"T1"), Country::UNKNOWN);
    }

    const REFERRERS: &[(Option<&str>, &str)] = &[
        (None, "direct"),
        (Some(""), "direct"),
        (Some("https://www.google.com/"), "www.google.com"),
        (Some("https://google.com"), "google.com"),
        (Some("https://t.co/AbC123?amp=1"), "t.co"),
        (Some("http://News.YCombinator.com/item?id=1"), "news.ycombinator.com"),
        (Some("HTTPS://EXAMPLE.COM:8443/path#frag"), "example.com"),
        (Some("https://user:secret@example.com/"), "example.com"),
        (Some("https://example.com./"), "example.com"),
        (Some("https://example.com?q=1"), "example.com"),
        (Some("https://example.com#top"), "example.com"),
        (
            Some("https://l.facebook.com/l.php?u=https%3A%2F%2Fsho.rt%2Fx"),
            "l.facebook.com",
        ),
        (Some("https://xn--bcher-kva.example/"), "xn--bcher-kva.example"),
        (Some("http://192.0.2.7:8080/"), "192.0.2.7"),
        (Some("http://[2001:db8::1]:8080/x"), "[2001:db8::1]"),
        (Some("https://my_host.example/"), "my_host.example"),
        // Not http(s), not absolute, or not a host.
        (Some("android-app://com.google.android.gm/"), "unknown"),
        (Some("ftp://example.com/"), "unknown"),
        // The scheme compared as a word: its letters in any case, `://` exactly.
        (Some("hTtP://a.example/"), "a.example"),
        (Some("HtTpS://b.example"), "b.example"),
        (Some("http://"), "unknown"),
        (Some("http:/"), "unknown"),
        (Some("https:/\x0fc.example/"), "unknown"),
        (Some("https\x1a//c.example/"), "unknown"),
        (Some("http\x1a//c.example/"), "unknown"),
        (Some("https//c.example/"), "unknown"),
        (Some("httpx://c.example/"), "unknown"),
        (Some("hxxp://c.example/"), "unknown"),
        (Some("http\u{0}//c.example/"), "unknown"),
        (Some("/relative/path"), "unknown"),
        (Some("example.com"), "unknown"),
        (Some("https://"), "unknown"),
        (Some("https:///path"), "unknown"),
        (Some("https://exa mple.com/"), "unknown"),
        (Some("https://bücher.example/"), "unknown"),
        (Some("https://ex%41mple.com/"), "unknown"),
        (Some("https://example.com:80a/"), "unknown"),
        (Some("https://[2001:db8::1/"), "unknown"),
        (Some("https://[]/"), "unknown"),
        (Some("https://[zz::1]/"), "unknown"),
        (Some("https://direct/"), "unknown"),
        (Some("https://UNKNOWN:1/"), "unknown"),
        (Some("\u{7f}garbage"), "unknown"),
    ];

    #[test]
    fn the_referrer_is_its_host_lower_cased_without_port_user_path_or_query() {
        for &(referer, want) in REFERRERS {
            assert_eq!(referrer_host(referer.map(str::as_bytes)).as_str(), want, "{referer:?}");
        }
        // Bytes that are not UTF-8 are a header's right; they are no host.
        assert_eq!(referrer_host(Some(b"https://ex\xffample.com/")), Referrer::Unknown);
    }

    #[test]
    fn a_host_longer_than_the_bound_is_unknown_and_one_at_the_bound_kept() {
        let at = format!("{}.com", "a".repeat(REFERRER_HOST_MAX - 4));
        let over = format!("{}.com", "a".repeat(REFERRER_HOST_MAX - 3));
        assert_eq!(referrer_host(Some(format!("https://{at}/").as_bytes())).as_str(), at);
        assert_eq!(
            referrer_host(Some(format!("https://{over}/").as_bytes())),
            Referrer::Unknown
        );
    }

    /// Every host kept is the one the WHATWG parser (the `url` crate) finds in the same URL.
    #[test]
    fn every_host_kept_is_the_url_parsers_host() {
        for &(referer, want) in REFERRERS {
            let Some(referer) = referer else { continue };
            if want == "direct" || want == "unknown" {
                continue;
            }
            let parsed = url::Url::parse(referer).unwrap();
            let host = parsed.host_str().unwrap();
            assert_eq!(host.strip_suffix('.').unwrap_or(host), want, "{referer}");
        }
    }

    #[test]
    fn the_campaign_is_the_first_of_each_utm_parameter_decoded_and_bounded() {
        type Want<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);
        let long = "x".repeat(CAMPAIGN_VALUE_MAX + 10);
        let long_query = format!("utm_campaign={long}");
        let cases: Vec<(Option<&str>, Want)> = vec![
            (None, (None, None, None)),
            (Some(""), (None, None, None)),
            (Some("a=1&b=2"), (None, None, None)),
            (
                Some("utm_source=newsletter&utm_medium=email&utm_campaign=spring_sale"),
                (Some("newsletter"), Some("email"), Some("spring_sale")),
            ),
            (Some("utm_medium=social"), (None, Some("social"), None)),
            // Decoded: percent escapes and '+'.
            (
                Some("utm_campaign=Black+Friday%20%E2%9C%93"),
                (None, None, Some("Black Friday ✓")),
            ),
            (Some("utm_source=a%26b%3Dc"), (Some("a&b=c"), None, None)),
            // The first occurrence wins, even when it is refused.
            (Some("utm_source=first&utm_source=second"), (Some("first"), None, None)),
            (Some("utm_source=&utm_source=second"), (None, None, None)),
            (Some("utm_source=%0Abad&utm_source=good"), (None, None, None)),
            // Control characters refuse the value; trimmed spaces are not content.
            (Some("utm_source=tab%09in"), (None, None, None)),
            (Some("utm_source=del%7F"), (None, None, None)),
            (Some("utm_source=+padded+"), (Some("padded"), None, None)),
            (Some("utm_source=+"), (None, None, None)),
            // Names are exact; an encoded name is still the name.
            (
                Some("UTM_SOURCE=x&utm_source_platform=y&utm_sourc=z"),
                (None, None, None),
            ),
            (Some("utm%5Fsource=x"), (Some("x"), None, None)),
            // Invalid UTF-8 is replaced, not refused.
            (Some("utm_source=%FFok"), (Some("\u{fffd}ok"), None, None)),
            (Some(&long_query), (None, None, Some(&long[..CAMPAIGN_VALUE_MAX]))),
        ];
        for (query, (source, medium, name)) in cases {
            let got = campaign(query).unwrap_or_default();
            let shown = |v: Option<CampaignValue>| v.map(|v| v.as_str().to_owned());
            assert_eq!(shown(got.source).as_deref(), source, "{query:?}");
            assert_eq!(shown(got.medium).as_deref(), medium, "{query:?}");
            assert_eq!(shown(got.campaign).as_deref(), name, "{query:?}");
        }
    }

    #[test]
    fn a_value_cut_to_the_bound_ends_on_a_character() {
        // 63 ASCII bytes, then a 2-byte character that would straddle the 64-byte bound.
        let query = format!("utm_source={}%C3%A9", "a".repeat(CAMPAIGN_VALUE_MAX - 1));
        let got = campaign(Some(&query)).unwrap().source.unwrap();
        assert_eq!(got.as_str(), "a".repeat(CAMPAIGN_VALUE_MAX - 1));
    }

    #[test]
    fn device_classes_and_the_other_agent_read_as_breakdowns_show_them() {
        let shown: Vec<_> = [
            DeviceClass::Desktop,
            DeviceClass::Mobile,
            DeviceClass::Tablet,
            DeviceClass::Other,
        ]
        .iter()
        .map(DeviceClass::as_str)
        .collect();
        assert_eq!(shown, ["desktop", "mobile", "tablet", "other"]);
        let other = AgentFamilies::other();
        assert_eq!(
            (other.device, other.browser.as_str(), other.os.as_str()),
            (DeviceClass::Other, "Other", "Other")
        );
    }
}
