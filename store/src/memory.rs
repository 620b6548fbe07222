//! An in-memory store for unit tests: the same contract as the real adapters, plus
//! switches to make it fail and counters of what was asked of it.

use crate::*;
use rebound_core::domain::split_key;
use rebound_core::threat::host_key;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
struct State {
    links: HashMap<String, Link>,
    idempotency: HashMap<(String, String), IdempotencyRecord>,
    keys: HashMap<String, ApiKeyRecord>,
    counters: HashMap<String, u64>,
    settings: HashMap<String, String>,
    aliases: std::collections::BTreeSet<String>,
    rollups: BTreeMap<(String, Day), crate::Clicks>,
    /// Breakdowns: clicks by (code, day, dimension) and value.
    breakdowns: BTreeMap<(String, Day, crate::Dimension), BTreeMap<String, u64>>,
    batches: std::collections::HashSet<String>,
    audit: Vec<AuditEvent>,
    propagations: HashMap<String, Propagation>,
}

impl State {
    /// Records the propagation of `link` (at its new version) pending, leased to `lease`.
    fn pending(&mut self, link: &Link, lease: &PropagationLease) {
        let pending = Propagation {
            code: link.code.clone(),
            version: link.version,
            lease_owner: lease.owner.clone(),
            lease_until: lease.until,
        };
        self.propagations.insert(link.code.clone(), pending);
    }
}

/// The in-memory fake.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    unavailable: AtomicBool,
    retried_writes: AtomicBool,
    link_reads: AtomicU64,
    certificates: crate::certs::MemoryCertificates,
    domains: crate::domains::MemoryDomains,
    /// A store that keeps no breakdowns (as a third-party adapter may be).
    no_breakdowns: bool,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that keeps no breakdowns: [`crate::RollupStore::breakdowns`] is `None`.
    pub fn keeping_no_breakdowns() -> Self {
        MemoryStore {
            no_breakdowns: true,
            ..Self::default()
        }
    }

    /// While true, every call fails with `Unavailable`.
    pub fn set_unavailable(&self, down: bool) {
        self.unavailable.store(down, Ordering::SeqCst);
    }

    /// While true, each versioned change of a link is applied and then answered as a store
    /// client's retry of it would be after a lost answer: `ConditionFailed`.
    pub fn set_writes_retried(&self, retried: bool) {
        self.retried_writes.store(retried, Ordering::SeqCst);
    }

    /// How many `get_link` calls were made.
    pub fn link_reads(&self) -> u64 {
        self.link_reads.load(Ordering::SeqCst)
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the memory store", "switched off"));
        }
        Ok(self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn check(&self) -> Result<(), StoreError> {
        self.state().map(drop)
    }

    /// A versioned change of a link (see the SQLite adapter's `change_link`).
    fn change_link(
        &self,
        code: &str,
        expected_version: u64,
        was_active: bool,
        lease: &PropagationLease,
        change: impl FnOnce(&Link) -> Link,
    ) -> Result<Link, StoreError> {
        let mut s = self.state()?;
        let link = s.links.get_mut(code).ok_or(StoreError::NotFound)?;
        if link.version != expected_version || link.is_active != was_active {
            return Err(StoreError::ConditionFailed);
        }
        *link = change(link);
        let next = link.clone();
        s.pending(&next, lease);
        match self.retried_writes.load(Ordering::SeqCst) {
            true => Err(StoreError::ConditionFailed),
            false => Ok(next),
        }
    }
}

#[async_trait]
impl LinkReads for MemoryStore {
    async fn get_link(&self, code: &str) -> Result<Option<Link>, StoreError> {
        self.link_reads.fetch_add(1, Ordering::SeqCst);
        Ok(self.state()?.links.get(code).cloned())
    }

    async fn high_water(&self, counter: &str) -> Result<u64, StoreError> {
        Ok(self.state()?.counters.get(counter).copied().unwrap_or(0))
    }

    async fn list_aliases(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, StoreError> {
        let s = self.state()?;
        let range = match after {
            Some(a) => s
                .aliases
                .range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded)),
            None => s.aliases.range::<str, _>(..),
        };
        Ok(range.take(limit).cloned().collect())
    }

    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self.state()?.settings.get(name).cloned())
    }
}

#[async_trait]
impl LinkStore for MemoryStore {
    async fn insert_link(&self, link: &Link, idempotency: Option<&IdempotencyRecord>) -> Result<(), StoreError> {
        let mut s = self.state()?;
        if let Some(rec) = idempotency {
            let k = (rec.scope.clone(), rec.key.clone());
            if s.idempotency.get(&k).is_some_and(|r| r.expires_at > rec.created_at) {
                return Err(StoreError::IdempotencyKeyExists);
            }
        }
        if s.links.contains_key(&link.code) {
            return Err(StoreError::AlreadyExists);
        }
        if let Some(rec) = idempotency {
            s.idempotency.insert((rec.scope.clone(), rec.key.clone()), rec.clone());
        }
        s.links.insert(link.code.clone(), link.clone());
        Ok(())
    }

    async fn record_alias(&self, alias: &str) -> Result<(), StoreError> {
        self.state()?.aliases.insert(alias.to_owned());
        Ok(())
    }

    async fn deactivate_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.change_link(code, expected_version, true, lease, |l| l.deactivated(deletion))
    }

    async fn edit_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        edit: &LinkEdit,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.change_link(code, expected_version, true, lease, |l| l.edited(edit))
    }

    async fn restore_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.change_link(code, expected_version, false, lease, Link::restored)
    }

    async fn pending_propagations(&self, now: UnixMillis, limit: usize) -> Result<Vec<Propagation>, StoreError> {
        let s = self.state()?;
        let mut due: Vec<Propagation> = s
            .propagations
            .values()
            .filter(|p| p.lease_until <= now)
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.lease_until, &a.code).cmp(&(b.lease_until, &b.code)));
        due.truncate(limit);
        Ok(due)
    }

    async fn lease_propagation(
        &self,
        code: &str,
        version: u64,
        lease: &PropagationLease,
        now: UnixMillis,
    ) -> Result<Link, StoreError> {
        let mut s = self.state()?;
        let p = s
            .propagations
            .get_mut(code)
            .filter(|p| p.version == version && (p.lease_until <= now || p.lease_owner == lease.owner))
            .ok_or(StoreError::ConditionFailed)?;
        p.lease_owner = lease.owner.clone();
        p.lease_until = lease.until;
        s.links.get(code).cloned().ok_or(StoreError::NotFound)
    }

    async fn finish_propagation(&self, code: &str, version: u64) -> Result<(), StoreError> {
        let mut s = self.state()?;
        match s.propagations.get(code) {
            Some(p) if p.version == version => {
                s.propagations.remove(code);
                Ok(())
            }
            _ => Err(StoreError::ConditionFailed),
        }
    }

    async fn list_links(
        &self,
        owner: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let after = cursor.map(ListCursor::decode).transpose()?;
        let s = self.state()?;
        let mut links: Vec<&Link> = s
            .links
            .values()
            .filter(|l| owner.is_none_or(|o| l.created_by == o))
            .filter(|l| {
                after
                    .as_ref()
                    .is_none_or(|c| (l.created_at, l.code.as_str()) < (c.created_at, c.code.as_str()))
            })
            .collect();
        links.sort_by(|a, b| (b.created_at, &b.code).cmp(&(a.created_at, &a.code)));
        Ok(LinkPage::from_overfetch(
            links.into_iter().take(limit + 1).cloned().collect(),
            limit,
        ))
    }

    async fn links_with_rules(&self, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let s = self.state()?;
        let mut found: Vec<&Link> = s
            .links
            .values()
            .filter(|l| l.is_active && !l.rules.is_empty())
            .filter(|l| after.as_ref().is_none_or(|c| l.code > c.code))
            .collect();
        found.sort_by(|a, b| a.code.cmp(&b.code));
        let links = found.into_iter().take(limit + 1).cloned().collect();
        Ok(IndexCursor::page(links, limit, |_| String::new()))
    }

    async fn links_by_target_host(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let s = self.state()?;
        let mut found: Vec<(String, &Link)> = s
            .links
            .values()
            .filter(|l| l.is_active)
            .filter_map(|l| Some((host_key(&l.long_url)?, l)))
            .filter(|(key, l)| {
                key.starts_with(prefix)
                    && after
                        .as_ref()
                        .is_none_or(|c| (key.as_str(), l.code.as_str()) > (c.key.as_str(), c.code.as_str()))
            })
            .collect();
        found.sort_by(|(ka, a), (kb, b)| (ka, &a.code).cmp(&(kb, &b.code)));
        let links = found.into_iter().take(limit + 1).map(|(_, l)| l.clone()).collect();
        Ok(IndexCursor::page(links, limit, |l| {
            host_key(&l.long_url).unwrap_or_default()
        }))
    }

    async fn links_on_domain(&self, id: &str, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        let after = cursor.map(IndexCursor::decode).transpose()?;
        let s = self.state()?;
        let mut links: Vec<Link> = s
            .links
            .values()
            .filter(|l| l.is_active && split_key(&l.code).1 == Some(id))
            .filter(|l| after.as_ref().is_none_or(|c| l.code > c.code))
            .cloned()
            .collect();
        links.sort_by(|a, b| a.code.cmp(&b.code));
        links.truncate(limit + 1);
        Ok(IndexCursor::page(links, limit, |_| id.to_owned()))
    }

    async fn get_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: UnixMillis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let s = self.state()?;
        Ok(s.idempotency
            .get(&(scope.to_owned(), key.to_owned()))
            .filter(|r| r.expires_at > now)
            .cloned())
    }
}

#[async_trait]
impl KeyStore for MemoryStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut s = self.state()?;
        if s.keys.contains_key(&key.id) {
            return Err(StoreError::AlreadyExists);
        }
        s.keys.insert(key.id.clone(), key.clone());
        Ok(())
    }

    async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(self.state()?.keys.values().find(|k| k.key_hash == key_hash).cloned())
    }

    async fn revoke_key(&self, id: &str, at: UnixMillis) -> Result<ApiKeyRecord, StoreError> {
        let mut s = self.state()?;
        let key = s.keys.get_mut(id).ok_or(StoreError::NotFound)?;
        key.revoked_at.get_or_insert(at);
        Ok(key.clone())
    }
}

#[async_trait]
impl CounterStore for MemoryStore {
    async fn lease_block(&self, counter: &str, size: u64) -> Result<Range<u64>, StoreError> {
        let mut s = self.state()?;
        let value = s.counters.entry(counter.to_owned()).or_insert(0);
        let start = *value;
        let end = start.checked_add(size).ok_or(StoreError::Exhausted)?;
        *value = end;
        Ok(start..end)
    }

    async fn get_or_init_setting(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        let mut s = self.state()?;
        Ok(s.settings
            .entry(name.to_owned())
            .or_insert_with(|| candidate.to_owned())
            .clone())
    }
}

#[async_trait]
impl RollupStore for MemoryStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        let mut s = self.state()?;
        if !s.batches.insert(batch.id.clone()) {
            return Ok(BatchOutcome::AlreadyApplied);
        }
        for add in &batch.adds {
            *s.rollups.entry((add.code.clone(), add.day)).or_default() +=
                crate::Clicks::new(add.clicks, add.bot_clicks);
        }
        Ok(BatchOutcome::Applied)
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, crate::Clicks)>, StoreError> {
        let s = self.state()?;
        Ok(s.rollups
            .range((code.to_owned(), from)..=(code.to_owned(), to))
            .filter(|(_, n)| !n.is_zero())
            .map(|((_, d), n)| (*d, *n))
            .collect())
    }

    fn breakdowns(&self) -> Option<&dyn crate::BreakdownStore> {
        match self.no_breakdowns {
            true => None,
            false => Some(self),
        }
    }
}

#[async_trait]
impl crate::BreakdownStore for MemoryStore {
    async fn apply_dimensions(&self, batch: &crate::DimensionBatch) -> Result<BatchOutcome, StoreError> {
        let mut s = self.state()?;
        if !s.batches.insert(batch.id.clone()) {
            return Ok(BatchOutcome::AlreadyApplied);
        }
        for add in &batch.adds {
            let values = s
                .breakdowns
                .entry((add.code.clone(), add.day, add.dimension))
                .or_default();
            let value = crate::breakdowns::bounded_value(
                add.dimension,
                &add.value,
                values.contains_key(&add.value),
                values.len(),
            );
            *values.entry(value.to_owned()).or_default() += add.clicks;
        }
        Ok(BatchOutcome::Applied)
    }

    async fn read_breakdown(
        &self,
        code: &str,
        dimension: crate::Dimension,
        from: Day,
        to: Day,
    ) -> Result<Vec<crate::ValueClicks>, StoreError> {
        let s = self.state()?;
        let mut totals: HashMap<String, u64> = HashMap::new();
        for ((c, day, d), values) in &s.breakdowns {
            if c == code && *d == dimension && (from..=to).contains(day) {
                for (value, clicks) in values {
                    *totals.entry(value.clone()).or_default() += clicks;
                }
            }
        }
        Ok(crate::breakdowns::ranked(totals))
    }
}

/// The domains: the fake of `domains`, failing with the rest.
#[async_trait]
impl crate::domains::DomainStore for MemoryStore {
    async fn insert_domain(&self, domain: &rebound_core::domain::Domain) -> Result<(), StoreError> {
        self.check()?;
        self.domains.insert_domain(domain).await
    }
    async fn get_domain(&self, name: &str) -> Result<Option<rebound_core::domain::Domain>, StoreError> {
        self.check()?;
        self.domains.get_domain(name).await
    }
    async fn list_domains(&self) -> Result<Vec<rebound_core::domain::Domain>, StoreError> {
        self.check()?;
        self.domains.list_domains().await
    }
    async fn update_domain(&self, domain: &rebound_core::domain::Domain) -> Result<(), StoreError> {
        self.check()?;
        self.domains.update_domain(domain).await
    }
    async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
        self.check()?;
        self.domains.delete_domain(name).await
    }
    async fn set_app_links(&self, name: &str, app_links: &rebound_core::app_links::AppLinks) -> Result<(), StoreError> {
        self.check()?;
        self.domains.set_app_links(name, app_links).await
    }
    async fn default_app_links(&self) -> Result<rebound_core::app_links::AppLinks, StoreError> {
        self.check()?;
        self.domains.default_app_links().await
    }
    async fn set_default_app_links(&self, app_links: &rebound_core::app_links::AppLinks) -> Result<(), StoreError> {
        self.check()?;
        self.domains.set_default_app_links(app_links).await
    }
}

/// ACME's account and certificates: the fake of `certs`, failing with the rest.
#[async_trait]
impl crate::certs::CertificateStore for MemoryStore {
    async fn get_account(&self) -> Result<Option<String>, StoreError> {
        self.check()?;
        self.certificates.get_account().await
    }
    async fn put_account(&self, credentials: &str) -> Result<(), StoreError> {
        self.check()?;
        self.certificates.put_account(credentials).await
    }
    async fn get_certificate(&self, domain: &str) -> Result<Option<crate::certs::StoredCertificate>, StoreError> {
        self.check()?;
        self.certificates.get_certificate(domain).await
    }
    async fn put_certificate(&self, certificate: &crate::certs::StoredCertificate) -> Result<(), StoreError> {
        self.check()?;
        self.certificates.put_certificate(certificate).await
    }
    async fn list_certificates(&self) -> Result<Vec<crate::certs::StoredCertificate>, StoreError> {
        self.check()?;
        self.certificates.list_certificates().await
    }
    async fn certificates_changed(&self) -> Result<u64, StoreError> {
        self.check()?;
        self.certificates.certificates_changed().await
    }
    async fn try_lease(
        &self,
        domain: &str,
        owner: &str,
        until: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        self.check()?;
        self.certificates.try_lease(domain, owner, until, now).await
    }
    async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError> {
        self.check()?;
        self.certificates.release(domain, owner).await
    }
    async fn put_challenge(&self, token: &str, key_authorization: &str, until: UnixMillis) -> Result<(), StoreError> {
        self.check()?;
        self.certificates.put_challenge(token, key_authorization, until).await
    }
    async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError> {
        self.check()?;
        self.certificates.get_challenge(token, now).await
    }
    async fn delete_challenge(&self, token: &str) -> Result<(), StoreError> {
        self.check()?;
        self.certificates.delete_challenge(token).await
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        self.state()?.audit.push(event.clone());
        Ok(())
    }

    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError> {
        Ok(self
            .state()?
            .audit
            .iter()
            .filter(|e| e.code.as_deref() == Some(code))
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_passes_the_contract() {
        let store = MemoryStore::new();
        crate::conformance::run_all(&store).await;
        crate::conformance::breakdowns_apply_once_and_stay_bounded(&store).await;
    }

    #[tokio::test]
    async fn switched_off_it_fails() {
        let s = MemoryStore::new();
        s.set_unavailable(true);
        assert!(matches!(s.get_link("abc").await, Err(StoreError::Unavailable { .. })));
        s.set_unavailable(false);
        assert!(s.get_link("abc").await.unwrap().is_none());
        assert_eq!(s.link_reads(), 2);
    }
}
