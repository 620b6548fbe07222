//! The L2 of cache records: Redis in distributed mode (`rebound-redis`), shared by every
//! data plane and written by the control plane; an in-memory fake for tests.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::{CacheRecord, UnixMillis};

/// What L2 holds for a code.
#[derive(Debug, Clone, PartialEq)]
pub enum L2Read {
    /// Nothing.
    Miss,
    /// A record to use: a tombstone (never wrong: a code is never reissued), or a record
    /// written since this Redis last changed identity.
    Found(CacheRecord),
    /// A live record written before this Redis last changed identity (a failover to a
    /// replica, a restart from a snapshot): it may be older than a tombstone the Redis
    /// lost, so only the store can confirm it.
    Unconfirmed,
}

/// An L2 of cache records.
#[async_trait]
pub trait RecordCache: Send + Sync {
    /// What L2 holds for `code`.
    async fn get_record(&self, code: &str) -> Result<L2Read, StoreError>;
    /// Writes `record` unless a newer version is cached; true when written.
    async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError>;
}

#[cfg(any(test, feature = "test-util"))]
pub use fake::MemoryRecordCache;

#[cfg(any(test, feature = "test-util"))]
mod fake {
    use super::*;
    use std::sync::atomic::Ordering;

    /// An in-memory [`RecordCache`] with the Lua script's version rule, for unit tests.
    #[derive(Default)]
    pub struct MemoryRecordCache {
        /// Each record, and whether it was written since the last identity change.
        records: std::sync::Mutex<std::collections::HashMap<String, (CacheRecord, bool)>>,
        failing: std::sync::atomic::AtomicBool,
        reads: std::sync::atomic::AtomicU64,
    }

    impl MemoryRecordCache {
        /// While true, every call fails.
        pub fn set_failing(&self, failing: bool) {
            self.failing.store(failing, Ordering::SeqCst);
        }
        /// Reads served so far.
        pub fn reads(&self) -> u64 {
            self.reads.load(Ordering::SeqCst)
        }
        /// The record held for `code`.
        pub fn peek(&self, code: &str) -> Option<CacheRecord> {
            self.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(code)
                .map(|(record, _)| record.clone())
        }
        /// What a failover or a restore does: every record held so far was written before
        /// the cache's identity changed.
        pub fn change_identity(&self) {
            for (_, confirmed) in self.records.lock().unwrap_or_else(|e| e.into_inner()).values_mut() {
                *confirmed = false;
            }
        }
        fn check(&self) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the memory cache", "switched off"));
            }
            Ok(())
        }
    }

    #[async_trait]
    impl RecordCache for MemoryRecordCache {
        async fn get_record(&self, code: &str) -> Result<L2Read, StoreError> {
            self.check()?;
            self.reads.fetch_add(1, Ordering::SeqCst);
            let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            Ok(match records.get(code) {
                None => L2Read::Miss,
                Some((record, confirmed)) if *confirmed || record.is_tombstone() => L2Read::Found(record.clone()),
                Some(_) => L2Read::Unconfirmed,
            })
        }

        async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
            self.check()?;
            if record.ttl_millis(now) <= 0 {
                return Ok(false);
            }
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            if records
                .get(code)
                .is_some_and(|(existing, _)| !record.may_replace(existing))
            {
                return Ok(false);
            }
            records.insert(code.to_owned(), (record.clone(), true));
            Ok(true)
        }
    }
}
