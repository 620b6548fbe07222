//! Regions (docs/regions.md, docs/spec.md §8): several regions on one machine, each with its own
//! redis-server, control plane and proxies, the regions 40 ms apart each way through relays
//! that can cut them off. First one store (moto) standing for the replicated one; then each
//! region with its own replica (its own moto) and the replicator fixture standing for a
//! global table's replication (lag, last writer wins). Every operation and probe goes in a
//! history the checker of docs/spec.md §4 reads.

use rebound_test_support as common;

use common::fleet::*;
use common::history::*;
use common::replicator::Replicated;
use common::services::*;
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two regions on one machine (docs/regions.md): each with its own redis-server and two
/// proxies, one store (moto) standing for the replicated one, and a control plane in
/// region A whose peer region B's Redis is 40 ms away each way (a relay). Returns the
/// deployment's parts: the control plane, the proxies (A's two, then B's two), the relay to
/// B and the servers, which must outlive the test.
async fn two_regions(dir: &std::path::Path) -> (Running, Vec<(String, Running)>, Relay, [OwnServer; 2]) {
    let (a, b) = (OwnServer::redis(), OwnServer::redis());
    let far = delayed_relay(b.port, Duration::from_millis(40));
    let d = Deployment::new(&shared_aws_url(), Some(&a.url()));
    let cp = d.control_plane(
        dir,
        &[(
            "REBOUND_PEER_REGIONS",
            &format!("b={}", through_relay(&b.url(), far.port)),
        )],
    );
    let mut proxies = Vec::new();
    for (name, redis) in [("a0", &a), ("a1", &a), ("b0", &b), ("b1", &b)] {
        proxies.push((
            name.to_owned(),
            d.proxy(dir, &[("REBOUND_REDIS_URL", &redis.url())]).await,
        ));
    }
    (cp, proxies, far, [a, b])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_create_is_served_and_a_delete_is_404_in_both_regions_at_once() {
    let dir = temp_dir();
    let (cp, proxies, _far, _servers) = two_regions(dir.path()).await;
    let history = History::default();
    let mut took = Vec::new();
    for i in 0..60 {
        let code = create_recorded(&history, &cp, i).await;
        // The first click in every region, right after the create returned.
        for (name, p) in &proxies {
            probe(&history, p, name, &code).await;
        }
        let start = Instant::now();
        assert!(
            delete_recorded(&history, &cp, &code, i % 2 == 1).await,
            "the delete succeeded"
        );
        took.push(start.elapsed());
        for (name, p) in &proxies {
            probe(&history, p, name, &code).await;
        }
    }
    history.assert_clean("two regions");
    took.sort();
    eprintln!(
        "cross-region deletes (40 ms each way to region B's Redis): p50 {:?}, p99 {:?}, max {:?} over {}",
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1],
        took.len()
    );
    // Of which each region's share (tombstone, publish, registry, acknowledgements), as the
    // control plane measured it; the rest is the store's writes.
    let text = scrape(&cp).await;
    for region in ["default", "b"] {
        let sum = metric_in(
            &text,
            &format!("rebound_region_propagation_seconds_sum{{region=\"{region}\"}}"),
        );
        let count = metric_in(
            &text,
            &format!("rebound_region_propagation_seconds_count{{region=\"{region}\"}}"),
        );
        eprintln!(
            "region {region}'s share: mean {:.1} ms over {count}",
            1000.0 * sum / count
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn an_edit_is_served_in_both_regions_at_once_and_the_old_target_nowhere() {
    // docs/spec.md §12: once an edit returned, no proxy in any region answers with the old target.
    // Each link is warmed into every proxy's L1 in both regions, then edited twice.
    let dir = temp_dir();
    let (cp, proxies, _far, _servers) = two_regions(dir.path()).await;
    let history = History::default();
    let mut took = Vec::new();
    for i in 0..30 {
        let code = create_recorded(&history, &cp, i).await;
        let mut target = format!("https://example.com/fault/{i}");
        for version in 1..=2 {
            for (name, p) in &proxies {
                probe(&history, p, name, &code).await;
                assert_eq!(probe(&history, p, name, &code).await, 302, "{name}: now from L1");
            }
            let next = format!("https://example.com/edited/{i}/{version}");
            let start = Instant::now();
            assert!(
                edit_recorded(&history, &cp, &code, version, &target, &next).await,
                "round {i}: the edit succeeded"
            );
            took.push(start.elapsed());
            for (name, p) in &proxies {
                probe(&history, p, name, &code).await;
            }
            target = next;
        }
    }
    let probes = history.assert_clean("an edit in two regions");
    assert!(probes >= 30 * 2 * 4 * 3);
    took.sort();
    eprintln!(
        "cross-region edits (40 ms each way to region B's Redis): p50 {:?}, p99 {:?}, max {:?} over {}",
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1],
        took.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_delete_that_could_not_reach_a_region_is_503_and_finished_there_once_it_can() {
    let dir = temp_dir();
    let (cp, proxies, far, servers) = two_regions(dir.path()).await;
    let history = History::default();
    let code = create_recorded(&history, &cp, 0).await;
    for (name, p) in &proxies {
        assert_eq!(probe(&history, p, name, &code).await, 302, "{name}");
    }
    // Region B's Redis cannot be reached from region A.
    far.freeze();
    let answer = delete_at(&history, &http(), &cp.api(), &code, false).await;
    assert!(
        matches!(answer, Changed::Pending),
        "the delete is not confirmed in region B: 503, not {}",
        match answer {
            Changed::Ok => "a success",
            _ => "another answer",
        }
    );
    for (name, p) in &proxies[..2] {
        assert_eq!(probe(&history, p, name, &code).await, 404, "{name}: region A has it");
    }
    // What was sent meanwhile is dropped with the connections; then B is reachable again.
    far.fail_over_to(servers[1].port);
    far.thaw();
    let back = Instant::now();
    for (name, p) in &proxies[2..] {
        assert!(
            eventually(p, &code, 404, Duration::from_secs(10)).await,
            "{name} still redirects {:?} after region B became reachable",
            back.elapsed()
        );
    }
    eprintln!("region B 404 {:?} after it became reachable", back.elapsed());
    history.assert_clean("a region cut off during a delete");
}

/// The permutation key every process of the replicated test bed is configured with: in a
/// fleet of several regions it is set, not generated (docs/regions.md), or two regions
/// starting within the replication lag could each record their own.
const CODE_KEY: &str = "00112233445566778899aabbccddeeff";

/// How far behind one region's replica is the other's.
const REPLICATION_LAG: Duration = Duration::from_millis(1500);

/// Two regions each with its own replica of the store: region A (the home region, slot 0)
/// and region B (slot 1), each with a moto, a redis-server, a control plane and two proxies.
/// Between them, 40 ms each way: A's control plane to B's Redis, B's to A's Redis and to A's
/// control plane (unique writes are forwarded home), B's proxies to A's replica (read before
/// a 404); and the replicator fixture between the replicas.
struct Regions {
    cps: [Running; 2],
    /// a0, a1, b0, b1.
    proxies: Vec<(String, Running)>,
    /// Every path between the regions, with the port it leads to.
    paths: Vec<(Relay, u16)>,
    replicated: Replicated,
    /// moto A, moto B, Redis A, Redis B.
    servers: Vec<OwnServer>,
}

impl Regions {
    async fn start(dir: &std::path::Path) -> Regions {
        let (moto_a, moto_b) = (OwnServer::moto(), OwnServer::moto());
        let replicated = Replicated::start([&moto_a.url(), &moto_b.url()], REPLICATION_LAG);
        let (redis_a, redis_b) = (OwnServer::redis(), OwnServer::redis());
        let d = Deployment::with_dynamodb(&shared_aws_url(), &replicated.fronts[0], Some(&redis_a.url()));
        // The tables in both replicas (as a global table has them), and each region's own
        // click queue (each region consumes its own clicks).
        rebound_dynamodb::DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws_conf(&moto_b.url()).await),
            d.prefix.clone(),
        )
        .create_tables(true)
        .await
        .unwrap();
        d.provision();
        let queue_b = format!("{}-b", d.queue);
        provision(&d.with(&[
            ("REBOUND_SQS_QUEUE", &queue_b),
            ("AWS_ENDPOINT_URL_DYNAMODB", &replicated.fronts[1]),
        ]));
        let port_of = |url: &str| -> u16 { url.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap() };
        let far = |port: u16| (delayed_relay(port, Duration::from_millis(40)), port);
        let to_b_redis = far(redis_b.port);
        let to_a_redis = far(redis_a.port);
        let to_a_store = far(port_of(&replicated.fronts[0]));
        let cp_a = d.control_plane(
            dir,
            &[
                ("REBOUND_REGION", "a"),
                ("REBOUND_CODE_KEY", CODE_KEY),
                (
                    "REBOUND_PEER_REGIONS",
                    &format!("b={}", through_relay(&redis_b.url(), to_b_redis.0.port)),
                ),
            ],
        );
        // Region B starts on a replica that has what A's start wrote.
        replicated.settle(Duration::from_secs(30)).await;
        let to_a_api = far(port_of(&cp_a.api()));
        let in_b = [
            ("REBOUND_REDIS_URL", redis_b.url()),
            ("AWS_ENDPOINT_URL_DYNAMODB", replicated.fronts[1].clone()),
            ("REBOUND_SQS_QUEUE", queue_b),
        ];
        let cp_b = d.control_plane(
            dir,
            &[
                in_b[0].clone_ref(),
                in_b[1].clone_ref(),
                in_b[2].clone_ref(),
                ("REBOUND_REGION", "b"),
                ("REBOUND_REGION_SLOT", "1"),
                ("REBOUND_CODE_KEY", CODE_KEY),
                (
                    "REBOUND_PEER_REGIONS",
                    &format!("a={}", through_relay(&redis_a.url(), to_a_redis.0.port)),
                ),
                (
                    "REBOUND_HOME_REGION_URL",
                    &format!("http://127.0.0.1:{}", to_a_api.0.port),
                ),
            ],
        );
        let home_store = format!("http://127.0.0.1:{}", to_a_store.0.port);
        let mut proxies = Vec::new();
        let redis_a_url = redis_a.url();
        for name in ["a0", "a1"] {
            let env = [
                ("REBOUND_REDIS_URL", redis_a_url.as_str()),
                ("REBOUND_CODE_KEY", CODE_KEY),
            ];
            proxies.push((name.to_owned(), d.proxy(dir, &env).await));
        }
        for name in ["b0", "b1"] {
            let env = [
                in_b[0].clone_ref(),
                in_b[1].clone_ref(),
                in_b[2].clone_ref(),
                ("REBOUND_CODE_KEY", CODE_KEY),
                ("REBOUND_HOME_STORE_REGION", "us-east-1"),
                ("REBOUND_HOME_STORE_ENDPOINT_URL", &home_store),
            ];
            proxies.push((name.to_owned(), d.proxy(dir, &env).await));
        }
        Regions {
            cps: [cp_a, cp_b],
            proxies,
            paths: vec![to_b_redis, to_a_redis, to_a_store, to_a_api],
            replicated,
            servers: vec![moto_a, moto_b, redis_a, redis_b],
        }
    }

    /// The regions cannot reach each other: no request, no Redis command, no replication.
    fn partition(&self) {
        self.replicated.pause();
        for (relay, _) in &self.paths {
            relay.freeze();
        }
    }

    /// The regions reach each other again; what was sent meanwhile is lost with its
    /// connections, and the replication catches up.
    fn heal(&self) {
        for (relay, port) in &self.paths {
            relay.fail_over_to(*port);
            relay.thaw();
        }
        self.replicated.resume();
    }
}

/// A `(&str, &str)` from an owned pair, for the environment lists.
trait CloneRef {
    fn clone_ref(&self) -> (&str, &str);
}

impl CloneRef for (&str, String) {
    fn clone_ref(&self) -> (&str, &str) {
        (self.0, self.1.as_str())
    }
}

/// A create through `cp` with `body`, recorded when it succeeded: its status and answer.
async fn create_with(history: &History, cp: &Running, body: Value) -> (u16, Value) {
    let start = Instant::now();
    let (status, answer) = operator(cp, reqwest::Method::POST, "/api/v1/links", Some(body)).await;
    if status == 201 {
        let code = answer["code"].as_str().unwrap().to_owned();
        history.record(Op::Create { code, ok: true }, start, Instant::now());
    }
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL, moto_server and redis-server (the test services): scripts/test starts them and runs it"]
async fn with_a_replica_per_region_a_link_is_served_everywhere_on_its_first_click_and_deleted_everywhere() {
    let dir = temp_dir();
    let regions = Regions::start(dir.path()).await;
    let history = History::default();
    let [cp_a, cp_b] = &regions.cps;
    let mut deletes: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let rounds: usize = std::env::var("REBOUND_REGION_ROUNDS").map_or(40, |n| n.parse().unwrap());
    for i in 0..rounds {
        // Made in one region (a generated code, or an alias: forwarded home from B), its
        // first click in every region right after the create returned, far inside the
        // replication lag.
        let (made_in, cp) = if i % 2 == 0 { ("a", cp_a) } else { ("b", cp_b) };
        let body = match i % 4 {
            3 => {
                json!({"long_url": format!("https://example.com/r/{i}"), "custom_alias": format!("alias-{i}-{}", unique_id())})
            }
            _ => json!({"long_url": format!("https://example.com/r/{i}")}),
        };
        let (status, link) = create_with(&history, cp, body).await;
        assert_eq!(status, 201, "round {i}, region {made_in}: {link}");
        let code = link["code"].as_str().unwrap();
        for (name, p) in &regions.proxies {
            assert_eq!(
                probe(&history, p, name, code).await,
                302,
                "round {i}: made in {made_in}, {name}"
            );
        }
        // Deleted through either region, fanned out from there; a link B's replica does not
        // have yet (made at home) is deleted at home. A link generated in B is deleted in B:
        // at home it is 404 until replicated (docs/regions.md).
        let generated_in_b = made_in == "b" && i % 4 != 3;
        let (deleted_in, cp) = if generated_in_b || i % 3 == 0 {
            ("b", cp_b)
        } else {
            ("a", cp_a)
        };
        let start = Instant::now();
        assert!(
            delete_recorded(&history, cp, code, i % 2 == 1).await,
            "round {i}: the delete succeeded"
        );
        deletes.entry(deleted_in).or_default().push(start.elapsed());
        for (name, p) in &regions.proxies {
            probe(&history, p, name, code).await;
        }
    }
    history.assert_clean("a replica per region");
    for (region, took) in &mut deletes {
        took.sort();
        eprintln!(
            "deletes through region {region}: p50 {:?}, p99 {:?} over {}",
            took[took.len() / 2],
            took[took.len() * 99 / 100],
            took.len()
        );
    }

    // A create whose write-through to region B's Redis was lost (B's Redis out of A's reach
    // for a moment) is still served in B on its first click: B's proxies read the home
    // region's replica before a 404.
    regions.paths[0].0.freeze();
    let (status, link) = create_with(&history, cp_a, json!({"long_url": "https://example.com/unannounced"})).await;
    assert_eq!(status, 201, "{link}");
    let (status, alias) = create_with(
        &history,
        cp_a,
        json!({"long_url": "https://example.com/unannounced-alias", "custom_alias": format!("quiet-{}", unique_id())}),
    )
    .await;
    assert_eq!(status, 201, "{alias}");
    for code in [link["code"].as_str().unwrap(), alias["code"].as_str().unwrap()] {
        for (name, p) in &regions.proxies {
            assert_eq!(probe(&history, p, name, code).await, 302, "{name}: {code}");
        }
    }
    regions.paths[0].0.fail_over_to(regions.paths[0].1);
    regions.paths[0].0.thaw();
    history.assert_clean("a create not announced in region B");
    clicks_in_both_regions_are_counted_once_each(&regions).await;
    let home_found = metric(
        &regions.proxies[2].1,
        "rebound_lookups_total{result=\"found\",tier=\"home\"}",
    )
    .await;
    assert!(home_found >= 1.0, "b0 read the home region's replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL, moto_server and redis-server (the test services): scripts/test starts them and runs it"]
async fn concurrent_creates_in_both_regions_never_give_a_code_twice() {
    let dir = temp_dir();
    let regions = Regions::start(dir.path()).await;
    let total: usize = std::env::var("REBOUND_REGION_CREATES").map_or(2_000, |n| n.parse().unwrap());
    let history = Arc::new(History::default());
    // Half the creates are aliases, each asked for in both regions at once with different
    // targets; the other half generated codes, half in each region.
    let names: Vec<String> = (0..total / 4).map(|i| format!("race-{i}-{}", unique_id())).collect();
    let mut jobs: Vec<(usize, Value)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        for region in 0..2 {
            jobs.push((
                region,
                json!({"long_url": format!("https://example.com/{region}/{name}"), "custom_alias": name}),
            ));
        }
        for region in 0..2 {
            jobs.push((
                region,
                json!({"long_url": format!("https://example.com/{region}/generated/{i}")}),
            ));
        }
    }
    let started = Instant::now();
    let answers: Vec<(usize, Value, u16, Value)> = futures_util::stream::iter(jobs)
        .map(|(region, body)| {
            let cp = &regions.cps[region];
            async move {
                let (status, answer) = operator(cp, reqwest::Method::POST, "/api/v1/links", Some(body.clone())).await;
                (region, body, status, answer)
            }
        })
        .buffer_unordered(48)
        .collect()
        .await;
    let took = started.elapsed();
    // Every code given once: an alias to one of the two regions (the other 409), a
    // generated code never twice and never an alias.
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    let mut refused = 0;
    for (region, body, status, answer) in &answers {
        match status {
            201 => {
                let code = answer["code"].as_str().unwrap().to_owned();
                let target = body["long_url"].as_str().unwrap().to_owned();
                if let Some(first) = given.insert(code.clone(), target.clone()) {
                    panic!("{code} given twice: {first} and {target} (region {region})");
                }
            }
            409 => refused += 1,
            other => panic!("region {region}: {other} {answer} for {body}"),
        }
    }
    assert_eq!(refused, names.len(), "each raced alias refused in exactly one region");
    assert_eq!(given.len(), answers.len() - names.len());
    eprintln!(
        "{} concurrent creates across two regions in {took:?}: {} codes given, each once; {refused} aliases refused as taken",
        answers.len(),
        given.len()
    );
    // Once replicated, both regions' replicas hold every link as its creator was told.
    regions.replicated.settle(Duration::from_secs(120)).await;
    for (cp, region) in regions.cps.iter().zip(["a", "b"]) {
        let mut held = BTreeMap::new();
        let mut cursor = String::new();
        loop {
            let path = format!(
                "/api/v1/links?limit=250&cursor={}",
                url::form_urlencoded::byte_serialize(cursor.as_bytes()).collect::<String>()
            );
            // moto scans a large table slowly: a page that timed out (503) is asked again.
            let mut tries = 0;
            let page = loop {
                let (status, page) = operator(cp, reqwest::Method::GET, &path, None).await;
                tries += 1;
                match status {
                    200 => break page,
                    503 if tries < 5 => continue,
                    _ => panic!("listing region {region}'s links: {status} {page}"),
                }
            };
            for link in page["links"].as_array().unwrap() {
                held.insert(
                    link["code"].as_str().unwrap().to_owned(),
                    link["long_url"].as_str().unwrap().to_owned(),
                );
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = next.to_owned(),
                None => break,
            }
        }
        assert_eq!(
            held, given,
            "region {region}'s replica holds every link as its creator was told, and no other"
        );
    }
    drop(history);
}

/// Clicks on one link in both regions at once are counted in each region's own rollup
/// items: once replicated, both regions' stats count every click (one shared item would keep
/// only the last region's copy).
async fn clicks_in_both_regions_are_counted_once_each(regions: &Regions) {
    let [cp_a, cp_b] = &regions.cps;
    let code = create(cp_a, json!({"long_url": "https://example.com/clicked-everywhere"})).await;
    let (a0, b0) = (&regions.proxies[0].1, &regions.proxies[2].1);
    for round in 0..30 {
        let (a, b) = tokio::join!(status(a0, &code), status(b0, &code));
        assert_eq!((a, b), (302, 302), "round {round}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts = (clicks(cp_a, &code).await, clicks_once_replicated(cp_b, &code).await);
        if counts == (60, 60) {
            break;
        }
        assert!(
            Instant::now() < deadline && counts.0 <= 60 && counts.1 <= 60,
            "clicks counted in regions A and B: {counts:?}, not 60 each"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The clicks region B's control plane counts for a link created in region A: none while
/// B's replica has not received the link yet (its stats are 404 for up to
/// `REPLICATION_LAG` after the create; the proxies read the home region meanwhile).
async fn clicks_once_replicated(cp: &Running, code: &str) -> u64 {
    let (s, v) = api(cp, reqwest::Method::GET, &format!("/api/v1/links/{code}/stats"), None).await;
    if s == reqwest::StatusCode::NOT_FOUND {
        return 0;
    }
    assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    v["total"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL, moto_server and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_region_that_loses_its_redis_keeps_every_delete_and_every_link() {
    let dir = temp_dir();
    let mut regions = Regions::start(dir.path()).await;
    let history = History::default();
    let mut codes = Vec::new();
    for i in 0..4 {
        let (status, link) = create_with(
            &history,
            &regions.cps[0],
            json!({"long_url": format!("https://example.com/lost/{i}")}),
        )
        .await;
        assert_eq!(status, 201, "{link}");
        let code = link["code"].as_str().unwrap().to_owned();
        for (name, p) in &regions.proxies {
            assert_eq!(probe(&history, p, name, &code).await, 302, "{name}");
        }
        codes.push(code);
    }
    // Region B's Redis is lost: stopped, then back empty.
    regions.servers[3].stop();
    // Deletes through A meanwhile cannot be confirmed in B: 503, and 404 in A at once.
    for code in &codes[..2] {
        assert!(matches!(
            delete_at(&history, &http(), &regions.cps[0].api(), code, false).await,
            Changed::Pending
        ));
        for (name, p) in &regions.proxies[..2] {
            assert_eq!(probe(&history, p, name, code).await, 404, "{name}");
        }
    }
    regions.servers[3].restart_empty();
    let back = Instant::now();
    // The deletes reach B with no retry; the links not deleted are still served there (a
    // Redis loses no link: B's proxies read them from B's replica).
    for code in &codes[..2] {
        all_answer(&regions.proxies[2..], code, 404, Duration::from_secs(30)).await;
    }
    for code in &codes[2..] {
        all_answer(&regions.proxies, code, 302, Duration::from_secs(30)).await;
    }
    eprintln!(
        "region B's Redis back empty: every delete 404 and every link 302 there {:?} later",
        back.elapsed()
    );
    // A delete now is confirmed in both regions (B's proxies seen before the loss are
    // waited for) and is 404 everywhere at once.
    assert!(delete_recorded(&history, &regions.cps[0], &codes[2], false).await);
    for (name, p) in &regions.proxies {
        probe(&history, p, name, &codes[2]).await;
    }
    history.assert_clean("a region's Redis lost");
}

/// Waits until every one of `proxies` answers `want` for `code` (at most `limit` each).
async fn all_answer(proxies: &[(String, Running)], code: &str, want: u16, limit: Duration) {
    for (name, p) in proxies {
        assert!(
            eventually(p, code, want, limit).await,
            "{name} does not answer {want} for {code} after {limit:?}"
        );
    }
}

/// [`api`] (as the operator), its status as a number.
async fn operator(cp: &Running, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let (status, answer) = api(cp, method, path, body).await;
    (status.as_u16(), answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL, moto_server and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_partition_between_regions_refuses_what_needs_both_and_converges_once_healed() {
    let dir = temp_dir();
    let regions = Regions::start(dir.path()).await;
    let history = History::default();
    let [cp_a, cp_b] = &regions.cps;
    let (a0, b0) = (&regions.proxies[0].1, &regions.proxies[2].1);
    let (_, before) = create_with(&history, cp_a, json!({"long_url": "https://example.com/before"})).await;
    let before = before["code"].as_str().unwrap().to_owned();
    for (name, p) in &regions.proxies {
        assert_eq!(probe(&history, p, name, &before).await, 302, "{name}");
    }
    regions.partition();
    // Generated codes are made in each region from its own slot: both go on.
    let mut made = Vec::new();
    for (cp, p, name) in [(cp_a, a0, "a0"), (cp_b, b0, "b0")] {
        let (status, link) = create_with(
            &history,
            cp,
            json!({"long_url": format!("https://example.com/cut/{name}")}),
        )
        .await;
        assert_eq!(status, 201, "{name}'s region creates alone: {link}");
        let code = link["code"].as_str().unwrap().to_owned();
        assert_eq!(probe(&history, p, name, &code).await, 302, "{name}");
        made.push(code);
    }
    // An alias made in B needs the home region: refused, nothing written.
    let alias = format!("cut-{}", unique_id());
    let (status, answer) = create_with(
        &history,
        cp_b,
        json!({"long_url": "https://example.com/cut/alias", "custom_alias": alias}),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (503, Some("home_unavailable")),
        "{answer}"
    );
    // A delete through A cannot be confirmed in B: 503, and 404 in A at once.
    assert!(matches!(
        delete_at(&history, &http(), &cp_a.api(), &before, false).await,
        Changed::Pending
    ));
    for (name, p) in &regions.proxies[..2] {
        assert_eq!(probe(&history, p, name, &before).await, 404, "{name}");
    }
    // A delete through B of a link B's replica has is made there: 503 as well (A cannot
    // confirm it), and 404 in B at once.
    let (_, doomed) = create_with(&history, cp_b, json!({"long_url": "https://example.com/cut/doomed"})).await;
    let doomed = doomed["code"].as_str().unwrap().to_owned();
    assert!(matches!(
        delete_at(&history, &http(), &cp_b.api(), &doomed, true).await,
        Changed::Pending
    ));
    for (name, p) in &regions.proxies[2..] {
        assert_eq!(probe(&history, p, name, &doomed).await, 404, "{name}");
    }
    // A delete through B of a link B's replica does not have needs the home region.
    let (status, answer) = operator(cp_b, reqwest::Method::DELETE, "/api/v1/links/only-at-home", None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (503, Some("home_unavailable")),
        "{answer}"
    );
    regions.heal();
    let healed = Instant::now();
    // The deletes made during the partition reach the other region with no retry (the
    // reconcilers).
    for (code, far_proxies) in [(&before, &regions.proxies[2..]), (&doomed, &regions.proxies[..2])] {
        all_answer(far_proxies, code, 404, Duration::from_secs(20)).await;
    }
    eprintln!(
        "the delete made during the partition: 404 in region B {:?} after it healed",
        healed.elapsed()
    );
    // The links made during the partition are served everywhere once it healed.
    for code in &made {
        all_answer(&regions.proxies, code, 302, Duration::from_secs(45)).await;
    }
    eprintln!(
        "links made during the partition: served in both regions {:?} after it healed",
        healed.elapsed()
    );
    // The alias refused in B was written nowhere: it can be made now, once.
    let (status, link) = create_with(
        &history,
        cp_b,
        json!({"long_url": "https://example.com/later", "custom_alias": alias}),
    )
    .await;
    assert_eq!(status, 201, "{link}");
    history.assert_clean("a partition between the regions");
}

/// The target `proxy` redirects `code` to right now (`None`: not a redirect).
async fn target_at(history: &History, proxy: &Running, name: &str, code: &str) -> Option<String> {
    probe_answer(history, &http(), &proxy.addr("redirect"), name, code)
        .await
        .1
}

/// What each region's replica holds for `code`, read through its control plane:
/// (is_active, version, long_url).
async fn as_replicated(cp: &Running, code: &str) -> (bool, u64, String) {
    let (s, v) = api(cp, reqwest::Method::GET, &format!("/api/v1/links/{code}"), None).await;
    assert_eq!(s, reqwest::StatusCode::OK, "{v}");
    (
        v["is_active"].as_bool().unwrap(),
        v["version"].as_u64().unwrap(),
        v["long_url"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL, moto_server and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_link_changed_in_two_regions_at_once_is_changed_once_and_a_deletion_is_never_undone() {
    // Issue 42, items 10 and 11: every change of an existing link is decided in the home
    // region, so two changes of one version made through two regions cannot both succeed,
    // and an edit can never revive a link deleted through the other region.
    let dir = temp_dir();
    let regions = Regions::start(dir.path()).await;
    let history = History::default();
    let [cp_a, cp_b] = &regions.cps;
    let apis = [cp_a.api(), cp_b.api()];
    let client = http();
    let mut codes = Vec::new();
    for i in 0..10 {
        let (status, link) = create_with(
            &history,
            &regions.cps[i % 2],
            json!({"long_url": format!("https://example.com/both/{i}")}),
        )
        .await;
        assert_eq!(status, 201, "{link}");
        codes.push(link["code"].as_str().unwrap().to_owned());
    }
    // Both replicas hold every link, and every proxy has it in L1.
    regions.replicated.settle(Duration::from_secs(30)).await;
    for code in &codes {
        for (name, p) in &regions.proxies {
            assert_eq!(probe(&history, p, name, code).await, 302, "{name}");
        }
    }

    // Two edits of version 1 at once, one through each region: one succeeds, the other is
    // refused as stale, and every proxy and both replicas end on the one that succeeded.
    let mut winners = BTreeMap::new();
    for (i, code) in codes[..4].iter().enumerate() {
        let from = format!("https://example.com/both/{i}");
        let (to_a, to_b) = (
            format!("https://example.com/a/{i}"),
            format!("https://example.com/b/{i}"),
        );
        let (a, b) = tokio::join!(
            edit_at(&history, &client, &apis[0], code, (1, &from, &to_a)),
            edit_at(&history, &client, &apis[1], code, (1, &from, &to_b)),
        );
        let winner = match (a, b) {
            (Changed::Ok, Changed::Unknown) => to_a,
            (Changed::Unknown, Changed::Ok) => to_b,
            other => panic!("{code}: two edits of version 1 answered {other:?}; exactly one may succeed"),
        };
        for (name, p) in &regions.proxies {
            assert_eq!(
                target_at(&history, p, name, code).await.as_deref(),
                Some(winner.as_str()),
                "{name}: {code} right after the edits returned"
            );
        }
        winners.insert(code.clone(), winner);
    }

    // A delete or takedown through one region, then an edit of the old version through the
    // other: the edit is refused, and the link stays down everywhere.
    for (i, code) in codes[4..].iter().enumerate() {
        let (delete_in, edit_in) = if i % 2 == 0 { (1, 0) } else { (0, 1) };
        assert_eq!(
            delete_at(&history, &client, &apis[delete_in], code, i % 3 == 2).await,
            Changed::Ok,
            "{code}: the delete through region {delete_in}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        let from = format!("https://example.com/both/{}", i + 4);
        let to = format!("https://example.com/revived/{i}");
        let start = Instant::now();
        let answer = client
            .patch(format!("{}/api/v1/links/{code}", apis[edit_in]))
            .bearer_auth(OPERATOR_KEY)
            .header("if-match", "\"1\"")
            .json(&json!({"long_url": to}))
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        history.record(
            Op::Edit {
                code: code.clone(),
                from,
                agent: None,
                ok: status == 200,
            },
            start,
            Instant::now(),
        );
        assert!(
            matches!(status, 409 | 412),
            "{code}: an edit through region {edit_in} after the delete answered {status}"
        );
        for (name, p) in &regions.proxies {
            assert_eq!(probe(&history, p, name, code).await, 404, "{name}: {code}");
        }
    }

    // Once replicated, both replicas agree, and so does every proxy.
    regions.replicated.settle(Duration::from_secs(30)).await;
    tokio::time::sleep(REPLICATION_LAG).await;
    regions.replicated.settle(Duration::from_secs(30)).await;
    for (code, winner) in &winners {
        for cp in &regions.cps {
            assert_eq!(as_replicated(cp, code).await, (true, 2, winner.clone()), "{code}");
        }
        for (name, p) in &regions.proxies {
            assert_eq!(
                target_at(&history, p, name, code).await.as_deref(),
                Some(winner.as_str()),
                "{name}: {code} once replicated"
            );
        }
    }
    for code in &codes[4..] {
        for cp in &regions.cps {
            let (active, _, _) = as_replicated(cp, code).await;
            assert!(!active, "{code}: a replica holds the deleted link active");
        }
        for (name, p) in &regions.proxies {
            assert_eq!(
                probe(&history, p, name, code).await,
                404,
                "{name}: {code} once replicated"
            );
        }
    }
    history.assert_clean("changes in two regions at once");
}
