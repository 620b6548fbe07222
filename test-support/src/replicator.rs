//! A TEST FIXTURE, never part of the product: two DynamoDB-API servers (moto) standing for
//! two regions' replicas of a global table, and a replicator between them standing for the
//! global table's replication: asynchronous, after a configurable lag, last writer wins.
//!
//! Each region's processes talk to its front (an HTTP relay to its own server). Every write
//! that succeeded there (PutItem, UpdateItem, DeleteItem, TransactWriteItems,
//! BatchWriteItem) has the items it touched copied to the other region `lag` later: each
//! item is read again at its source (strongly consistent) and put in the other region as
//! it is then, or deleted there if it is gone. Two regions writing one item both copy it,
//! and the copy that lands last wins in both, as a global table's replication does. Like a
//! global table, a conditional write is checked against its own region's replica only (and
//! atomically: the front lets one write at a time through to its server).
//! While paused (a partition between the regions) copies wait, and land once resumed.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Two regions' servers, their fronts and the replication between them.
pub struct Replicated {
    /// Each region's front (`http://127.0.0.1:<port>`), for its processes' DynamoDB endpoint.
    pub fronts: [String; 2],
    paused: Arc<AtomicBool>,
    in_flight: Arc<AtomicU64>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Replicated {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// One direction: the front of `source`, whose writes are copied to `dest`.
#[derive(Clone)]
struct Side {
    source: String,
    dest: String,
    lag: Duration,
    http: reqwest::Client,
    key_schemas: Arc<Mutex<HashMap<String, Vec<String>>>>,
    paused: Arc<AtomicBool>,
    in_flight: Arc<AtomicU64>,
    /// One write at a time to the source: a DynamoDB conditional write is atomic, moto's
    /// threaded server checks and writes in two steps that two requests can interleave.
    writes: Arc<tokio::sync::Mutex<()>>,
}

impl Replicated {
    /// Fronts for the servers at `servers` (each region's own), replicating each way `lag`
    /// after every write.
    pub fn start(servers: [&str; 2], lag: Duration) -> Replicated {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let paused = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicU64::new(0));
        let http = crate::http_builder().pool_max_idle_per_host(64).build().unwrap();
        let mut fronts = Vec::new();
        for (source, dest) in [(servers[0], servers[1]), (servers[1], servers[0])] {
            let side = Side {
                source: source.to_owned(),
                dest: dest.to_owned(),
                lag,
                http: http.clone(),
                key_schemas: Arc::default(),
                paused: paused.clone(),
                in_flight: in_flight.clone(),
                writes: Arc::default(),
            };
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            fronts.push(format!("http://{}", listener.local_addr().unwrap()));
            runtime.spawn(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
                    let side = side.clone();
                    async move { side.relay(request).await }
                });
                axum::serve(listener, app).await.unwrap();
            });
        }
        Replicated {
            fronts: [fronts[0].clone(), fronts[1].clone()],
            paused,
            in_flight,
            runtime: Some(runtime),
        }
    }

    /// A partition between the regions: copies wait.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Waits until every copy made so far has landed (at most `limit`).
    pub async fn settle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "replication did not settle in {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Side {
    /// [`Side::forward`] in a task of its own: a client that gives up on its answer (the
    /// SDK's attempt timeout) drops this future, not the write, which may have landed and
    /// must then be copied like any other (a global table replicates every write that
    /// landed, whoever waited for its answer).
    async fn relay(self, request: axum::extract::Request) -> axum::response::Response {
        match tokio::spawn(self.forward(request)).await {
            Ok(response) => response,
            Err(e) => axum::response::Response::builder()
                .status(502)
                .body(axum::body::Body::from(e.to_string()))
                .unwrap(),
        }
    }

    async fn forward(self, request: axum::extract::Request) -> axum::response::Response {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
        let target = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut forwarded = self
            .http
            .request(parts.method, format!("{}{}", self.source, parts.uri))
            .body(body.clone());
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                forwarded = forwarded.header(name, value);
            }
        }
        let is_write = matches!(
            target.rsplit('.').next(),
            Some("PutItem" | "UpdateItem" | "DeleteItem" | "TransactWriteItems" | "BatchWriteItem")
        );
        let one_write = match is_write {
            true => Some(self.writes.clone().lock_owned().await),
            false => None,
        };
        let sent = forwarded.send().await;
        drop(one_write);
        let answer = match sent {
            Ok(a) => a,
            Err(e) => {
                return axum::response::Response::builder()
                    .status(502)
                    .body(axum::body::Body::from(e.to_string()))
                    .unwrap()
            }
        };
        let status = answer.status();
        let mut response = axum::response::Response::builder().status(status.as_u16());
        for (name, value) in answer.headers() {
            if name != "content-length" && name != "transfer-encoding" {
                response = response.header(name.as_str(), value.as_bytes());
            }
        }
        let answer_body = answer.bytes().await.unwrap_or_default();
        if status.is_success() {
            if let Ok(request) = serde_json::from_slice::<Value>(&body) {
                let written = self.written_items(&target, &request).await;
                if !written.is_empty() {
                    self.in_flight.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(self.clone().copy_later(written));
                }
            }
        }
        response.body(axum::body::Body::from(answer_body)).unwrap()
    }

    /// The (table, key) of every item a successful write touched.
    async fn written_items(&self, target: &str, request: &Value) -> Vec<(String, Value)> {
        let operation = target.rsplit('.').next().unwrap_or_default();
        let mut items = Vec::new();
        let mut add = |table: &Value, key: Option<&Value>, item: Option<&Value>| {
            if let Some(table) = table.as_str() {
                items.push((table.to_owned(), key.cloned(), item.cloned()));
            }
        };
        match operation {
            "PutItem" => add(&request["TableName"], None, request.get("Item")),
            "UpdateItem" | "DeleteItem" => add(&request["TableName"], request.get("Key"), None),
            "TransactWriteItems" => {
                for t in request["TransactItems"].as_array().into_iter().flatten() {
                    for (kind, op) in t.as_object().into_iter().flatten() {
                        match kind.as_str() {
                            "Put" => add(&op["TableName"], None, op.get("Item")),
                            "Update" | "Delete" => add(&op["TableName"], op.get("Key"), None),
                            _ => {}
                        }
                    }
                }
            }
            "BatchWriteItem" => {
                for (table, writes) in request["RequestItems"].as_object().into_iter().flatten() {
                    for w in writes.as_array().into_iter().flatten() {
                        let table = Value::String(table.clone());
                        add(&table, w["DeleteRequest"].get("Key"), w["PutRequest"].get("Item"));
                    }
                }
            }
            _ => {}
        }
        let mut keyed = Vec::new();
        for (table, key, item) in items {
            let key = match (key, item) {
                (Some(key), _) => key,
                (None, Some(item)) => {
                    let names = self.key_schema(&table).await;
                    Value::Object(names.iter().map(|n| (n.clone(), item[n].clone())).collect())
                }
                (None, None) => continue,
            };
            keyed.push((table, key));
        }
        keyed
    }

    async fn key_schema(&self, table: &str) -> Vec<String> {
        if let Some(names) = self.key_schemas.lock().unwrap().get(table) {
            return names.clone();
        }
        let described = self
            .call(&self.source, "DescribeTable", json!({ "TableName": table }))
            .await;
        let names: Vec<String> = described["Table"]["KeySchema"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k["AttributeName"].as_str().map(str::to_owned))
            .collect();
        self.key_schemas.lock().unwrap().insert(table.to_owned(), names.clone());
        names
    }

    /// Copies the items as they are at the source, `lag` from now (later while paused).
    async fn copy_later(self, items: Vec<(String, Value)>) {
        tokio::time::sleep(self.lag).await;
        while self.paused.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (table, key) in items {
            let now = self
                .call(
                    &self.source,
                    "GetItem",
                    json!({ "TableName": table, "Key": key, "ConsistentRead": true }),
                )
                .await;
            match now.get("Item") {
                Some(item) => {
                    self.call(&self.dest, "PutItem", json!({ "TableName": table, "Item": item }))
                        .await
                }
                None => {
                    self.call(&self.dest, "DeleteItem", json!({ "TableName": table, "Key": key }))
                        .await
                }
            };
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    async fn call(&self, server: &str, operation: &str, body: Value) -> Value {
        let answer = self
            .http
            .post(server)
            .header("x-amz-target", format!("DynamoDB_20120810.{operation}"))
            .header("content-type", "application/x-amz-json-1.0")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00",
            )
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("replicator: {operation} on {server}: {e}"));
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "replicator: {operation} on {server}: {status} {text}"
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}
