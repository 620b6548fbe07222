//! What a redirect captures of who clicked (docs/spec.md §13): whether a person or a bot
//! ([`crate::visitor`]), and for a person's GET with breakdowns on, the click's
//! [`Dimensions`]: country (a trusted CDN's header, else the country database by the
//! client's address), the referrer's host, the agent's device class and families, and the
//! campaign of the query. Each dimension can be off; with all off nothing here runs but
//! the bot verdict, as before breakdowns. Nothing that identifies a person is counted,
//! streamed or kept: the whole User-Agent, the referrer's path and query are read and
//! dropped here; the client's address goes on with the request ([`Known`], for a link's
//! rules) and is dropped with it.

use crate::geoip::CountryDb;
use crate::targeting::{Known, Targeting};
use crate::visitor::{AgentParser, BotPatterns, Visitor};
use http::header::REFERER;
use http::{HeaderMap, HeaderName, Method};
use rebound_core::dimensions::{campaign, referrer_authority, referrer_of_authority, Dimensions, Referrer};
use rebound_core::rules::Device;
use rebound_store::Dimension;
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Arc;

/// Whose click a redirect counts and, for a person's with breakdowns on, its dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Click {
    pub visitor: Visitor,
    pub dimensions: Option<Dimensions>,
    /// What the capture learned on the way that a link's rules ask again: never counted,
    /// streamed or kept past the request.
    pub known: Known,
}

impl Click {
    /// A click without dimensions.
    pub fn of(visitor: Visitor) -> Click {
        Click {
            visitor,
            dimensions: None,
            known: Known::default(),
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
    /// Which of a link's rules chose the target (set by the redirect, for a link with rules).
    rule: bool,
    parser: Arc<AgentParser>,
    /// Where the country comes from: the database, if one is configured, and the CDN
    /// header that names it, believed from trusted peers only (what a link's rules read too).
    countries: Targeting,
    /// A bot's click has its dimensions too (for the click stream, which carries bots'
    /// clicks; the breakdowns count people's only).
    bots: bool,
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
        let countries = Targeting::new(countries, country_header);
        let capture = Capture {
            country: on(Dimension::Country) && countries.knows_countries(),
            referrer: on(Dimension::Referrer),
            agent: on(Dimension::Device) || on(Dimension::Browser) || on(Dimension::Os),
            utm: [Dimension::UtmSource, Dimension::UtmMedium, Dimension::UtmCampaign].map(on),
            rule: on(Dimension::Rule),
            parser: AgentParser::shared(),
            countries,
            bots: false,
        };
        let any = capture.country || capture.referrer || capture.agent || capture.utm.contains(&true) || capture.rule;
        any.then_some(capture)
    }

    /// Captures a bot's click's dimensions as well as a person's (the click stream's events).
    pub fn with_bots(mut self) -> Capture {
        self.bots = true;
        self
    }

    /// Whether the country is captured.
    pub fn captures_country(&self) -> bool {
        self.country
    }

    /// The click of a request with `method`, `headers` and `query`, from `client` (the
    /// client's address, when known; `trusted` when the peer is a trusted proxy, whose
    /// country header is believed). A bot's click and a `HEAD` have no dimensions, unless
    /// [`Capture::with_bots`].
    #[inline]
    pub fn click(
        &self,
        bots: &BotPatterns,
        method: &Method,
        headers: &HeaderMap,
        query: Option<&str>,
        client: impl FnOnce() -> (Option<IpAddr>, bool),
    ) -> Click {
        let mut known = Known::default();
        let (visitor, families) = match self.agent {
            true => {
                let verdict = bots.classify_with_families(method, headers, &self.parser);
                known.agent_digest = verdict.digest;
                known.agent = Some((verdict.os, Device::of_class(verdict.families.device)));
                (verdict.visitor, Some(verdict.families))
            }
            false => (bots.classify(method, headers), None),
        };
        if visitor == Visitor::Bot && !self.bots {
            return Click::of(visitor);
        }
        let mut dimensions = Dimensions::default();
        if self.country {
            let (address, trusted) = client();
            known.client = Some((address, trusted));
            dimensions.country = Some(self.countries.country_of(headers, address, trusted));
        }
        if self.referrer {
            // The few headers walked, as for the agent: cheaper than hashing the name.
            let referer = headers.iter().find(|(name, _)| **name == REFERER);
            dimensions.referrer = Some(referrer_of(referer.map(|(_, v)| v.as_bytes())));
        }
        // Device, browser and OS travel together; the queue leaves out those that are off
        // (`ClickQueue::breaking_down`).
        dimensions.agent = families;
        if let Some(mut found) = self.utm.contains(&true).then(|| campaign(query)).flatten() {
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
                dimensions.campaign = Some(Box::new(found));
            }
        }
        Click {
            visitor,
            dimensions: Some(dimensions),
            known,
        }
    }
}

/// Referrers remembered per redirect thread, by the authority of their `Referer` (a
/// direct-mapped table: an authority's slot is its hash's low bits).
const REFERRER_SLOTS: usize = 64;
/// Authorities longer than this are read every time (the slots' memory stays bounded).
const LONGEST_REMEMBERED_AUTHORITY: usize = 96;

/// A remembered referrer: the hash of its authority, the authority, what it names.
type SeenReferrer = (u64, Box<[u8]>, Referrer);

struct SeenReferrers {
    hasher: hashbrown::DefaultHashBuilder,
    slots: Box<[Option<SeenReferrer>]>,
}

thread_local! {
    static REFERRERS: RefCell<SeenReferrers> = RefCell::new(SeenReferrers {
        hasher: hashbrown::DefaultHashBuilder::default(),
        slots: (0..REFERRER_SLOTS).map(|_| None).collect(),
    });
}

/// The referrer of a `Referer` header ([`rebound_core::dimensions::referrer_host`]): its
/// authority found, then the host it names remembered per thread by that authority, as the
/// bot verdict is by agent. Measured under callgrind: a browser's `Referer` read whole was
/// about 1,000 instructions a redirect (benches/results/2026-12-06e-callgrind-breakdowns.md).
#[inline]
fn referrer_of(referer: Option<&[u8]>) -> Referrer {
    let authority = match referrer_authority(referer) {
        Ok(authority) if authority.len() <= LONGEST_REMEMBERED_AUTHORITY => authority,
        Ok(authority) => return referrer_of_authority(authority),
        Err(referrer) => return referrer,
    };
    REFERRERS.with(|seen| {
        let mut seen = seen.borrow_mut();
        let hash = seen.hasher.hash_one(authority);
        let slot = &mut seen.slots[(hash as usize) % REFERRER_SLOTS];
        match slot {
            Some((h, a, referrer)) if *h == hash && **a == *authority => *referrer,
            _ => {
                let referrer = referrer_of_authority(authority);
                *slot = Some((hash, authority.into(), referrer));
                referrer
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::dimensions::referrer_host;

    #[test]
    fn a_remembered_referrer_is_the_one_its_header_names() {
        let headers = [
            None,
            Some("https://news.ycombinator.com/item?id=1"),
            Some("https://news.ycombinator.com/item?id=2"),
            Some("HTTPS://News.YCombinator.com:443/"),
            Some("https://user:pw@t.co/x"),
            Some("android-app://com.slack/"),
            Some("https://exa mple.com/"),
            Some(""),
        ];
        // Twice: read, then remembered; and each slot's owner checked, not only its hash.
        for _ in 0..2 {
            for h in headers {
                let h = h.map(str::as_bytes);
                assert_eq!(referrer_of(h), referrer_host(h), "{:?}", h.map(String::from_utf8_lossy));
            }
        }
        let long = format!("https://{}.example/", "a".repeat(100));
        assert_eq!(referrer_of(Some(long.as_bytes())), Referrer::Unknown);
    }

    #[test]
    fn a_capture_hands_a_links_rules_what_it_learned_and_the_same_as_a_fresh_look() {
        use crate::targeting::RequestVisitor;
        use rebound_core::rules::{agent_digest, visitor_digest, Visitor as _};
        let bots = BotPatterns::shared();
        let country = HeaderName::from_static("cf-ipcountry");
        let capture = Capture::new(&[Dimension::Country, Dimension::Device], None, Some(country)).unwrap();
        let agent = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 capture-test";
        let mut headers = HeaderMap::new();
        headers.insert(http::header::USER_AGENT, agent.parse().unwrap());
        let address: IpAddr = [198, 51, 100, 7].into();
        let want = visitor_digest(Some(address), agent_digest(agent.as_bytes()));
        // The first click of an agent on a thread carries no digest (none made yet); a
        // split makes it, and the next click carries it.
        let first = capture.click(&bots, &Method::GET, &headers, None, || (Some(address), false));
        assert_eq!(first.known.client, Some((Some(address), false)));
        assert_eq!(first.known.agent_digest, None);
        let targeting = Targeting::default();
        let mut asked = 0;
        let client = || {
            asked += 1;
            (Some(address), false)
        };
        let mut fresh = RequestVisitor::new(
            &targeting,
            &bots,
            &headers,
            client,
            first.dimensions.as_ref(),
            &first.known,
        );
        assert_eq!(fresh.stickiness(), want);
        let next = capture.click(&bots, &Method::GET, &headers, None, || (Some(address), false));
        assert_eq!(next.known.agent_digest, Some(agent_digest(agent.as_bytes())));
        assert_eq!(next.known.agent, Some((rebound_core::rules::Os::Ios, Device::Mobile)));
        // What the capture learned is used, not asked again: a client closure that lies
        // is never called.
        let lies = || (None, true);
        let mut known = RequestVisitor::new(&targeting, &bots, &headers, lies, next.dimensions.as_ref(), &next.known);
        assert_eq!(known.stickiness(), want);
        assert_eq!(asked, 0, "the capture's client was used");
    }
}
