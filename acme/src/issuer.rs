//! Ordering and renewing certificates: [`Issuer::renew_due`] orders a certificate for each
//! configured domain that has none or whose certificate is due ([`renew_at`]: once a third
//! of its lifetime is left, as certbot and Caddy renew, so a 90-day certificate 30 days
//! before it expires and a 6-day one 2 days before), one process of the fleet at a time per
//! domain (the store's lease), and backs off exponentially per domain after a failure. [`Issuer::run`] does that on a timer and
//! installs the store's certificates in the port's [`SniResolver`].

use crate::challenges::Challenges;
use crate::client::acme_http_client;
use crate::error::AcmeError;
use crate::metrics::AcmeMetrics;
use instant_acme::{Account, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, Order, OrderStatus};
use rebound_core::{Clock, UnixMillis};
use rebound_edge::sni::{certified_key_from_pem, SniResolver};
use rebound_edge::tls::TlsError;
use rebound_store::certs::{CertificateStore, StoredCertificate};
use rebound_store::{Causes, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The challenge an issuer answers when the server offers both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// HTTP-01: the cleartext port answers `/.well-known/acme-challenge/{token}`.
    Http01,
    /// TLS-ALPN-01: the TLS port answers `acme-tls/1` handshakes.
    TlsAlpn01,
}

impl ChallengeKind {
    fn acme_type(self) -> ChallengeType {
        match self {
            ChallengeKind::Http01 => ChallengeType::Http01,
            ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
        }
    }

    fn other(self) -> ChallengeKind {
        match self {
            ChallengeKind::Http01 => ChallengeKind::TlsAlpn01,
            ChallengeKind::TlsAlpn01 => ChallengeKind::Http01,
        }
    }
}

/// How an issuer orders and renews (plain data; [`IssuerConfig::new`] gives the defaults).
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    /// The ACME server's directory URL.
    pub directory_url: String,
    /// The roots (PEM) the ACME server's HTTPS certificate must chain to; `None` for the
    /// system's.
    pub acme_roots_pem: Option<String>,
    /// The account's contact URLs (`mailto:ops@example.com`); none by default.
    pub contact: Vec<String>,
    /// This process in the store's leases: unique in the fleet.
    pub owner: String,
    /// The challenge answered when both are offered (the other one otherwise); HTTP-01.
    pub prefer: ChallengeKind,
    /// The share of a certificate's lifetime (notBefore to notAfter) left when it is
    /// renewed: one third ([`renew_at`]).
    pub renew_left: f64,
    /// The bound on one order, from creating it to the certificate: 5 minutes.
    pub order_timeout: Duration,
    /// The first wait between polls of an order, doubled after each poll: 250 ms.
    pub poll_first: Duration,
    /// The longest wait between polls: 5 s.
    pub poll_max: Duration,
    /// The wait before a domain is ordered again after its first failure, doubled after
    /// each further one: 5 minutes.
    pub retry_first: Duration,
    /// The longest wait after failures: 6 hours.
    pub retry_max: Duration,
    /// How often [`Issuer::run`] looks for certificates due: 10 minutes.
    pub check_every: Duration,
}

impl IssuerConfig {
    /// The defaults, ordering from `directory_url` as `owner`.
    pub fn new(directory_url: &str, owner: &str) -> IssuerConfig {
        IssuerConfig {
            directory_url: directory_url.to_owned(),
            acme_roots_pem: None,
            contact: Vec::new(),
            owner: owner.to_owned(),
            prefer: ChallengeKind::Http01,
            renew_left: RENEW_LEFT,
            order_timeout: Duration::from_secs(300),
            poll_first: Duration::from_millis(250),
            poll_max: Duration::from_secs(5),
            retry_first: Duration::from_secs(300),
            retry_max: Duration::from_secs(6 * 3600),
            check_every: Duration::from_secs(600),
        }
    }

    /// How long a lease taken to order lasts: past the order's bound, so that it never
    /// lapses while the order runs.
    fn lease_for(&self) -> Duration {
        self.order_timeout + Duration::from_secs(60)
    }
}

/// The share of its lifetime a certificate has left when it is renewed, by default: one
/// third, as certbot and Caddy renew.
pub const RENEW_LEFT: f64 = 1.0 / 3.0;

/// When a certificate valid from `not_before` to `not_after` is due: once `left` (a share,
/// 0 to 1) of its lifetime is left. A 90-day certificate with a third left is renewed 30
/// days before it expires, a 6-day one 2 days before, a 90-second one 30 seconds before:
/// each once per lifetime, however short. An inverted validity is due at its `not_after`.
pub fn renew_at(not_before: UnixMillis, not_after: UnixMillis, left: f64) -> UnixMillis {
    let lifetime = not_after.saturating_sub(not_before).max(0);
    let left = (lifetime as f64 * left.clamp(0.0, 1.0)) as i64;
    not_after.saturating_sub(left)
}

/// What [`Issuer::renew_due`] did for one domain.
#[derive(Debug)]
pub enum Outcome {
    /// The stored certificate is not due; it expires at `not_after`.
    NotDue { not_after: UnixMillis },
    /// A first certificate was issued and stored.
    Issued { not_after: UnixMillis },
    /// A certificate due was replaced.
    Renewed { not_after: UnixMillis },
    /// Another process holds the lease: it is ordering this domain.
    LeasedElsewhere,
    /// A recent failure: not ordered again before `until`.
    BackingOff { until: UnixMillis },
    /// The order failed (counted by kind, and backed off).
    Failed(AcmeError),
}

/// Failures in a row of one domain, and when it may be ordered again.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    until: UnixMillis,
}

/// Orders certificates over ACME for the configured domains and keeps them renewed.
pub struct Issuer {
    config: IssuerConfig,
    store: Arc<dyn CertificateStore>,
    challenges: Arc<Challenges>,
    metrics: AcmeMetrics,
    account: tokio::sync::Mutex<Option<Account>>,
    backoff: Mutex<HashMap<String, Backoff>>,
    /// Domains whose expiry is exported.
    exported: Mutex<BTreeSet<String>>,
    /// One round at a time: the leases are per owner, not per call.
    round: tokio::sync::Mutex<()>,
}

impl Issuer {
    /// An issuer storing in `store` and answering challenges through `challenges`.
    pub fn new(
        config: IssuerConfig,
        store: Arc<dyn CertificateStore>,
        challenges: Arc<Challenges>,
        metrics: AcmeMetrics,
    ) -> Issuer {
        Issuer {
            config,
            store,
            challenges,
            metrics,
            account: tokio::sync::Mutex::new(None),
            backoff: Mutex::new(HashMap::new()),
            exported: Mutex::new(BTreeSet::new()),
            round: tokio::sync::Mutex::new(()),
        }
    }

    /// Orders a certificate for each of `domains` that has none or whose certificate expires
    /// within the renewal window at `now`, one after the other; a domain that is not in
    /// `domains` is never ordered. Exports each domain's expiry.
    pub async fn renew_due(&self, domains: &[String], now: UnixMillis) -> Vec<(String, Outcome)> {
        self.renew_due_knowing(domains, now, &HashMap::new()).await
    }

    /// [`Issuer::renew_due`], taking a domain's certificate for not due without reading
    /// the store when `known` (domain -> its certificate's validity, from this process's
    /// last listing) says it is not: a round over 10,000 domains then reads nothing for the
    /// ones not due. A domain `known` calls due (or does not know) is read and leased as
    /// always.
    async fn renew_due_knowing(
        &self,
        domains: &[String],
        now: UnixMillis,
        known: &HashMap<String, Validity>,
    ) -> Vec<(String, Outcome)> {
        let domains = configured(domains);
        let _round = self.round.lock().await;
        self.forget_expiries_but(&domains);
        let mut outcomes = Vec::with_capacity(domains.len());
        for domain in domains {
            let outcome = match known.get(&domain) {
                Some(&validity) if !self.due_at(validity, now) => {
                    self.export_expiry(&domain, validity.not_after);
                    Outcome::NotDue {
                        not_after: validity.not_after,
                    }
                }
                _ => self.renew_one(&domain, now).await,
            };
            match &outcome {
                Outcome::Issued { .. } | Outcome::Renewed { .. } => {
                    tracing::info!(%domain, ?outcome, "certificate issued over ACME")
                }
                Outcome::Failed(e) => {
                    tracing::warn!(%domain, kind = e.kind().as_str(), error = %Causes(e), "certificate order failed")
                }
                _ => {}
            }
            outcomes.push((domain, outcome));
        }
        outcomes
    }

    async fn renew_one(&self, domain: &str, now: UnixMillis) -> Outcome {
        if let Some(until) = self.backing_off(domain, now) {
            return Outcome::BackingOff { until };
        }
        let mut leased = false;
        match self.renew_if_due(domain, now, &mut leased).await {
            Ok(outcome) => {
                lock(&self.backoff).remove(domain);
                outcome
            }
            Err(e) => {
                self.metrics.failed(e.kind());
                let until = self.back_off(domain, now);
                if leased {
                    // The lease is kept until then: the rest of the fleet does not retry at
                    // once either (the ACME server's limits count failed validations).
                    let _ = self.store.try_lease(domain, &self.config.owner, until, now).await;
                }
                Outcome::Failed(e)
            }
        }
    }

    async fn renew_if_due(&self, domain: &str, now: UnixMillis, leased: &mut bool) -> Result<Outcome, AcmeError> {
        let stored = self.store.get_certificate(domain).await?;
        if let Some(stored) = &stored {
            self.export_expiry(domain, stored.not_after);
            if !self.due(stored, now) {
                return Ok(Outcome::NotDue {
                    not_after: stored.not_after,
                });
            }
        }
        let until = now + millis(self.config.lease_for());
        if !self.store.try_lease(domain, &self.config.owner, until, now).await? {
            return Ok(Outcome::LeasedElsewhere);
        }
        *leased = true;
        // Another process may have renewed it between the read and the lease.
        let stored = self.store.get_certificate(domain).await?;
        if let Some(stored) = &stored {
            if !self.due(stored, now) {
                self.export_expiry(domain, stored.not_after);
                self.store.release(domain, &self.config.owner).await?;
                return Ok(Outcome::NotDue {
                    not_after: stored.not_after,
                });
            }
        }
        let issued = match tokio::time::timeout(self.config.order_timeout, self.order(domain, now)).await {
            Ok(issued) => issued?,
            Err(_) => return Err(AcmeError::Timeout(domain.to_owned())),
        };
        self.store.put_certificate(&issued).await?;
        self.store.release(domain, &self.config.owner).await?;
        self.metrics.issued(stored.is_some());
        self.export_expiry(domain, issued.not_after);
        Ok(match stored {
            Some(_) => Outcome::Renewed {
                not_after: issued.not_after,
            },
            None => Outcome::Issued {
                not_after: issued.not_after,
            },
        })
    }

    fn due(&self, stored: &StoredCertificate, now: UnixMillis) -> bool {
        self.due_at(Validity::of(stored), now)
    }

    fn due_at(&self, validity: Validity, now: UnixMillis) -> bool {
        renew_at(validity.not_before, validity.not_after, self.config.renew_left) <= now
    }

    /// One order, from its creation to the certificate: the caller holds the lease.
    async fn order(&self, domain: &str, now: UnixMillis) -> Result<StoredCertificate, AcmeError> {
        let account = self.account().await?;
        let identifiers = [Identifier::Dns(domain.to_owned())];
        let mut order = account
            .new_order(&NewOrder::new(&identifiers))
            .await
            .map_err(AcmeError::acme("creating the order"))?;
        // Cleared however the order ends, a timeout's drop included.
        let mut answers = Answers {
            challenges: &self.challenges,
            store: self.store.clone(),
            tokens: Vec::new(),
            domains: Vec::new(),
        };
        // The HTTP-01 answers are in the store until the order's bound has passed.
        let until = now + millis(self.config.lease_for());
        self.answer_challenges(domain, &mut order, &mut answers, until).await?;
        self.poll(domain, &mut order, OrderStatus::Ready).await?;

        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key)?;
        order
            .finalize_csr(csr.der())
            .await
            .map_err(AcmeError::acme("finalizing the order"))?;
        let mut wait = self.config.poll_first;
        let chain_pem = loop {
            match order
                .certificate()
                .await
                .map_err(AcmeError::acme("fetching the certificate"))?
            {
                Some(chain) => break chain,
                None => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(self.config.poll_max);
                }
            }
        };
        let key_pem = key.serialize_pem();
        let (_, not_after) = leaf_validity(domain, &chain_pem)?;
        // Stored only if the port will load it.
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        certified_key_from_pem(domain, chain_pem.as_bytes(), key_pem.as_bytes(), &provider).map_err(|e| {
            AcmeError::Certificate {
                domain: domain.to_owned(),
                problem: e.to_string(),
            }
        })?;
        Ok(StoredCertificate {
            domain: domain.to_owned(),
            chain_pem,
            key_pem,
            not_after,
        })
    }

    async fn answer_challenges(
        &self,
        domain: &str,
        order: &mut Order,
        answers: &mut Answers<'_>,
        until: UnixMillis,
    ) -> Result<(), AcmeError> {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization.map_err(AcmeError::acme("reading an authorization"))?;
            match &authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                status => {
                    return Err(AcmeError::Validation {
                        domain: domain.to_owned(),
                        detail: format!("the authorization is {status:?}"),
                    })
                }
            }
            let offered = |kind: ChallengeKind| authorization.challenges.iter().any(|c| c.r#type == kind.acme_type());
            let kind = [self.config.prefer, self.config.prefer.other()]
                .into_iter()
                .find(|kind| offered(*kind))
                .ok_or_else(|| AcmeError::NoChallenge(domain.to_owned()))?;
            let mut challenge = authorization
                .challenge(kind.acme_type())
                .ok_or_else(|| AcmeError::NoChallenge(domain.to_owned()))?;
            let key_authorization = challenge.key_authorization();
            match kind {
                ChallengeKind::Http01 => {
                    let token = challenge.token.clone();
                    self.challenges.set_http01(&token, key_authorization.as_str());
                    answers.tokens.push(token.clone());
                    // For whichever process of the fleet the CA asks, before it is told to.
                    self.store
                        .put_challenge(&token, key_authorization.as_str(), until)
                        .await?;
                }
                ChallengeKind::TlsAlpn01 => {
                    let digest = key_authorization.digest();
                    self.challenges.set_tls_alpn01(domain, digest.as_ref())?;
                    answers.domains.push(domain.to_owned());
                    // For whichever process of the fleet the CA reaches (`FleetTlsAlpn`).
                    let token = crate::challenges::tls_alpn01_token(domain);
                    answers.tokens.push(token.clone());
                    self.store
                        .put_challenge(&token, &hex::encode(digest.as_ref()), until)
                        .await?;
                }
            }
            challenge
                .set_ready()
                .await
                .map_err(AcmeError::acme("answering the challenge"))?;
        }
        Ok(())
    }

    /// Polls `order` until it is `target`, waiting longer between polls (bounded by the
    /// order's timeout); an invalid order is a failed validation, with the server's reason.
    async fn poll(&self, domain: &str, order: &mut Order, target: OrderStatus) -> Result<(), AcmeError> {
        let mut wait = self.config.poll_first;
        loop {
            tokio::time::sleep(wait).await;
            let state = order.refresh().await.map_err(AcmeError::acme("polling the order"))?;
            if state.status == target {
                return Ok(());
            }
            if state.status == OrderStatus::Invalid {
                let mut detail = state
                    .error
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "the order is invalid".to_owned());
                // The challenge's own error says why (the connection refused, the wrong answer).
                // (the refreshed order's authorizations are fetched anew).
                let mut authorizations = order.authorizations();
                while let Some(Ok(authorization)) = authorizations.next().await {
                    for problem in authorization.challenges.iter().filter_map(|c| c.error.as_ref()) {
                        detail = format!("{detail}; {problem}");
                    }
                }
                return Err(AcmeError::Validation {
                    domain: domain.to_owned(),
                    detail,
                });
            }
            wait = (wait * 2).min(self.config.poll_max);
        }
    }

    /// The account: loaded from the store, or created and stored (the first one stored wins
    /// in a fleet).
    async fn account(&self) -> Result<Account, AcmeError> {
        let mut cached = self.account.lock().await;
        if let Some(account) = &*cached {
            return Ok(account.clone());
        }
        let account = match self.store.get_account().await? {
            Some(credentials) => self.restore(&credentials).await?,
            None => {
                let contact: Vec<&str> = self.config.contact.iter().map(String::as_str).collect();
                let new = NewAccount {
                    contact: &contact,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                };
                let (account, credentials) = Account::builder_with_http(self.http()?)
                    .create(&new, self.config.directory_url.clone(), None)
                    .await
                    .map_err(AcmeError::acme("creating the account"))?;
                let credentials =
                    serde_json::to_string(&credentials).map_err(|e| AcmeError::Internal(e.to_string()))?;
                match self.store.put_account(&credentials).await {
                    Ok(()) => account,
                    Err(StoreError::AlreadyExists) => {
                        let stored = self.store.get_account().await?.ok_or(StoreError::NotFound)?;
                        self.restore(&stored).await?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        *cached = Some(account.clone());
        Ok(account)
    }

    async fn restore(&self, credentials: &str) -> Result<Account, AcmeError> {
        let credentials = serde_json::from_str(credentials).map_err(AcmeError::Account)?;
        Account::builder_with_http(self.http()?)
            .from_credentials(credentials)
            .await
            .map_err(AcmeError::acme("loading the account"))
    }

    fn http(&self) -> Result<Box<dyn instant_acme::HttpClient>, AcmeError> {
        acme_http_client(self.config.acme_roots_pem.as_deref())
    }

    fn backing_off(&self, domain: &str, now: UnixMillis) -> Option<UnixMillis> {
        lock(&self.backoff)
            .get(domain)
            .filter(|b| b.until > now)
            .map(|b| b.until)
    }

    /// Records a failure of `domain`: the time before which it is not ordered again.
    fn back_off(&self, domain: &str, now: UnixMillis) -> UnixMillis {
        let mut backoff = lock(&self.backoff);
        let entry = backoff.entry(domain.to_owned()).or_insert(Backoff {
            failures: 0,
            until: now,
        });
        let wait = self
            .config
            .retry_first
            .saturating_mul(1u32 << entry.failures.min(20))
            .min(self.config.retry_max);
        entry.failures = entry.failures.saturating_add(1);
        entry.until = now + millis(wait);
        entry.until
    }

    fn export_expiry(&self, domain: &str, not_after: UnixMillis) {
        self.metrics.set_expiry(domain, not_after);
        lock(&self.exported).insert(domain.to_owned());
    }

    fn forget_expiries_but(&self, domains: &BTreeSet<String>) {
        let mut exported = lock(&self.exported);
        exported.retain(|d| {
            let keep = domains.contains(d);
            if !keep {
                self.metrics.forget_expiry(d);
            }
            keep
        });
    }

    /// Every `check_every` and whenever the list changes: orders what is due for the
    /// domains `domains` holds now, then installs the store's certificates of those domains
    /// in `resolver` (the ones other processes ordered too), until `stop` turns true.
    pub async fn run(
        &self,
        domains: watch::Receiver<Vec<String>>,
        resolver: Option<Arc<SniResolver>>,
        clock: Arc<dyn Clock>,
        stop: watch::Receiver<bool>,
    ) {
        self.run_reporting(domains, resolver, clock, stop, |_| async {}).await
    }

    /// [`Issuer::run`], handing each round's outcomes to `report` (to record a domain's
    /// failure where people see it, say) before the certificates are installed.
    pub async fn run_reporting<F, Fut>(
        &self,
        mut domains: watch::Receiver<Vec<String>>,
        resolver: Option<Arc<SniResolver>>,
        clock: Arc<dyn Clock>,
        mut stop: watch::Receiver<bool>,
        mut report: F,
    ) where
        F: FnMut(Vec<(String, Outcome)>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut tick = tokio::time::interval(self.config.check_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut listing = Listing::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = domains.changed() => if changed.is_err() { return },
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let list = domains.borrow_and_update().clone();
            // What the store holds, listed again only when it changed (one point read of
            // the change number otherwise), when the domains changed, or every RELIST_EVERY.
            let mark = self.changes_mark().await;
            if listing.stale(mark, &list) {
                self.relist(&mut listing, mark, &list, resolver.as_deref()).await;
            }
            let outcomes = self
                .renew_due_knowing(&list, clock.now_millis(), &listing.expiries)
                .await;
            let ordered = outcomes
                .iter()
                .any(|(_, o)| matches!(o, Outcome::Issued { .. } | Outcome::Renewed { .. }));
            report(outcomes).await;
            if ordered {
                // Served at once, not a round later.
                let mark = self.changes_mark().await;
                self.relist(&mut listing, mark, &list, resolver.as_deref()).await;
            }
        }
    }

    /// The store's certificate change number; `None` when it cannot be read (then the
    /// certificates are listed, as if it had moved).
    async fn changes_mark(&self) -> Option<u64> {
        match self.store.certificates_changed().await {
            Ok(mark) => Some(mark),
            Err(e) => {
                tracing::warn!(error = %Causes(&e), "cannot read the certificates' change number; listing them");
                None
            }
        }
    }

    /// Lists the stored certificates of `domains`: installs them in `resolver` (when this
    /// port serves them) and remembers their expiries. A failed listing keeps the previous.
    async fn relist(
        &self,
        listing: &mut Listing,
        mark: Option<u64>,
        domains: &[String],
        resolver: Option<&SniResolver>,
    ) {
        let configured = configured(domains);
        match self.store.list_certificates().await {
            Ok(stored) => {
                let stored: Vec<StoredCertificate> =
                    stored.into_iter().filter(|c| configured.contains(&c.domain)).collect();
                if let Some(resolver) = resolver {
                    let refused = resolver.load_pem(
                        stored
                            .iter()
                            .map(|c| (c.domain.as_str(), c.chain_pem.as_str(), c.key_pem.as_str())),
                    );
                    for e in refused {
                        tracing::error!(error = %e, "a stored certificate does not load; the previous one keeps serving");
                    }
                }
                listing.expiries = stored.iter().map(|c| (c.domain.clone(), Validity::of(c))).collect();
                listing.mark = mark;
                listing.domains = domains.to_vec();
                listing.listed_at = Some(tokio::time::Instant::now());
            }
            Err(e) => tracing::warn!(error = %Causes(&e), "cannot read the stored certificates"),
        }
    }
}

/// How often a running issuer lists the stored certificates whatever the change number
/// says: a process that died between storing a certificate and moving the number (the
/// DynamoDB adapter writes them one after the other) is caught up with within this.
const RELIST_EVERY: Duration = Duration::from_secs(600);

/// What a running issuer last listed from the store.
#[derive(Default)]
struct Listing {
    /// The change number read before that listing (`None`: unknown, list again).
    mark: Option<u64>,
    /// The domains it was listed for.
    domains: Vec<String>,
    listed_at: Option<tokio::time::Instant>,
    /// The listed certificates' validity, by domain.
    expiries: HashMap<String, Validity>,
}

/// When a stored certificate is valid: its leaf's notBefore, and the notAfter the store
/// records (the leaf's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Validity {
    not_before: UnixMillis,
    not_after: UnixMillis,
}

impl Validity {
    /// `stored`'s validity; a chain whose leaf cannot be read (the port does not load it
    /// either) is taken as valid since ever, so it is due.
    fn of(stored: &StoredCertificate) -> Validity {
        let not_before = leaf_validity(&stored.domain, &stored.chain_pem)
            .map(|(not_before, _)| not_before)
            .unwrap_or(UnixMillis::MIN);
        Validity {
            not_before,
            not_after: stored.not_after,
        }
    }
}

impl Listing {
    /// Whether the store must be listed again: never listed, the number unknown or moved,
    /// the domains changed, or the last listing is older than [`RELIST_EVERY`].
    fn stale(&self, mark: Option<u64>, domains: &[String]) -> bool {
        mark.is_none()
            || mark != self.mark
            || domains != self.domains.as_slice()
            || self.listed_at.is_none_or(|t| t.elapsed() >= RELIST_EVERY)
    }
}

/// The configured domains as the store names them: lowercase, no trailing dot.
fn configured(domains: &[String]) -> BTreeSet<String> {
    domains
        .iter()
        .map(|d| d.trim_end_matches('.').to_ascii_lowercase())
        .collect()
}

/// Serves in `resolver` the stored certificate of each of `domains` (and no other domain):
/// the ones that do not load are returned, their domains keeping what they had.
pub async fn install_stored(
    store: &dyn CertificateStore,
    domains: &[String],
    resolver: &SniResolver,
) -> Result<Vec<TlsError>, StoreError> {
    let configured = configured(domains);
    let stored = store.list_certificates().await?;
    Ok(resolver.load_pem(
        stored
            .iter()
            .filter(|c| configured.contains(&c.domain))
            .map(|c| (c.domain.as_str(), c.chain_pem.as_str(), c.key_pem.as_str())),
    ))
}

/// The challenge answers one order set, cleared when it ends (in the store too, from a task
/// of its own: one that does not run leaves them to end at their bound).
struct Answers<'a> {
    challenges: &'a Challenges,
    store: Arc<dyn CertificateStore>,
    tokens: Vec<String>,
    domains: Vec<String>,
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        for token in &self.tokens {
            self.challenges.clear_http01(token);
        }
        if let (false, Ok(runtime)) = (self.tokens.is_empty(), tokio::runtime::Handle::try_current()) {
            let (store, tokens) = (self.store.clone(), std::mem::take(&mut self.tokens));
            runtime.spawn(async move {
                for token in tokens {
                    if let Err(e) = store.delete_challenge(&token).await {
                        tracing::warn!(error = %rebound_store::Causes(&e), "an HTTP-01 answer stays in the store until its bound");
                    }
                }
            });
        }
        for domain in &self.domains {
            self.challenges.clear_tls_alpn01(domain);
        }
    }
}

/// The notBefore and notAfter of the chain's first certificate, in Unix milliseconds.
fn leaf_validity(domain: &str, chain_pem: &str) -> Result<(UnixMillis, UnixMillis), AcmeError> {
    use rustls::pki_types::pem::PemObject;
    let problem = |problem: String| AcmeError::Certificate {
        domain: domain.to_owned(),
        problem,
    };
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or_else(|| problem("no certificate in the chain".to_owned()))?
        .map_err(|e| problem(e.to_string()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).map_err(|e| problem(e.to_string()))?;
    let validity = cert.validity();
    Ok((
        validity.not_before.timestamp() * 1000,
        validity.not_after.timestamp() * 1000,
    ))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::ManualClock;
    use rebound_store::certs::MemoryCertificates;

    /// A self-signed certificate for `domain`, valid from 1970, stored as expiring at
    /// `not_after`.
    fn certificate(domain: &str, not_after: UnixMillis) -> StoredCertificate {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        StoredCertificate {
            domain: domain.to_owned(),
            chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        }
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_reads_one_number_and_lists_only_when_the_certificates_or_domains_changed() {
        let (now, far) = (1_000_000, 4_000_000_000_000);
        let store = Arc::new(MemoryCertificates::new());
        for d in ["a.test", "b.test", "c.test"] {
            store.put_certificate(&certificate(d, far)).await.unwrap();
        }
        let mut config = IssuerConfig::new("https://127.0.0.1:9/directory", "me");
        config.check_every = Duration::from_secs(15);
        let issuer = Arc::new(Issuer::new(
            config,
            store.clone(),
            Challenges::new(),
            AcmeMetrics::detached(),
        ));
        let resolver = SniResolver::new(None, None);
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (domains, rx) = watch::channel(names(&["a.test", "b.test", "c.test"]));
        let (stop, stopped) = watch::channel(false);
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::at(now));
        let run = {
            let (issuer, resolver) = (issuer.clone(), resolver.clone());
            tokio::spawn(async move { issuer.run(rx, Some(resolver), clock, stopped).await })
        };
        // Ten rounds with nothing changed: one listing, no certificate read one by one.
        tokio::time::sleep(Duration::from_millis(15_000 * 9 + 1)).await;
        assert_eq!(store.reads(), (10, 1, 0), "(numbers read, listings, reads)");
        assert_eq!(sorted(resolver.domains()), names(&["a.test", "b.test", "c.test"]));

        // Another process renews b.test: the number moves, the next round lists again.
        store.put_certificate(&certificate("b.test", far + 1)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(store.reads(), (11, 2, 0));

        // A domain added (its certificate stored by another process) and one removed: a
        // listing for the new list; the removed one is no longer served.
        store.put_certificate(&certificate("d.test", far)).await.unwrap();
        domains.send(names(&["a.test", "b.test", "d.test"])).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(store.reads().1, 3);
        assert_eq!(sorted(resolver.domains()), names(&["a.test", "b.test", "d.test"]));

        // Nothing changes for ten minutes: listed once more all the same.
        let before = store.reads().1;
        tokio::time::sleep(RELIST_EVERY + Duration::from_secs(15)).await;
        assert_eq!(store.reads().1, before + 1, "one listing every RELIST_EVERY");
        assert_eq!(store.reads().2, 0, "never a read one by one: nothing was due");

        stop.send(true).unwrap();
        run.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_certificate_the_listing_calls_due_is_read_from_the_store_before_ordering() {
        let now = 10 * 86_400_000;
        let store = Arc::new(MemoryCertificates::new());
        // Due (less than a third of its 11 days left), and renewed meanwhile by another
        // process: the read finds it not due, and nothing is ordered.
        store
            .put_certificate(&certificate("due.test", now + 86_400_000))
            .await
            .unwrap();
        let issuer = Issuer::new(
            IssuerConfig::new("https://127.0.0.1:9/directory", "me"),
            store.clone(),
            Challenges::new(),
            AcmeMetrics::detached(),
        );
        let due = Validity {
            not_before: 0,
            not_after: now + 86_400_000,
        };
        let known = HashMap::from([("due.test".to_owned(), due)]);
        store
            .put_certificate(&certificate("due.test", now + 90 * 86_400_000))
            .await
            .unwrap();
        let outcomes = issuer.renew_due_knowing(&["due.test".to_owned()], now, &known).await;
        assert!(
            matches!(outcomes[0].1, Outcome::NotDue { not_after } if not_after == now + 90 * 86_400_000),
            "{outcomes:?}"
        );
        assert_eq!(store.reads().2, 1, "read once: not due any more");
        assert_eq!(store.lease("due.test"), None, "so not leased either");
    }

    #[test]
    fn a_certificate_is_due_once_a_third_of_its_lifetime_is_left() {
        const DAY: i64 = 86_400_000;
        // (notBefore, notAfter, share left, renewed at)
        let cases: &[(i64, i64, f64, i64)] = &[
            // Let's Encrypt's 90 days: 30 days before expiry, as the fixed window was.
            (0, 90 * DAY, RENEW_LEFT, 60 * DAY),
            // Its short-lived profile's 6 days: 2 days before, not at once.
            (1_000, 1_000 + 6 * DAY, RENEW_LEFT, 1_000 + 4 * DAY),
            // pebble's 90 s: 30 s before.
            (5_000, 95_000, RENEW_LEFT, 65_000),
            // Other shares, and the bounds.
            (0, 100 * DAY, 0.5, 50 * DAY),
            (0, 100 * DAY, 1.0, 0),
            (0, 100 * DAY, 0.0, 100 * DAY),
            (0, 100 * DAY, 7.0, 0),
            (0, 100 * DAY, -1.0, 100 * DAY),
            // No lifetime, or an inverted one: due at notAfter.
            (50, 50, RENEW_LEFT, 50),
            (90 * DAY, 10 * DAY, RENEW_LEFT, 10 * DAY),
        ];
        for &(not_before, not_after, left, want) in cases {
            assert_eq!(
                renew_at(not_before, not_after, left),
                want,
                "{not_before}..{not_after}, {left} left"
            );
        }
        // An unreadable chain: valid since ever, so due now.
        assert!(renew_at(UnixMillis::MIN, 90 * DAY, RENEW_LEFT) < 0);
        // Due at that instant, not before.
        let issuer = Issuer::new(
            IssuerConfig::new("https://127.0.0.1:9/directory", "me"),
            Arc::new(MemoryCertificates::new()),
            Challenges::new(),
            AcmeMetrics::detached(),
        );
        let six_days = Validity {
            not_before: 0,
            not_after: 6 * DAY,
        };
        assert!(!issuer.due_at(six_days, 4 * DAY - 1));
        assert!(issuer.due_at(six_days, 4 * DAY));
        let stored = certificate("x.test", 90 * DAY);
        assert_eq!(
            Validity::of(&stored),
            Validity {
                not_before: 0,
                not_after: 90 * DAY
            }
        );
    }
}
