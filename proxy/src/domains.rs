//! Routing by host (docs/spec.md §11): which domain a request is for, from its `Host` (HTTP/1) or
//! `:authority` (HTTP/2), and so which key its code is looked up by and which pages answer
//! it.
//!
//! The default domain (the host of `public_base_url`) costs one case-insensitive comparison
//! and builds no key: its links' keys are their codes. A request by address (an IP literal,
//! or a one-label name such as `localhost`, which no added domain can be) is the default
//! domain's too, so a load balancer's health check or `curl 127.0.0.1:8080/x` keep working.
//! Any other host is looked up in a table replaced whole when the store's domains change (a
//! reader never waits for a writer); a host in no domain is answered 404 with the default
//! domain's page, or, when configured, served as the default domain.
//!
//! Each domain's app links (docs/spec.md §14), the default domain's included, are built into
//! their answers with the table, so a `/.well-known/` document costs a request no more than
//! a 404 page.
//!
//! A host not in the table may be a domain added a moment ago: before its 404 the table is
//! brought up to date from the store ([`DomainRoutes::resync`]: one read of the store's
//! change counter, the list only when it moved), whatever the path (a code, `/`, or a path
//! that is no code), so a new domain's links, root and pages answer its first request. At
//! most one such read runs at a time (a request arriving meanwhile takes its
//! result), and they are paced by a token bucket ([`RESYNC_BURST`], [`RESYNC_PER_SEC`]): a
//! flood of made-up hosts costs the store a few reads a second, and while it lasts a new
//! domain is routed by the poll instead.

use crate::app_links::AppLinkAnswers;
use crate::pages::{DeadEndTargets, DeadEnds};
use arc_swap::ArcSwap;
use http::header::HOST;
use http::Request;
use rebound_core::app_links::AppLinks;
use rebound_core::domain::{host_of, is_address, link_key, Domain};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Reads of the store for unknown hosts that may follow each other at once …
pub const RESYNC_BURST: f64 = 10.0;
/// … and how many a second after that.
pub const RESYNC_PER_SEC: f64 = 4.0;
/// The longest a request for an unknown host waits for that read.
pub const RESYNC_BUDGET: Duration = Duration::from_secs(1);

/// A reading of the store in flight.
pub type Reading<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Brings the routes up to date from the store (the data plane's domain watch).
pub trait Resync: Send + Sync {
    fn resync(&self) -> Reading<'_>;
}

/// What a host that is no domain of the fleet gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownHost {
    /// 404 with the default domain's not-found answer.
    #[default]
    NotFound,
    /// Served as the default domain (a fleet that answers under any name).
    DefaultDomain,
}

/// A domain besides the default one: its id (what its links' keys end with), its pages and
/// its app links.
#[derive(Debug)]
pub struct Route {
    pub id: Box<str>,
    pub pages: DeadEnds,
    pub app_links: AppLinkAnswers,
}

impl Route {
    /// The key of `code` on this domain.
    pub fn key(&self, code: &str) -> String {
        link_key(code, Some(&self.id))
    }
}

/// Where a request goes.
#[derive(Debug)]
pub enum Routed {
    /// The default domain: the code is the key.
    Default,
    /// Another domain.
    Domain(Arc<Route>),
    /// A host of no domain, answered 404.
    Unknown,
}

/// The fleet's domains by host.
pub struct DomainRoutes {
    /// Lower case, no trailing dot.
    default_host: Box<str>,
    unknown: UnknownHost,
    table: ArcSwap<HashMap<Box<str>, Arc<Route>>>,
    /// The default domain's app links, replaced with the table.
    default_app_links: ArcSwap<AppLinkAnswers>,
    /// Where an unknown host sends the routes to be brought up to date, when set.
    source: OnceLock<Arc<dyn Resync>>,
    /// The pacing of reads for unknown hosts; held while one runs.
    resyncs: tokio::sync::Mutex<Bucket>,
    /// Reads for unknown hosts started so far: a request that waited for one in flight
    /// takes its result.
    resynced: std::sync::atomic::AtomicU64,
}

/// A token bucket: `tokens` as of `at`.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl DomainRoutes {
    /// Routes with no domain but the default one, whose host is `default_host`.
    pub fn new(default_host: &str, unknown: UnknownHost) -> DomainRoutes {
        DomainRoutes {
            default_host: default_host.trim_end_matches('.').to_ascii_lowercase().into(),
            unknown,
            table: ArcSwap::from_pointee(HashMap::new()),
            default_app_links: ArcSwap::from_pointee(AppLinkAnswers::default()),
            source: OnceLock::new(),
            resyncs: tokio::sync::Mutex::new(Bucket {
                tokens: RESYNC_BURST,
                at: Instant::now(),
            }),
            resynced: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Reads the store through `source` before a host is answered as unknown.
    pub fn resync_with(&self, source: Arc<dyn Resync>) {
        let _ = self.source.set(source);
    }

    /// Whether an unknown host may be a domain not routed yet (a source is set).
    pub fn can_resync(&self) -> bool {
        self.source.get().is_some()
    }

    /// Brings the table up to date for a host it does not have: takes the result of the read
    /// in flight, or starts one when the bucket has a token; never waits longer than
    /// [`RESYNC_BUDGET`].
    pub async fn resync(&self) {
        use std::sync::atomic::Ordering;
        let Some(source) = self.source.get() else {
            return;
        };
        let arrived = self.resynced.load(Ordering::Acquire);
        let _ = tokio::time::timeout(RESYNC_BUDGET, async {
            let mut bucket = self.resyncs.lock().await;
            if self.resynced.load(Ordering::Acquire) != arrived {
                return;
            }
            let now = Instant::now();
            let refill = now.duration_since(bucket.at).as_secs_f64() * RESYNC_PER_SEC;
            bucket.tokens = (bucket.tokens + refill).min(RESYNC_BURST);
            bucket.at = now;
            if bucket.tokens < 1.0 {
                return;
            }
            bucket.tokens -= 1.0;
            self.resynced.fetch_add(1, Ordering::AcqRel);
            source.resync().await;
        })
        .await;
    }

    /// Replaces the table with `domains` and the default domain's app links with
    /// `default_app_links`; a domain whose page URL cannot be a `Location` (the control
    /// plane checks them, so only a store written by hand) gets the built-in pages, and is
    /// returned.
    pub fn install(&self, domains: &[Domain], default_app_links: &AppLinks) -> Vec<String> {
        let mut refused = Vec::new();
        let table = domains
            .iter()
            .map(|d| {
                let pages = DeadEnds::new(&DeadEndTargets {
                    not_found_url: d.pages.not_found_url.clone(),
                    expired_url: d.pages.expired_url.clone(),
                    root_url: d.pages.root_url.clone(),
                })
                .unwrap_or_else(|_| {
                    refused.push(d.name.clone());
                    DeadEnds::default()
                });
                let route = Route {
                    id: d.id.as_str().into(),
                    pages,
                    app_links: AppLinkAnswers::new(&d.app_links),
                };
                (d.name.to_ascii_lowercase().into_boxed_str(), Arc::new(route))
            })
            .collect();
        self.table.store(Arc::new(table));
        self.default_app_links
            .store(Arc::new(AppLinkAnswers::new(default_app_links)));
        refused
    }

    /// The default domain's app links.
    pub fn default_app_links(&self) -> arc_swap::Guard<Arc<AppLinkAnswers>> {
        self.default_app_links.load()
    }

    /// How many domains besides the default one are routed.
    pub fn len(&self) -> usize {
        self.table.load().len()
    }

    /// Whether only the default domain is routed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The default domain's host (lower case, no trailing dot).
    pub fn default_host(&self) -> &str {
        &self.default_host
    }

    /// The host of each routed domain by its id (what the click stream names a domain by).
    pub fn hosts_by_id(&self) -> HashMap<Box<str>, Box<str>> {
        self.table
            .load()
            .iter()
            .map(|(host, route)| (route.id.clone(), host.clone()))
            .collect()
    }

    /// Where a request for `authority` (its `Host` or `:authority`; `None` when it has none,
    /// as HTTP/1.0 may) goes. The default domain's host, an address or a single label cost
    /// a comparison and a byte or two; only another name looks into the table.
    #[inline]
    pub fn route<A: AsRef<[u8]> + ?Sized>(&self, authority: Option<&A>) -> Routed {
        let Some(authority) = authority else {
            return Routed::Default;
        };
        let host = host_of(authority.as_ref());
        if host.eq_ignore_ascii_case(self.default_host.as_bytes()) || is_address(host) || !host.contains(&b'.') {
            return Routed::Default;
        }
        self.route_name(host)
    }

    /// A host that may be a domain's: looked up in the table.
    fn route_name(&self, host: &[u8]) -> Routed {
        // Not text: no domain's name.
        let Ok(host) = std::str::from_utf8(host) else {
            return self.unknown_host();
        };
        let table = self.table.load();
        let found = match host.bytes().any(|b| b.is_ascii_uppercase()) {
            false => table.get(host),
            true => table.get(host.to_ascii_lowercase().as_str()),
        };
        match found {
            Some(route) => Routed::Domain(route.clone()),
            None => self.unknown_host(),
        }
    }

    fn unknown_host(&self) -> Routed {
        match self.unknown {
            UnknownHost::NotFound => Routed::Unknown,
            UnknownHost::DefaultDomain => Routed::Default,
        }
    }
}

/// The authority a request is for, as bytes: HTTP/2's `:authority` (hyper puts it in the
/// URI), else the `Host` header (checked by the edge). Walks the few headers rather than
/// hashing a name, as the edge's `Host` check does.
#[inline]
pub fn request_authority<B>(req: &Request<B>) -> Option<&[u8]> {
    if let Some(authority) = req.uri().authority() {
        return Some(authority.as_str().as_bytes());
    }
    req.headers()
        .iter()
        .find(|(name, _)| *name == HOST)
        .map(|(_, value)| value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::domain::{CertificateSource, DomainPages};

    fn domain(name: &str, id: &str) -> Domain {
        Domain {
            name: name.into(),
            id: id.into(),
            created_at: 0,
            created_by: "op".into(),
            certificate: CertificateSource::Acme,
            pages: DomainPages::default(),
            certificate_error: None,
            certificate_attempt_at: None,
            app_links: Default::default(),
        }
    }

    fn id_of(routed: Routed) -> Option<String> {
        match routed {
            Routed::Domain(r) => Some(r.id.to_string()),
            Routed::Default => Some("default".into()),
            Routed::Unknown => None,
        }
    }

    #[test]
    fn hosts_route_to_their_domain_the_default_or_nowhere() {
        let routes = DomainRoutes::new("sho.rt", UnknownHost::NotFound);
        assert!(routes
            .install(
                &[domain("go.acme.com", "1"), domain("acme.link", "2")],
                &AppLinks::default()
            )
            .is_empty());
        let cases: &[(Option<&str>, Option<&str>)] = &[
            (Some("sho.rt"), Some("default")),
            (Some("SHO.RT:8080"), Some("default")),
            (Some("sho.rt."), Some("default")),
            (None, Some("default")),
            (Some("127.0.0.1:8080"), Some("default")),
            (Some("[::1]:8443"), Some("default")),
            (Some("localhost:8080"), Some("default")),
            (Some("go.acme.com"), Some("1")),
            (Some("Go.Acme.COM:443"), Some("1")),
            (Some("go.acme.com."), Some("1")),
            (Some("acme.link"), Some("2")),
            (Some("evil.example"), None),
            (Some("acme.com"), None),
            (Some("x.go.acme.com"), None),
        ];
        for (authority, want) in cases {
            assert_eq!(id_of(routes.route(*authority)).as_deref(), *want, "{authority:?}");
        }
        // The table is replaced whole: a removed domain is no longer routed.
        routes.install(&[domain("acme.link", "2")], &AppLinks::default());
        assert_eq!(routes.len(), 1);
        assert_eq!(id_of(routes.route(Some("go.acme.com"))), None);

        let lenient = DomainRoutes::new("sho.rt", UnknownHost::DefaultDomain);
        assert_eq!(id_of(lenient.route(Some("evil.example"))).as_deref(), Some("default"));
    }

    #[test]
    fn a_route_builds_its_keys_and_the_authority_comes_from_the_uri_or_host() {
        let routes = DomainRoutes::new("sho.rt", UnknownHost::NotFound);
        routes.install(&[domain("acme.link", "Zz")], &AppLinks::default());
        let Routed::Domain(route) = routes.route(Some("acme.link")) else {
            panic!("routed")
        };
        assert_eq!(route.key("promo"), "promo.Zz");

        let h1 = Request::get("/abc").header(HOST, "acme.link:80").body(()).unwrap();
        assert_eq!(request_authority(&h1), Some(&b"acme.link:80"[..]));
        let h2 = Request::get("https://acme.link/abc").body(()).unwrap();
        assert_eq!(request_authority(&h2), Some(&b"acme.link"[..]));
        let none = Request::get("/abc").body(()).unwrap();
        assert_eq!(request_authority(&none), None);
    }
}
