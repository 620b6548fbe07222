//! What a link's rules ask of who clicks (docs/spec.md §14), from a request: the country
//! (a trusted CDN's header, else the country database by the client's address), the OS
//! family and device class of the User-Agent (remembered per thread with the bot verdict,
//! [`crate::visitor`]), `Accept-Language`, and what a split is sticky on (the client's
//! address and its User-Agent's digest, remembered with the verdict). What the click's
//! capture found already (breakdowns on, [`Known`]) is not looked up again. Each is read
//! only when a rule of the link needs it, and only for a link with rules: a link without
//! rules reads none of it.

use crate::geoip::CountryDb;
use crate::visitor::{AgentParser, BotPatterns};
use http::header::ACCEPT_LANGUAGE;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use rebound_core::dimensions::{cdn_country, Country, Dimensions};
use rebound_core::rules::{is_web, visitor_digest, AcceptLanguage, Decided, Device, Os, RuleSet, Visitor};
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Arc;

/// Where a rule's visitor facts come from; built once per process.
#[derive(Clone, Default)]
pub struct Targeting {
    /// The country database, if one is configured.
    countries: Option<Arc<CountryDb>>,
    /// The CDN header that names the country, believed from trusted peers only.
    country_header: Option<HeaderName>,
}

impl Targeting {
    pub fn new(countries: Option<Arc<CountryDb>>, country_header: Option<HeaderName>) -> Targeting {
        Targeting {
            countries,
            country_header,
        }
    }

    /// The country of a request with `headers` from `address`: the CDN's header when the
    /// peer is `trusted`, else the database's entry for the address, else unknown.
    pub fn country_of(&self, headers: &HeaderMap, address: Option<IpAddr>, trusted: bool) -> Country {
        if let (Some(name), true) = (&self.country_header, trusted) {
            if let Some(value) = headers.get(name) {
                return cdn_country(value.as_bytes());
            }
        }
        match (&self.countries, address) {
            (Some(countries), Some(address)) => countries.country_of(address),
            _ => Country::UNKNOWN,
        }
    }

    /// Whether a country can be known at all (a database or a header): without either,
    /// a rule on countries never matches.
    pub fn knows_countries(&self) -> bool {
        self.countries.is_some() || self.country_header.is_some()
    }
}

/// A link's rules as the redirect path answers by them: the [`RuleSet`], and each of its
/// targets ([`RuleSet::all_targets`]) as a `Location` value built once, with whether it is a
/// web address (an app's own scheme takes no query of the web's). A redirect by a rule then
/// clones a value (a reference count) instead of copying the target into a new buffer (51
/// instructions under callgrind) and checking each byte of it again (about 70 inlined,
/// 118 called) (benches/results/2026-12-07d-callgrind-rules-margin.md).
pub struct Ruled {
    pub set: RuleSet,
    locations: Box<[(HeaderValue, bool)]>,
}

impl Ruled {
    /// `None` when a target cannot be a header value (never: targets are checked when they
    /// are set, as a link's own is).
    pub fn new(set: RuleSet) -> Option<Ruled> {
        let locations = set
            .all_targets()
            .map(|t| Some((HeaderValue::from_str(t).ok()?, is_web(t))))
            .collect::<Option<_>>()?;
        Some(Ruled { set, locations })
    }

    /// The `Location` value of the target `decided` names, and whether it is a web address;
    /// `None` for the link's own target (no rule decided).
    #[inline]
    pub fn location(&self, decided: Decided) -> Option<&(HeaderValue, bool)> {
        self.locations.get(self.set.target_index(decided)?)
    }

    /// Bytes held on the heap, itself included: what a link with rules adds to L1.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Ruled>() - std::mem::size_of::<RuleSet>()
            + self.set.heap_bytes()
            + self
                .locations
                .iter()
                .map(|(v, _)| std::mem::size_of::<(HeaderValue, bool)>() + v.len())
                .sum::<usize>()
    }
}

/// What a click's capture ([`crate::capture::Capture::click`]) learned of one request beyond
/// its dimensions, for the link's rules ([`RequestVisitor::new`]) so that they do not
/// look it up again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Known {
    /// The User-Agent's digest a split is sticky on, when this thread had made it before.
    pub agent_digest: Option<u64>,
    /// The OS family and device class as a rule names them, when the agent's families were
    /// captured.
    pub agent: Option<(Os, Device)>,
    /// The client's address (when known), and whether the peer is a trusted proxy: asked
    /// when the country was captured.
    pub client: Option<(Option<IpAddr>, bool)>,
}

/// One request as a link's rules see it. `client` gives the client's address (when known)
/// and whether the peer is a trusted proxy, whose country header is believed; it is asked
/// at most once.
pub struct RequestVisitor<'a, C: FnMut() -> (Option<IpAddr>, bool)> {
    pub targeting: &'a Targeting,
    pub bots: &'a BotPatterns,
    pub headers: &'a HeaderMap,
    pub client: C,
    /// The client, once asked (or as the capture found it).
    asked_client: Option<(Option<IpAddr>, bool)>,
    /// What the click's capture found already (breakdowns on): not looked up again.
    country: Option<Country>,
    agent: Option<(Os, Device)>,
    agent_digest: Option<u64>,
}

impl<'a, C: FnMut() -> (Option<IpAddr>, bool)> RequestVisitor<'a, C> {
    /// The request `headers`, with what the click's capture found (`dimensions`' country; in
    /// `known`, its agent's OS, device and digest, and the client) used instead of looking it
    /// up again.
    #[inline]
    pub fn new(
        targeting: &'a Targeting,
        bots: &'a BotPatterns,
        headers: &'a HeaderMap,
        client: C,
        dimensions: Option<&Dimensions>,
        known: &Known,
    ) -> Self {
        RequestVisitor {
            targeting,
            bots,
            headers,
            client,
            asked_client: known.client,
            country: dimensions.and_then(|d| d.country),
            agent: known.agent,
            agent_digest: known.agent_digest,
        }
    }

    #[inline]
    fn client(&mut self) -> (Option<IpAddr>, bool) {
        match self.asked_client {
            Some(client) => client,
            None => *self.asked_client.insert((self.client)()),
        }
    }
}

impl<C: FnMut() -> (Option<IpAddr>, bool)> Visitor for RequestVisitor<'_, C> {
    #[inline]
    fn country(&mut self) -> Country {
        if let Some(country) = self.country {
            return country;
        }
        let (address, trusted) = self.client();
        self.targeting.country_of(self.headers, address, trusted)
    }

    #[inline]
    fn agent(&mut self) -> (Os, Device) {
        match self.agent {
            Some(agent) => agent,
            None => {
                let verdict = self
                    .bots
                    .classify_with_families(&Method::GET, self.headers, &AgentParser::shared());
                (verdict.os, Device::of_class(verdict.families.device))
            }
        }
    }

    #[inline]
    fn language(&mut self, rules: &RuleSet) -> u32 {
        // The few headers walked, as for the agent: `HeaderMap::get` hashed the name, 113
        // instructions a redirect under callgrind.
        let found = self.headers.iter().find(|(name, _)| **name == ACCEPT_LANGUAGE);
        found.map_or(0, |(_, value)| language_bits(value.as_bytes(), rules))
    }

    #[inline]
    fn stickiness(&mut self) -> u64 {
        let address = self.client().0;
        let agent = match self.agent_digest {
            Some(digest) => digest,
            None => self.bots.agent_digest(self.headers),
        };
        visitor_digest(address, agent)
    }
}

/// `Accept-Language` readings remembered per redirect thread, by the header's bytes (a
/// direct-mapped table; the slot found last is compared first): a browser population sends
/// few distinct headers, and a redirect by a language rule then compares its header with
/// the one remembered instead of reading it.
const READING_SLOTS: usize = 16;
/// Headers longer than this are read every time (the slots' memory stays bounded: at most
/// 16 headers of 128 bytes and their readings a thread).
const LONGEST_REMEMBERED_HEADER: usize = 128;

/// A remembered header and its reading.
type Reading = (Box<[u8]>, AcceptLanguage);

struct Readings {
    hasher: hashbrown::DefaultHashBuilder,
    last: usize,
    slots: Box<[Option<Reading>]>,
}

thread_local! {
    static READINGS: RefCell<Readings> = RefCell::new(Readings {
        hasher: hashbrown::DefaultHashBuilder::default(),
        last: 0,
        slots: (0..READING_SLOTS).map(|_| None).collect(),
    });
}

/// [`RuleSet::preferred`] of `header` for `rules`, the header's reading remembered.
fn language_bits(header: &[u8], rules: &RuleSet) -> u32 {
    if header.len() > LONGEST_REMEMBERED_HEADER {
        return rules.preferred(header);
    }
    READINGS.with(|readings| {
        let readings = &mut *readings.borrow_mut();
        let last = readings.last;
        let at = match &readings.slots[last] {
            Some((held, _)) if **held == *header => last,
            _ => {
                let at = (readings.hasher.hash_one(header) as usize) % READING_SLOTS;
                if !matches!(&readings.slots[at], Some((held, _)) if **held == *header) {
                    readings.slots[at] = Some((header.into(), AcceptLanguage::read(header)));
                }
                readings.last = at;
                at
            }
        };
        let (held, read) = readings.slots[at].as_ref().expect("filled above");
        rules.preferred_in(held, read)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(languages: &[&[&str]]) -> RuleSet {
        let rules: Vec<rebound_core::rules::Rule> = languages
            .iter()
            .map(|l| {
                serde_json::from_value(serde_json::json!({"languages": l, "target": "https://a.example/"})).unwrap()
            })
            .collect();
        RuleSet::compile("k", &rebound_core::rules::normalize(rules).unwrap())
    }

    #[test]
    fn a_rule_answers_with_the_location_built_for_its_target() {
        let rules: Vec<rebound_core::rules::Rule> = serde_json::from_value(serde_json::json!([
            {"languages": ["fr"], "target": "https://a.example/fr"},
            {"languages": ["de"], "target": "intent://open#Intent;scheme=app;end"},
            {"split": [{"target": "https://a.example/x", "weight": 1}, {"target": "myapp://y", "weight": 1}]},
        ]))
        .unwrap();
        let ruled = Ruled::new(RuleSet::compile("k", &rebound_core::rules::normalize(rules).unwrap())).unwrap();
        struct Speaks(&'static [u8], u64);
        impl Visitor for Speaks {
            fn country(&mut self) -> rebound_core::dimensions::Country {
                rebound_core::dimensions::Country::UNKNOWN
            }
            fn agent(&mut self) -> (Os, Device) {
                (Os::Windows, Device::Desktop)
            }
            fn language(&mut self, rules: &RuleSet) -> u32 {
                rules.preferred(self.0)
            }
            fn stickiness(&mut self) -> u64 {
                self.1
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (header, id) in (0..64).flat_map(|id| [(&b"fr"[..], id), (b"de", id), (b"en", id)]) {
            let (want, decided) = ruled.set.choose(&mut Speaks(header, id)).unwrap();
            let (location, web) = ruled.location(decided).unwrap();
            assert_eq!(
                (location.as_bytes(), *web),
                (want.as_bytes(), is_web(want)),
                "{decided:?}"
            );
            seen.insert(want.to_owned());
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(ruled.location(Decided::DEFAULT).is_none());
    }

    #[test]
    fn remembered_readings_answer_as_reading_the_header() {
        let sets = [
            set(&[&["fr", "de"]]),
            set(&[&["en-gb"], &["en"]]),
            set(&[&["pt-br", "pt"], &["es"]]),
        ];
        // More distinct headers than slots, some longer than what is remembered, asked in
        // an order that revisits each after others took its slot.
        let mut headers: Vec<String> = vec![
            "en-US,en;q=0.9".into(),
            "fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7, *;q=0.5".into(),
            "de".into(),
            "pt-BR,pt;q=0.9,en-US;q=0.8,en;q=0.7".into(),
            "es-419,es;q=0.9".into(),
            "en-GB;q=0.2,fr;q=0.2".into(),
            "".into(),
            format!("{}fr", "xx;q=0.1,".repeat(20)),
        ];
        headers.extend((0..30).map(|i| format!("x{i};q=0.{i},en-gb;q=0.05,pt")));
        for round in 0..3 {
            for (i, header) in headers.iter().enumerate() {
                for rules in &sets {
                    let header = header.as_bytes();
                    assert_eq!(
                        language_bits(header, rules),
                        rules.preferred(header),
                        "round {round}, header {i}: {:?}",
                        String::from_utf8_lossy(header)
                    );
                }
            }
        }
        let held = READINGS.with(|r| r.borrow().slots.iter().flatten().count());
        assert!(held <= READING_SLOTS);
    }
}
