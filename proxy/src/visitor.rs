//! Who a redirect answered: a person, or a bot (a link unfurler such as Slackbot or
//! facebookexternalhit, a crawler, or any `HEAD`). Both are answered alike; their clicks
//! are counted apart (`clicks` and `bot_clicks` in the stats).
//!
//! The patterns are [`isbot`]'s maintained list (one regular expression over the
//! lowercased User-Agent, a few microseconds). The request path does not run it for every
//! request: each redirect thread remembers the verdicts of the last agents it saw, so a
//! redirect costs a hash of the header and one comparison with the agent remembered in its
//! slot; a User-Agent seen for the first time (or pushed out of the slot) is classified
//! once more. Traffic repeats a few agents, so the expression runs rarely; a client that
//! changes its agent on every request pays for its own classification, bounded by the
//! header's size limit.
//!
//! The same slot remembers what the agent says about the device (docs/spec.md §13): device
//! class, browser family and OS family ([`AgentFamilies`]), from uap-core's regexes
//! ([`AgentParser`], chosen by measurement: benches/results/2026-12-06d-user-agent-parsers.md).
//! They are parsed the first time a caller asks for them (never when the dimensions are
//! off), and remembered beside the verdict: one hash lookup answers both.

use http::header::USER_AGENT;
use http::{HeaderMap, Method};
use rebound_core::dimensions::{AgentFamilies, DeviceClass, Family};
use rebound_core::rules::Os;
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Who a redirect is for, as far as the clicks are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visitor {
    Person,
    Bot,
}

/// A redirect's visitor, and what its agent says about the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentVerdict {
    pub visitor: Visitor,
    pub families: AgentFamilies,
    /// The agent's digest a split is sticky on ([`BotPatterns::agent_digest`]), when this
    /// thread has made it before: a link with rules then does not look the agent up again.
    pub digest: Option<u64>,
    /// The OS family as a link's rules name it ([`Os::of_family`] of `families.os`).
    pub os: Os,
}

/// Verdicts remembered per redirect thread (a direct-mapped table: an agent's slot is its
/// hash's low bits).
const SLOTS: usize = 256;
/// Agents longer than this are classified every time instead of being remembered (the
/// slots' memory stays bounded: 256 × 512 bytes a thread at most).
const LONGEST_REMEMBERED: usize = 512;

/// The shared classifier: the compiled patterns, built once.
pub struct BotPatterns {
    bots: isbot::Bots,
}

impl BotPatterns {
    /// isbot's default list (compiled on first use: tens of milliseconds, so it happens
    /// at start, not on a request).
    pub fn shared() -> Arc<BotPatterns> {
        static SHARED: OnceLock<Arc<BotPatterns>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                Arc::new(BotPatterns {
                    bots: isbot::Bots::default(),
                })
            })
            .clone()
    }

    /// The pattern check itself, without the remembered verdicts.
    pub fn is_bot(&self, user_agent: &[u8]) -> bool {
        self.bots.is_bot(&String::from_utf8_lossy(user_agent))
    }

    /// Who sent a request with `method` and `headers`: `HEAD` is always a bot's (nobody
    /// is taken anywhere), a GET is a bot's when its User-Agent matches the patterns. No
    /// User-Agent is a person's: browsers always send one, and counting the agents that
    /// send none as bots would hide every scripted client's clicks in one bucket.
    #[inline]
    pub fn classify(&self, method: &Method, headers: &HeaderMap) -> Visitor {
        if *method == Method::HEAD {
            return Visitor::Bot;
        }
        // The few headers walked, as for `Host`: cheaper than hashing the name.
        match headers.iter().find(|(name, _)| **name == USER_AGENT) {
            None => Visitor::Person,
            Some((_, agent)) => self.classify_agent(agent.as_bytes()),
        }
    }

    /// The verdict on one User-Agent, remembered per thread.
    #[inline]
    pub fn classify_agent(&self, agent: &[u8]) -> Visitor {
        if agent.len() > LONGEST_REMEMBERED {
            return self.verdict(agent);
        }
        SEEN.with(|seen| self.slot(&mut seen.borrow_mut(), agent).visitor)
    }

    /// [`BotPatterns::classify`], with the agent's families (parsed by `parser` the first
    /// time the slot is asked for them). A request without a User-Agent is a person's on
    /// an `other` device; a `HEAD` is a bot's, its agent's families read all the same.
    #[inline]
    pub fn classify_with_families(&self, method: &Method, headers: &HeaderMap, parser: &AgentParser) -> AgentVerdict {
        let verdict = match headers.iter().find(|(name, _)| **name == USER_AGENT) {
            None => AgentVerdict {
                visitor: Visitor::Person,
                families: AgentFamilies::other(),
                digest: None,
                os: Os::Other,
            },
            Some((_, agent)) => self.classify_agent_with_families(agent.as_bytes(), parser),
        };
        match *method == Method::HEAD {
            true => AgentVerdict {
                visitor: Visitor::Bot,
                ..verdict
            },
            false => verdict,
        }
    }

    /// The verdict on one User-Agent and its families, remembered per thread together.
    #[inline]
    pub fn classify_agent_with_families(&self, agent: &[u8], parser: &AgentParser) -> AgentVerdict {
        if agent.len() > LONGEST_REMEMBERED {
            let families = parser.families(agent);
            return AgentVerdict {
                visitor: self.verdict(agent),
                families,
                digest: None,
                os: Os::of_family(families.os.as_bytes()),
            };
        }
        SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            let slot = self.slot(&mut seen, agent);
            let (families, os) = *slot.families.get_or_insert_with(|| {
                let families = parser.families(agent);
                (families, Os::of_family(families.os.as_bytes()))
            });
            AgentVerdict {
                visitor: slot.visitor,
                families,
                digest: slot.digest,
                os,
            }
        })
    }

    /// The digest a split is sticky on of the request's User-Agent (none: of no bytes),
    /// remembered per thread with the agent's verdict.
    pub fn agent_digest(&self, headers: &HeaderMap) -> u64 {
        let agent = match headers.iter().find(|(name, _)| **name == USER_AGENT) {
            Some((_, agent)) => agent.as_bytes(),
            None => b"",
        };
        if agent.len() > LONGEST_REMEMBERED {
            return rebound_core::rules::agent_digest(agent);
        }
        SEEN.with(|seen| {
            let seen = &mut *seen.borrow_mut();
            // Most often the agent this request's click was just classified by: its slot,
            // compared and not hashed again.
            let last = seen.last;
            let slot = match &mut seen.slots[last] {
                Some(slot) if *slot.agent == *agent => slot,
                _ => self.slot(seen, agent),
            };
            *slot
                .digest
                .get_or_insert_with(|| rebound_core::rules::agent_digest(agent))
        })
    }

    /// The slot that remembers `agent`: classified again, its families forgotten, when it
    /// held another agent.
    #[inline]
    fn slot<'s>(&self, seen: &'s mut SeenAgents, agent: &[u8]) -> &'s mut Seen {
        let hash = seen.hasher.hash_one(agent);
        seen.last = (hash as usize) % SLOTS;
        let slot = &mut seen.slots[seen.last];
        if !matches!(slot, Some(s) if s.hash == hash && *s.agent == *agent) {
            *slot = Some(Seen {
                hash,
                agent: agent.into(),
                visitor: self.verdict(agent),
                families: None,
                digest: None,
            });
        }
        slot.as_mut().expect("filled above")
    }

    #[cold]
    fn verdict(&self, agent: &[u8]) -> Visitor {
        match self.is_bot(agent) {
            true => Visitor::Bot,
            false => Visitor::Person,
        }
    }
}

struct Seen {
    hash: u64,
    agent: Box<[u8]>,
    visitor: Visitor,
    /// Parsed the first time they are asked for, with the OS family a rule names.
    families: Option<(AgentFamilies, Os)>,
    /// What a split is sticky on ([`rebound_core::rules::agent_digest`]), made the first
    /// time a split asks.
    digest: Option<u64>,
}

struct SeenAgents {
    /// foldhash (hashbrown's default): a 120-byte browser agent measured at 12
    /// instructions a redirect under callgrind, where `ahash::RandomState::hash_one` took
    /// 144 (benches/results/2026-12-05-callgrind-domains-bots.md).
    hasher: hashbrown::DefaultHashBuilder,
    slots: Box<[Option<Seen>]>,
    /// The slot of the agent classified last.
    last: usize,
}

thread_local! {
    static SEEN: RefCell<SeenAgents> = RefCell::new(SeenAgents {
        hasher: hashbrown::DefaultHashBuilder::default(),
        slots: (0..SLOTS).map(|_| None).collect(),
        last: 0,
    });
}

/// The version of uap-core whose regexes are compiled in (proxy/data/uap-core).
pub const UAP_CORE: &str = "0.18.0";
const UAP_REGEXES: &str = include_str!("../data/uap-core/regexes.yaml");

/// The User-Agent parser of the dimensions: uap-core's browser and OS regexes (its device
/// regexes name models, not classes, and are not compiled), behind one normalisation of
/// their names and one rule for the device class.
pub struct AgentParser {
    browsers: ua_parser::user_agent::Extractor<'static>,
    systems: ua_parser::os::Extractor<'static>,
    parses: AtomicU64,
}

impl AgentParser {
    /// The parser every redirect thread shares, built on first use: reading the YAML and
    /// compiling its 563 regexes takes about a tenth of a second, so it happens at start.
    pub fn shared() -> Arc<AgentParser> {
        static SHARED: OnceLock<Arc<AgentParser>> = OnceLock::new();
        SHARED.get_or_init(|| Arc::new(AgentParser::new())).clone()
    }

    /// A parser of its own (the shared one is the one to use; a test counts its parses).
    pub fn new() -> AgentParser {
        // The file is compiled in and tested: a failure here is a broken build, not input.
        let regexes: ua_parser::Regexes<'static> =
            serde_yaml::from_str(UAP_REGEXES).expect("proxy/data/uap-core/regexes.yaml is uap-core's format");
        let browsers = ua_parser::user_agent::Builder::new()
            .push_all(regexes.user_agent_parsers)
            .expect("uap-core's browser regexes parse")
            .build()
            .expect("uap-core's browser regexes compile");
        let systems = ua_parser::os::Builder::new()
            .push_all(regexes.os_parsers)
            .expect("uap-core's OS regexes parse")
            .build()
            .expect("uap-core's OS regexes compile");
        AgentParser {
            browsers,
            systems,
            parses: AtomicU64::new(0),
        }
    }

    /// The families of one agent, parsed now (a few microseconds; the remembered ones are
    /// [`BotPatterns::classify_agent_with_families`]'s).
    pub fn families(&self, agent: &[u8]) -> AgentFamilies {
        self.parses.fetch_add(1, Ordering::Relaxed);
        let agent = String::from_utf8_lossy(agent);
        let browser = self.browsers.extract(&agent);
        let os = self.systems.extract(&agent);
        let os = os.as_ref().map_or("Other", |v| os_family(&v.os));
        AgentFamilies {
            device: device_class(os, &agent),
            browser: Family::truncated(browser.as_ref().map_or("Other", |v| browser_family(&v.family))),
            os: Family::truncated(os),
        }
    }

    /// How many agents this parser has parsed.
    pub fn parses(&self) -> u64 {
        self.parses.load(Ordering::Relaxed)
    }
}

impl Default for AgentParser {
    fn default() -> AgentParser {
        AgentParser::new()
    }
}

/// One name per browser, whatever uap-core calls its mobile or iOS build; web views without
/// an app's name are named as such, not as the browser whose engine they embed.
fn browser_family(name: &str) -> &str {
    match name {
        "Mobile Safari" | "Safari" => "Safari",
        "Chrome" | "Chrome Mobile" | "Chrome Mobile iOS" => "Chrome",
        "Firefox" | "Firefox Mobile" | "Firefox iOS" => "Firefox",
        "Edge" | "Edge Mobile" => "Edge",
        "Chrome Mobile WebView" => "Android WebView",
        "Mobile Safari UI/WKWebView" => "iOS WebView",
        "" => "Other",
        other => other,
    }
}

/// One name per OS family, without versions; Linux distributions are Linux.
fn os_family(name: &str) -> &str {
    match name {
        "Windows Phone" | "Windows Mobile" => name,
        n if n.starts_with("Windows") => "Windows",
        "Mac OS X" => "macOS",
        "Chrome OS" => "ChromeOS",
        "Ubuntu" | "Kubuntu" | "Debian" | "Fedora" | "Red Hat" | "CentOS" | "openSUSE" | "Gentoo" | "Mint" => "Linux",
        n if n.contains("Linux") => "Linux",
        "" => "Other",
        other => other,
    }
}

/// The device class from the OS family and a few tokens (uap-core has no class: its device
/// regexes name models). An iPad says so (an iPad's Safari sends a Mac's agent by default
/// since iPadOS 13, and is counted as a desktop: nothing tells them apart); an Android
/// tablet's browser leaves `Mobile` out (Chrome's and Samsung's convention); consoles and
/// TVs are `other`, as are agents of no known OS (scripts, bots).
fn device_class(os: &str, agent: &str) -> DeviceClass {
    let appliance = [
        "Xbox",
        "PlayStation",
        "Nintendo",
        "SMART-TV",
        "SmartTV",
        "Android TV",
        "BRAVIA",
    ]
    .iter()
    .any(|token| agent.contains(token));
    match os {
        _ if appliance => DeviceClass::Other,
        "iOS" if agent.contains("iPad") => DeviceClass::Tablet,
        "iOS" | "Windows Phone" | "Windows Mobile" | "KaiOS" => DeviceClass::Mobile,
        "Android" if agent.contains("Mobile") => DeviceClass::Mobile,
        "Android" => DeviceClass::Tablet,
        "Windows" | "macOS" | "Linux" | "ChromeOS" => DeviceClass::Desktop,
        _ => DeviceClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// Agents the unfurlers and crawlers of the issue send, as they send them, and
    /// browsers' and apps' that must stay people.
    const AGENTS: &[(&str, Visitor)] = &[
        ("Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", Visitor::Bot),
        ("Slackbot 1.0 (+https://api.slack.com/robots)", Visitor::Bot),
        ("Twitterbot/1.0", Visitor::Bot),
        ("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", Visitor::Bot),
        ("Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)", Visitor::Bot),
        ("WhatsApp/2.23.20.0 A", Visitor::Bot),
        ("LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)", Visitor::Bot),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", Visitor::Bot),
        ("TelegramBot (like TwitterBot)", Visitor::Bot),
        ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", Visitor::Bot),
        ("curl/8.5.0", Visitor::Bot),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
            Visitor::Person,
        ),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Mobile/15E148 Safari/604.1",
            Visitor::Person,
        ),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", Visitor::Person),
        (
            "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Mobile Safari/537.36",
            Visitor::Person,
        ),
        ("", Visitor::Person),
    ];

    #[test]
    fn unfurlers_and_crawlers_are_bots_and_browsers_are_people() {
        let p = BotPatterns::shared();
        for &(agent, want) in AGENTS {
            assert_eq!(p.verdict(agent.as_bytes()), want, "{agent}");
            // Remembered: the same verdict from the slot, twice.
            assert_eq!(p.classify_agent(agent.as_bytes()), want, "{agent}");
            assert_eq!(p.classify_agent(agent.as_bytes()), want, "{agent} (remembered)");
        }
    }

    #[test]
    fn head_is_a_bot_and_a_missing_agent_a_person() {
        let p = BotPatterns::shared();
        let mut headers = HeaderMap::new();
        assert_eq!(p.classify(&Method::GET, &headers), Visitor::Person);
        assert_eq!(p.classify(&Method::HEAD, &headers), Visitor::Bot);
        headers.insert(USER_AGENT, HeaderValue::from_static("Twitterbot/1.0"));
        assert_eq!(p.classify(&Method::GET, &headers), Visitor::Bot);
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"),
        );
        assert_eq!(p.classify(&Method::GET, &headers), Visitor::Person);
        // Bytes that are not UTF-8 are classified too (a browser would not send them).
        let odd = HeaderValue::from_bytes(b"Mozilla/5.0 \xff\xfe Googlebot/2.1").unwrap();
        headers.insert(USER_AGENT, odd);
        assert_eq!(p.classify(&Method::GET, &headers), Visitor::Bot);
    }

    #[test]
    fn a_slot_taken_by_another_agent_is_classified_again_not_mistaken() {
        let p = BotPatterns::shared();
        // More agents than slots: every slot is overwritten, none answers for another.
        for i in 0..(SLOTS * 4) {
            let person = format!("Mozilla/5.0 (X11; Linux x86_64; rv:{i}.0) Gecko/20100101 Firefox/{i}.0");
            let bot = format!("Mozilla/5.0 (compatible; Crawlbot{i}/2.0; +http://example.com/bot)");
            assert_eq!(p.classify_agent(person.as_bytes()), Visitor::Person, "{person}");
            assert_eq!(p.classify_agent(bot.as_bytes()), Visitor::Bot, "{bot}");
        }
        // Too long to remember: classified each time, alike.
        let long = format!("Googlebot/2.1 {}", "x".repeat(LONGEST_REMEMBERED));
        assert_eq!(p.classify_agent(long.as_bytes()), Visitor::Bot);
    }

    use DeviceClass::{Desktop, Mobile, Other, Tablet};

    /// The agents of benches/results/2026-12-06d-user-agent-parsers.md (the list the parsers
    /// were chosen on), with their device class, browser family and OS family.
    const FAMILIES: &[(&str, DeviceClass, &str, &str)] = &[
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", Desktop, "Chrome", "Windows"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", Desktop, "Chrome", "macOS"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", Desktop, "Chrome", "Linux"),
        ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", Desktop, "Chrome", "ChromeOS"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0", Desktop, "Firefox", "Windows"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:133.0) Gecko/20100101 Firefox/133.0", Desktop, "Firefox", "macOS"),
        ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", Desktop, "Firefox", "Linux"),
        ("Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", Desktop, "Firefox", "Linux"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", Desktop, "Safari", "macOS"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", Desktop, "Edge", "Windows"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", Desktop, "Edge", "macOS"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 OPR/115.0.0.0", Desktop, "Opera", "Windows"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", Mobile, "Safari", "iOS"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1", Mobile, "Chrome", "iOS"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/133.0 Mobile/15E148 Safari/605.1.15", Mobile, "Firefox", "iOS"),
        ("Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1", Tablet, "Safari", "iOS"),
        ("Mozilla/5.0 (iPad; CPU OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1", Tablet, "Chrome", "iOS"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36", Mobile, "Chrome", "Android"),
        ("Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Mobile Safari/537.36", Mobile, "Chrome", "Android"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", Tablet, "Chrome", "Android"),
        ("Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Safari/537.36", Tablet, "Chrome", "Android"),
        ("Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36", Mobile, "Samsung Internet", "Android"),
        ("Mozilla/5.0 (Linux; Android 13; SAMSUNG SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Safari/537.36", Tablet, "Samsung Internet", "Android"),
        ("Mozilla/5.0 (Android 14; Mobile; rv:133.0) Gecko/133.0 Firefox/133.0", Mobile, "Firefox", "Android"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 EdgA/131.0.0.0", Mobile, "Edge", "Android"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 Instagram 339.0.3.12.91 (iPhone14,2; iOS 17_5; en_US; en; scale=3.00; 1170x2532; 618023787)", Mobile, "Instagram", "iOS"),
        ("Mozilla/5.0 (Linux; Android 14; SM-S918B Build/UP1A.231005.007; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36 Instagram 357.0.0.25.101 Android (34/14; 480dpi; 1080x2340; samsung; SM-S918B; dm3q; qcom; en_US; 661945435)", Mobile, "Instagram", "Android"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [FBAN/FBIOS;FBAV/470.0.0.39.109;FBBV/619513207;FBDV/iPhone14,2;FBMD/iPhone;FBSN/iOS;FBSV/17.5;FBSS/3;FBID/phone;FBLC/en_US;FBOP/5;FBRV/621440329]", Mobile, "Facebook", "iOS"),
        ("Mozilla/5.0 (Linux; Android 14; SM-S918B Build/UP1A.231005.007; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36 [FB_IAB/FB4A;FBAV/489.0.0.66.81;]", Mobile, "Facebook", "Android"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; Xbox; Xbox One) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/70.0.3538.102 Safari/537.36 Edge/18.19041", Other, "Edge", "Windows"),
        ("curl/8.5.0", Other, "curl", "Other"),
        ("Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", Other, "Slackbot-LinkExpanding", "Other"),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", Other, "Googlebot", "Other"),
        // Beyond the measured list: a web view without an app's name, a TV, no agent at all.
        ("Mozilla/5.0 (Linux; Android 13; Pixel 7 Build/TQ3A.230901.001; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/131.0.6778.39 Mobile Safari/537.36", Mobile, "Android WebView", "Android"),
        ("Mozilla/5.0 (Linux; Android 9; BRAVIA 4K GB) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.39 Safari/537.36", Other, "Chrome", "Android"),
        ("", Other, "Other", "Other"),
    ];

    fn shown(f: AgentFamilies) -> (DeviceClass, String, String) {
        (f.device, f.browser.as_str().to_owned(), f.os.as_str().to_owned())
    }

    #[test]
    fn the_families_of_browsers_apps_consoles_and_scripts() {
        let parser = AgentParser::shared();
        let bots = BotPatterns::shared();
        for &(agent, device, browser, os) in FAMILIES {
            let want = (device, browser.to_owned(), os.to_owned());
            assert_eq!(shown(parser.families(agent.as_bytes())), want, "{agent}");
            // Remembered: the same families from the slot, twice, with the bot verdict.
            for _ in 0..2 {
                let verdict = bots.classify_agent_with_families(agent.as_bytes(), &parser);
                assert_eq!(shown(verdict.families), want, "{agent}");
                assert_eq!(verdict.visitor, bots.verdict(agent.as_bytes()), "{agent}");
            }
        }
    }

    #[test]
    fn an_agent_is_parsed_once_per_slot_and_only_when_its_families_are_asked_for() {
        let parser = AgentParser::new();
        let bots = BotPatterns::shared();
        let chrome = FAMILIES[0].0.as_bytes();
        // The bot verdict alone never parses.
        assert_eq!(bots.classify_agent(chrome), Visitor::Person);
        assert_eq!(parser.parses(), 0);
        // The slot filled by the verdict is completed once, then answers.
        for _ in 0..3 {
            let v = bots.classify_agent_with_families(chrome, &parser);
            assert_eq!((v.visitor, v.families.device), (Visitor::Person, Desktop));
        }
        assert_eq!(parser.parses(), 1);
        assert_eq!(bots.classify_agent(chrome), Visitor::Person);
        assert_eq!(parser.parses(), 1);
        // Pushed out by other agents, it is parsed again, and right.
        for i in 0..(SLOTS * 4) {
            let other = format!("Mozilla/5.0 (iPhone; CPU iPhone OS 18_{i} like Mac OS X) Mobile/15E148 Safari/604.1");
            let v = bots.classify_agent_with_families(other.as_bytes(), &parser);
            assert_eq!((v.families.device, v.families.os.as_str()), (Mobile, "iOS"), "{other}");
        }
        let before = parser.parses();
        let v = bots.classify_agent_with_families(chrome, &parser);
        assert_eq!(shown(v.families), (Desktop, "Chrome".to_owned(), "Windows".to_owned()));
        assert_eq!(parser.parses(), before + 1);
        // Too long to remember: parsed each time, alike.
        let long = format!("{} {}", FAMILIES[0].0, "x".repeat(LONGEST_REMEMBERED));
        let before = parser.parses();
        for _ in 0..2 {
            let v = bots.classify_agent_with_families(long.as_bytes(), &parser);
            assert_eq!((v.families.device, v.families.browser.as_str()), (Desktop, "Chrome"));
        }
        assert_eq!(parser.parses(), before + 2);
    }

    #[test]
    fn head_is_a_bot_with_its_agents_families_and_no_agent_a_person_on_another_device() {
        let bots = BotPatterns::shared();
        let parser = AgentParser::shared();
        let mut headers = HeaderMap::new();
        let v = bots.classify_with_families(&Method::GET, &headers, &parser);
        assert_eq!((v.visitor, v.families), (Visitor::Person, AgentFamilies::other()));
        let (iphone, ..) = FAMILIES[12];
        headers.insert(USER_AGENT, HeaderValue::from_static(iphone));
        let get = bots.classify_with_families(&Method::GET, &headers, &parser);
        let head = bots.classify_with_families(&Method::HEAD, &headers, &parser);
        assert_eq!((get.visitor, head.visitor), (Visitor::Person, Visitor::Bot));
        assert_eq!(get.families, head.families);
        assert_eq!(shown(get.families), (Mobile, "Safari".to_owned(), "iOS".to_owned()));
        // The verdict agrees with `classify` on every agent of the tables.
        for &(agent, ..) in FAMILIES.iter().filter(|(a, ..)| !a.is_empty()) {
            headers.insert(USER_AGENT, HeaderValue::from_str(agent).unwrap());
            for method in [Method::GET, Method::HEAD] {
                let v = bots.classify_with_families(&method, &headers, &parser);
                assert_eq!(v.visitor, bots.classify(&method, &headers), "{method} {agent}");
            }
        }
    }
}
