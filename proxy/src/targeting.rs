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
use http::{HeaderMap, HeaderName, Method};
use rebound_core::dimensions::{cdn_country, Country, Dimensions};
use rebound_core::rules::{visitor_digest, Device, Os, Visitor};
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

/// What a click's capture ([`crate::capture::Capture::click`]) learned of one request beyond
/// its dimensions, for the link's rules ([`RequestVisitor::knowing`]) so that they do not
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
    pub fn new(targeting: &'a Targeting, bots: &'a BotPatterns, headers: &'a HeaderMap, client: C) -> Self {
        RequestVisitor {
            targeting,
            bots,
            headers,
            client,
            asked_client: None,
            country: None,
            agent: None,
            agent_digest: None,
        }
    }

    /// Uses what the click's capture found (its country; its agent's OS, device and digest;
    /// the client) instead of looking them up again.
    pub fn knowing(mut self, dimensions: Option<&Dimensions>, known: &Known) -> Self {
        self.country = dimensions.and_then(|d| d.country);
        self.agent = known.agent;
        self.agent_digest = known.agent_digest;
        self.asked_client = known.client;
        self
    }

    fn client(&mut self) -> (Option<IpAddr>, bool) {
        match self.asked_client {
            Some(client) => client,
            None => *self.asked_client.insert((self.client)()),
        }
    }
}

impl<C: FnMut() -> (Option<IpAddr>, bool)> Visitor for RequestVisitor<'_, C> {
    fn country(&mut self) -> Country {
        if let Some(country) = self.country {
            return country;
        }
        let (address, trusted) = self.client();
        self.targeting.country_of(self.headers, address, trusted)
    }

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

    fn accept_language(&self) -> Option<&[u8]> {
        // The few headers walked, as for the agent: `HeaderMap::get` hashed the name, 113
        // instructions a redirect under callgrind.
        let found = self.headers.iter().find(|(name, _)| **name == ACCEPT_LANGUAGE);
        found.map(|(_, value)| value.as_bytes())
    }

    fn stickiness(&mut self) -> u64 {
        let address = self.client().0;
        let agent = match self.agent_digest {
            Some(digest) => digest,
            None => self.bots.agent_digest(self.headers),
        };
        visitor_digest(address, agent)
    }
}
