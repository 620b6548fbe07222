//! Stores made by the version before domains (commit 8960b1d) open in place (issue 32): a
//! SQLite data directory and the items of a DynamoDB store, both written by that version's
//! binary through its API (`scripts/store-fixture` made them; `tests/fixtures/store-8960b1d/
//! manifest.json` lists what is in them and how each link answered then). Today's binary
//! serves every link as it was, on the default domain, keeps their clicks and the creator
//! key, and adds domains, domain links and scoped keys on top.

use rebound_test_support as common;

use aws_sdk_dynamodb::types::AttributeValue;
use common::fleet::{aws_conf, Deployment};
use common::rebound::Rebound;
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-8960b1d")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(fixture().join("manifest.json")).unwrap()).unwrap()
}

/// One request to the redirect port at `base` (`http://host:port`), not followed.
async fn answer(base: &str, code: &str) -> (u16, Option<String>) {
    let res = http().get(format!("{base}/{code}")).send().await.unwrap();
    let location = res.headers().get("location").map(|l| l.to_str().unwrap().to_owned());
    (res.status().as_u16(), location)
}

/// Every link of `mode` in the manifest answers on `redirect` as it did before, and reads
/// back through the API on the default domain with its clicks; the creator key still works.
async fn links_answer_as_before(mode: &Value, redirect: &str, api: &Running, default_domain: &str) {
    for link in mode["links"].as_array().unwrap() {
        let code = link["code"].as_str().unwrap();
        let want = (
            link["status"].as_u64().unwrap() as u16,
            link["location"].as_str().map(str::to_owned),
        );
        assert_eq!(answer(redirect, code).await, want, "{code}");
        let (status, view) = fleet::api(api, Method::GET, &format!("/api/v1/links/{code}"), None).await;
        assert_eq!(status, StatusCode::OK, "{code}: {view}");
        assert_eq!(view["domain"], default_domain, "{code}");
        for field in [
            "code",
            "long_url",
            "created_at",
            "created_by",
            "is_active",
            "version",
            "deleted_at",
        ] {
            assert_eq!(view[field], link["view"][field], "{code}: {field}");
        }
        if link["stats_status"] == 200 {
            let total = fleet::clicks(api, code).await;
            assert!(
                total >= link["stats_total"].as_u64().unwrap(),
                "{code}: the clicks counted before are kept ({total})"
            );
        }
    }
    let key = mode["creator_key"]["key"].as_str().unwrap();
    let me: Value = http()
        .get(format!("{}/api/v1/me", api.api()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["id"], mode["creator_key"]["id"]);
    assert_eq!(
        (me["role"].as_str(), &me["domains"]),
        (Some("creator"), &Value::Null),
        "unscoped, as it was made"
    );
}

/// What the new version adds works on the old store: a domain, the alias of an old link on
/// it (another domain, so free), a key scoped to it.
async fn domains_work_on_top(api: &Running, redirect_port: &str) {
    let (status, d) = fleet::api(
        api,
        Method::POST,
        "/api/v1/domains",
        Some(json!({"name": "brand.migrated.test"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    let created = create_link(
        api,
        json!({"long_url": "https://example.com/on-the-new-domain", "custom_alias": "old-alias", "domain": "brand.migrated.test"}),
    )
    .await;
    assert_eq!(
        (created["code"].as_str(), created["domain"].as_str()),
        (Some("old-alias"), Some("brand.migrated.test"))
    );
    let (status, key) = fleet::api(
        api,
        Method::POST,
        "/api/v1/keys",
        Some(json!({"name": "brand", "role": "creator", "domains": ["brand.migrated.test"]})),
    )
    .await;
    assert_eq!(
        (status, &key["domains"]),
        (StatusCode::CREATED, &json!(["brand.migrated.test"]))
    );
    // Routed by every proxy within its poll.
    let resolve = format!("brand.migrated.test:{redirect_port}:127.0.0.1");
    let url = format!("http://brand.migrated.test:{redirect_port}/old-alias");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = curl("%{http_code} %{redirect_url}", &["--resolve", &resolve, &url]);
        if got == "302 https://example.com/on-the-new-domain" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new domain's link answered {got:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_made_before_domains_opens_in_place() {
    let manifest = manifest();
    let dir = temp_dir();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for file in ["rebound.db", "rebound-clicks.db"] {
        std::fs::copy(fixture().join("sqlite").join(file), data.join(file)).unwrap();
    }
    // Twice: the migration is done once and a second start finds nothing to do.
    for _ in 0..2 {
        let rb = Rebound::start(&data, &[]);
        let redirect = rb.run.addr("redirect");
        links_answer_as_before(&manifest["sqlite"], &redirect, &rb.run, "127.0.0.1").await;
        drop(rb);
    }
    let rb = Rebound::start(&data, &[]);
    let port = rb.redirect().rsplit_once(':').unwrap().1.to_owned();
    domains_work_on_top(&rb.run, &port).await;
    // The old link of that alias is untouched on the default domain.
    assert_eq!(
        answer(&rb.run.addr("redirect"), "old-alias").await,
        (302, Some("https://example.com/fixture/sqlite/old-alias".to_owned()))
    );
    // A store from before breakdowns keeps them from now on: a person's click on an old
    // link is counted by its referrer.
    let res = http()
        .get(format!("{}/old-alias", rb.run.addr("redirect")))
        .header(
            "User-Agent",
            "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
        )
        .header("Referer", "https://news.example/today")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (s, stats) = rb
            .api(Method::GET, "/api/v1/links/old-alias/stats?by=referrer", None)
            .await;
        assert_eq!(s, StatusCode::OK, "{stats}");
        // (The answers read above were people's clicks too, without a referrer: `direct`.)
        let values = stats["breakdown"]["values"].as_array().cloned().unwrap_or_default();
        if values.contains(&json!({"value": "news.example", "clicks": 1})) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stats}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A DynamoDB-JSON value (`{"S": "..."}`, `{"N": "..."}`, ...) as the SDK's.
fn attribute(v: &Value) -> AttributeValue {
    let (kind, inner) = v.as_object().and_then(|o| o.iter().next()).expect("a typed value");
    match kind.as_str() {
        "S" => AttributeValue::S(inner.as_str().unwrap().to_owned()),
        "N" => AttributeValue::N(inner.as_str().unwrap().to_owned()),
        "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(
            inner
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect(),
        ),
        "NS" => AttributeValue::Ns(
            inner
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect(),
        ),
        "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(attribute).collect()),
        "M" => AttributeValue::M(item(inner)),
        other => panic!("an attribute of type {other} in the fixture"),
    }
}

fn item(v: &Value) -> HashMap<String, AttributeValue> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), attribute(v)))
        .collect()
}

/// The key schema and indexes of a table, for comparing what the old version created with
/// what today's `provision` creates.
fn shape(keys: &[(String, String)], indexes: &[(String, Vec<(String, String)>)]) -> String {
    format!("{keys:?} {indexes:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL: scripts/test runs it"]
async fn a_dynamodb_store_made_before_domains_opens_in_place() {
    let manifest = manifest();
    // Today's `provision` makes the tables (unchanged since but for the links' two new
    // indexes: domains live in `keys`), which are checked against the old version's, and the
    // old version's items are put back raw.
    let d = Deployment::new(&shared_aws_url(), Some(&shared_redis_url()));
    let client = aws_sdk_dynamodb::Client::new(&aws_conf(&shared_aws_url()).await);
    let tables: Value =
        serde_json::from_slice(&std::fs::read(fixture().join("dynamodb-tables.json")).unwrap()).unwrap();
    let items: Value = serde_json::from_slice(&std::fs::read(fixture().join("dynamodb.json")).unwrap()).unwrap();
    let pairs = |v: &Value| -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["AttributeName"].as_str().unwrap().into(),
                    k["KeyType"].as_str().unwrap().into(),
                )
            })
            .collect();
        p.sort();
        p
    };
    for (suffix, old) in tables.as_object().unwrap() {
        let table = format!("{}{suffix}", d.prefix);
        let now = client.describe_table().table_name(&table).send().await.unwrap();
        let now = now.table().unwrap();
        let now_keys: Vec<(String, String)> = {
            let mut k: Vec<_> = now
                .key_schema()
                .iter()
                .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
                .collect();
            k.sort();
            k
        };
        let mut now_indexes: Vec<(String, Vec<(String, String)>)> = now
            .global_secondary_indexes()
            .iter()
            .map(|i| {
                let mut k: Vec<_> = i
                    .key_schema()
                    .iter()
                    .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
                    .collect();
                k.sort();
                (i.index_name().unwrap_or_default().to_owned(), k)
            })
            .collect();
        // The indexes added since the old version (the threat-list rescan's and a domain's
        // removal's, issue 42; the links with rules, issue 46): `provision` adds them to an old table, and the first control
        // plane that needs them indexes the old items (checked below).
        now_indexes.retain(|(name, _)| !(suffix == "links" && ADDED_SINCE.contains(&name.as_str())));
        now_indexes.sort();
        let mut old_indexes: Vec<(String, Vec<(String, String)>)> = old["GlobalSecondaryIndexes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| (i["IndexName"].as_str().unwrap().to_owned(), pairs(&i["KeySchema"])))
                    .collect()
            })
            .unwrap_or_default();
        old_indexes.sort();
        assert_eq!(
            shape(&now_keys, &now_indexes),
            shape(&pairs(&old["KeySchema"]), &old_indexes),
            "table {suffix}"
        );
        for raw in items[suffix].as_array().unwrap() {
            client
                .put_item()
                .table_name(&table)
                .set_item(Some(item(raw)))
                .send()
                .await
                .unwrap();
        }
    }
    let dir = temp_dir();
    let code_key = manifest["code_permutation_key"]["value"].as_str().unwrap().to_owned();
    let cp = d.control_plane(dir.path(), &[("REBOUND_CODE_KEY", &code_key)]);
    let proxy = d.proxy(dir.path(), &[]).await;
    links_answer_as_before(&manifest["dynamodb"], &proxy.addr("redirect"), &cp, "127.0.0.1").await;
    let port = proxy.addrs["redirect"].rsplit_once(':').unwrap().1.to_owned();
    domains_work_on_top(&cp, &port).await;
    assert_eq!(
        answer(&proxy.addr("redirect"), "old-alias").await,
        (302, Some("https://example.com/fixture/dynamodb/old-alias".to_owned()))
    );
    // Adding a domain needed the index by target host: the old items are in it now.
    let indexed = client
        .query()
        .table_name(format!("{}links", d.prefix))
        .index_name("by_target_host")
        .key_condition_expression("#zone = :zone")
        .expression_attribute_names("#zone", "host_zone")
        .expression_attribute_values(":zone", AttributeValue::S("com.example".into()))
        .send()
        .await
        .unwrap();
    let codes: Vec<&str> = indexed
        .items()
        .iter()
        .filter_map(|i| i.get("code")?.as_s().ok().map(String::as_str))
        .collect();
    assert!(codes.contains(&"old-alias"), "the old links are indexed: {codes:?}");
}

/// The links table's indexes added since the fixture's version (the links with rules: issue 46).
const ADDED_SINCE: [&str; 3] = ["by_target_host", "by_domain", "by_rules"];
