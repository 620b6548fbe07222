//! The fleet under faults (docs/spec.md §4 I1/I2, §8): real control planes and proxies on a real
//! Redis and moto, faults injected by the test (subscriptions killed, clocks skewed,
//! proxies leaving, a peer region out of reach), every operation and probe recorded in a
//! history that a checker reads; and two regions, each with its own Redis and proxies.

use rebound_test_support as common;

use common::fleet::*;
use common::history::*;
use common::services::*;
use common::visitors::AGENTS;
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A desktop's User-Agent (Chrome on Windows): no rule of the schedule's matches it.
const DESKTOP: &str = AGENTS[0].0;
/// An iPhone's: the schedule's rules send it elsewhere (docs/spec.md §14).
const IPHONE: &str = AGENTS[1].0;

/// Kills every pub/sub connection of the Redis on `port` (what a failover, a restart or a
/// middlebox's idle cut does to subscribers).
async fn kill_subscriptions(port: u16) -> i64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut c)
        .await
        .unwrap()
}

/// Runs one command on the Redis on `port`.
async fn redis_cmd<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> T {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut c).await.unwrap()
}

/// Creates six links, warms each into every proxy's L1, runs `before` (a fault that makes
/// Redis lose what follows), then deletes or takes each down; returns the codes.
async fn warm_then_delete(
    history: &History,
    cp: &Running,
    proxies: &[Running],
    before: impl std::future::Future<Output = ()>,
) -> Vec<String> {
    let codes = warm(history, cp, proxies).await;
    before.await;
    for (i, code) in codes.iter().enumerate() {
        assert!(delete_recorded(history, cp, code, i % 2 == 1).await, "delete {i}");
    }
    codes
}

/// Creates six links and warms each into every proxy's L1.
async fn warm(history: &History, cp: &Running, proxies: &[Running]) -> Vec<String> {
    let mut codes = Vec::new();
    for i in 0..6 {
        let code = create_recorded(history, cp, i).await;
        for (n, p) in proxies.iter().enumerate() {
            for _ in 0..2 {
                assert_eq!(probe(history, p, &format!("p{n}"), &code).await, 302, "warmed into L1");
            }
        }
        codes.push(code);
    }
    codes
}

/// After a fault: starts one more proxy (it knows nothing from before), then for three
/// seconds probes every deleted code on every proxy and creates links, probing each at
/// once.
async fn probe_after_fault(
    history: &History,
    d: &Deployment,
    cp: &Running,
    mut proxies: Vec<Running>,
    codes: &[String],
) {
    let dir = temp_dir();
    proxies.push(d.proxy(dir.path(), &[]).await);
    let until = Instant::now() + Duration::from_secs(3);
    let mut i = 100;
    while Instant::now() < until {
        for code in codes {
            for (n, p) in proxies.iter().enumerate() {
                probe(history, p, &format!("p{n}"), code).await;
            }
        }
        i += 1;
        let created = create_recorded(history, cp, i).await;
        for (n, p) in proxies.iter().enumerate() {
            probe(history, p, &format!("p{n}"), &created).await;
        }
    }
}

/// libfaketime, which runs a process on a skewed clock (Debian's `faketime`).
fn faketime_lib() -> String {
    for path in [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ] {
        if std::path::Path::new(path).exists() {
            return path.to_owned();
        }
    }
    panic!("libfaketime not found: install Debian's faketime (scripts/test does)");
}

#[test]
fn the_checker_finds_a_redirect_after_a_delete_or_to_an_edited_away_target_and_a_404_after_a_create() {
    let h = History::default();
    let t = Instant::now();
    let at = |ms: u64| t + Duration::from_millis(ms);
    let probe = |code: &str, status: u16| Op::Probe {
        code: code.into(),
        proxy: "p".into(),
        status,
        location: (status == 302).then(|| format!("https://{code}.example/")),
        agent: None,
    };
    let to = |code: &str, target: &str| Op::Probe {
        code: code.into(),
        proxy: "p".into(),
        status: 302,
        location: Some(target.into()),
        agent: None,
    };
    // A probe as the visitor `agent`, sent to `target`.
    let as_visitor = |code: &str, agent: &str, target: &str| Op::Probe {
        code: code.into(),
        proxy: "p".into(),
        status: 302,
        location: Some(target.into()),
        agent: Some(agent.into()),
    };
    let rules_edit = |code: &str, from: &str, ok: bool| Op::Edit {
        code: code.into(),
        from: from.into(),
        agent: Some(IPHONE.into()),
        ok,
    };
    h.record(
        Op::Create {
            code: "a".into(),
            ok: true,
        },
        at(0),
        at(10),
    );
    h.record(probe("a", 302), at(20), at(21));
    h.record(
        Op::Delete {
            code: "a".into(),
            ok: true,
        },
        at(30),
        at(40),
    );
    // Overlapping the delete: either answer is right.
    h.record(probe("a", 302), at(35), at(41));
    h.record(
        Op::Create {
            code: "b".into(),
            ok: true,
        },
        at(0),
        at(10),
    );
    // A failed delete promises nothing.
    h.record(
        Op::Delete {
            code: "c".into(),
            ok: false,
        },
        at(0),
        at(10),
    );
    h.record(probe("c", 302), at(20), at(21));
    // An edit of d from its first target to a second: the second any time, the first only
    // before the edit returned (or overlapping it).
    h.record(
        Op::Edit {
            code: "d".into(),
            from: "https://d.example/".into(),
            agent: None,
            ok: true,
        },
        at(30),
        at(40),
    );
    h.record(to("d", "https://d.example/"), at(20), at(21));
    h.record(to("d", "https://d.example/"), at(35), at(41));
    h.record(to("d", "https://second.example/"), at(50), at(51));
    // A failed edit promises nothing.
    h.record(
        Op::Edit {
            code: "e".into(),
            from: "https://e.example/".into(),
            agent: None,
            ok: false,
        },
        at(0),
        at(10),
    );
    h.record(to("e", "https://e.example/"), at(20), at(21));
    // An edit of f's rules replaced the target its rule sends iPhones to: the first only
    // before the edit returned (or overlapping it), the second after; a desktop, which no
    // rule matches, keeps f's long_url.
    h.record(rules_edit("f", "https://f.example/ios-1", true), at(30), at(40));
    h.record(as_visitor("f", IPHONE, "https://f.example/ios-1"), at(20), at(21));
    h.record(as_visitor("f", IPHONE, "https://f.example/ios-1"), at(35), at(41));
    h.record(as_visitor("f", IPHONE, "https://f.example/ios-2"), at(50), at(51));
    h.record(as_visitor("f", DESKTOP, "https://f.example/"), at(50), at(51));
    // An edit gave g a rule for iPhones: an iPhone leaves g's long_url, a desktop keeps it.
    h.record(rules_edit("g", "https://g.example/", true), at(30), at(40));
    h.record(as_visitor("g", DESKTOP, "https://g.example/"), at(50), at(51));
    h.record(as_visitor("g", IPHONE, "https://g.example/ios"), at(50), at(51));
    // A failed edit of the rules promises nothing.
    h.record(rules_edit("h", "https://h.example/ios-1", false), at(0), at(10));
    h.record(as_visitor("h", IPHONE, "https://h.example/ios-1"), at(20), at(21));
    assert!(h.violations().is_empty(), "{:?}", h.violations());
    h.record(probe("a", 302), at(50), at(51));
    h.record(probe("b", 404), at(50), at(51));
    h.record(to("d", "https://d.example/"), at(60), at(61));
    h.record(as_visitor("f", IPHONE, "https://f.example/ios-1"), at(60), at(61));
    h.record(as_visitor("g", IPHONE, "https://g.example/"), at(60), at(61));
    let found: Vec<&str> = h.violations().iter().map(|v| v.what).collect();
    assert_eq!(
        found,
        [
            "I1: redirected after a successful delete",
            "I2: 404 after a successful create",
            "I1: redirected to the old target after a successful edit",
            "I1: redirected a visitor to its old target after a successful edit of the rules",
            "I1: redirected a visitor to its old target after a successful edit of the rules",
        ]
    );
    let _: Vec<Event> = h.events();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_when_every_subscription_is_killed_right_before_each_delete() {
    // A Redis of its own: killing its subscribers must not touch other tests'.
    let redis = OwnServer::redis();
    let d = Deployment::new(&shared_aws_url(), Some(&redis.url()));
    subscriptions_killed_before_each_delete(&d, &[redis.port]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_when_every_subscription_is_killed_right_before_each_delete_on_a_redis_cluster() {
    // The shard subscriptions, on the fleet's node, killed: each proxy subscribes again on
    // that node (found through MOVED when it asks another).
    let cluster = OwnCluster::start();
    let mut d = Deployment::new(&shared_aws_url(), Some(&cluster.url()));
    d.env.push(("REBOUND_REDIS_CLUSTER".to_owned(), "true".to_owned()));
    subscriptions_killed_before_each_delete(&d, &cluster.ports()).await;
}

/// Ten times: a link warmed into two proxies, every subscription on the Redis servers at
/// `ports` killed, the link deleted, then probed ten times on each proxy: never redirected.
async fn subscriptions_killed_before_each_delete(d: &Deployment, ports: &[u16]) {
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let proxies = [d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let history = History::default();
    for i in 0..10 {
        let code = create_recorded(&history, &cp, i).await;
        for (n, p) in proxies.iter().enumerate() {
            for _ in 0..2 {
                assert_eq!(probe(&history, p, &format!("p{n}"), &code).await, 302, "warmed into L1");
            }
        }
        let mut killed = 0;
        for port in ports {
            killed += kill_subscriptions(*port).await;
        }
        assert!(killed >= 2, "the proxies were subscribed");
        assert!(delete_recorded(&history, &cp, &code, i % 2 == 1).await);
        for _ in 0..10 {
            for (n, p) in proxies.iter().enumerate() {
                probe(&history, p, &format!("p{n}"), &code).await;
            }
        }
    }
    let probes = history.assert_clean("subscriptions killed before each delete");
    assert!(probes >= 200, "{probes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL (the test services) and faketime: scripts/test runs it"]
async fn i1_holds_for_proxies_whose_clocks_are_five_seconds_off() {
    let redis = shared_redis_url();
    // The proxy behind hears Redis 50 ms late: without waiting for it, a delete would
    // answer before it had dropped the code.
    let distant = delayed_relay(redis_port(&redis), Duration::from_millis(50));
    let d = Deployment::new(&shared_aws_url(), Some(&redis));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let lib = faketime_lib();
    let far = through_relay(&redis, distant.port);
    let behind = d
        .proxy(
            dir.path(),
            &[("LD_PRELOAD", &lib), ("FAKETIME", "-5s"), ("REBOUND_REDIS_URL", &far)],
        )
        .await;
    let ahead = d.proxy(dir.path(), &[("LD_PRELOAD", &lib), ("FAKETIME", "+5s")]).await;
    let proxies = [("behind", behind), ("ahead", ahead)];
    let history = Arc::new(History::default());
    for i in 0..20 {
        let code = create_recorded(&history, &cp, i).await;
        for (name, p) in &proxies {
            assert_eq!(probe(&history, p, name, &code).await, 302);
            assert_eq!(probe(&history, p, name, &code).await, 302);
        }
        assert!(delete_recorded(&history, &cp, &code, i % 2 == 0).await);
        for (name, p) in &proxies {
            probe(&history, p, name, &code).await;
        }
    }
    history.assert_clean("proxies with skewed clocks");
    assert_eq!(
        metric(&cp, "rebound_invalidation_waited_out_total").await,
        0.0,
        "both proxies were waited for and acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL (the test services): scripts/test starts them and runs it"]
async fn a_proxy_that_exits_gracefully_leaves_the_registry_and_deletes_stop_waiting_for_it() {
    let d = Deployment::new(&shared_aws_url(), Some(&shared_redis_url()));
    // A long bound, so that a proxy still registered would be waited for long after it left.
    let slow = [("REBOUND_INVALIDATION_TIMEOUT_MS", "8000")];
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &slow);
    let stays = d.proxy(dir.path(), &slow).await;
    let mut leaves = d.proxy(dir.path(), &slow).await;
    let code = create(&cp, json!({"long_url": "https://example.com/leaving"})).await;
    assert_eq!(status(&leaves, &code).await, 302);
    assert!(leaves.terminate().success());
    let (s, _) = take_down(&cp, &code, false).await;
    assert!(s.is_success());
    assert_eq!(status(&stays, &code).await, 404);
    assert_eq!(
        metric(&cp, "rebound_invalidation_waited_out_total").await,
        0.0,
        "the delete waited for no proxy that had left"
    );
    assert_eq!(
        metric(&cp, "rebound_invalidation_acks_total").await,
        1.0,
        "the remaining proxy acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_through_a_failover_to_a_replica_that_missed_the_tombstones() {
    let primary = OwnServer::redis();
    let replica = OwnServer::redis_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    // Every process reaches Redis at one address, which the failover moves to the replica.
    let vip = Relay::to(primary.port);
    let url = through_relay(&primary.url(), vip.port);
    let d = Deployment::new(&shared_aws_url(), Some(&url));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let proxies = vec![d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let history = History::default();
    let codes = warm_then_delete(&history, &cp, &proxies, async {
        // The replica has every record, then its replication is cut: the deletes' tombstones
        // reach the primary only.
        let synced: i64 = redis_cmd(primary.port, &["WAIT", "1", "5000"]).await;
        assert_eq!(synced, 1, "the replica caught up");
        let _: String = redis_cmd(replica.port, &["REPLICAOF", "NO", "ONE"]).await;
    })
    .await;
    vip.fail_over_to(replica.port);
    probe_after_fault(&history, &d, &cp, proxies, &codes).await;
    history.assert_clean("failover to a replica that missed the tombstones");
    assert!(metric(&cp, "rebound_redis_identity_changes_total").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_when_a_failover_returns_to_an_old_primary_that_had_not_resynced() {
    // Found by the randomized schedule: two failovers close together. The address moves to
    // the replica, the old primary is told to follow it but has not resynced yet (here it
    // never can: it follows a port nothing listens on), the deletes' tombstones reach the
    // new primary only, and the address moves back. The old primary's identity key names its
    // own run_id: only its new replication id tells that it missed writes.
    let first = OwnServer::redis();
    let second = OwnServer::redis_with(&["--replicaof", "127.0.0.1", &first.port.to_string()]);
    let vip = Relay::to(first.port);
    let url = through_relay(&first.url(), vip.port);
    let d = Deployment::new(&shared_aws_url(), Some(&url));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let proxies = vec![d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let history = History::default();
    let codes = warm(&history, &cp, &proxies).await;
    let synced: i64 = redis_cmd(first.port, &["WAIT", "1", "5000"]).await;
    assert_eq!(synced, 1, "the replica caught up");
    let _: String = redis_cmd(second.port, &["REPLICAOF", "NO", "ONE"]).await;
    vip.fail_over_to(second.port);
    let nowhere = free_port().to_string();
    let _: String = redis_cmd(first.port, &["REPLICAOF", "127.0.0.1", &nowhere]).await;
    for (i, code) in codes.iter().enumerate() {
        // The failover cut the control plane's connections: a delete may answer 503 until
        // it reconnects, and the client retries it (the tombstone must be on the new
        // primary before the address moves back).
        let mut tries = 0;
        while !delete_recorded(&history, &cp, code, i % 2 == 1).await {
            tries += 1;
            assert!(tries < 50, "delete {i} never succeeded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _: String = redis_cmd(first.port, &["REPLICAOF", "NO", "ONE"]).await;
    vip.fail_over_to(first.port);
    probe_after_fault(&history, &d, &cp, proxies, &codes).await;
    history.assert_clean("a failover back to an old primary that had not resynced");
    assert!(metric(&cp, "rebound_redis_identity_changes_total").await >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_when_redis_restarts_from_a_snapshot_older_than_the_deletes() {
    let mut redis = OwnServer::redis();
    let d = Deployment::new(&shared_aws_url(), Some(&redis.url()));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let proxies = vec![d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let history = History::default();
    let mut snapshot = Vec::new();
    let codes = warm_then_delete(&history, &cp, &proxies, async { snapshot = redis.snapshot() }).await;
    redis.restart_from(&snapshot);
    probe_after_fault(&history, &d, &cp, proxies, &codes).await;
    history.assert_clean("restart from a snapshot taken before the deletes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn i1_holds_on_a_redis_cluster_whose_masters_restart_from_snapshots_older_than_the_deletes() {
    // A three-master cluster of the test's own: records spread over the shards, the fleet's
    // keys and channels on one of them, so a delete writes its tombstone on one node and
    // publishes on another. Every master then loses the deletes (a restart from a snapshot
    // taken before them): each bucket's epoch, and the fleet's, must change on its own node.
    let mut cluster = OwnCluster::start();
    let mut d = Deployment::new(&shared_aws_url(), Some(&cluster.url()));
    d.env.push(("REBOUND_REDIS_CLUSTER".to_owned(), "true".to_owned()));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let proxies = vec![d.proxy(dir.path(), &[]).await, d.proxy(dir.path(), &[]).await];
    let history = History::default();
    let mut snapshots = Vec::new();
    let codes = warm_then_delete(&history, &cp, &proxies, async {
        let records = format!("{}:{{r*}}url:*", d.prefix);
        let spread: Vec<usize> = (0..3).map(|i| cluster.keys(i, &records).len()).collect();
        eprintln!("records on each master before the deletes: {spread:?}");
        snapshots = (0..3).map(|i| cluster.snapshot(i)).collect();
    })
    .await;
    for (i, snapshot) in snapshots.iter().enumerate() {
        cluster.restart_from(i, snapshot);
    }
    probe_after_fault(&history, &d, &cp, proxies, &codes).await;
    history.assert_clean("cluster masters restarted from snapshots taken before the deletes");
    assert!(metric(&cp, "rebound_redis_identity_changes_total").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn deletes_wait_for_the_proxies_a_redis_that_lost_writes_dropped_from_the_registry() {
    // Proxies cut off from Redis (their trust lapsed, their registrations no longer
    // refreshed) still serve, from the store, entries a few hundred milliseconds old; then
    // Redis loses its data (a failover to a replica that had not synced, a restore): the
    // registry no longer lists them, and a delete must still wait for them.
    let redis = OwnServer::redis();
    let d = Deployment::new(&shared_aws_url(), Some(&redis.url()));
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let relays = [Relay::to(redis.port), Relay::to(redis.port)];
    let mut proxies = Vec::new();
    for relay in &relays {
        let url = through_relay(&redis.url(), relay.port);
        proxies.push(d.proxy(dir.path(), &[("REBOUND_REDIS_URL", &url)]).await);
    }
    // The control plane reads the registry once a second: a proxy that registered less than
    // that before Redis lost its data may be unknown to it (stated in the docs). Here both
    // have been seen.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let history = History::default();
    for round in 0..4 {
        let code = create_recorded(&history, &cp, round).await;
        for relay in &relays {
            relay.freeze();
        }
        // Past invalidation_timeout: the proxies no longer trust their L1 and are not heard.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let _: () = redis_cmd(redis.port, &["FLUSHALL"]).await;
        for (n, p) in proxies.iter().enumerate() {
            assert_eq!(probe(&history, p, &format!("p{n}"), &code).await, 302);
        }
        assert!(delete_recorded(&history, &cp, &code, round % 2 == 1).await);
        for _ in 0..5 {
            for (n, p) in proxies.iter().enumerate() {
                probe(&history, p, &format!("p{n}"), &code).await;
            }
        }
        for relay in &relays {
            relay.thaw();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    history.assert_clean("a Redis that lost the registry");
}

/// The proxies of a fault schedule, probed after it.
struct Fleet<'a> {
    history: &'a History,
    client: &'a reqwest::Client,
    /// Each proxy's name and redirect URL, beside `proxies`.
    addrs: &'a [(String, String)],
    proxies: &'a [Running],
    seed: u64,
}

impl Fleet<'_> {
    /// Probes `code` on every proxy, as the visitor `agent`, until `settled(status,
    /// location)` holds there (status 0: no answer), each probe recorded; panics with the
    /// proxy's metrics when one has not settled 20 s after `started`. `wanted` names the
    /// settled answer in that message.
    async fn settles(
        &self,
        (code, agent): (&str, &str),
        started: Instant,
        wanted: &str,
        settled: impl Fn(u16, Option<&str>) -> bool,
    ) {
        let limit = Duration::from_secs(20);
        for ((name, addr), proxy) in self.addrs.iter().zip(self.proxies) {
            loop {
                let (status, location) = probe_as(self.history, self.client, addr, name, code, Some(agent)).await;
                if settled(status, location.as_deref()) {
                    break;
                }
                if started.elapsed() >= limit {
                    // What the proxy's tiers and invalidation channel say, for the diagnosis.
                    let said: Vec<String> = scrape(proxy)
                        .await
                        .lines()
                        .filter(|l| !l.starts_with('#'))
                        .filter(|l| {
                            ["invalidation", "lookups", "l1_", "epoch", "reads_"]
                                .iter()
                                .any(|k| l.contains(k))
                        })
                        .map(str::to_owned)
                        .collect();
                    panic!(
                        "seed {}: {code} still answers {status} ({location:?}), not {wanted}, on {name} after {limit:?}; its metrics:\n{}",
                        self.seed,
                        said.join("\n")
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Rules sending iPhones to `target` (docs/spec.md §14).
fn ios_rule(target: &str) -> Value {
    json!([{"os": ["ios"], "target": target}])
}

/// A small generator from a seed (xorshift), so a schedule replays from its seed.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and redis-server (the test services): scripts/test starts them and runs it"]
async fn a_randomized_schedule_of_faults_breaks_neither_i1_nor_i2() {
    let seconds: u64 = std::env::var("REBOUND_FAULT_SECONDS").map_or(45, |s| s.parse().unwrap());
    let seed: u64 = std::env::var("REBOUND_FAULT_SEED").map_or_else(
        |_| (now_millis() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        |s| s.parse().unwrap(),
    );
    eprintln!("fault schedule: seed {seed}, {seconds} s (replay with REBOUND_FAULT_SEED={seed} REBOUND_FAULT_SECONDS={seconds})");
    // A primary and a replica behind one address, which a failover moves.
    let first = OwnServer::redis();
    let replica = OwnServer::redis_with(&["--replicaof", "127.0.0.1", &first.port.to_string()]);
    let servers = [first, replica];
    let vip = Relay::to(servers[0].port);
    let url = through_relay(&servers[0].url(), vip.port);
    let d = Deployment::new(&shared_aws_url(), Some(&url));
    let dir = temp_dir();
    // Two control planes, either of which the schedule may kill and start again.
    let mut cps = [d.control_plane(dir.path(), &[]), d.control_plane(dir.path(), &[])];
    let apis: Arc<Vec<std::sync::Mutex<String>>> =
        Arc::new(cps.iter().map(|cp| std::sync::Mutex::new(cp.api())).collect());
    // Each proxy reaches that address through a relay of its own, which the schedule can freeze.
    let relays: Vec<Relay> = (0..3).map(|_| Relay::to(vip.port)).collect();
    let mut proxies = Vec::new();
    for relay in &relays {
        let url = through_relay(&url, relay.port);
        proxies.push(d.proxy(dir.path(), &[("REBOUND_REDIS_URL", &url)]).await);
    }
    let addrs: Vec<(String, String)> = proxies
        .iter()
        .enumerate()
        .map(|(n, p)| (format!("p{n}"), p.addr("redirect")))
        .collect();
    let pids: Vec<u32> = proxies.iter().map(|p| p.pid()).collect();
    let history = Arc::new(History::default());
    let pending = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    // Edits that answered 503: each code with the target it was edited away from, and for
    // whom (`None`: every visitor; an iPhone for an edit of the rules).
    type Away = (String, Option<&'static str>);
    let pending_edits = Arc::new(std::sync::Mutex::new(Vec::<(String, Away)>::new()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let client = http_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();

    let workers = (0..3).map(|w| {
        let (history, addrs, client, apis, pending, pending_edits) = (
            history.clone(),
            addrs.clone(),
            client.clone(),
            apis.clone(),
            pending.clone(),
            pending_edits.clone(),
        );
        let mut rng = Schedule(seed.rotate_left(w * 8 + 1) | 1);
        async move {
            let mut i = 0usize;
            while Instant::now() < deadline {
                i += 1;
                // The link's long_url and, on one link in two, a rule sending iPhones to a
                // target of its own (docs/spec.md §14); every target names its link and, once
                // an edit set it, the version (`/v2`, `/ios/v2`), so none is ever set twice.
                let base = format!("https://example.com/fault/{}", w as usize * 1_000_000 + i);
                let mut long = base.clone();
                let mut ios = (rng.below(2) == 0).then(|| format!("{base}/ios"));
                let mut body = json!({"long_url": long});
                if let Some(target) = &ios {
                    body["rules"] = ios_rule(target);
                }
                let api = apis[rng.below(2) as usize].lock().unwrap().clone();
                let Some(code) = create_body_at(&history, &client, &api, &body).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                for (name, addr) in &addrs {
                    for agent in [IPHONE, DESKTOP] {
                        probe_as(&history, &client, addr, name, &code, Some(agent)).await;
                    }
                }
                // Two links in three are edited, once or twice (docs/spec.md §12: the old target
                // is never served once an edit returned), each edit probed on every proxy as an
                // iPhone and as a desktop. An edit sets a new long_url; or the rules, to one
                // sending iPhones to a new target (the link's first rule, or its rule's target
                // replaced: an iPhone leaves its old target, a desktop keeps long_url); or
                // removes the rule with a new long_url (an iPhone is never sent back to a
                // target an edit took it away from).
                for version in 1..=rng.below(3) {
                    let api = apis[rng.below(2) as usize].lock().unwrap().clone();
                    let (next, next_ios) = (
                        format!("{base}/v{}", version + 1),
                        format!("{base}/ios/v{}", version + 1),
                    );
                    let (body, away, after): (Value, Vec<Away>, _) = match (rng.below(3), &ios) {
                        (0, _) => (
                            json!({"long_url": next}),
                            vec![(long.clone(), None)],
                            (next, ios.clone()),
                        ),
                        (2, Some(old)) => (
                            json!({"long_url": next, "rules": []}),
                            vec![(old.clone(), Some(IPHONE)), (long.clone(), None)],
                            (next, None),
                        ),
                        (_, old) => (
                            json!({"rules": ios_rule(&next_ios)}),
                            vec![(old.clone().unwrap_or_else(|| long.clone()), Some(IPHONE))],
                            (long.clone(), Some(next_ios)),
                        ),
                    };
                    let from: Vec<(&str, Option<&str>)> = away.iter().map(|(t, a)| (t.as_str(), *a)).collect();
                    match patch_at(&history, &client, &api, &code, version, &body, &from).await {
                        Changed::Ok => {}
                        Changed::Pending => pending_edits
                            .lock()
                            .unwrap()
                            .extend(away.into_iter().map(|away| (code.clone(), away))),
                        // Maybe made, maybe not (a killed control plane): the version is unknown.
                        Changed::Unknown => break,
                    }
                    (long, ios) = after;
                    for (name, addr) in &addrs {
                        for agent in [IPHONE, DESKTOP] {
                            probe_as(&history, &client, addr, name, &code, Some(agent)).await;
                        }
                    }
                }
                if rng.below(3) > 0 {
                    let api = apis[rng.below(2) as usize].lock().unwrap().clone();
                    if let Changed::Pending = delete_at(&history, &client, &api, &code, rng.below(2) == 0).await {
                        pending.lock().unwrap().push(code.clone());
                    }
                }
                for agent in [IPHONE, DESKTOP, IPHONE] {
                    for (name, addr) in &addrs {
                        probe_as(&history, &client, addr, name, &code, Some(agent)).await;
                    }
                }
            }
        }
    });
    let faults = async {
        let mut rng = Schedule(seed);
        let mut injected = Vec::new();
        let mut primary = 0usize;
        while Instant::now() + Duration::from_secs(3) < deadline {
            tokio::time::sleep(rng.millis(200, 1500)).await;
            let k = rng.below(3) as usize;
            let began = Instant::now();
            match rng.below(5) {
                0 => {
                    kill_subscriptions(servers[primary].port).await;
                    injected.push("subscriptions killed".to_owned());
                }
                1 => {
                    let held = rng.millis(100, 2500);
                    relays[k].freeze();
                    tokio::time::sleep(held).await;
                    relays[k].thaw();
                    injected.push(format!("p{k}'s Redis frozen {held:?}"));
                }
                2 => {
                    let held = rng.millis(100, 2000);
                    signal(pids[k], "STOP");
                    tokio::time::sleep(held).await;
                    signal(pids[k], "CONT");
                    injected.push(format!("p{k} stopped {held:?}"));
                }
                3 => {
                    // A control plane crashes (between any two steps of whatever it was
                    // doing) and another starts in its place.
                    let k = k % 2;
                    cps[k].kill();
                    tokio::time::sleep(rng.millis(0, 1000)).await;
                    cps[k] = tokio::task::block_in_place(|| d.control_plane_restarted(dir.path()));
                    *apis[k].lock().unwrap() = cps[k].api();
                    injected.push(format!("cp{k} killed"));
                }
                _ => {
                    // A failover: the replica (in sync or not) is promoted, the address
                    // moves to it, and the old primary follows it.
                    let (old, new) = (primary, 1 - primary);
                    let _: String = redis_cmd(servers[new].port, &["REPLICAOF", "NO", "ONE"]).await;
                    vip.fail_over_to(servers[new].port);
                    let _: String = redis_cmd(
                        servers[old].port,
                        &["REPLICAOF", "127.0.0.1", &servers[new].port.to_string()],
                    )
                    .await;
                    primary = new;
                    injected.push(format!("failover to r{new}"));
                }
            }
            let what = injected.last().cloned().unwrap_or_default();
            history.record(Op::Fault { what }, began, Instant::now());
        }
        injected
    };
    let (injected, _) = tokio::join!(faults, futures_util::future::join_all(workers));
    let events = history.events();
    let deletes = events
        .iter()
        .filter(|e| matches!(e.op, Op::Delete { ok: true, .. }))
        .count();
    let edits = events
        .iter()
        .filter(|e| {
            matches!(
                e.op,
                Op::Edit {
                    agent: None,
                    ok: true,
                    ..
                }
            )
        })
        .count();
    let rule_edits = events
        .iter()
        .filter(|e| {
            matches!(
                e.op,
                Op::Edit {
                    agent: Some(_),
                    ok: true,
                    ..
                }
            )
        })
        .count();
    eprintln!(
        "fault schedule seed {seed}: {} faults, {deletes} deletes, {edits} edits of long_url, {rule_edits} of the rules, {} events; faults: {injected:?}",
        injected.len(),
        events.len()
    );
    history.assert_clean(&format!("seed {seed} (faults: {injected:?})"));
    assert!(
        deletes >= 10 && edits >= 5 && rule_edits >= 5 && injected.len() >= 5,
        "too little happened to judge"
    );
    // The checker compares locations with the targets edited away from: the proxies must
    // have answered with the edited targets too, long_url's to a desktop and the rule's to
    // an iPhone, or it compared nothing. No rule matches a desktop: it is never sent to a
    // rule's target.
    let answered = |agent: &str, to: &dyn Fn(&str) -> bool| {
        events
            .iter()
            .filter(|e| matches!(&e.op, Op::Probe { location: Some(l), agent: Some(a), .. } if a == agent && to(l)))
            .count()
    };
    let by_rule = |l: &str| l.contains("/ios");
    let edited = |l: &str| l.rsplit('/').next().is_some_and(|last| last.starts_with('v'));
    let served_edited = answered(DESKTOP, &|l| edited(l) && !by_rule(l));
    let served_rule = answered(IPHONE, &by_rule);
    let served_edited_rule = answered(IPHONE, &|l| edited(l) && by_rule(l));
    eprintln!(
        "fault schedule seed {seed}: desktops sent to an edited long_url {served_edited} times; iPhones to a rule's target {served_rule} times, to one an edit set {served_edited_rule}"
    );
    assert!(served_edited > 0, "no probe was answered with an edited target");
    assert!(
        served_edited_rule > 0,
        "no iPhone was sent to a target an edit of the rules set"
    );
    assert_eq!(answered(DESKTOP, &by_rule), 0, "a desktop was sent to a rule's target");
    // Deletes that answered 503 were durable: the reconcilers finish them, with no retry.
    let fleet = Fleet {
        history: &history,
        client: &client,
        addrs: &addrs,
        proxies: &proxies,
        seed,
    };
    let pending = pending.lock().unwrap().clone();
    let started = Instant::now();
    for code in &pending {
        fleet
            .settles((code, DESKTOP), started, "404", |status, _| status == 404)
            .await;
    }
    eprintln!(
        "fault schedule seed {seed}: {} deletes answered 503, all 404 everywhere {:?} after the schedule ended",
        pending.len(),
        started.elapsed()
    );
    // Edits that answered 503 were durable too: the reconcilers tell every proxy, and the
    // old target goes (the link may have been deleted since: a 404 is gone too), asked as
    // the visitor it was edited away for (a desktop for long_url's). Only an answer counts:
    // one without the old target in its `Location`.
    let pending_edits = pending_edits.lock().unwrap().clone();
    let started = Instant::now();
    for (code, (old, agent)) in &pending_edits {
        let gone = |status, location: Option<&str>| status != 0 && location != Some(old.as_str());
        let visitor = agent.unwrap_or(DESKTOP);
        fleet
            .settles(
                (code, visitor),
                started,
                &format!("no redirect to {old} for {visitor}"),
                gone,
            )
            .await;
    }
    eprintln!(
        "fault schedule seed {seed}: {} old targets of edits that answered 503, gone everywhere {:?} after",
        pending_edits.len(),
        started.elapsed()
    );
    drop(proxies);
}
