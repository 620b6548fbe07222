//! What the black-box tests read from their own environment (the services and tools that
//! `scripts/test` starts or installs and names in `REBOUND_TEST_*`), the environments they
//! hand to the processes they start, and names that no other test uses at the same time.

use std::sync::atomic::{AtomicU64, Ordering};

/// The value of `name`, which `scripts/test` sets; a test that needs it fails without it
/// (it is `#[ignore]`d with the variable's name, so a plain `cargo test` does not run it).
pub fn env_or_panic(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run scripts/test, which sets it"))
}

/// The Redis that `scripts/test` started.
pub fn shared_redis_url() -> String {
    env_or_panic("REBOUND_TEST_REDIS_URL")
}

/// The moto server (DynamoDB and SQS) that `scripts/test` started.
pub fn shared_aws_url() -> String {
    env_or_panic("REBOUND_TEST_DYNAMODB_URL")
}

/// The dynalite (DynamoDB with AWS's strict expression parsing) that `scripts/test` started.
pub fn shared_dynalite_url() -> String {
    env_or_panic("REBOUND_TEST_DYNALITE_URL")
}

/// An environment of owned pairs as the `(&str, &str)` pairs `start` takes.
pub fn as_pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Milliseconds since the Unix epoch, on the wall clock.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A name no other test uses, in this run or an earlier one on the same shared servers:
/// the time, this process and a counter (for table prefixes, queues, stacks).
pub fn unique_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed) * 1000 + u64::from(std::process::id() % 1000);
    format!("{:x}{n}", now_millis())
}

/// True when `REBOUND_TEST_REDIS_URL` lists the seed nodes of a Redis Cluster
/// (`REBOUND_TEST_REDIS_CLUSTER=true`).
pub fn shared_redis_is_a_cluster() -> bool {
    std::env::var("REBOUND_TEST_REDIS_CLUSTER").is_ok_and(|v| v == "true")
}
