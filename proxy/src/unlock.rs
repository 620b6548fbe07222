//! Password-protected links on the redirect port (docs/spec.md §12). A protected link's redirect
//! answers a small form instead; the form posts the password back to the same URL; a
//! correct one gets the redirect (303 to the target, so a 307/308 link never re-posts the
//! password there) and a cookie signed with the fleet's key that lets its visitor through
//! for 15 minutes at this version of the link; a wrong one gets the form again.
//!
//! Guessing is slow: attempts are limited per link and per client network (429 with
//! `Retry-After`), before anything is read or checked. The per-link budget is the fleet's
//! when Redis is there (every proxy takes from one budget, so N proxies let no more
//! guesses through than one), and this proxy's own count besides, which alone bounds them
//! while Redis cannot be reached: never unlimited. The per-client budget is each proxy's.
//! A check (Argon2id, tens of milliseconds) runs on the runtime's blocking threads, never
//! on the redirect threads, at most [`CHECKS_AT_ONCE`] at a time; a check with none free is
//! answered 503 at once, so a storm of attempts costs the redirect path nothing.
//! Unprotected links never come here.

use crate::l1::L1Entry;
use bytes::Bytes;
use governor::clock::{Clock as _, DefaultClock};
use governor::{Quota, RateLimiter};
use http::header::{
    HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, RETRY_AFTER,
};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use rebound_core::password::{cookie_unlocks, unlock_cookie, verify_password, UNLOCK_KEY_SETTING, UNLOCK_MILLIS};
use rebound_core::UnixMillis;
use rebound_store::{AttemptBudget, LinkReads};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use tokio::sync::{OnceCell, Semaphore};

/// Password checks at once, at most (each 19 MiB and tens of milliseconds of a core).
pub const CHECKS_AT_ONCE: usize = 2;
/// The cookie's name (its path is the link's, so each link has its own).
const COOKIE_NAME: &str = "rebound_unlock";
/// The longest form body read.
const MAX_FORM_BYTES: usize = 1024;
/// Attempts per client network: 5 at once, then one every 12 s.
const PER_CLIENT_BURST: u32 = 5;
const PER_CLIENT_EVERY_SECS: u64 = 12;
/// Attempts per link, from everyone: 30 at once, then one every 2 s.
const PER_LINK_BURST: u32 = 30;
const PER_LINK_EVERY_SECS: u64 = 2;
/// The longest an attempt waits for the fleet's budget before counting on this proxy's own.
const FLEET_BUDGET_WAIT: std::time::Duration = std::time::Duration::from_millis(250);
/// Keys kept by each limiter before the idle ones are forgotten.
const FORGET_ABOVE: usize = 100_000;

type Keyed<K> = RateLimiter<K, governor::state::keyed::DefaultKeyedStateStore<K>, DefaultClock>;

/// The answer to a reply of the redirect port.
type Reply = Response<Full<Bytes>>;

/// How an attempt ended, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Unlocked,
    Wrong,
    Limited,
    Busy,
}

impl Attempt {
    pub fn label(self) -> &'static str {
        match self {
            Attempt::Unlocked => "unlocked",
            Attempt::Wrong => "wrong",
            Attempt::Limited => "limited",
            Attempt::Busy => "busy",
        }
    }
}

/// What the form says above its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    None,
    Wrong,
    TooMany,
}

/// Who makes an attempt, as the connection tells.
#[derive(Debug, Clone, Copy, Default)]
pub struct Client {
    /// The client's address (attempts are limited per client network).
    pub address: Option<IpAddr>,
    /// The request came over TLS: the cookie is `Secure` then.
    pub over_tls: bool,
}

/// The gate of password-protected links.
pub struct Unlocks {
    store: Arc<dyn LinkReads>,
    /// The fleet's cookie key, read from the store once it is there.
    key: OnceCell<Vec<u8>>,
    checks: Arc<Semaphore>,
    per_client: Keyed<u128>,
    /// This proxy's own count per link: the bound while the fleet's cannot be reached.
    per_link: Keyed<String>,
    /// The fleet's budget per link (Redis), when there is one.
    fleet: Option<Arc<dyn AttemptBudget>>,
}

fn quota(burst: u32, every_secs: u64) -> Quota {
    let burst = NonZeroU32::new(burst).expect("a burst above 0");
    Quota::with_period(std::time::Duration::from_secs(every_secs))
        .expect("a period above 0")
        .allow_burst(burst)
}

/// A client's network: an IPv4 address, or an IPv6 /64 (one client holds a whole /64).
fn network(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(u32::from(v4)),
            None => u128::from(v6) & !((1u128 << 64) - 1) | (1 << 32),
        },
    }
}

impl Unlocks {
    /// The gate, reading hashes from `store`, with the fleet's per-link budget `fleet`
    /// when there is one.
    pub fn new(store: Arc<dyn LinkReads>, fleet: Option<Arc<dyn AttemptBudget>>) -> Unlocks {
        Unlocks {
            store,
            key: OnceCell::new(),
            checks: Arc::new(Semaphore::new(CHECKS_AT_ONCE)),
            per_client: RateLimiter::keyed(quota(PER_CLIENT_BURST, PER_CLIENT_EVERY_SECS)),
            per_link: RateLimiter::keyed(quota(PER_LINK_BURST, PER_LINK_EVERY_SECS)),
            fleet,
        }
    }

    /// The fleet's cookie key; `None` until a control plane has made it (then no cookie
    /// unlocks anything, and none is given: every visit asks for the password).
    async fn key(&self) -> Option<&[u8]> {
        let key = self
            .key
            .get_or_try_init(|| async {
                match self.store.read_setting(UNLOCK_KEY_SETTING).await {
                    Ok(Some(key)) => hex::decode(key).map_err(drop),
                    _ => Err(()),
                }
            })
            .await;
        key.ok().map(Vec::as_slice)
    }

    /// Whether the request's cookies let it through to `key` at `entry`'s version.
    pub async fn cookie_lets_through(&self, headers: &HeaderMap, key: &str, entry: &L1Entry, now: UnixMillis) -> bool {
        let Some(secret) = self.key().await else { return false };
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(Result::ok)
            .filter(|c| c.name() == COOKIE_NAME)
            .any(|c| cookie_unlocks(secret, c.value(), key, entry.version(), now))
    }

    /// The form (200), or only its headers for a HEAD.
    pub fn form(&self, head: bool) -> Reply {
        page(StatusCode::OK, Notice::None, head, None)
    }

    /// An attempt: the password in the form body, checked against the link `key` at
    /// `entry`'s version. `Ok` with the `Set-Cookie` value when it unlocks (the caller
    /// answers the redirect; the cookie `Secure` when the request came over TLS), `Err`
    /// with the answer otherwise.
    pub async fn attempt(
        &self,
        key: &str,
        entry: &L1Entry,
        client: Client,
        headers: &HeaderMap,
        body: hyper::body::Incoming,
        now: UnixMillis,
    ) -> Result<Option<HeaderValue>, (Attempt, Reply)> {
        // Limited before anything is read or checked.
        if let Err(wait) = self.admit(key, client.address).await {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            return Err((
                Attempt::Limited,
                page(StatusCode::TOO_MANY_REQUESTS, Notice::TooMany, false, Some(secs.max(1))),
            ));
        }
        let is_form = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
        let body = match Limited::new(body, MAX_FORM_BYTES).collect().await {
            Ok(body) if is_form => body.to_bytes(),
            _ => {
                return Err((
                    Attempt::Wrong,
                    page(StatusCode::BAD_REQUEST, Notice::Wrong, false, None),
                ))
            }
        };
        let password = form_urlencoded::parse(&body)
            .find(|(name, _)| name == "password")
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default();
        // At most CHECKS_AT_ONCE checks; a storm gets 503 at once instead of a queue.
        let Ok(permit) = self.checks.clone().try_acquire_owned() else {
            let mut busy = page(StatusCode::SERVICE_UNAVAILABLE, Notice::None, false, None);
            busy.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return Err((Attempt::Busy, busy));
        };
        // The hash from the store, at the version the visitor was shown.
        let hash = match self.store.get_link(key).await {
            Ok(Some(link)) if link.is_active && link.version == entry.version() => link.password_hash,
            _ => None,
        };
        let Some(hash) = hash else {
            drop(permit);
            let mut again = page(StatusCode::SERVICE_UNAVAILABLE, Notice::None, false, None);
            again.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return Err((Attempt::Busy, again));
        };
        let matches = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            verify_password(&password, &hash)
        })
        .await
        .unwrap_or(false);
        if !matches {
            return Err((
                Attempt::Wrong,
                page(StatusCode::UNAUTHORIZED, Notice::Wrong, false, None),
            ));
        }
        let Some(secret) = self.key().await else {
            return Ok(None);
        };
        let value = unlock_cookie(secret, key, entry.version(), now + UNLOCK_MILLIS);
        Ok(HeaderValue::from_str(&unlock_set_cookie(key, value, client.over_tls)).ok())
    }

    /// Takes an attempt on the link `key` from `client`'s budget, then from the link's: the
    /// fleet's when it answers in time, and this proxy's own in any case (alone the bound
    /// while the fleet's cannot be reached). `Err` with the wait when one is spent.
    async fn admit(&self, key: &str, client: Option<IpAddr>) -> Result<(), std::time::Duration> {
        let clock = DefaultClock::default();
        if let Some(ip) = client {
            if let Err(until) = self.per_client.check_key(&network(ip)) {
                return Err(until.wait_time_from(clock.now()));
            }
        }
        if let Some(fleet) = &self.fleet {
            let every = std::time::Duration::from_secs(PER_LINK_EVERY_SECS);
            match tokio::time::timeout(FLEET_BUDGET_WAIT, fleet.take_attempt(key, PER_LINK_BURST, every)).await {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(wait))) => return Err(wait),
                Ok(Err(e)) => {
                    tracing::debug!(error = %rebound_core::Causes(&e), "the fleet's attempt budget is away: this proxy's alone");
                }
                Err(_) => tracing::debug!("the fleet's attempt budget is slow: this proxy's alone"),
            }
        }
        let local = self.per_link.check_key(&key.to_owned());
        self.forget_idle();
        local.map_err(|until| until.wait_time_from(clock.now()))
    }

    /// Forgets the limiters' idle keys once they hold many.
    fn forget_idle(&self) {
        if self.per_client.len() > FORGET_ABOVE {
            self.per_client.retain_recent();
        }
        if self.per_link.len() > FORGET_ABOVE {
            self.per_link.retain_recent();
        }
    }
}

/// The `Set-Cookie` value of the cookie `value` for the link `key`: only for its path, never
/// read by scripts, not sent along cross-site posts, for [`UNLOCK_MILLIS`]; `Secure` when
/// the request came over TLS (a browser then never sends it in the clear).
fn unlock_set_cookie(key: &str, value: String, secure: bool) -> String {
    let path = format!("/{}", rebound_core::domain::split_key(key).0);
    cookie::Cookie::build((COOKIE_NAME, value))
        .path(path)
        .http_only(true)
        .secure(secure)
        .same_site(cookie::SameSite::Lax)
        .max_age(cookie::time::Duration::milliseconds(UNLOCK_MILLIS))
        .build()
        .to_string()
}

/// The form's page at `status`; with `retry_after` seconds the header says so.
fn page(status: StatusCode, notice: Notice, head: bool, retry_after: Option<u64>) -> Reply {
    let message = match notice {
        Notice::None => "",
        Notice::Wrong => r#"<p class="error" role="alert">That password is not right. Try again.</p>"#,
        Notice::TooMany => r#"<p class="error" role="alert">Too many tries. Wait a little, then try again.</p>"#,
    };
    let body = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="robots" content="noindex"><title>Password needed</title>
<style>body{{font:1rem/1.5 system-ui,sans-serif;max-width:34rem;margin:12vh auto;padding:0 1.25rem;color:#1f2328;background:#fff}}h1{{font-size:1.5rem}}label{{display:block;font-weight:600;margin:.75rem 0 .25rem}}input{{font:inherit;padding:.4rem;width:100%;box-sizing:border-box}}button{{font:inherit;margin-top:.75rem;padding:.4rem 1rem}}.error{{color:#b42318}}@media(prefers-color-scheme:dark){{body{{color:#e6edf3;background:#0d1117}}.error{{color:#ff7b72}}}}</style></head>
<body><main><h1>This link is protected</h1><p>Whoever shared it set a password. Enter it to continue.</p>{message}
<form method="post"><label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required maxlength="128" autofocus><button type="submit">Continue</button></form></main></body></html>
"#
    );
    let length = HeaderValue::from(body.len());
    let mut res = match head {
        true => Response::new(Full::default()),
        false => Response::new(Full::new(Bytes::from(body))),
    };
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(CONTENT_LENGTH, length);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self' http: https:; frame-ancestors 'none'",
        ),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if let Some(secs) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_store::{MemoryStore, StoreError};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// A fleet's budget in memory: attempts taken per link, no refill (the tests take far
    /// less than a refill's 2 s); while `away`, every call fails as Redis down would.
    #[derive(Default)]
    struct FleetBudget {
        taken: Mutex<std::collections::HashMap<String, u32>>,
        away: AtomicBool,
    }

    #[async_trait::async_trait]
    impl AttemptBudget for FleetBudget {
        async fn take_attempt(
            &self,
            key: &str,
            burst: u32,
            every: std::time::Duration,
        ) -> Result<Option<std::time::Duration>, StoreError> {
            if self.away.load(Ordering::Relaxed) {
                return Err(StoreError::unavailable("Redis", "down"));
            }
            let mut taken = self.taken.lock().unwrap();
            let n = taken.entry(key.to_owned()).or_default();
            if *n >= burst {
                return Ok(Some(every));
            }
            *n += 1;
            Ok(None)
        }
    }

    fn proxy(fleet: &Arc<FleetBudget>) -> Unlocks {
        Unlocks::new(
            Arc::new(MemoryStore::new()),
            Some(fleet.clone() as Arc<dyn AttemptBudget>),
        )
    }

    /// `n` attempts on `key`, each from a client of its own, alternating between `proxies`:
    /// how many were let through.
    async fn admitted(proxies: &[&Unlocks], key: &str, n: u8, first_client: u8) -> usize {
        let mut through = 0;
        for i in 0..n {
            let client = IpAddr::from([10, 0, first_client, i]);
            if proxies[usize::from(i) % proxies.len()]
                .admit(key, Some(client))
                .await
                .is_ok()
            {
                through += 1;
            }
        }
        through
    }

    #[tokio::test]
    async fn two_proxies_share_one_budget_per_link() {
        let fleet = Arc::new(FleetBudget::default());
        let (a, b) = (proxy(&fleet), proxy(&fleet));
        let burst = PER_LINK_BURST as usize;
        assert_eq!(admitted(&[&a, &b], "locked", 40, 1).await, burst, "one budget for both");
        // Either proxy refuses the next, and says how long to wait.
        for p in [&a, &b] {
            let wait = p.admit("locked", Some(IpAddr::from([10, 0, 2, 1]))).await;
            assert_eq!(wait, Err(std::time::Duration::from_secs(PER_LINK_EVERY_SECS)));
        }
        // Another link has its own budget.
        assert_eq!(admitted(&[&a, &b], "other", 2, 3).await, 2);
    }

    #[tokio::test]
    async fn with_the_fleets_budget_away_each_proxy_still_limits_per_link() {
        let fleet = Arc::new(FleetBudget::default());
        fleet.away.store(true, Ordering::Relaxed);
        let a = proxy(&fleet);
        let burst = PER_LINK_BURST as usize;
        assert_eq!(
            admitted(&[&a], "locked", 40, 1).await,
            burst,
            "this proxy's own limit, never none"
        );
        // And the per-client limit holds with or without the fleet's.
        let b = proxy(&fleet);
        let client = Some(IpAddr::from([10, 0, 9, 9]));
        for i in 0..PER_CLIENT_BURST {
            assert!(b.admit(&format!("link{i}"), client).await.is_ok(), "attempt {i}");
        }
        assert!(b.admit("link-next", client).await.is_err());
    }

    #[test]
    fn a_client_network_is_its_ipv4_address_or_its_ipv6_64() {
        let n = |s: &str| network(s.parse().unwrap());
        assert_eq!(n("192.0.2.7"), n("::ffff:192.0.2.7"));
        assert_ne!(n("192.0.2.7"), n("192.0.2.8"));
        assert_eq!(n("2001:db8:1:2::1"), n("2001:db8:1:2:ffff::9"));
        assert_ne!(n("2001:db8:1:2::1"), n("2001:db8:1:3::1"));
        assert_ne!(n("0.0.0.1"), n("::1"), "IPv4 and IPv6 never collide");
    }

    #[test]
    fn the_unlock_cookie_is_secure_exactly_when_the_request_came_over_tls() {
        for (over_tls, secure) in [(true, true), (false, false)] {
            let cookie = unlock_set_cookie("abc", "1.2.ff".into(), over_tls);
            let attributes: Vec<&str> = cookie.split(';').map(str::trim).collect();
            assert_eq!(attributes.contains(&"Secure"), secure, "{cookie}");
            for always in ["rebound_unlock=1.2.ff", "HttpOnly", "SameSite=Lax", "Path=/abc"] {
                assert!(attributes.contains(&always), "{always} in {cookie}");
            }
        }
    }

    #[test]
    fn the_form_is_a_page_that_loads_nothing_and_posts_to_itself() {
        let res = page(StatusCode::TOO_MANY_REQUESTS, Notice::TooMany, false, Some(12));
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()[RETRY_AFTER], "12");
        assert_eq!(res.headers()[CACHE_CONTROL], "no-store");
        // The form posts here, and the answer redirects to the target (a browser holds
        // form-action to the redirect too).
        assert!(res.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("form-action 'self' http: https:"));
        let head = page(StatusCode::OK, Notice::None, true, None);
        assert_eq!(
            head.headers()[CONTENT_LENGTH],
            page(StatusCode::OK, Notice::None, false, None).headers()[CONTENT_LENGTH]
        );
    }
}
