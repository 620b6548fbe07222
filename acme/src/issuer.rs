//! Ordering and renewing certificates: [`Issuer::renew_due`] orders a certificate for each
//! configured domain that has none or whose certificate is due ([`renew_at`]: once a third
//! of its lifetime is left, as certbot and Caddy renew, so a 90-day certificate 30 days
//! before it expires and a 6-day one 2 days before), one process of the fleet at a time per
//! domain (the store's lease), and backs off exponentially per domain after a failure. When
//! the CA offers ACME Renewal Information (RFC 9773, `renewalInfo` in its directory), its
//! suggested window decides instead ([`ari_renew_at`]): asked about each certificate again
//! after the CA's `Retry-After`, so a CA that wants its certificates replaced early (a
//! revocation coming) is followed within that. [`Issuer::run`] does that on a timer and
//! installs the store's certificates in the port's [`SniResolver`].

use crate::challenges::Challenges;
use crate::client::acme_http_client;
use crate::error::AcmeError;
use crate::metrics::AcmeMetrics;
use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewAccount, NewOrder, Order,
    OrderStatus,
};
use rebound_core::Causes;
use rebound_core::{Clock, UnixMillis};
use rebound_edge::sni::{certified_key_from_pem, SniResolver};
use rebound_edge::tls::TlsError;
use rebound_store::certs::{CertificateStore, StoredCertificate};
use rebound_store::StoreError;
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

/// Where in the renewal window `start..end` that a CA suggests (RFC 9773 §4.2) a certificate
/// expiring at `not_after` is renewed: `fraction` (0 to 1) of the way in, a point drawn
/// once per certificate as the RFC's uniformly random choice (so every process of the fleet
/// picks the same one); an inverted window is its start. `None` for a window that starts
/// at or past the expiry, which no renewal could follow: the lifetime rule decides then.
pub fn ari_renew_at(start: UnixMillis, end: UnixMillis, fraction: f64, not_after: UnixMillis) -> Option<UnixMillis> {
    if start >= not_after {
        return None;
    }
    let span = end.saturating_sub(start).max(0);
    Some(start.saturating_add((span as f64 * fraction.clamp(0.0, 1.0)) as i64))
}

/// The bound on one question to the CA about a certificate's renewal.
const ARI_TIMEOUT: Duration = Duration::from_secs(10);
/// The CA's `Retry-After` for its renewal information, bounded below …
const ARI_MIN_RECHECK: Duration = Duration::from_secs(60);
/// … and above (RFC 9773 §4.3.2 asks clients to check at least daily).
const ARI_MAX_RECHECK: Duration = Duration::from_secs(24 * 3600);
/// The wait after the CA could not be asked (or the account not loaded).
const ARI_RETRY: Duration = Duration::from_secs(3600);

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
    /// What the CA's renewal information said.
    ari: tokio::sync::Mutex<AriState>,
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
            ari: tokio::sync::Mutex::new(AriState::default()),
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
        known: &HashMap<String, Held>,
    ) -> Vec<(String, Outcome)> {
        let domains = configured(domains);
        let _round = self.round.lock().await;
        self.forget_expiries_but(&domains);
        let mut outcomes = Vec::with_capacity(domains.len());
        for domain in domains {
            let not_due = match known.get(&domain) {
                Some(held) => (!self.due_held(&domain, held, now).await).then_some(held.validity.not_after),
                None => None,
            };
            let outcome = match not_due {
                Some(not_after) => {
                    self.export_expiry(&domain, not_after);
                    Outcome::NotDue { not_after }
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
            if !self.due(stored, now).await {
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
            if !self.due(stored, now).await {
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

    async fn due(&self, stored: &StoredCertificate, now: UnixMillis) -> bool {
        self.due_held(&stored.domain, &Held::of(stored), now).await
    }

    /// Whether `domain`'s certificate `held` is due at `now`: at the point of the CA's
    /// suggested window when it offers one ([`Issuer::ari_renew_at`]), else by its lifetime.
    async fn due_held(&self, domain: &str, held: &Held, now: UnixMillis) -> bool {
        let suggested = match &held.ari_id {
            Some(id) => self.ari_renew_at(domain, held.validity, id, now).await,
            None => None,
        };
        match suggested {
            Some(at) => at <= now,
            None => self.due_at(held.validity, now),
        }
    }

    /// The renewal time the CA's renewal information (RFC 9773) gives `domain`'s
    /// certificate `id`, valid `validity`: [`ari_renew_at`] of its suggested window, asked
    /// again once the CA's `Retry-After` (bounded to a minute .. a day) has passed. `None`
    /// when the CA offers none (then never asked again), cannot be asked now (asked again
    /// after [`ARI_RETRY`]; a window known for the certificate is kept meanwhile), or its
    /// window is past the expiry.
    async fn ari_renew_at(
        &self,
        domain: &str,
        validity: Validity,
        id: &CertificateIdentifier<'static>,
        now: UnixMillis,
    ) -> Option<UnixMillis> {
        let mut ari = self.ari.lock().await;
        if ari.offered == Some(false) {
            return None;
        }
        let known = ari
            .windows
            .get(domain)
            .filter(|w| w.not_after == validity.not_after)
            .copied();
        if ari.quiet_until > now || known.is_some_and(|w| w.check_at > now) {
            return known.map(|w| w.renew_at);
        }
        let asked = async {
            let account = self.account().await?;
            account
                .renewal_info(id)
                .await
                .map_err(AcmeError::acme("reading the renewal information"))
        };
        match tokio::time::timeout(ARI_TIMEOUT, asked).await {
            Ok(Ok((info, retry_after))) => {
                ari.offered = Some(true);
                let window = &info.suggested_window;
                let ms = |nanos: i128| i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX);
                let (start, end) = (
                    ms(window.start.unix_timestamp_nanos()),
                    ms(window.end.unix_timestamp_nanos()),
                );
                let renew_at = ari_renew_at(start, end, fraction_of(id), validity.not_after);
                let check_at = now + millis(retry_after.clamp(ARI_MIN_RECHECK, ARI_MAX_RECHECK));
                match renew_at {
                    Some(renew_at) => {
                        ari.windows.insert(
                            domain.to_owned(),
                            AriWindow {
                                not_after: validity.not_after,
                                renew_at,
                                check_at,
                            },
                        );
                    }
                    None => {
                        ari.windows.remove(domain);
                    }
                }
                renew_at
            }
            Ok(Err(AcmeError::Acme {
                source: instant_acme::Error::Unsupported(_),
                ..
            })) => {
                ari.offered = Some(false);
                None
            }
            failed => {
                let cause = match failed {
                    Ok(Err(e)) => Causes(&e).to_string(),
                    _ => format!("no answer within {ARI_TIMEOUT:?}"),
                };
                tracing::warn!(%domain, error = %cause, "cannot read the CA's renewal information; the lifetime decides meanwhile");
                ari.quiet_until = now + millis(ARI_RETRY);
                known.map(|w| w.renew_at)
            }
        }
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
                .map_err(AcmeError::acme(crate::error::ANSWERING_THE_CHALLENGE))?;
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
                listing.expiries = stored.iter().map(|c| (c.domain.clone(), Held::of(c))).collect();
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
    /// The listed certificates' validity and identifier, by domain.
    expiries: HashMap<String, Held>,
}

/// What the CA's renewal information (RFC 9773) said.
#[derive(Default)]
struct AriState {
    /// `Some(false)` once the CA said it offers none: never asked again.
    offered: Option<bool>,
    /// Not asked before this, after it could not be asked.
    quiet_until: UnixMillis,
    /// By domain.
    windows: HashMap<String, AriWindow>,
}

/// The renewal time the CA suggested for a domain's certificate.
#[derive(Debug, Clone, Copy)]
struct AriWindow {
    /// The certificate asked about, by its expiry (a new one is asked about anew).
    not_after: UnixMillis,
    renew_at: UnixMillis,
    /// When to ask again.
    check_at: UnixMillis,
}

/// A stored certificate as the renewal sees it: its validity and its identifier for the
/// CA's renewal information (`None` without an Authority Key Identifier).
#[derive(Debug, Clone)]
struct Held {
    validity: Validity,
    ari_id: Option<CertificateIdentifier<'static>>,
}

impl Held {
    fn of(stored: &StoredCertificate) -> Held {
        use rustls::pki_types::pem::PemObject;
        let ari_id = rustls::pki_types::CertificateDer::pem_slice_iter(stored.chain_pem.as_bytes())
            .next()
            .and_then(Result::ok)
            .and_then(|leaf| CertificateIdentifier::try_from(&leaf).ok())
            .map(CertificateIdentifier::into_owned);
        Held {
            validity: Validity::of(stored),
            ari_id,
        }
    }
}

/// The point of a suggested window a certificate is renewed at, drawn from its identifier:
/// the same for every process of the fleet, evenly spread over certificates.
fn fraction_of(id: &CertificateIdentifier<'_>) -> f64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same identifier, the same point, in every process.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.to_string().hash(&mut h);
    (h.finish() % 1_000_000) as f64 / 1_000_000.0
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
                        tracing::warn!(error = %rebound_core::Causes(&e), "an HTTP-01 answer stays in the store until its bound");
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
        let known = HashMap::from([(
            "due.test".to_owned(),
            Held {
                validity: due,
                ari_id: None,
            },
        )]);
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

    #[test]
    fn a_cas_suggested_window_gives_one_point_per_certificate_never_past_its_expiry() {
        // (start, end, fraction, notAfter, renewed at)
        let cases: &[(i64, i64, f64, i64, Option<i64>)] = &[
            (100, 200, 0.0, 1_000, Some(100)),
            (100, 200, 0.5, 1_000, Some(150)),
            (100, 200, 1.0, 1_000, Some(200)),
            (100, 200, 3.0, 1_000, Some(200)),
            (100, 200, -1.0, 1_000, Some(100)),
            // An inverted window: its start.
            (200, 100, 0.7, 1_000, Some(200)),
            // Starting at or past the expiry: no use, the lifetime decides.
            (1_000, 2_000, 0.5, 1_000, None),
            (5_000, 6_000, 0.5, 1_000, None),
            // A window in the past: due at once.
            (-500, -100, 0.25, 1_000, Some(-400)),
        ];
        for &(start, end, fraction, not_after, want) in cases {
            assert_eq!(
                ari_renew_at(start, end, fraction, not_after),
                want,
                "{start}..{end} at {fraction}, expiring {not_after}"
            );
        }
        // The point is drawn from the certificate: the same for one, spread over many.
        let id = |serial: &[u8]| {
            CertificateIdentifier::new(
                rustls::pki_types::Der::from_slice(b"aki"),
                rustls::pki_types::Der::from_slice(serial),
            )
        };
        assert_eq!(fraction_of(&id(b"\x01")), fraction_of(&id(b"\x01")));
        let points: Vec<f64> = (0..200u8).map(|n| fraction_of(&id(&[n]))).collect();
        assert!(points.iter().all(|f| (0.0..1.0).contains(f)));
        let low = points.iter().filter(|f| **f < 0.5).count();
        assert!((60..140).contains(&low), "{low} of 200 in the first half");
    }

    /// A CA's directory and renewal information over HTTPS on 127.0.0.1 (nothing else: no
    /// order can be made), answering every certificate with `window` (Unix seconds) and
    /// `Retry-After: 3600`; the renewal information is offered when `ari`. The CA's
    /// certificate (PEM), its directory URL, and the count of renewal-information requests.
    async fn fake_ca(ari: bool, window: (i64, i64)) -> (String, String, Arc<std::sync::atomic::AtomicUsize>) {
        use http_body_util::Full;
        use hyper::body::Bytes;
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let certified =
            certified_key_from_pem("ca", cert.pem().as_bytes(), key.serialize_pem().as_bytes(), &provider).unwrap();
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(Arc::new(certified)));
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let directory = {
            let mut d = serde_json::json!({
                "newNonce": format!("{base}/nonce"),
                "newAccount": format!("{base}/account"),
                "newOrder": format!("{base}/order"),
            });
            if ari {
                d["renewalInfo"] = format!("{base}/ari").into();
            }
            d.to_string()
        };
        let rfc3339 = |secs: i64| {
            time::OffsetDateTime::from_unix_timestamp(secs)
                .unwrap()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        };
        let info =
            serde_json::json!({"suggestedWindow": {"start": rfc3339(window.0), "end": rfc3339(window.1)}}).to_string();
        let counted = asked.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, directory, info, asked) =
                    (acceptor.clone(), directory.clone(), info.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let path = req.uri().path().to_owned();
                        let (directory, info, asked) = (directory.clone(), info.clone(), asked.clone());
                        async move {
                            if path == "/directory" {
                                hyper::Response::builder().body(Full::new(Bytes::from(directory)))
                            } else if path.starts_with("/ari/") {
                                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                hyper::Response::builder()
                                    .header("content-type", "application/json")
                                    .header("retry-after", "3600")
                                    .body(Full::new(Bytes::from(info)))
                            } else {
                                hyper::Response::builder().status(404).body(Full::new(Bytes::new()))
                            }
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        (cert.pem(), format!("{base}/directory"), asked)
    }

    /// A certificate for `domain` valid `days` from `not_before` (Unix seconds), issued by a
    /// CA of its own (so it has the Authority Key Identifier an ARI identifier is made of).
    fn issued(domain: &str, not_before: i64, days: i64) -> StoredCertificate {
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()]).unwrap();
        params.use_authority_key_identifier_extension = true;
        let at = |secs: i64| time::OffsetDateTime::from_unix_timestamp(secs).unwrap();
        params.not_before = at(not_before);
        params.not_after = at(not_before + days * 86_400);
        let cert = params.signed_by(&key, &issuer).unwrap();
        StoredCertificate {
            domain: domain.to_owned(),
            chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after: (not_before + days * 86_400) * 1000,
        }
    }

    /// An issuer of `directory` (trusting `ca_pem`) whose store holds an account there.
    async fn issuer_of(directory: &str, ca_pem: &str) -> (Issuer, Arc<MemoryCertificates>) {
        let store = Arc::new(MemoryCertificates::new());
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let credentials = serde_json::json!({
            "id": directory.replace("/directory", "/account/1"),
            "key_pkcs8": base64url(&key.serialize_der()),
            "directory": directory,
        });
        store.put_account(&credentials.to_string()).await.unwrap();
        let mut config = IssuerConfig::new(directory, "me");
        config.acme_roots_pem = Some(ca_pem.to_owned());
        let issuer = Issuer::new(config, store.clone(), Challenges::new(), AcmeMetrics::detached());
        (issuer, store)
    }

    fn base64url(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    #[tokio::test]
    async fn the_cas_renewal_information_decides_when_offered_asked_again_after_its_retry_after() {
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let now = now_secs * 1000;
        // A 90-day certificate issued a day ago: by its lifetime due in 59 days.
        let cert = issued("ari.test", now_secs - 86_400, 90);
        let by_lifetime = renew_at(now - 86_400_000, cert.not_after, RENEW_LEFT);
        assert!(
            Held::of(&cert).ari_id.is_some(),
            "an identifier from the AKI and serial"
        );

        // The CA wants it replaced now (a window already past, as RFC 9773 §4.2 says: renew
        // at once): due, 59 days before its lifetime would have it.
        let (ca, directory, asked) = fake_ca(true, (now_secs - 7200, now_secs - 3600)).await;
        let (issuer, _) = issuer_of(&directory, &ca).await;
        assert!(issuer.due(&cert, now).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Asked again only after its Retry-After (an hour).
        assert!(issuer.due(&cert, now + 1_000).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(issuer.due(&cert, now + 3_600_000).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);

        // The CA suggests a window later than the lifetime's third: followed, not earlier.
        let (start, end) = (now_secs + 70 * 86_400, now_secs + 71 * 86_400);
        let (ca, directory, asked) = fake_ca(true, (start, end)).await;
        let (issuer, _) = issuer_of(&directory, &ca).await;
        assert!(!issuer.due(&cert, by_lifetime).await);
        assert!(!issuer.due(&cert, start * 1000 - 1).await);
        assert!(issuer.due(&cert, end * 1000).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 3);

        // A CA without renewal information: the lifetime decides, and it is not asked.
        let (ca, directory, asked) = fake_ca(false, (0, 0)).await;
        let (issuer, _) = issuer_of(&directory, &ca).await;
        assert!(!issuer.due(&cert, by_lifetime - 1).await);
        assert!(issuer.due(&cert, by_lifetime).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0);

        // A CA that cannot be reached: the lifetime decides meanwhile.
        let (issuer, _) = issuer_of("https://127.0.0.1:9/directory", &ca).await;
        assert!(!issuer.due(&cert, now).await);
        assert!(issuer.due(&cert, by_lifetime).await);
    }
}
