//! What a redirect captures of who clicked (docs/spec.md §13): whether a person or a bot
//! ([`crate::visitor`]), and for a person's GET with breakdowns on, the click's
//! [`Dimensions`]: country (a trusted CDN's header, else the country database by the
//! client's address), the referrer's host, the agent's device class and families, and the
//! campaign of the query. Each dimension can be off; with all off nothing here runs but
//! the bot verdict, as before breakdowns. Nothing that identifies a person leaves this
//! module: the address, the whole User-Agent, the referrer's path and query are read and
//! dropped.

use crate::geoip::CountryDb;
use crate::visitor::{AgentParser, BotPatterns, Visitor};
use http::header::REFERER;
use http::{HeaderMap, HeaderName, Method};
use rebound_core::dimensions::{campaign, cdn_country, referrer_host, Country, Dimensions};
use rebound_store::Dimension;
use std::net::IpAddr;
use std::sync::Arc;

/// Whose click a redirect counts and, for a person's with breakdowns on, its dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Click {
    pub visitor: Visitor,
    pub dimensions: Option<Dimensions>,
}

impl Click {
    /// A click without dimensions.
    pub fn of(visitor: Visitor) -> Click {
        Click {
            visitor,
            dimensions: None,
        }
    }
}

/// Which dimensions are captured, and from what.
pub struct Capture {
    country: bool,
    referrer: bool,
    /// Any of device, browser and OS: the agent is parsed (once per agent and thread).
    agent: bool,
    /// utm_source, utm_medium, utm_campaign.
    utm: [bool; 3],
    parser: Arc<AgentParser>,
    /// The country database, if one is configured.
    countries: Option<Arc<CountryDb>>,
    /// The CDN header that names the country, believed from trusted peers only.
    country_header: Option<HeaderName>,
}

impl Capture {
    /// Captures `dimensions`; `country` only with a database or a header (none: it is left
    /// out). `None` when nothing would be captured.
    pub fn new(
        dimensions: &[Dimension],
        countries: Option<Arc<CountryDb>>,
        country_header: Option<HeaderName>,
    ) -> Option<Capture> {
        let on = |d: Dimension| dimensions.contains(&d);
        let capture = Capture {
            country: on(Dimension::Country) && (countries.is_some() || country_header.is_some()),
            referrer: on(Dimension::Referrer),
            agent: on(Dimension::Device) || on(Dimension::Browser) || on(Dimension::Os),
            utm: [Dimension::UtmSource, Dimension::UtmMedium, Dimension::UtmCampaign].map(on),
            parser: AgentParser::shared(),
            countries,
            country_header,
        };
        let any = capture.country || capture.referrer || capture.agent || capture.utm.contains(&true);
        any.then_some(capture)
    }

    /// Whether the country is captured.
    pub fn captures_country(&self) -> bool {
        self.country
    }

    /// The click of a request with `method`, `headers` and `query`, from `client` (the
    /// client's address, when known; `trusted` when the peer is a trusted proxy, whose
    /// country header is believed). A bot's click and a `HEAD` have no dimensions.
    #[inline]
    pub fn click(
        &self,
        bots: &BotPatterns,
        method: &Method,
        headers: &HeaderMap,
        query: Option<&str>,
        client: impl FnOnce() -> (Option<IpAddr>, bool),
    ) -> Click {
        let (visitor, families) = match self.agent {
            true => {
                let verdict = bots.classify_with_families(method, headers, &self.parser);
                (verdict.visitor, Some(verdict.families))
            }
            false => (bots.classify(method, headers), None),
        };
        if visitor == Visitor::Bot {
            return Click::of(visitor);
        }
        let mut dimensions = Dimensions::default();
        if self.country {
            dimensions.country = Some(self.country_of(headers, client));
        }
        if self.referrer {
            dimensions.referrer = Some(referrer_host(headers.get(REFERER).map(|v| v.as_bytes())));
        }
        // Device, browser and OS travel together; the queue leaves out those that are off
        // (`ClickQueue::breaking_down`).
        dimensions.agent = families;
        if self.utm.contains(&true) {
            let mut found = campaign(query);
            let [source, medium, name] = self.utm;
            if !source {
                found.source = None;
            }
            if !medium {
                found.medium = None;
            }
            if !name {
                found.campaign = None;
            }
            if found.source.is_some() || found.medium.is_some() || found.campaign.is_some() {
                dimensions.campaign = Some(found);
            }
        }
        Click {
            visitor,
            dimensions: Some(dimensions),
        }
    }

    /// The country of a click: the CDN's header from a trusted peer, else the database's
    /// entry for the client's address, else unknown.
    fn country_of(&self, headers: &HeaderMap, client: impl FnOnce() -> (Option<IpAddr>, bool)) -> Country {
        let (address, trusted) = client();
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
}
