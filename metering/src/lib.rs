//! Every adapter call counted by operation and outcome, with its latency: the metric
//! families, and decorators that put them around any [`Store`] (SQLite, DynamoDB),
//! [`RecordCache`] (Redis), [`LinkEvents`] (Redis from a control plane), [`ClickSink`]
//! (SQS) or [`ClickStreamSink`] (Kinesis), so the adapters and the ports of `rebound-store` stay free of metrics. The click
//! consumer times its SQS calls itself through [`AdapterMetrics::operation`].
//!
//! A call its caller abandons (a budget ran out and the future was dropped) is counted with
//! outcome `abandoned`, so a slow backend shows up even though no answer came back.
#![forbid(unsafe_code)]

use async_trait::async_trait;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};
use rebound_core::app_links::AppLinks;
use rebound_core::cache::CacheRecord;
use rebound_core::domain::Domain;
use rebound_core::link::Deletion;
use rebound_core::{Day, Link, LinkEdit, UnixMillis};
use rebound_store::certs::{CertificateStore, StoredCertificate};
use rebound_store::click_stream::{ClickEvent, ClickStreamSink, StreamPut};
use rebound_store::domains::DomainStore;
use rebound_store::{
    ApiKeyRecord, AttemptBudget, AuditEvent, AuditLog, BatchOutcome, BreakdownSink, ClickBatch, ClickSink,
    CounterStore, DimensionBatch, EventError, IdempotencyRecord, KeyStore, L2Read, LinkEvents, LinkPage, LinkReads,
    LinkStore, Propagation, PropagationLease, RecordCache, RollupStore, Store, StoreError,
};
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The label of a failed call: one per [`StoreError`] variant, so the set is bounded.
pub fn error_outcome(e: &StoreError) -> &'static str {
    match e {
        StoreError::AlreadyExists => "already_exists",
        StoreError::IdempotencyKeyExists => "idempotency_key_exists",
        StoreError::ConditionFailed => "condition_failed",
        StoreError::NotFound => "not_found",
        StoreError::BadCursor => "bad_cursor",
        StoreError::Exhausted => "exhausted",
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::Corrupt(_) => "corrupt",
        StoreError::Internal(_) => "internal",
    }
}

/// The two families every adapter call is counted in, registered once per process.
#[derive(Clone)]
pub struct AdapterMetrics {
    calls: IntCounterVec,
    latency: HistogramVec,
}

impl AdapterMetrics {
    /// Declares the families in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<AdapterMetrics> {
        let m = AdapterMetrics::unregistered()?;
        registry.register(Box::new(m.calls.clone()))?;
        registry.register(Box::new(m.latency.clone()))?;
        Ok(m)
    }

    /// The families registered nowhere, for tests.
    pub fn unregistered() -> prometheus::Result<AdapterMetrics> {
        Ok(AdapterMetrics {
            calls: IntCounterVec::new(
                Opts::new(
                    "rebound_adapter_calls_total",
                    "Calls to a backend (sqlite, dynamodb, redis, sqs), by operation and outcome (ok, abandoned, or the error kind).",
                ),
                &["adapter", "operation", "outcome"],
            )?,
            latency: HistogramVec::new(
                HistogramOpts::new(
                    "rebound_adapter_call_duration_seconds",
                    "Time a backend call took, by adapter and operation (abandoned calls excluded).",
                )
                .buckets(vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
                ]),
                &["adapter", "operation"],
            )?,
        })
    }

    /// One operation's handles, resolved once.
    pub fn operation(&self, adapter: &str, operation: &str) -> OperationMetrics {
        OperationMetrics {
            ok: self.calls.with_label_values(&[adapter, operation, "ok"]),
            latency: self.latency.with_label_values(&[adapter, operation]),
            calls: self.calls.clone(),
            adapter: Arc::from(adapter),
            operation: Arc::from(operation),
        }
    }
}

/// The counters and histogram of one adapter operation.
#[derive(Clone)]
pub struct OperationMetrics {
    ok: IntCounter,
    latency: Histogram,
    /// Failures are rare: their series are looked up when they happen.
    calls: IntCounterVec,
    adapter: Arc<str>,
    operation: Arc<str>,
}

impl OperationMetrics {
    /// Runs `call`, counting its outcome and timing it; a call dropped before it finished
    /// counts as `abandoned`.
    pub async fn time<T, E, F>(&self, classify: impl Fn(&E) -> &'static str, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let mut pending = PendingCall {
            metrics: self,
            started: Instant::now(),
            done: false,
        };
        let result = call.await;
        pending.done = true;
        self.latency.observe(pending.started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => self.ok.inc(),
            Err(e) => self.count(classify(e)),
        }
        result
    }

    /// [`OperationMetrics::time`] for calls that fail with a [`StoreError`].
    pub async fn store_call<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.time(error_outcome, call).await
    }

    fn count(&self, outcome: &str) {
        self.calls
            .with_label_values(&[&self.adapter, &self.operation, outcome])
            .inc();
    }
}

/// Counts a call as abandoned when its future is dropped before it finished.
struct PendingCall<'a> {
    metrics: &'a OperationMetrics,
    started: Instant,
    done: bool,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.metrics.count("abandoned");
        }
    }
}

/// The handles of every store operation.
#[derive(Clone)]
struct StoreOperations {
    insert_link: OperationMetrics,
    insert_links: OperationMetrics,
    get_link: OperationMetrics,
    deactivate_link: OperationMetrics,
    edit_link: OperationMetrics,
    pending_propagations: OperationMetrics,
    lease_propagation: OperationMetrics,
    finish_propagation: OperationMetrics,
    list_links: OperationMetrics,
    links_by_target_host: OperationMetrics,
    links_on_domain: OperationMetrics,
    links_with_rules: OperationMetrics,
    index_older_links: OperationMetrics,
    high_water: OperationMetrics,
    list_aliases: OperationMetrics,
    read_setting: OperationMetrics,
    record_alias: OperationMetrics,
    get_idempotency: OperationMetrics,
    insert_key: OperationMetrics,
    find_key_by_hash: OperationMetrics,
    revoke_key: OperationMetrics,
    lease_block: OperationMetrics,
    get_or_init_setting: OperationMetrics,
    apply_clicks: OperationMetrics,
    apply_click_batches: OperationMetrics,
    read_clicks: OperationMetrics,
    append_audit: OperationMetrics,
    audit_for: OperationMetrics,
    get_account: OperationMetrics,
    put_account: OperationMetrics,
    get_certificate: OperationMetrics,
    insert_domain: OperationMetrics,
    get_domain: OperationMetrics,
    list_domains: OperationMetrics,
    update_domain: OperationMetrics,
    delete_domain: OperationMetrics,
    set_app_links: OperationMetrics,
    default_app_links: OperationMetrics,
    set_default_app_links: OperationMetrics,
    put_certificate: OperationMetrics,
    list_certificates: OperationMetrics,
    certificates_changed: OperationMetrics,
    try_certificate_lease: OperationMetrics,
    release_certificate_lease: OperationMetrics,
    put_challenge: OperationMetrics,
    get_challenge: OperationMetrics,
    delete_challenge: OperationMetrics,
}

/// A [`Store`] whose every call is counted and timed under `adapter` (`sqlite`, `dynamodb`).
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    ops: StoreOperations,
}

impl MeteredStore {
    /// Wraps `inner`; its calls are counted as `adapter`.
    pub fn new(inner: Arc<dyn Store>, metrics: &AdapterMetrics, adapter: &str) -> MeteredStore {
        let op = |name: &str| metrics.operation(adapter, name);
        MeteredStore {
            inner,
            ops: StoreOperations {
                insert_link: op("insert_link"),
                insert_links: op("insert_links"),
                get_link: op("get_link"),
                deactivate_link: op("deactivate_link"),
                edit_link: op("edit_link"),
                pending_propagations: op("pending_propagations"),
                lease_propagation: op("lease_propagation"),
                finish_propagation: op("finish_propagation"),
                list_links: op("list_links"),
                links_by_target_host: op("links_by_target_host"),
                links_on_domain: op("links_on_domain"),
                links_with_rules: op("links_with_rules"),
                index_older_links: op("index_older_links"),
                high_water: op("high_water"),
                list_aliases: op("list_aliases"),
                read_setting: op("read_setting"),
                record_alias: op("record_alias"),
                get_idempotency: op("get_idempotency"),
                insert_key: op("insert_key"),
                find_key_by_hash: op("find_key_by_hash"),
                revoke_key: op("revoke_key"),
                lease_block: op("lease_block"),
                get_or_init_setting: op("get_or_init_setting"),
                apply_clicks: op("apply_clicks"),
                apply_click_batches: op("apply_click_batches"),
                read_clicks: op("read_clicks"),
                append_audit: op("append_audit"),
                audit_for: op("audit_for"),
                get_account: op("get_account"),
                put_account: op("put_account"),
                get_certificate: op("get_certificate"),
                insert_domain: op("insert_domain"),
                get_domain: op("get_domain"),
                list_domains: op("list_domains"),
                update_domain: op("update_domain"),
                delete_domain: op("delete_domain"),
                set_app_links: op("set_app_links"),
                default_app_links: op("default_app_links"),
                set_default_app_links: op("set_default_app_links"),
                put_certificate: op("put_certificate"),
                list_certificates: op("list_certificates"),
                certificates_changed: op("certificates_changed"),
                try_certificate_lease: op("try_certificate_lease"),
                release_certificate_lease: op("release_certificate_lease"),
                put_challenge: op("put_challenge"),
                get_challenge: op("get_challenge"),
                delete_challenge: op("delete_challenge"),
            },
        }
    }
}

#[async_trait]
impl LinkReads for MeteredStore {
    async fn get_link(&self, code: &str) -> Result<Option<Link>, StoreError> {
        self.ops.get_link.store_call(self.inner.get_link(code)).await
    }
    async fn high_water(&self, counter: &str) -> Result<u64, StoreError> {
        self.ops.high_water.store_call(self.inner.high_water(counter)).await
    }
    async fn list_aliases(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>, StoreError> {
        self.ops
            .list_aliases
            .store_call(self.inner.list_aliases(after, limit))
            .await
    }
    async fn read_setting(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.ops.read_setting.store_call(self.inner.read_setting(name)).await
    }
}

#[async_trait]
impl LinkStore for MeteredStore {
    async fn insert_link(&self, link: &Link, idempotency: Option<&IdempotencyRecord>) -> Result<(), StoreError> {
        self.ops
            .insert_link
            .store_call(self.inner.insert_link(link, idempotency))
            .await
    }
    async fn record_alias(&self, alias: &str) -> Result<(), StoreError> {
        self.ops.record_alias.store_call(self.inner.record_alias(alias)).await
    }
    async fn insert_links(&self, links: &[Link]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.ops.insert_links.store_call(self.inner.insert_links(links)).await
    }
    // Counted as `deactivate_link`, the write it is (the pending record rides along).
    async fn deactivate_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        deletion: &Deletion,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.ops
            .deactivate_link
            .store_call(
                self.inner
                    .deactivate_link_pending(code, expected_version, deletion, lease),
            )
            .await
    }
    async fn edit_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        edit: &LinkEdit,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.ops
            .edit_link
            .store_call(self.inner.edit_link_pending(code, expected_version, edit, lease))
            .await
    }
    // Counted as `edit_link`: the same write, the other way round.
    async fn restore_link_pending(
        &self,
        code: &str,
        expected_version: u64,
        lease: &PropagationLease,
    ) -> Result<Link, StoreError> {
        self.ops
            .edit_link
            .store_call(self.inner.restore_link_pending(code, expected_version, lease))
            .await
    }
    async fn pending_propagations(&self, now: UnixMillis, limit: usize) -> Result<Vec<Propagation>, StoreError> {
        self.ops
            .pending_propagations
            .store_call(self.inner.pending_propagations(now, limit))
            .await
    }
    async fn lease_propagation(
        &self,
        code: &str,
        version: u64,
        lease: &PropagationLease,
        now: UnixMillis,
    ) -> Result<Link, StoreError> {
        self.ops
            .lease_propagation
            .store_call(self.inner.lease_propagation(code, version, lease, now))
            .await
    }
    async fn finish_propagation(&self, code: &str, version: u64) -> Result<(), StoreError> {
        self.ops
            .finish_propagation
            .store_call(self.inner.finish_propagation(code, version))
            .await
    }
    async fn list_links(
        &self,
        owner: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        self.ops
            .list_links
            .store_call(self.inner.list_links(owner, limit, cursor))
            .await
    }
    async fn links_by_target_host(
        &self,
        prefix: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LinkPage, StoreError> {
        self.ops
            .links_by_target_host
            .store_call(self.inner.links_by_target_host(prefix, limit, cursor))
            .await
    }
    async fn links_on_domain(&self, id: &str, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        self.ops
            .links_on_domain
            .store_call(self.inner.links_on_domain(id, limit, cursor))
            .await
    }
    async fn links_with_rules(&self, limit: usize, cursor: Option<&str>) -> Result<LinkPage, StoreError> {
        self.ops
            .links_with_rules
            .store_call(self.inner.links_with_rules(limit, cursor))
            .await
    }
    async fn index_older_links(&self, cursor: Option<&str>, limit: usize) -> Result<Option<String>, StoreError> {
        self.ops
            .index_older_links
            .store_call(self.inner.index_older_links(cursor, limit))
            .await
    }
    async fn get_idempotency(
        &self,
        scope: &str,
        key: &str,
        now: UnixMillis,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.ops
            .get_idempotency
            .store_call(self.inner.get_idempotency(scope, key, now))
            .await
    }
}

#[async_trait]
impl KeyStore for MeteredStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        self.ops.insert_key.store_call(self.inner.insert_key(key)).await
    }
    async fn find_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.ops
            .find_key_by_hash
            .store_call(self.inner.find_key_by_hash(key_hash))
            .await
    }
    async fn revoke_key(&self, id: &str, at: UnixMillis) -> Result<ApiKeyRecord, StoreError> {
        self.ops.revoke_key.store_call(self.inner.revoke_key(id, at)).await
    }
}

#[async_trait]
impl CounterStore for MeteredStore {
    async fn lease_block(&self, counter: &str, size: u64) -> Result<Range<u64>, StoreError> {
        self.ops
            .lease_block
            .store_call(self.inner.lease_block(counter, size))
            .await
    }
    async fn get_or_init_setting(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        self.ops
            .get_or_init_setting
            .store_call(self.inner.get_or_init_setting(name, candidate))
            .await
    }
}

#[async_trait]
impl RollupStore for MeteredStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        self.ops.apply_clicks.store_call(self.inner.apply_clicks(batch)).await
    }
    async fn apply_click_batches(&self, batches: &[ClickBatch]) -> Result<Vec<BatchOutcome>, StoreError> {
        self.ops
            .apply_click_batches
            .store_call(self.inner.apply_click_batches(batches))
            .await
    }
    async fn read_clicks(
        &self,
        code: &str,
        from: Day,
        to: Day,
    ) -> Result<Vec<(Day, rebound_store::Clicks)>, StoreError> {
        self.ops
            .read_clicks
            .store_call(self.inner.read_clicks(code, from, to))
            .await
    }
    /// The inner store's, not counted: breakdowns are written by the click writer and read
    /// by the stats, both off the request path.
    fn breakdowns(&self) -> Option<&dyn rebound_store::BreakdownStore> {
        self.inner.breakdowns()
    }
}

#[async_trait]
impl AuditLog for MeteredStore {
    async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        self.ops.append_audit.store_call(self.inner.append_audit(event)).await
    }
    async fn audit_for(&self, code: &str) -> Result<Vec<AuditEvent>, StoreError> {
        self.ops.audit_for.store_call(self.inner.audit_for(code)).await
    }
}

#[async_trait]
impl DomainStore for MeteredStore {
    async fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.ops
            .insert_domain
            .store_call(self.inner.insert_domain(domain))
            .await
    }
    async fn get_domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        self.ops.get_domain.store_call(self.inner.get_domain(name)).await
    }
    async fn list_domains(&self) -> Result<Vec<Domain>, StoreError> {
        self.ops.list_domains.store_call(self.inner.list_domains()).await
    }
    async fn update_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.ops
            .update_domain
            .store_call(self.inner.update_domain(domain))
            .await
    }
    async fn delete_domain(&self, name: &str) -> Result<(), StoreError> {
        self.ops.delete_domain.store_call(self.inner.delete_domain(name)).await
    }
    async fn set_app_links(&self, name: &str, app_links: &AppLinks) -> Result<(), StoreError> {
        self.ops
            .set_app_links
            .store_call(self.inner.set_app_links(name, app_links))
            .await
    }
    async fn default_app_links(&self) -> Result<AppLinks, StoreError> {
        self.ops
            .default_app_links
            .store_call(self.inner.default_app_links())
            .await
    }
    async fn set_default_app_links(&self, app_links: &AppLinks) -> Result<(), StoreError> {
        self.ops
            .set_default_app_links
            .store_call(self.inner.set_default_app_links(app_links))
            .await
    }
}

#[async_trait]
impl CertificateStore for MeteredStore {
    async fn get_account(&self) -> Result<Option<String>, StoreError> {
        self.ops.get_account.store_call(self.inner.get_account()).await
    }
    async fn put_account(&self, credentials: &str) -> Result<(), StoreError> {
        self.ops
            .put_account
            .store_call(self.inner.put_account(credentials))
            .await
    }
    async fn get_certificate(&self, domain: &str) -> Result<Option<StoredCertificate>, StoreError> {
        self.ops
            .get_certificate
            .store_call(self.inner.get_certificate(domain))
            .await
    }
    async fn put_certificate(&self, certificate: &StoredCertificate) -> Result<(), StoreError> {
        self.ops
            .put_certificate
            .store_call(self.inner.put_certificate(certificate))
            .await
    }
    async fn list_certificates(&self) -> Result<Vec<StoredCertificate>, StoreError> {
        self.ops
            .list_certificates
            .store_call(self.inner.list_certificates())
            .await
    }
    async fn certificates_changed(&self) -> Result<u64, StoreError> {
        self.ops
            .certificates_changed
            .store_call(self.inner.certificates_changed())
            .await
    }
    async fn try_lease(
        &self,
        domain: &str,
        owner: &str,
        until: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        self.ops
            .try_certificate_lease
            .store_call(self.inner.try_lease(domain, owner, until, now))
            .await
    }
    async fn release(&self, domain: &str, owner: &str) -> Result<(), StoreError> {
        self.ops
            .release_certificate_lease
            .store_call(self.inner.release(domain, owner))
            .await
    }
    async fn put_challenge(&self, token: &str, key_authorization: &str, until: UnixMillis) -> Result<(), StoreError> {
        self.ops
            .put_challenge
            .store_call(self.inner.put_challenge(token, key_authorization, until))
            .await
    }
    async fn get_challenge(&self, token: &str, now: UnixMillis) -> Result<Option<String>, StoreError> {
        self.ops
            .get_challenge
            .store_call(self.inner.get_challenge(token, now))
            .await
    }
    async fn delete_challenge(&self, token: &str) -> Result<(), StoreError> {
        self.ops
            .delete_challenge
            .store_call(self.inner.delete_challenge(token))
            .await
    }
}

/// A [`RecordCache`] (Redis L2) whose reads and writes are counted and timed as `redis`.
pub struct MeteredRecordCache {
    inner: Arc<dyn RecordCache>,
    get_record: OperationMetrics,
    put_record: OperationMetrics,
}

impl MeteredRecordCache {
    pub fn new(inner: Arc<dyn RecordCache>, metrics: &AdapterMetrics) -> MeteredRecordCache {
        MeteredRecordCache {
            inner,
            get_record: metrics.operation("redis", "get_record"),
            put_record: metrics.operation("redis", "put_record"),
        }
    }
}

#[async_trait]
impl RecordCache for MeteredRecordCache {
    async fn get_record(&self, code: &str) -> Result<L2Read, StoreError> {
        self.get_record.store_call(self.inner.get_record(code)).await
    }
    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
        self.put_record
            .store_call(self.inner.put_record(code, record, now))
            .await
    }
}

/// The fleet's budget of password attempts ([`AttemptBudget`], Redis), counted and timed as
/// `redis` `take_attempt`.
pub struct MeteredAttemptBudget {
    inner: Arc<dyn AttemptBudget>,
    take_attempt: OperationMetrics,
}

impl MeteredAttemptBudget {
    pub fn new(inner: Arc<dyn AttemptBudget>, metrics: &AdapterMetrics) -> MeteredAttemptBudget {
        MeteredAttemptBudget {
            inner,
            take_attempt: metrics.operation("redis", "take_attempt"),
        }
    }
}

#[async_trait]
impl AttemptBudget for MeteredAttemptBudget {
    async fn take_attempt(&self, key: &str, burst: u32, every: Duration) -> Result<Option<Duration>, StoreError> {
        self.take_attempt
            .store_call(self.inner.take_attempt(key, burst, every))
            .await
    }
}

/// A control plane's [`LinkEvents`] over Redis (write-through, tombstone, invalidation,
/// creation feed), counted and timed as `redis`.
pub struct MeteredLinkEvents {
    inner: Arc<dyn LinkEvents>,
    created: OperationMetrics,
    leased: OperationMetrics,
    deactivated: OperationMetrics,
    changed: OperationMetrics,
}

impl MeteredLinkEvents {
    pub fn new(inner: Arc<dyn LinkEvents>, metrics: &AdapterMetrics) -> MeteredLinkEvents {
        MeteredLinkEvents {
            inner,
            created: metrics.operation("redis", "announce_created"),
            leased: metrics.operation("redis", "announce_high_water"),
            deactivated: metrics.operation("redis", "write_tombstone"),
            changed: metrics.operation("redis", "write_edit"),
        }
    }
}

fn event_outcome(_: &EventError) -> &'static str {
    "unavailable"
}

#[async_trait]
impl LinkEvents for MeteredLinkEvents {
    async fn created(&self, link: &Link) -> Result<(), EventError> {
        self.created.time(event_outcome, self.inner.created(link)).await
    }
    async fn leased(&self, high_water: u64) -> Result<(), EventError> {
        self.leased.time(event_outcome, self.inner.leased(high_water)).await
    }
    async fn deactivated(&self, link: &Link) -> Result<(), EventError> {
        self.deactivated.time(event_outcome, self.inner.deactivated(link)).await
    }
    async fn changed(&self, link: &Link) -> Result<(), EventError> {
        self.changed.time(event_outcome, self.inner.changed(link)).await
    }
}

/// Each region's share of a delete, takedown or edit (docs/regions.md): how long its record
/// and its proxies' acknowledgements took, and how often they could not be confirmed.
#[derive(Clone)]
pub struct RegionPropagationMetrics {
    seconds: HistogramVec,
    failures: IntCounterVec,
}

impl RegionPropagationMetrics {
    /// Declares the families in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<RegionPropagationMetrics> {
        let m = RegionPropagationMetrics {
            seconds: HistogramVec::new(
                HistogramOpts::new(
                    "rebound_region_propagation_seconds",
                    "How long a delete's, takedown's or edit's record and its proxies' acknowledgements took in each region (this control plane's own included).",
                )
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
                &["region"],
            )?,
            failures: IntCounterVec::new(
                Opts::new(
                    "rebound_region_propagation_failures_total",
                    "Deletes, takedowns and edits that could not be confirmed in a region (answered 503; the reconciler finishes them).",
                ),
                &["region"],
            )?,
        };
        registry.register(Box::new(m.seconds.clone()))?;
        registry.register(Box::new(m.failures.clone()))?;
        Ok(m)
    }

    /// `region`'s series, made at 0 without anything to time (a control plane that tells
    /// no proxy): the dashboard and the alerts read 0 rather than no data.
    pub fn declare(&self, region: &str) {
        self.seconds.with_label_values(&[region]);
        self.failures.with_label_values(&[region]);
    }
}

/// One region's [`LinkEvents`] with its deactivations and edits timed and their failures counted under
/// the region's name; the series exist from the start, so dashboards and alerts find them.
pub struct RegionTimedLinkEvents {
    inner: Arc<dyn LinkEvents>,
    seconds: Histogram,
    failures: IntCounter,
}

impl RegionTimedLinkEvents {
    pub fn new(inner: Arc<dyn LinkEvents>, metrics: &RegionPropagationMetrics, region: &str) -> RegionTimedLinkEvents {
        RegionTimedLinkEvents {
            inner,
            seconds: metrics.seconds.with_label_values(&[region]),
            failures: metrics.failures.with_label_values(&[region]),
        }
    }
}

#[async_trait]
impl LinkEvents for RegionTimedLinkEvents {
    async fn created(&self, link: &Link) -> Result<(), EventError> {
        self.inner.created(link).await
    }
    async fn leased(&self, high_water: u64) -> Result<(), EventError> {
        self.inner.leased(high_water).await
    }
    async fn deactivated(&self, link: &Link) -> Result<(), EventError> {
        self.timed(self.inner.deactivated(link)).await
    }
    async fn changed(&self, link: &Link) -> Result<(), EventError> {
        self.timed(self.inner.changed(link)).await
    }
}

impl RegionTimedLinkEvents {
    /// `propagation` timed when it succeeds, counted when it fails.
    async fn timed(&self, propagation: impl Future<Output = Result<(), EventError>>) -> Result<(), EventError> {
        let started = Instant::now();
        let result = propagation.await;
        match &result {
            Ok(()) => self.seconds.observe(started.elapsed().as_secs_f64()),
            Err(_) => self.failures.inc(),
        }
        result
    }
}

/// A [`ClickSink`] (and [`BreakdownSink`]) whose every shipment is counted and timed as
/// one call of `adapter` (`sqs`: `send_message_batch`).
pub struct MeteredClickSink<S: ?Sized> {
    inner: Arc<S>,
    ship: OperationMetrics,
}

impl<S: ?Sized> MeteredClickSink<S> {
    pub fn new(inner: Arc<S>, metrics: &AdapterMetrics, adapter: &str, operation: &str) -> MeteredClickSink<S> {
        MeteredClickSink {
            inner,
            ship: metrics.operation(adapter, operation),
        }
    }
}

#[async_trait]
impl<S: ClickSink + ?Sized> ClickSink for MeteredClickSink<S> {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.ship.store_call(self.inner.ship(batches)).await
    }
}

#[async_trait]
impl<S: BreakdownSink + ?Sized> BreakdownSink for MeteredClickSink<S> {
    async fn ship_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError> {
        self.ship.store_call(self.inner.ship_breakdowns(batches)).await
    }
}

/// A [`ClickStreamSink`] whose every put is counted and timed as one call of `adapter`
/// (`kinesis`: `put_records`; a put of more than one call's records is one call here).
pub struct MeteredClickStream {
    inner: Arc<dyn ClickStreamSink>,
    put: OperationMetrics,
}

impl MeteredClickStream {
    pub fn new(
        inner: Arc<dyn ClickStreamSink>,
        metrics: &AdapterMetrics,
        adapter: &str,
        operation: &str,
    ) -> MeteredClickStream {
        MeteredClickStream {
            inner,
            put: metrics.operation(adapter, operation),
        }
    }
}

#[async_trait]
impl ClickStreamSink for MeteredClickStream {
    async fn put(&self, events: &[ClickEvent]) -> Result<StreamPut, StoreError> {
        self.put.store_call(self.inner.put(events)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_store::MemoryStore;

    fn calls(metrics: &AdapterMetrics, adapter: &str, operation: &str, outcome: &str) -> u64 {
        metrics.calls.with_label_values(&[adapter, operation, outcome]).get()
    }

    #[tokio::test]
    async fn calls_are_counted_by_operation_and_outcome_and_timed() {
        let metrics = AdapterMetrics::unregistered().unwrap();
        let store = MeteredStore::new(Arc::new(MemoryStore::new()), &metrics, "memory");
        assert_eq!(store.get_link("nope").await.unwrap(), None);
        assert!(matches!(
            store.revoke_key("missing", 1).await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(calls(&metrics, "memory", "get_link", "ok"), 1);
        assert_eq!(calls(&metrics, "memory", "revoke_key", "not_found"), 1);
        assert_eq!(calls(&metrics, "memory", "revoke_key", "ok"), 0);
        let timed = metrics.latency.with_label_values(&["memory", "get_link"]);
        assert_eq!(timed.get_sample_count(), 1);
    }

    #[test]
    fn a_declared_region_reads_zero_before_any_delete() {
        let registry = Registry::new();
        let metrics = RegionPropagationMetrics::register(&registry).unwrap();
        metrics.declare("solo");
        let families = registry.gather();
        for name in [
            "rebound_region_propagation_seconds",
            "rebound_region_propagation_failures_total",
        ] {
            let family = families.iter().find(|f| f.name() == name);
            let family = family.unwrap_or_else(|| panic!("{name} is exported"));
            let metric = &family.get_metric()[0];
            assert_eq!(metric.get_label()[0].value(), "solo", "{name}");
            let value = match name {
                "rebound_region_propagation_seconds" => metric.get_histogram().get_sample_count() as f64,
                _ => metric.get_counter().get_value(),
            };
            assert_eq!(value, 0.0, "{name}");
        }
    }

    #[tokio::test]
    async fn propagation_calls_are_counted() {
        let metrics = AdapterMetrics::unregistered().unwrap();
        let store = MeteredStore::new(Arc::new(MemoryStore::new()), &metrics, "memory");
        assert_eq!(store.pending_propagations(0, 10).await.unwrap(), vec![]);
        let lease = PropagationLease {
            owner: "cp".into(),
            until: 1,
        };
        assert!(store.lease_propagation("nope", 2, &lease, 0).await.is_err());
        assert!(store.finish_propagation("nope", 2).await.is_err());
        assert_eq!(calls(&metrics, "memory", "pending_propagations", "ok"), 1);
        assert_eq!(calls(&metrics, "memory", "lease_propagation", "condition_failed"), 1);
        assert_eq!(calls(&metrics, "memory", "finish_propagation", "condition_failed"), 1);
    }

    #[tokio::test]
    async fn a_call_dropped_by_its_budget_counts_as_abandoned() {
        let metrics = AdapterMetrics::unregistered().unwrap();
        let op = metrics.operation("redis", "get_record");
        let slow = op.store_call(async {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            Ok::<_, StoreError>(())
        });
        assert!(tokio::time::timeout(std::time::Duration::from_millis(10), slow)
            .await
            .is_err());
        assert_eq!(calls(&metrics, "redis", "get_record", "abandoned"), 1);
        assert_eq!(calls(&metrics, "redis", "get_record", "ok"), 0);
    }
}
