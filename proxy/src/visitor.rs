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

use http::header::USER_AGENT;
use http::{HeaderMap, Method};
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

/// Who a redirect is for, as far as the clicks are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visitor {
    Person,
    Bot,
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
        SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            let hash = seen.hasher.hash_one(agent);
            let slot = &mut seen.slots[(hash as usize) % SLOTS];
            match slot {
                Some(s) if s.hash == hash && *s.agent == *agent => s.visitor,
                _ => {
                    let visitor = self.verdict(agent);
                    *slot = Some(Seen {
                        hash,
                        agent: agent.into(),
                        visitor,
                    });
                    visitor
                }
            }
        })
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
}

struct SeenAgents {
    /// foldhash (hashbrown's default): a 120-byte browser agent measured at 12
    /// instructions a redirect under callgrind, where `ahash::RandomState::hash_one` took
    /// 144 (benches/results/2026-12-05-callgrind-domains-bots.md).
    hasher: hashbrown::DefaultHashBuilder,
    slots: Box<[Option<Seen>]>,
}

thread_local! {
    static SEEN: RefCell<SeenAgents> = RefCell::new(SeenAgents {
        hasher: hashbrown::DefaultHashBuilder::default(),
        slots: (0..SLOTS).map(|_| None).collect(),
    });
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
}
