//! A distributed deployment for black-box tests: the names and endpoints one test's control
//! planes and proxies share (tables, queue, Redis prefix), and the calls the tests make to
//! them.

use crate::services::distributed_env;
use crate::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Names and endpoints one test's processes share.
#[derive(Clone)]
pub struct Deployment {
    pub env: Vec<(String, String)>,
    pub aws_url: String,
    pub prefix: String,
    pub queue: String,
}

/// The port of a Redis URL (`redis://[user:password@]host:port/`).
pub fn redis_port(url: &str) -> u16 {
    url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap()
}

/// `url` with its host and port replaced by a relay's on 127.0.0.1 (the scheme and the
/// credentials kept: TLS and AUTH go through the relay too).
pub fn through_relay(url: &str, relay_port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let auth = rest.rsplit_once('@').map_or(String::new(), |(a, _)| format!("{a}@"));
    format!("{scheme}://{auth}127.0.0.1:{relay_port}/")
}

impl Deployment {
    pub fn new(aws_url: &str, redis_url: Option<&str>) -> Deployment {
        Deployment::build(aws_url, None, redis_url)
    }

    /// As [`Deployment::new`], with DynamoDB at `dynamodb_url` (dynalite) and SQS at `aws_url`.
    pub fn with_dynamodb(aws_url: &str, dynamodb_url: &str, redis_url: Option<&str>) -> Deployment {
        Deployment::build(aws_url, Some(dynamodb_url), redis_url)
    }

    fn build(aws_url: &str, dynamodb_url: Option<&str>, redis_url: Option<&str>) -> Deployment {
        let id = unique_id();
        let prefix = format!("d{id}_");
        let queue = format!("d{id}-clicks");
        let mut env = distributed_env(aws_url, redis_url, &prefix, &queue);
        for (k, v) in [
            ("REBOUND_SQS_VISIBILITY_SECS", "1"),
            ("REBOUND_INVALIDATION_TIMEOUT_MS", "600"),
            ("REBOUND_L1_TTL_MS", "400"),
            // No breakdowns or summary but where a test asks for them: their writes (a read
            // and a transaction per batch) on the one moto every test shares made its
            // calls time out under the suite's load.
            ("REBOUND_BREAKDOWNS", "none"),
        ] {
            env.push((k.to_owned(), v.to_owned()));
        }
        if let Some(url) = dynamodb_url {
            env.push(("AWS_ENDPOINT_URL_DYNAMODB".to_owned(), url.to_owned()));
        }
        let d = Deployment {
            env,
            aws_url: aws_url.to_owned(),
            prefix,
            queue,
        };
        // dynalite has no TTL API, which `rebound provision` sets: its tables are made
        // without it (`Deployment::create_tables_without_ttl`).
        if dynamodb_url.is_none() {
            d.provision();
        }
        d
    }

    /// The tables, without TTL, on the DynamoDB at `url` (dynalite).
    pub async fn create_tables_without_ttl(&self, url: &str) {
        let store = rebound_dynamodb::DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws_conf(url).await),
            self.prefix.clone(),
        );
        store.create_tables(false).await.unwrap();
    }

    /// The environment with `extra` set over it.
    pub fn with(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        for (k, v) in extra {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v.to_string()));
        }
        env
    }

    pub fn provision(&self) {
        provision(&self.env);
    }

    pub fn control_plane(&self, dir: &Path, extra: &[(&str, &str)]) -> Running {
        start_control_plane(dir, &self.with(extra))
    }

    /// A control plane started as an orchestrator restarts one: one that exits at start (its
    /// store did not answer in time, on a machine the faults keep busy) is started again, up
    /// to five times.
    pub fn control_plane_restarted(&self, dir: &Path) -> Running {
        let mut last = String::new();
        for _ in 0..5 {
            match try_start(&["control-plane"], dir, &as_pairs(&self.with(&[])), &["API", "metrics"]) {
                Ok(running) => return running,
                Err(e) => last = e,
            }
        }
        panic!("a control plane did not start in five attempts: {last}")
    }

    pub async fn proxy(&self, dir: &Path, extra: &[(&str, &str)]) -> Running {
        start_proxy(dir, &self.with(extra)).await
    }

    pub async fn sqs(&self) -> rebound_sqs::SqsClickQueue {
        let client = aws_sdk_sqs::Client::new(&aws_conf(&self.aws_url).await);
        rebound_sqs::SqsClickQueue::open(client, &self.queue).await.unwrap()
    }

    pub async fn dlq(&self) -> rebound_sqs::SqsClickQueue {
        let client = aws_sdk_sqs::Client::new(&aws_conf(&self.aws_url).await);
        rebound_sqs::SqsClickQueue::open(client, &format!("{}-dlq", self.queue))
            .await
            .unwrap()
    }

    pub async fn store(&self) -> rebound_dynamodb::DynamoStore {
        let client = aws_sdk_dynamodb::Client::new(&aws_conf(&self.aws_url).await);
        rebound_dynamodb::DynamoStore::new(client, self.prefix.clone())
    }
}

/// Starts `rebound control-plane` with `env`, its API and metrics ports on port 0.
pub fn start_control_plane(dir: &Path, env: &[(String, String)]) -> Running {
    start(&["control-plane"], dir, &as_pairs(env), &["API", "metrics"])
}

/// Starts `rebound proxy` with `env`, its redirect and metrics ports on port 0, and waits
/// until it is ready.
pub async fn start_proxy(dir: &Path, env: &[(String, String)]) -> Running {
    let p = start(&["proxy"], dir, &as_pairs(env), &["redirect", "metrics"]);
    wait_ready(&p).await;
    p
}

/// Runs `rebound provision` with `env`; returns its stdout.
pub fn provision(env: &[(String, String)]) -> String {
    let out = std::process::Command::new(bin())
        .arg("provision")
        .env_clear()
        .envs(env.iter().cloned())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "provision failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub async fn aws_conf(url: &str) -> aws_config::SdkConfig {
    rebound_store::testing::local_aws_config(url).await
}

/// Creates a link through `cp`'s API; returns its code.
pub async fn create(cp: &Running, body: Value) -> String {
    create_link(cp, body).await["code"].as_str().unwrap().to_owned()
}

/// Deletes `code`, or takes it down as an operator with a reason.
pub async fn take_down(cp: &Running, code: &str, takedown: bool) -> (StatusCode, Value) {
    match takedown {
        false => api(cp, reqwest::Method::DELETE, &format!("/api/v1/links/{code}"), None).await,
        true => {
            let path = format!("/api/v1/links/{code}/takedown");
            api(cp, reqwest::Method::POST, &path, Some(json!({"reason": "spam"}))).await
        }
    }
}

/// Edits `code` at `version` (`If-Match`) through `cp`'s API, as the operator.
pub async fn edit_link(cp: &Running, code: &str, version: u64, body: Value) -> (StatusCode, Value) {
    let res = http()
        .patch(format!("{}/api/v1/links/{code}", cp.api()))
        .bearer_auth(OPERATOR_KEY)
        .header("if-match", format!("\"{version}\""))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Where `proxy` redirects `code` (its status and `Location`).
pub async fn location(proxy: &Running, code: &str) -> (u16, Option<String>) {
    let res = get(proxy, code).await;
    let at = res
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .map(str::to_owned);
    (res.status().as_u16(), at)
}

pub async fn api(cp: &Running, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = http()
        .request(method, format!("{}{}", cp.api(), path))
        .bearer_auth(OPERATOR_KEY);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

pub async fn get(proxy: &Running, code: &str) -> reqwest::Response {
    http()
        .get(format!("{}/{}", proxy.addr("redirect"), code))
        .send()
        .await
        .unwrap()
}

pub async fn status(proxy: &Running, code: &str) -> u16 {
    get(proxy, code).await.status().as_u16()
}

/// Polls until `proxy` answers `want` for `code`, for at most `limit`; returns whether it did.
pub async fn eventually(proxy: &Running, code: &str, want: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if status(proxy, code).await == want {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn clicks(cp: &Running, code: &str) -> u64 {
    let (s, v) = api(cp, reqwest::Method::GET, &format!("/api/v1/links/{code}/stats"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["total"].as_u64().unwrap()
}
