//! The L2 of cache records: Redis in distributed mode (`rebound-redis`), shared by every
//! data plane and written by the control plane; an in-memory fake for tests.

use crate::StoreError;
use async_trait::async_trait;
use rebound_core::{CacheRecord, UnixMillis};

/// An L2 of cache records.
#[async_trait]
pub trait RecordCache: Send + Sync {
    /// The record of `code`, if cached.
    async fn get_record(&self, code: &str) -> Result<Option<CacheRecord>, StoreError>;
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
        records: std::sync::Mutex<std::collections::HashMap<String, CacheRecord>>,
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
                .cloned()
        }
        fn check(&self) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("memory cache switched off".into()));
            }
            Ok(())
        }
    }

    #[async_trait]
    impl RecordCache for MemoryRecordCache {
        async fn get_record(&self, code: &str) -> Result<Option<CacheRecord>, StoreError> {
            self.check()?;
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.peek(code))
        }

        async fn put_record(&self, code: &str, record: &CacheRecord, now: UnixMillis) -> Result<bool, StoreError> {
            self.check()?;
            if record.ttl_millis(now) <= 0 {
                return Ok(false);
            }
            let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            if records.get(code).is_some_and(|existing| !record.may_replace(existing)) {
                return Ok(false);
            }
            records.insert(code.to_owned(), record.clone());
            Ok(true)
        }
    }
}
