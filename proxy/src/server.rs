//! The redirect port. [`Redirects`] is the hyper service that answers `GET/HEAD /{code}`
//! from the redirect path; [`RedirectService`] is the Pingora service of one listener,
//! whose accept loop hands each connection to the edge (hyper inside the port's defences,
//! see `rebound_edge`), so Pingora keeps the server lifecycle, the fd table and the
//! graceful upgrade. Like River's file server it never proxies.

use crate::capture::{Capture, Click};
use crate::clicks::{ClickQueue, ClickStream};
use crate::domains::{request_authority, DomainRoutes, Route, Routed, UnknownHost};
use crate::l1::L1Entry;
use crate::pages::DeadEnds;
use crate::path::{RedirectPath, Resolution};
use crate::targeting::{RequestVisitor, Ruled, Targeting};
use crate::unlock::{Attempt, Client, Unlocks};
use crate::visitor::{BotPatterns, Visitor};
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::future::Either;
use http::header::{
    HeaderName, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, FORWARDED, LOCATION, RETRY_AFTER,
    SET_COOKIE,
};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{ListenFds, RunArgs, Server, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::Service;
use rebound_core::app_links::AppLinkDocument;
use rebound_core::client::{client_of, forwarded_over_tls, TrustedNetworks};
use rebound_core::code::is_valid_code;
use rebound_core::decision::{max_age_seconds, push_location, query_is_forwardable};
use rebound_core::rules::{Decided, RuleSet};
use rebound_core::UnixMillis;
use rebound_edge::acme::{http01_token, Http01Answers};
use rebound_edge::Edge;
use rebound_store::certs::CertificateStore;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

/// A response of the redirect port.
pub type Reply = Response<Full<Bytes>>;

/// What answers requests: the redirect path, the click queue and the prebuilt headers.
pub struct RedirectAnswers {
    path: Arc<RedirectPath>,
    clicks: Arc<ClickQueue>,
    /// `Cache-Control` of a redirect for every `max-age` from 0 to the configured one.
    cache_control: Vec<HeaderValue>,
    /// The same, `private`: a link with rules answers each visitor for itself.
    private_cache_control: Vec<HeaderValue>,
    max_age_secs: u64,
    /// The prebuilt 404, 410 and `/` answers.
    dead_ends: DeadEnds,
    /// The HTTP-01 validations in flight, when this port's certificates come from ACME.
    acme: Option<AcmeAnswers>,
    /// Which domain a request is for (docs/spec.md §11).
    routes: Arc<DomainRoutes>,
    /// Whose clicks a redirect counts: people's or bots' (docs/spec.md §12).
    bots: Arc<BotPatterns>,
    /// The gate of password-protected links (docs/spec.md §12).
    unlocks: Arc<Unlocks>,
    /// The proxies believed about the client (docs/spec.md §13): a request from one of
    /// them is from the client its forwarding headers name.
    trusted: TrustedNetworks,
    /// What a person's click is broken down by (docs/spec.md §13); none: nothing but the
    /// bot verdict is read of who clicked.
    capture: Option<Capture>,
    /// Where each click also goes as an event (docs/analytics.md, "The click stream");
    /// none: off, and a redirect costs one branch more.
    stream: Option<Arc<ClickStream>>,
    /// Where a link's rules learn who clicks (docs/spec.md §14).
    targeting: Targeting,
}

/// Where a redirect sends the visitor: a target's text, or (a rule's target) its `Location`
/// value built once ([`Ruled`]); a query forwarded is appended to either.
#[derive(Clone, Copy)]
enum Location<'a> {
    Text(&'a str),
    Built(&'a HeaderValue),
}

/// What a redirect's answer may depend on besides the link: the link's key, the request's
/// headers and its connection (a link's rules read them; nothing else does).
#[derive(Clone, Copy)]
struct Asked<'a> {
    key: &'a str,
    headers: &'a HeaderMap,
    connection: Connection,
}

/// The HTTP-01 validations in flight: this process's own, then the fleet's in the store (the
/// CA may ask any process of the fleet, not only the one that ordered).
#[derive(Clone)]
pub struct AcmeAnswers {
    pub local: Arc<dyn Http01Answers>,
    pub shared: Arc<dyn CertificateStore>,
}

/// The hyper service of the redirect port (cheap to clone: one per connection), with what
/// it knows of the connection.
#[derive(Clone)]
pub struct Redirects(Arc<RedirectAnswers>, Connection);

/// What the redirect service knows of a request's connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connection {
    /// The peer's address, when known: the TCP peer, or on a port that reads the PROXY
    /// protocol the client its header named.
    pub peer: Option<std::net::IpAddr>,
    /// Accepted on Rebound's own TLS listener: the request came over TLS.
    pub tls: bool,
    /// Its requests' forwarding headers are read when the peer is trusted: not on a port
    /// that reads the PROXY protocol (a layer-4 balancer passes the client's own headers).
    pub forwards: bool,
}

impl RedirectAnswers {
    /// Who makes a request on `connection` with `headers` (docs/spec.md §13): its client's
    /// address (the peer, or whom a trusted proxy forwards for), and whether the visitor
    /// came over TLS (Rebound's own TLS listener, or a trusted proxy's word), so that a
    /// cookie given in the answer may be `Secure`.
    fn client(&self, connection: Connection, headers: &HeaderMap) -> Client {
        let Some(peer) = connection.peer else {
            return Client {
                address: None,
                over_tls: connection.tls,
            };
        };
        if !connection.forwards || self.trusted.is_empty() {
            return Client {
                address: Some(peer),
                over_tls: connection.tls,
            };
        }
        let values = |name| headers.get_all(name).into_iter().map(HeaderValue::as_bytes);
        Client {
            address: Some(client_of(
                peer,
                &self.trusted,
                values(FORWARDED),
                values(X_FORWARDED_FOR),
            )),
            over_tls: connection.tls
                || forwarded_over_tls(peer, &self.trusted, values(FORWARDED), values(X_FORWARDED_PROTO)),
        }
    }
}

impl RedirectAnswers {
    /// Whose click a request with `method`, `headers` and `query` on `connection` is, with
    /// its dimensions when breakdowns are on ([`Capture::click`]); without them, the bot
    /// verdict alone, as before breakdowns.
    #[inline]
    fn click(&self, method: &Method, headers: &HeaderMap, query: Option<&str>, connection: Connection) -> Click {
        match &self.capture {
            None => Click::of(self.bots.classify(method, headers)),
            Some(capture) => capture.click(&self.bots, method, headers, query, || {
                let trusted = connection.forwards && connection.peer.is_some_and(|p| self.trusted.contains(p));
                (self.client(connection, headers).address, trusted)
            }),
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
const EMPTY: HeaderValue = HeaderValue::from_static("0");

/// An answer to HEAD with the headers of its GET. hyper states no `Content-Length: 0` for
/// an empty answer to HEAD (it cannot know what the GET would carry), so every answer
/// without a length of its own (a page states its length) gets the GET's `0` here.
fn as_head(mut res: Reply) -> Reply {
    if !res.headers().contains_key(CONTENT_LENGTH) {
        res.headers_mut().insert(CONTENT_LENGTH, EMPTY);
    }
    res
}

impl Redirects {
    /// Answers from `path`, counting redirects on `clicks` (people's, and bots' apart:
    /// link unfurlers, crawlers and `HEAD`); redirects say
    /// `Cache-Control: public, max-age=<max_age_secs>` (never past the link's expiry).
    /// 404, 410 and `/` get the built-in pages.
    pub fn new(path: Arc<RedirectPath>, clicks: Arc<ClickQueue>, max_age_secs: u64) -> Redirects {
        Self::with_dead_ends(path, clicks, max_age_secs, DeadEnds::default())
    }

    /// As [`Redirects::new`], with 404, 410 and `/` answered by `dead_ends`; every host is
    /// the default domain's.
    pub fn with_dead_ends(
        path: Arc<RedirectPath>,
        clicks: Arc<ClickQueue>,
        max_age_secs: u64,
        dead_ends: DeadEnds,
    ) -> Redirects {
        let routes = Arc::new(DomainRoutes::new("", UnknownHost::DefaultDomain));
        Self::answering(path, clicks, max_age_secs, dead_ends, None, routes)
    }

    /// As [`Redirects::with_dead_ends`] (`dead_ends` are the default domain's), routing
    /// each request by its host with `routes`, and answering the HTTP-01 validations in
    /// flight in `acme` on any host (`/.well-known/acme-challenge/{token}`: never a code,
    /// `.` is not a code character, so looked at only once a path is not one).
    pub fn answering(
        path: Arc<RedirectPath>,
        clicks: Arc<ClickQueue>,
        max_age_secs: u64,
        dead_ends: DeadEnds,
        acme: Option<AcmeAnswers>,
        routes: Arc<DomainRoutes>,
    ) -> Redirects {
        let cache_control = (0..=max_age_secs)
            .map(|s| HeaderValue::from_str(&format!("public, max-age={s}")).expect("digits are a valid header value"))
            .collect();
        let private_cache_control = (0..=max_age_secs)
            .map(|s| HeaderValue::from_str(&format!("private, max-age={s}")).expect("digits are a valid header value"))
            .collect();
        let unlocks = Arc::new(Unlocks::new(path.store.clone(), path.attempts.clone()));
        Redirects(
            Arc::new(RedirectAnswers {
                path,
                clicks,
                cache_control,
                private_cache_control,
                max_age_secs,
                dead_ends,
                acme,
                routes,
                bots: BotPatterns::shared(),
                unlocks,
                trusted: TrustedNetworks::default(),
                capture: None,
                stream: None,
                targeting: Targeting::default(),
            }),
            Connection::default(),
        )
    }

    /// Believes the proxies of `trusted` about the client of a request on a connection
    /// that takes forwarding headers ([`Connection::forwards`]). Called once, before the
    /// service is shared.
    pub fn trusting(mut self, trusted: TrustedNetworks) -> Redirects {
        match Arc::get_mut(&mut self.0) {
            Some(answers) => answers.trusted = trusted,
            None => unreachable!("trusting() is called before the service is shared"),
        }
        self
    }

    /// Breaks people's clicks down as `capture` says. Called once, before the service is
    /// shared.
    pub fn capturing(mut self, capture: Option<Capture>) -> Redirects {
        match Arc::get_mut(&mut self.0) {
            Some(answers) => answers.capture = capture,
            None => unreachable!("capturing() is called before the service is shared"),
        }
        self
    }

    /// Lets a link's rules know the country from `targeting`. Called once, before the
    /// service is shared.
    pub fn targeting(mut self, targeting: Targeting) -> Redirects {
        match Arc::get_mut(&mut self.0) {
            Some(answers) => answers.targeting = targeting,
            None => unreachable!("targeting() is called before the service is shared"),
        }
        self
    }

    /// Sends each click to `stream` as an event too. Called once, before the service is
    /// shared.
    pub fn streaming(mut self, stream: Option<Arc<ClickStream>>) -> Redirects {
        match Arc::get_mut(&mut self.0) {
            Some(answers) => answers.stream = stream,
            None => unreachable!("streaming() is called before the service is shared"),
        }
        self
    }

    /// The service of a cleartext connection from `peer`.
    pub fn for_peer(&self, peer: std::net::IpAddr) -> Redirects {
        self.for_connection(Connection {
            peer: Some(peer),
            tls: false,
            forwards: true,
        })
    }

    /// The service of `connection`.
    pub fn for_connection(&self, connection: Connection) -> Redirects {
        Redirects(self.0.clone(), connection)
    }
}

/// The pages of the domain a request was routed to.
enum Pages {
    Default,
    Domain(Arc<Route>),
}

impl Pages {
    fn of(routed: &Routed) -> Pages {
        match routed {
            Routed::Domain(route) => Pages::Domain(route.clone()),
            Routed::Default | Routed::Unknown => Pages::Default,
        }
    }

    #[inline]
    fn get<'a>(&'a self, answers: &'a RedirectAnswers) -> &'a DeadEnds {
        match self {
            Pages::Default => &answers.dead_ends,
            Pages::Domain(route) => &route.pages,
        }
    }
}

/// Why a request gets no lookup.
enum Refusal {
    Status(StatusCode),
    /// `/`: the root answer.
    Root,
    /// An HTTP-01 validation's key authorization.
    Challenge(String),
    /// An HTTP-01 validation this process did not start: its answer is looked up in the
    /// store.
    SharedChallenge(String),
    /// An app links document (docs/spec.md §14): the domain's, or 404.
    AppLink(AppLinkDocument),
}

/// The headers an answer past memory may read, kept for it: the cookies (a
/// password-protected link), and what a link's rules read of who clicks.
fn kept_headers(headers: &HeaderMap) -> HeaderMap {
    headers.clone()
}

/// A request refused before any lookup, or an answer without a page.
fn status_reply(status: StatusCode) -> Reply {
    let mut res = Response::new(Full::default());
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(CACHE_CONTROL, NO_STORE);
    match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    res
}

impl RedirectAnswers {
    /// The code of a request that may be looked up, or why not.
    fn check<'r>(&self, req: &'r Request<Incoming>) -> Result<&'r str, Refusal> {
        // `Host` was checked by the edge (RFC 9112 §3.2, the same on every port).
        let m = &self.path.metrics;
        if req.method() != Method::GET && req.method() != Method::HEAD {
            m.bad_method.inc();
            return Err(Refusal::Status(StatusCode::METHOD_NOT_ALLOWED));
        }
        match req.uri().path().strip_prefix('/') {
            Some(code) if is_valid_code(code.as_bytes()) => Ok(code),
            Some("") => {
                m.bad_path.inc();
                Err(Refusal::Root)
            }
            // `AppLinkDocument::path`s: no code (`.` is not a code character), so looked at
            // only once a path is not one; counted once answered.
            Some(".well-known/apple-app-site-association") => {
                Err(Refusal::AppLink(AppLinkDocument::AppleAppSiteAssociation))
            }
            Some(".well-known/assetlinks.json") => Err(Refusal::AppLink(AppLinkDocument::Assetlinks)),
            _ if self.acme.is_some() => {
                let path = req.uri().path();
                match (
                    self.acme.as_ref().and_then(|a| a.local.answer_path(path)),
                    http01_token(path),
                ) {
                    (Some(answer), _) => Err(Refusal::Challenge(answer)),
                    (None, Some(token)) => Err(Refusal::SharedChallenge(token.to_owned())),
                    (None, None) => {
                        m.bad_path.inc();
                        Err(Refusal::Status(StatusCode::NOT_FOUND))
                    }
                }
            }
            _ => {
                m.bad_path.inc();
                Err(Refusal::Status(StatusCode::NOT_FOUND))
            }
        }
    }

    /// The answer of a status without a redirect, with the default domain's pages.
    fn refuse(&self, refusal: Refusal, head: bool) -> Reply {
        self.refuse_with(&self.dead_ends, refusal, head)
    }

    /// The answer of a path that is no code, or `/`, on the host `routed`: its domain's
    /// pages (a host of no domain has no root: 404 with the default domain's), or its app
    /// links document (404 where it has none, and on a host of no domain).
    fn refuse_routed(&self, routed: &Routed, refusal: Refusal, head: bool) -> Reply {
        let refusal = match (routed, refusal) {
            (Routed::Unknown, Refusal::Root) => Refusal::Status(StatusCode::NOT_FOUND),
            (_, Refusal::AppLink(document)) => {
                let answer = match routed {
                    Routed::Default => self.routes.default_app_links().answer(document, head),
                    Routed::Domain(route) => route.app_links.answer(document, head),
                    Routed::Unknown => None,
                };
                if let Some(res) = answer {
                    self.path.metrics.app_links.inc();
                    return res;
                }
                self.path.metrics.bad_path.inc();
                Refusal::Status(StatusCode::NOT_FOUND)
            }
            (_, refusal) => refusal,
        };
        self.refuse_with(Pages::of(routed).get(self), refusal, head)
    }

    /// The answer of a status without a redirect: the 404 and 410 answers of `pages` are
    /// prebuilt.
    fn refuse_with(&self, pages: &DeadEnds, refusal: Refusal, head: bool) -> Reply {
        let res = match refusal {
            Refusal::Status(StatusCode::NOT_FOUND) => pages.not_found(head),
            Refusal::Status(StatusCode::GONE) => pages.gone(head),
            Refusal::Status(status) => status_reply(status),
            Refusal::Root => pages.root(head),
            // Looked up by the caller (`refuse_routed`), never answered here.
            Refusal::SharedChallenge(_) | Refusal::AppLink(_) => pages.not_found(head),
            Refusal::Challenge(answer) => {
                let length = HeaderValue::from(answer.len());
                let mut res = Response::new(match head {
                    true => Full::default(),
                    false => Full::new(Bytes::from(answer)),
                });
                let headers = res.headers_mut();
                headers.insert(CONTENT_LENGTH, length);
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
                headers.insert(CACHE_CONTROL, NO_STORE);
                res
            }
        };
        match head {
            true => as_head(res),
            false => res,
        }
    }

    /// The answer to an HTTP-01 validation another process of the fleet started, from the
    /// store: 404 when it has none (or cannot tell).
    async fn shared_challenge(&self, token: &str, head: bool) -> Reply {
        let Some(acme) = &self.acme else {
            return self.refuse(Refusal::Status(StatusCode::NOT_FOUND), head);
        };
        let now = self.path.clock.now_millis();
        match acme.shared.get_challenge(token, now).await {
            Ok(Some(answer)) => self.refuse(Refusal::Challenge(answer), head),
            Ok(None) => self.refuse(Refusal::Status(StatusCode::NOT_FOUND), head),
            Err(e) => {
                tracing::warn!(error = %rebound_core::Causes(&e), "an HTTP-01 answer could not be read from the store");
                self.refuse(Refusal::Status(StatusCode::NOT_FOUND), head)
            }
        }
    }

    /// The answer for what the path decided; `pages` answer what is not a redirect. A
    /// password-protected link's redirect is [`RedirectAnswers::gate`]'s, which the callers
    /// ask first: here it only ever gets the form.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn reply(
        &self,
        pages: &DeadEnds,
        resolution: Resolution,
        asked: Asked<'_>,
        click: Click,
        is_get: bool,
        query: Option<&str>,
        now: UnixMillis,
    ) -> Reply {
        let m = &self.path.metrics;
        let status = match resolution {
            Resolution::Redirect(entry) if entry.is_protected() => return self.unlocks.form(!is_get),
            Resolution::Redirect(entry) => match entry.redirect() {
                Some(kind) => return self.redirect(&entry, kind.status(), asked, click, is_get, query, now),
                None => {
                    m.not_found.inc();
                    StatusCode::NOT_FOUND
                }
            },
            Resolution::NotFound => {
                m.not_found.inc();
                StatusCode::NOT_FOUND
            }
            Resolution::Gone => {
                m.gone.inc();
                StatusCode::GONE
            }
            Resolution::Unavailable => {
                m.unavailable.inc();
                StatusCode::SERVICE_UNAVAILABLE
            }
        };
        self.refuse_with(pages, Refusal::Status(status), !is_get)
    }

    /// The redirect of the active `entry` with `status` (the link's own, or 303 after a
    /// password), its click counted; 503 for a target that cannot be a header. Built in
    /// place, HEAD's length included: a redirect is the hot path's answer, and each move
    /// of a response through an `Option` or `as_head` was a copy of it (about 30
    /// instructions each under callgrind).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn redirect(
        &self,
        entry: &L1Entry,
        status: u16,
        asked: Asked<'_>,
        mut click: Click,
        is_get: bool,
        query: Option<&str>,
        now: UnixMillis,
    ) -> Reply {
        // A link with rules is decided off this path; a link without reads nothing more of
        // the request than before rules (one bit tested). Only the choice is out of line:
        // the click is not moved into it (a copy of about 30 instructions, and the answer
        // built once, here).
        let rules: Arc<Ruled>;
        let target = match entry.has_rules() {
            false => (Location::Text(entry.long_url()), entry.forward_query(), false),
            true => {
                let Some((chosen, decided)) = self.rules_decide(entry, asked, &mut click) else {
                    self.path.metrics.unavailable.inc();
                    return status_reply(StatusCode::SERVICE_UNAVAILABLE);
                };
                rules = chosen;
                match rules.location(decided) {
                    // An app's own scheme (`intent:`) takes no query of the web's.
                    Some((location, web)) => (Location::Built(location), *web && entry.forward_query(), true),
                    None => (Location::Text(entry.long_url()), entry.forward_query(), true),
                }
            }
        };
        self.respond(entry, target, status, click, is_get, query, now)
    }

    /// What the rules of `entry` (one with rules; docs/spec.md §14) decide for the request
    /// `asked`: the first rule that matches who clicks (none: the link's own target), with
    /// the rule set that names it; the click notes which rule chose. `None`: rules that
    /// cannot be read (written by this build's serializer: never), refused rather than
    /// answered with a target no rule chose.
    #[cold]
    #[inline(never)]
    fn rules_decide(&self, entry: &L1Entry, asked: Asked<'_>, click: &mut Click) -> Option<(Arc<Ruled>, Decided)> {
        let rules = self.path.l1.rules(entry)?;
        let decided = self
            .choose(&rules.set, asked, click)
            .map_or(Decided::DEFAULT, |(_, decided)| decided);
        if let Some(dimensions) = click.dimensions.as_mut() {
            dimensions.rule = Some(decided);
        }
        Some((rules, decided))
    }

    /// The redirect of `entry` to `target` (the location, whether the query is forwarded,
    /// whether the answer is private to the visitor) with `status`, its click counted.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn respond(
        &self,
        entry: &L1Entry,
        target: (Location<'_>, bool, bool),
        status: u16,
        click: Click,
        is_get: bool,
        query: Option<&str>,
        now: UnixMillis,
    ) -> Reply {
        let (target, forward_query, private) = target;
        let query = query.filter(|q| forward_query && !q.is_empty() && query_is_forwardable(q));
        let location = match (target, query) {
            (Location::Built(location), None) => location.clone(),
            (target, query) => {
                let target = match target {
                    Location::Text(text) => text,
                    // Built from a `&str`: always UTF-8.
                    Location::Built(built) => std::str::from_utf8(built.as_bytes()).unwrap_or_default(),
                };
                let mut location = Vec::with_capacity(target.len() + query.map_or(0, |q| q.len() + 1));
                push_location(&mut location, target, forward_query, query);
                // Targets are validated at creation and queries just above: this cannot fail.
                let Ok(location) = HeaderValue::from_maybe_shared(Bytes::from(location)) else {
                    self.path.metrics.unavailable.inc();
                    return status_reply(StatusCode::SERVICE_UNAVAILABLE);
                };
                location
            }
        };
        let max_age = max_age_seconds(self.max_age_secs, entry.expires_at(), now);
        let mut res = Response::new(Full::default());
        *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::FOUND);
        let headers = res.headers_mut();
        // Room for the three headers a redirect may carry, rather than grown at the first
        // insert.
        *headers = HeaderMap::with_capacity(3);
        headers.insert(LOCATION, location);
        headers.insert(
            CACHE_CONTROL,
            match (entry.is_protected(), private) {
                // Never kept by a shared cache: it would let everyone through.
                (true, _) => NO_STORE,
                (false, false) => self.cache_control[max_age as usize].clone(),
                // Chosen for this visitor: a shared cache must not hand it to another.
                (false, true) => self.private_cache_control[max_age as usize].clone(),
            },
        );
        if !is_get {
            headers.insert(CONTENT_LENGTH, EMPTY);
        }
        self.path.metrics.redirects.inc();
        // The click moved, not cloned, into the queue: its dimensions are ~130 bytes.
        match &self.stream {
            None => match click {
                Click {
                    visitor: Visitor::Person,
                    dimensions: Some(dimensions),
                    ..
                } => self.clicks.record_with(entry, dimensions),
                Click { visitor, .. } => self.clicks.record(entry, visitor),
            },
            Some(stream) => stream.record(&self.clicks, entry, click, now),
        }
        res
    }

    /// The answer for what a lookup past memory decided: [`RedirectAnswers::reply`], or
    /// for a password-protected link [`RedirectAnswers::gate`]. `request` is the key, the
    /// request's cookies, who asks, whether it is a GET, and the query.
    async fn answer(
        &self,
        pages: &DeadEnds,
        resolution: Resolution,
        request: (Asked<'_>, Click, bool, Option<&str>),
    ) -> Reply {
        let (asked, click, is_get, query) = request;
        match resolution {
            Resolution::Redirect(entry) if entry.is_protected() => self.gate(entry, asked, click, is_get, query).await,
            resolution => {
                let now = self.path.clock.now_millis();
                self.reply(pages, resolution, asked, click, is_get, query, now)
            }
        }
    }

    /// The target `rules` choose for the request `asked` and which rule chose it; `None`:
    /// none matched (the link's own target answers).
    fn choose<'r>(&self, rules: &'r RuleSet, asked: Asked<'_>, captured: &Click) -> Option<(&'r str, Decided)> {
        let connection = asked.connection;
        let client = || {
            let trusted = connection.forwards && connection.peer.is_some_and(|p| self.trusted.contains(p));
            (self.client(connection, asked.headers).address, trusted)
        };
        let (dimensions, known) = (captured.dimensions.as_ref(), &captured.known);
        let mut visitor = RequestVisitor::new(&self.targeting, &self.bots, asked.headers, client, dimensions, known);
        rules.choose(&mut visitor)
    }

    /// The answer of a password-protected link to GET or HEAD: its redirect when the
    /// request's cookie lets it through, the form otherwise.
    async fn gate(&self, entry: L1Entry, asked: Asked<'_>, click: Click, is_get: bool, query: Option<&str>) -> Reply {
        let now = self.path.clock.now_millis();
        if let Some(kind) = entry.redirect() {
            if self
                .unlocks
                .cookie_lets_through(asked.headers, asked.key, &entry, now)
                .await
            {
                return self.redirect(&entry, kind.status(), asked, click, is_get, query, now);
            }
        }
        self.path.metrics.unlock_forms.inc();
        self.unlocks.form(!is_get)
    }

    /// A POST to `/{code}`: a password for a protected link (on the domain the request is
    /// routed to); 405 for anything else, as before passwords.
    async fn post(&self, req: Request<Incoming>, connection: Connection) -> Reply {
        let code = match req.uri().path().strip_prefix('/') {
            Some(code) if is_valid_code(code.as_bytes()) => code.to_owned(),
            _ => {
                self.path.metrics.bad_method.inc();
                return status_reply(StatusCode::METHOD_NOT_ALLOWED);
            }
        };
        let routed = self.routes.route(request_authority(&req));
        let key = match &routed {
            Routed::Default => code,
            Routed::Domain(route) => route.key(&code),
            Routed::Unknown => return status_reply(StatusCode::METHOD_NOT_ALLOWED),
        };
        let entry = match self.path.resolve(&key).await {
            Resolution::Redirect(entry) if entry.is_protected() => entry,
            _ => {
                self.path.metrics.bad_method.inc();
                return status_reply(StatusCode::METHOD_NOT_ALLOWED);
            }
        };
        let (parts, body) = req.into_parts();
        let now = self.path.clock.now_millis();
        let client = self.client(connection, &parts.headers);
        let attempt = self
            .unlocks
            .attempt(&key, &entry, client, &parts.headers, body, now)
            .await;
        let m = &self.path.metrics;
        match attempt {
            Ok(cookie) => {
                m.unlock_attempts.with_label_values(&[Attempt::Unlocked.label()]).inc();
                // 303: the browser follows with a GET, whatever the link's status (a 307 or
                // 308 would post the password to the target).
                let click = self.click(&Method::GET, &parts.headers, parts.uri.query(), connection);
                let asked = Asked {
                    key: &key,
                    headers: &parts.headers,
                    connection,
                };
                let mut res = self.redirect(&entry, 303, asked, click, true, parts.uri.query(), now);
                if let (Some(cookie), true) = (cookie, res.status() == StatusCode::SEE_OTHER) {
                    res.headers_mut().insert(SET_COOKIE, cookie);
                }
                res
            }
            Err((outcome, res)) => {
                m.unlock_attempts.with_label_values(&[outcome.label()]).inc();
                res
            }
        }
    }
}

type Lookup = Pin<Box<dyn Future<Output = Result<Reply, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Redirects {
    type Response = Reply;
    type Error = Infallible;
    /// Answered at once from memory, or a lookup past it.
    type Future = Either<Ready<Result<Reply, Infallible>>, Lookup>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        // POST: a password for a protected link (405 for anything else), whole past here.
        if req.method() == Method::POST {
            let (answers, connection) = (self.0.clone(), self.1);
            return Either::Right(Box::pin(async move { Ok(answers.post(req, connection).await) }));
        }
        let answers = &self.0;
        let code = match answers.check(&req) {
            Ok(code) => code,
            Err(Refusal::SharedChallenge(token)) => {
                let (answers, head) = (self.0.clone(), req.method() == Method::HEAD);
                return Either::Right(Box::pin(
                    async move { Ok(answers.shared_challenge(&token, head).await) },
                ));
            }
            Err(refusal @ Refusal::Challenge(_)) => {
                return Either::Left(ready(Ok(answers.refuse(refusal, req.method() == Method::HEAD))))
            }
            Err(refusal) => {
                // A path that is no code, or `/`: the domain's answer (a host of no domain
                // has no root).
                let head = req.method() == Method::HEAD;
                let routed = answers.routes.route(request_authority(&req));
                // Maybe a domain added a moment ago, as for a code: its root and pages
                // answer once the routes are current.
                if matches!(routed, Routed::Unknown) && answers.routes.can_resync() {
                    let answers = self.0.clone();
                    let authority = request_authority(&req).map(<[u8]>::to_vec);
                    return Either::Right(Box::pin(async move {
                        answers.routes.resync().await;
                        let routed = answers.routes.route(authority.as_deref());
                        Ok(answers.refuse_routed(&routed, refusal, head))
                    }));
                }
                return Either::Left(ready(Ok(answers.refuse_routed(&routed, refusal, head))));
            }
        };
        let is_get = req.method() == Method::GET;
        let click = answers.click(req.method(), req.headers(), req.uri().query(), self.1);
        // The default domain's key is its code: no key is built.
        let routed = answers.routes.route(request_authority(&req));
        let (key, pages) = match &routed {
            Routed::Default => (std::borrow::Cow::Borrowed(code), Pages::Default),
            Routed::Domain(route) => (std::borrow::Cow::Owned(route.key(code)), Pages::Domain(route.clone())),
            // Maybe a domain added a moment ago: routed again once the routes are current.
            Routed::Unknown if answers.routes.can_resync() => {
                let (answers, code, connection) = (self.0.clone(), code.to_owned(), self.1);
                let authority = request_authority(&req).map(<[u8]>::to_vec);
                let query = req.uri().query().map(str::to_owned);
                let headers = kept_headers(req.headers());
                return Either::Right(Box::pin(async move {
                    answers.routes.resync().await;
                    let (key, pages) = match answers.routes.route(authority.as_deref()) {
                        Routed::Domain(route) => (route.key(&code), Pages::Domain(route)),
                        Routed::Default => (code, Pages::Default),
                        Routed::Unknown => {
                            answers.path.metrics.unknown_host.inc();
                            return Ok(answers.refuse(Refusal::Status(StatusCode::NOT_FOUND), !is_get));
                        }
                    };
                    let resolution = answers.path.resolve(&key).await;
                    let asked = Asked {
                        key: &key,
                        headers: &headers,
                        connection,
                    };
                    let request = (asked, click, is_get, query.as_deref());
                    Ok(answers.answer(pages.get(&answers), resolution, request).await)
                }));
            }
            Routed::Unknown => {
                answers.path.metrics.unknown_host.inc();
                let reply = answers.refuse(Refusal::Status(StatusCode::NOT_FOUND), !is_get);
                return Either::Left(ready(Ok(reply)));
            }
        };
        let now = answers.path.clock.now_millis();
        match answers.path.resolve_from_memory(&key, now) {
            // A password-protected link: off the hot path, past memory.
            Some(Resolution::Redirect(entry)) if entry.is_protected() => {
                let (answers, key, connection) = (self.0.clone(), key.into_owned(), self.1);
                let query = req.uri().query().map(str::to_owned);
                let headers = kept_headers(req.headers());
                Either::Right(Box::pin(async move {
                    let asked = Asked {
                        key: &key,
                        headers: &headers,
                        connection,
                    };
                    Ok(answers.gate(entry, asked, click, is_get, query.as_deref()).await)
                }))
            }
            Some(resolution) => {
                let asked = Asked {
                    key: &key,
                    headers: req.headers(),
                    connection: self.1,
                };
                let reply = answers.reply(
                    pages.get(answers),
                    resolution,
                    asked,
                    click,
                    is_get,
                    req.uri().query(),
                    now,
                );
                Either::Left(ready(Ok(reply)))
            }
            None => {
                let (answers, key, connection) = (self.0.clone(), key.into_owned(), self.1);
                let query = req.uri().query().map(str::to_owned);
                let headers = kept_headers(req.headers());
                // Only what waits is timed: an answer from memory or a refusal never waits.
                let started = Instant::now();
                Either::Right(Box::pin(async move {
                    let resolution = answers.path.resolve_beyond_memory(&key).await;
                    let asked = Asked {
                        key: &key,
                        headers: &headers,
                        connection,
                    };
                    let request = (asked, click, is_get, query.as_deref());
                    let reply = answers.answer(pages.get(&answers), resolution, request).await;
                    answers
                        .path
                        .metrics
                        .lookup_latency
                        .observe(started.elapsed().as_secs_f64());
                    Ok(reply)
                }))
            }
        }
    }
}

/// What serves one redirect listener: every accepted connection goes to the edge with the
/// redirect service.
pub struct RedirectPort {
    redirects: Redirects,
    edge: Edge,
}

impl RedirectPort {
    pub fn new(redirects: Redirects, edge: Edge) -> RedirectPort {
        RedirectPort { redirects, edge }
    }
}

/// A listening socket of the redirect server.
pub enum RedirectListener {
    /// Bound by the caller (so port 0 works and the address is known before the server
    /// runs); entered in Pingora's fd table, from which an upgrade hands it over.
    Bound(std::net::TcpListener),
    /// Taken over from the process this one upgrades (by its address as that process
    /// bound it).
    Inherited(String),
}

/// One redirect listener as a Pingora service: Pingora keeps the lifecycle and the fd
/// table of the upgrade hand-over; the accept loop is the edge's, so an accepted socket
/// goes to hyper as a tokio stream. (Pingora's own `Listening` service wraps each in its
/// `Stream`, whose per-read bookkeeping cost about 700 instructions per redirect under
/// callgrind, for digests and timings nothing here reads.)
pub struct RedirectService {
    name: String,
    /// The key of the socket in the fd table: the address it was bound to.
    key: String,
    listener: Option<std::net::TcpListener>,
    port: RedirectPort,
}

impl RedirectService {
    pub fn new(name: String, listener: RedirectListener, port: RedirectPort) -> std::io::Result<Self> {
        let (key, listener) = match listener {
            RedirectListener::Bound(l) => {
                l.set_nonblocking(true)?;
                (l.local_addr()?.to_string(), Some(l))
            }
            RedirectListener::Inherited(key) => (key, None),
        };
        Ok(RedirectService {
            name,
            key,
            listener,
            port,
        })
    }

    /// The socket: the one bound, now entered in the fd table, or the one the table holds
    /// under its key after a take-over.
    #[allow(unsafe_code)]
    fn listener(&mut self, fds: Option<&ListenFds>) -> std::io::Result<tokio::net::TcpListener> {
        let listener = match (self.listener.take(), fds) {
            (Some(l), fds) => {
                if let Some(fds) = fds {
                    fds.lock().add(self.key.clone(), l.as_raw_fd());
                }
                l
            }
            (None, Some(fds)) => {
                let fd = fds.lock().get(&self.key).copied().ok_or_else(|| {
                    std::io::Error::other(format!("the old process handed over no listener for {}", self.key))
                })?;
                // SAFETY: the descriptor came from the old process for this service alone;
                // the table keeps only its number, to hand it on at the next upgrade.
                let l = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                l.set_nonblocking(true)?;
                l
            }
            (None, None) => return Err(std::io::Error::other("no listener to serve")),
        };
        tokio::net::TcpListener::from_std(listener)
    }
}

#[async_trait]
impl Service for RedirectService {
    async fn start_service(&mut self, fds: Option<ListenFds>, shutdown: ShutdownWatch, _listeners_per_fd: usize) {
        let listener = match self.listener(fds.as_ref()) {
            Ok(l) => l,
            Err(e) => {
                // A process that cannot serve its redirect port must not look alive (Pingora's
                // own listening service panics here).
                tracing::error!(error = %rebound_core::Causes(&e), listener = %self.key, "cannot serve the redirect listener; exiting");
                eprintln!("rebound: cannot serve the redirect listener {}: {e}", self.key);
                std::process::exit(1);
            }
        };
        let (edge, redirects) = (self.port.edge.clone(), self.port.redirects.clone());
        let tls = edge.is_tls();
        // Behind a layer-4 balancer that writes PROXY headers, the headers are the client's.
        let forwards = !edge.reads_proxy_protocol();
        rebound_edge::serve_listener_spread(
            listener,
            edge,
            move |peer: std::net::SocketAddr| {
                redirects.for_connection(Connection {
                    peer: Some(peer.ip()),
                    tls,
                    forwards,
                })
            },
            shutdown,
            pingora_runtime::current_handle,
        )
        .await;
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// How the redirect server is run.
pub struct RedirectServer {
    /// Worker threads of each listener's runtime.
    pub threads: usize,
    /// The socket on which a new process asks this one for its listeners (SIGQUIT), or on
    /// which this one asks the old one when it takes over.
    pub upgrade_sock: PathBuf,
    /// Take the listeners over from the running process instead of binding them.
    pub take_over: bool,
}

/// Runs the redirect service on its listeners (cleartext, and TLS when given) until
/// `shutdown` says so; blocks the calling thread, which must not be inside a tokio runtime.
/// Graceful termination drains for a second and then gives connections two more.
pub fn run_redirect_server(
    server: RedirectServer,
    listeners: Vec<(RedirectListener, RedirectPort)>,
    shutdown: impl Future<Output = Shutdown> + Send + 'static,
) -> std::io::Result<()> {
    let conf = ServerConf {
        threads: server.threads,
        // One single-threaded runtime per thread, each connection on one of them
        // (`serve_listener_spread`): no request pays for a scheduler shared between
        // threads (measured in the callgrind bench).
        work_stealing: false,
        grace_period_seconds: Some(1),
        graceful_shutdown_timeout_seconds: Some(2),
        upgrade_sock: server.upgrade_sock.to_string_lossy().into_owned(),
        ..ServerConf::default()
    };
    let opt = Opt {
        upgrade: server.take_over,
        ..Opt::default()
    };
    let mut pingora = Server::new_with_opt_and_conf(Some(opt), conf);
    for (i, (listener, port)) in listeners.into_iter().enumerate() {
        pingora.add_service(RedirectService::new(format!("rebound redirect {i}"), listener, port)?);
    }
    // Takes the listeners over from the old process when upgrading.
    pingora.bootstrap();
    pingora.run(RunArgs {
        shutdown_signal: Box::new(ShutdownWhen(std::sync::Mutex::new(Some(Box::pin(shutdown))))),
    });
    Ok(())
}

/// How a redirect server run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Stop accepting, drain the connections, return.
    Drain,
    /// Hand the listeners to a new process over the upgrade socket, then drain.
    HandOver,
}

/// Pingora's shutdown watch over a future: the server runs until it resolves.
struct ShutdownWhen(std::sync::Mutex<Option<Pin<Box<dyn Future<Output = Shutdown> + Send>>>>);

#[async_trait]
impl ShutdownSignalWatch for ShutdownWhen {
    async fn recv(&self) -> pingora::server::ShutdownSignal {
        let when = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        match when {
            Some(when) => match when.await {
                Shutdown::Drain => pingora::server::ShutdownSignal::GracefulTerminate,
                Shutdown::HandOver => pingora::server::ShutdownSignal::GracefulUpgrade,
            },
            // Pingora asks once; a second ask never ends the run.
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issued::IssuedCodeGate;
    use crate::l1::L1;
    use crate::metrics::ProxyMetrics;
    use crate::pages::DeadEndTargets;
    use rebound_core::{Link, ManualClock, RedirectKind};
    use rebound_edge::{EdgeLimits, PortMetrics};
    use rebound_store::{LinkStore, MemoryStore};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The status line and the headers but `Date` of the one answer to `request`, served by
    /// the edge as on the redirect port, sorted.
    async fn head_of(redirects: &Redirects, request: String) -> Vec<String> {
        let text = answer_of(redirects, request).await;
        let mut lines = text.split("\r\n\r\n").next().unwrap_or_default().split("\r\n");
        let status = lines.next().unwrap_or_default().to_owned();
        let mut fields: Vec<String> = lines.filter(|l| !l.starts_with("date:")).map(str::to_owned).collect();
        fields.sort();
        [vec![status], fields].concat()
    }

    /// A redirect path over `store` on a clock standing still, its click queue and its
    /// metrics.
    fn path_over(store: Arc<MemoryStore>) -> (Arc<RedirectPath>, Arc<ClickQueue>, ProxyMetrics) {
        let metrics = ProxyMetrics::register(&prometheus::Registry::new()).unwrap();
        let clock = Arc::new(ManualClock::at(1_000_000));
        let path = Arc::new(RedirectPath::new(
            Arc::new(L1::new(1000)),
            Arc::new(IssuedCodeGate::new(1000)),
            store,
            clock.clone(),
            metrics.clone(),
            Duration::from_secs(1),
        ));
        let clicks = Arc::new(ClickQueue::new(1024, metrics.clone(), clock));
        (path, clicks, metrics)
    }

    #[tokio::test]
    async fn a_head_gets_the_status_and_headers_of_its_get_on_every_answer() {
        let store = Arc::new(MemoryStore::new());
        for (code, kind, expires_at) in [
            ("s301", RedirectKind::Permanent, None),
            ("s302", RedirectKind::Found, None),
            ("s307", RedirectKind::Temporary, None),
            ("s308", RedirectKind::PermanentKeepMethod, None),
            ("expired", RedirectKind::Found, Some(500)),
        ] {
            let link = Link::new_active(
                code.into(),
                "https://example.com/p".into(),
                kind,
                false,
                0,
                "k".into(),
                expires_at,
            );
            store.insert_link(&link, None).await.unwrap();
        }
        let (path, clicks, _) = path_over(store.clone());
        let pages = Redirects::new(path.clone(), clicks.clone(), 5);
        let elsewhere = DeadEnds::new(&DeadEndTargets {
            not_found_url: Some("https://example.com/404".into()),
            expired_url: Some("https://example.com/410".into()),
            root_url: Some("https://example.com/".into()),
        })
        .unwrap();
        let redirected = Redirects::with_dead_ends(path.clone(), clicks.clone(), 5, elsewhere);
        struct OneToken;
        impl Http01Answers for OneToken {
            fn answer_path(&self, path: &str) -> Option<String> {
                (path == "/.well-known/acme-challenge/tok").then(|| "tok.thumbprint".to_owned())
            }
        }
        let challenged = Redirects::answering(
            path,
            clicks,
            5,
            DeadEnds::default(),
            Some(AcmeAnswers {
                local: Arc::new(OneToken),
                shared: store.clone(),
            }),
            Arc::new(DomainRoutes::new("x", UnknownHost::NotFound)),
        );
        // One another process of the fleet started, one that ended.
        use rebound_store::certs::CertificateStore;
        store
            .put_challenge("theirs", "theirs.thumbprint", 2_000_000)
            .await
            .unwrap();
        store
            .put_challenge("ended", "ended.thumbprint", 1_000_000)
            .await
            .unwrap();
        let get_and_head = |redirects: &Redirects, path: &str| {
            let request = |method| format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let redirects = redirects.clone();
            let (get, head) = (request("GET"), request("HEAD"));
            async move { (head_of(&redirects, get).await, head_of(&redirects, head).await) }
        };
        for (redirects, path, status) in [
            (&pages, "/s301", "301"),
            (&pages, "/s302", "302"),
            (&pages, "/s307", "307"),
            (&pages, "/s308", "308"),
            (&pages, "/unknown", "404"),
            (&pages, "/a/b", "404"),
            (&pages, "/", "404"),
            (&pages, "/expired", "410"),
            (&redirected, "/unknown", "302"),
            (&redirected, "/expired", "302"),
            (&redirected, "/", "302"),
            // HTTP-01: the validation in flight is answered where ACME is on, and only it.
            (&challenged, "/.well-known/acme-challenge/tok", "200"),
            (&challenged, "/.well-known/acme-challenge/other", "404"),
            (&challenged, "/.well-known/acme-challenge/theirs", "200"),
            (&challenged, "/.well-known/acme-challenge/ended", "404"),
            (&challenged, "/.well-known/acme-challenge/not%20a%20token", "404"),
            (&challenged, "/s302", "302"),
            (&pages, "/.well-known/acme-challenge/tok", "404"),
        ] {
            let (get, head) = get_and_head(redirects, path).await;
            assert!(get[0].starts_with(&format!("HTTP/1.1 {status} ")), "{path}: {get:?}");
            assert!(get.iter().any(|l| l.starts_with("content-length: ")), "{path}: {get:?}");
            assert_eq!(head, get, "HEAD {path}");
        }
        let (get, _) = get_and_head(&challenged, "/.well-known/acme-challenge/tok").await;
        assert!(
            get.contains(&"content-length: 14".to_owned())
                && get.contains(&"content-type: application/octet-stream".to_owned()),
            "{get:?}"
        );
        store.set_unavailable(true);
        let (get, head) = get_and_head(&pages, "/never").await;
        assert!(get[0].starts_with("HTTP/1.1 503 "), "{get:?}");
        assert_eq!(head, get, "HEAD of a 503");
        // 405 answers neither GET nor HEAD; it states its empty length too.
        let post = head_of(
            &pages,
            "POST /s302 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
        )
        .await;
        assert!(
            post[0].starts_with("HTTP/1.1 405 ") && post.contains(&"content-length: 0".to_owned()),
            "{post:?}"
        );
    }

    /// The whole answer to `request` (status line, headers and body), as text.
    async fn answer_of(redirects: &Redirects, request: String) -> String {
        let edge = Edge::plain(EdgeLimits::default(), PortMetrics::detached());
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let served = tokio::spawn({
            let redirects = redirects.clone();
            async move { edge.serve(server, redirects, shutdown).await }
        });
        client.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        drop(client);
        served.await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn app_links_are_served_on_their_domain_and_404_where_it_has_none() {
        use rebound_core::app_links::{AppLinkDocument, AppLinks};
        use rebound_core::domain::{CertificateSource, Domain, DomainPages};
        let store = Arc::new(MemoryStore::new());
        let (path, clicks, metrics) = path_over(store);
        let routes = Arc::new(DomainRoutes::new("sho.rt", UnknownHost::NotFound));
        let (aasa, assetlinks) = (
            r#"{"applinks":{"details":[{"appIDs":["T.com.acme"],"components":[{"/":"/*"}]}]}}"#,
            r#"[{"relation":["delegate_permission/common.handle_all_urls"],"target":{"namespace":"android_app","package_name":"com.acme"}}]"#,
        );
        let domain = |name: &str, id: &str, app_links: AppLinks| Domain {
            name: name.into(),
            id: id.into(),
            created_at: 0,
            created_by: "op".into(),
            certificate: CertificateSource::Files,
            pages: DomainPages::default(),
            certificate_error: None,
            certificate_attempt_at: None,
            app_links,
        };
        routes.install(
            &[
                domain(
                    "go.acme.test",
                    "1",
                    AppLinks {
                        apple_app_site_association: Some(aasa.into()),
                        assetlinks: Some(assetlinks.into()),
                    },
                ),
                domain("bare.test", "2", AppLinks::default()),
            ],
            &AppLinks {
                apple_app_site_association: None,
                assetlinks: Some("[]".into()),
            },
        );
        let redirects = Redirects::answering(path, clicks, 5, DeadEnds::default(), None, routes);
        let (apple, android) = (
            AppLinkDocument::AppleAppSiteAssociation.path(),
            AppLinkDocument::Assetlinks.path(),
        );
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("go.acme.test", apple, Some(aasa)),
            ("GO.ACME.TEST:8080", android, Some(assetlinks)),
            (
                "go.acme.test",
                "/.well-known/apple-app-site-association?x=1",
                Some(aasa),
            ),
            ("bare.test", apple, None),
            ("bare.test", android, None),
            ("sho.rt", apple, None),
            ("sho.rt", android, Some("[]")),
            ("127.0.0.1", android, Some("[]")),
            ("evil.example", apple, None),
            ("go.acme.test", "/.well-known/apple-app-site-association/", None),
            ("go.acme.test", "/.well-known/assetlinks", None),
            ("go.acme.test", "/apple-app-site-association", None),
        ];
        for (host, path, want) in cases {
            let request = |method| format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            let get = answer_of(&redirects, request("GET")).await;
            let head = head_of(&redirects, request("HEAD")).await;
            let status = if want.is_some() { "200" } else { "404" };
            assert!(get.starts_with(&format!("HTTP/1.1 {status} ")), "{host}{path}: {get}");
            assert_eq!(head, head_of(&redirects, request("GET")).await, "HEAD {host}{path}");
            if let Some(body) = want {
                for header in [
                    "content-type: application/json".to_owned(),
                    "cache-control: public, max-age=3600".to_owned(),
                    format!("content-length: {}", body.len()),
                ] {
                    assert!(head.contains(&header), "{host}{path}: {header} in {head:?}");
                }
                assert!(get.ends_with(&format!("\r\n\r\n{body}")), "{host}{path}: {get}");
                assert!(!head.iter().any(|h| h.starts_with("location:")), "never a redirect");
            }
        }
        assert_eq!(metrics.app_links.get(), 3 * 5, "two GETs and a HEAD of each one served");
    }
}
