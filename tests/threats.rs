//! Abuse kept out (docs/spec.md §12, issue 33), black-box on the all-in-one: threat lists read from
//! a local file and from a feed served on loopback, refreshed every second; a create on a
//! listed target refused naming the list; a feed refresh taking a live link down with its
//! audit entry; an operator reinstating it for good; a restart reading only the links on
//! the listed hosts, and lists back to content they held before taking down a link made in
//! between (issue 42); anonymous abuse reports, rate limited and listed for operators.

use rebound_test_support as common;

use common::rebound::Rebound;
use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A feed served over HTTP on loopback: every request gets the body as it is now.
struct Feed {
    body: Arc<Mutex<String>>,
    url: String,
    served: Arc<std::sync::atomic::AtomicUsize>,
}

impl Feed {
    async fn start(body: &str) -> Feed {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/downloads/csv_recent/", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(body.to_owned()));
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (text, count) = (body.clone(), served.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let text = text.lock().unwrap().clone();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = vec![0u8; 4096];
                    let _ = conn.read(&mut head).await;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        Feed { body, url, served }
    }

    fn set(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_owned();
    }
}

/// A URLhaus `csv_recent` feed listing `urls`, in the shape the real one has.
fn urlhaus(urls: &[&str]) -> String {
    let mut text = String::from(
        "################################################################\n\
         # abuse.ch URLhaus Database Dump (CSV - recent URLs only)      #\n\
         ################################################################\n\
         #\n\
         # id,dateadded,url,url_status,last_online,threat,tags,urlhaus_link,reporter\n",
    );
    for (i, url) in urls.iter().enumerate() {
        text.push_str(&format!(
            "\"{}\",\"2026-12-05 06:00:00\",\"{url}\",\"online\",\"2026-12-05 06:00:00\",\"malware_download\",\"elf\",\"https://urlhaus.abuse.ch/url/{}/\",\"anonymous\"\n",
            3_000_000 + i,
            3_000_000 + i
        ));
    }
    text
}

async fn status_of(rb: &Rebound, code: &str) -> u16 {
    rb.get(&format!("/{code}")).await.status().as_u16()
}

/// Polls until `done` holds, for at most 20 s.
async fn within_20_s<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "{what} within 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threat_lists_refuse_targets_take_links_down_on_refresh_and_operators_reinstate_them() {
    let dir = temp_dir();
    let hosts = dir.path().join("blocked-hosts.txt");
    std::fs::write(&hosts, "# local list\n0.0.0.0 bad.example\n").unwrap();
    let feed = Feed::start(&urlhaus(&["http://203.0.113.9/bins/x86"])).await;
    let lists = format!("urlhaus=urlhaus:{},local=domains:{}", feed.url, hosts.display());
    let rb = Rebound::start(
        dir.path(),
        &[("REBOUND_THREAT_LISTS", &lists), ("REBOUND_THREAT_REFRESH_SECS", "1")],
    );
    rb.wait_ready().await;
    within_20_s("both lists loaded", || async {
        let (_, v) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
        v["lists"]
            .as_array()
            .is_some_and(|l| l.len() == 2 && l.iter().all(|l| l["entries"] == 1))
    })
    .await;

    // Creates on a listed target are refused, naming the list; the rest are served.
    for (url, list) in [
        ("http://203.0.113.9/bins/x86", "urlhaus"),
        ("https://cdn.bad.example/a", "local"),
    ] {
        let (s, v) = rb
            .api(Method::POST, "/api/v1/links", Some(json!({"long_url": url})))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["code"], "blocked_target");
        assert!(v["error"]["message"].as_str().unwrap().contains(list), "{v}");
    }
    let victim = rb
        .create_code(json!({"long_url": "https://victim.example/download/setup.exe", "custom_alias": "victim"}))
        .await;
    let fine = rb.create_code(json!({"long_url": "https://fine.example/"})).await;
    for code in [&victim, &fine] {
        assert_eq!(status_of(&rb, code).await, 302);
        assert_eq!(status_of(&rb, code).await, 302, "now from L1");
    }

    // The feed lists the victim's target: the next refresh takes the link down, audited.
    feed.set(&urlhaus(&[
        "http://203.0.113.9/bins/x86",
        "https://victim.example/download/setup.exe",
    ]));
    within_20_s("the listed link taken down", || async {
        status_of(&rb, &victim).await == 404
    })
    .await;
    assert_eq!(status_of(&rb, &fine).await, 302);
    let (_, audit) = rb.api(Method::GET, "/api/v1/links/victim/audit", None).await;
    let entry = &audit["events"][0];
    assert_eq!(
        (&entry["action"], &entry["actor"], &entry["reason"], &entry["outcome"]),
        (
            &json!("takedown"),
            &json!("threat-lists"),
            &json!("threat-list:urlhaus"),
            &json!("ok")
        ),
        "{audit}"
    );
    let (_, link) = rb.api(Method::GET, "/api/v1/links/victim", None).await;
    assert_eq!(
        (&link["is_active"], &link["delete_reason"]),
        (&json!(false), &json!("threat-list:urlhaus"))
    );

    // An operator reinstates it (a false positive): served again at once, and kept up through
    // later refreshes and rescans.
    let (ok, out, err) = cli(&rb.run.api(), Some(OPERATOR_KEY), &["abuse", "reinstate", "victim"]);
    assert!(
        ok && out.contains("https://victim.example/download/setup.exe"),
        "{out}{err}"
    );
    assert_eq!(status_of(&rb, &victim).await, 302);
    let served = feed.served.load(std::sync::atomic::Ordering::SeqCst);
    feed.set(&urlhaus(&[
        "http://203.0.113.9/bins/x86",
        "https://victim.example/download/setup.exe",
        "http://203.0.113.10/i",
    ]));
    within_20_s("two more loads of the feed", || async {
        feed.served.load(std::sync::atomic::Ordering::SeqCst) >= served + 2
    })
    .await;
    assert_eq!(status_of(&rb, &victim).await, 302, "reinstated for good");
    // The local file changes too: a new host is refused from the next load.
    std::fs::write(&hosts, "# local list\n0.0.0.0 bad.example\nworse.example\n").unwrap();
    within_20_s("the file's new host refused", || async {
        let (s, _) = rb
            .api(
                Method::POST,
                "/api/v1/links",
                Some(json!({"long_url": "https://worse.example/"})),
            )
            .await;
        s == StatusCode::BAD_REQUEST
    })
    .await;
    // The loader puts a changed list in force, then rescans: the refusal above can come
    // before the rescan that follows the file's load has ended. That rescan's outcome is
    // the one whose start is at or after the file's load.
    let deadline = Instant::now() + Duration::from_secs(20);
    let lists = loop {
        let (_, lists) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
        let loaded = lists["lists"][1]["loaded_at"].as_str().unwrap_or_default().to_owned();
        if lists["last_rescan_at"].as_str().is_some_and(|at| at >= loaded.as_str()) {
            break lists;
        }
        assert!(
            Instant::now() < deadline,
            "the rescan after the file's load within 20 s: {lists}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lists["lists"][0]["entries"], 3, "{lists}");
    assert_eq!(lists["lists"][1]["entries"], 2, "{lists}");
    assert!(lists["last_rescan_scanned"].as_u64().unwrap() >= 2, "{lists}");
    let (ok, out, err) = cli(&rb.run.api(), Some(OPERATOR_KEY), &["abuse", "lists"]);
    assert!(
        ok && out.contains("urlhaus") && out.contains("local") && out.contains("last check"),
        "{out}{err}"
    );

    // A feed that breaks keeps the entries before it, and says why.
    feed.set("<html><body>503 Service Unavailable</body></html>");
    within_20_s("the failed load reported", || async {
        let (_, v) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
        v["lists"][0]["error"].is_string()
    })
    .await;
    let (s, _) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "http://203.0.113.10/i"})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "the entries before stay in force");
    assert!(rb.metric("rebound_threat_takedowns_total{list=\"urlhaus\"}").await >= 1.0);

    // The feed back as it was: the error goes, and the same bytes are the same list (not a
    // change: its load time and the last rescan stay).
    let (_, before) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
    feed.set(&urlhaus(&[
        "http://203.0.113.9/bins/x86",
        "https://victim.example/download/setup.exe",
        "http://203.0.113.10/i",
    ]));
    within_20_s("the feed read again", || async {
        let (_, v) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
        v["lists"][0]["error"].is_null()
    })
    .await;
    let (_, after) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
    assert_eq!(after["lists"][0]["entries"], 3, "{after}");
    assert_eq!(
        after["lists"][0]["loaded_at"], before["lists"][0]["loaded_at"],
        "{after}"
    );
    assert_eq!(after["last_rescan_at"], before["last_rescan_at"], "{after}");
}

/// The last rescan's time, once there was one.
async fn last_rescan(rb: &Rebound) -> Option<String> {
    let (_, v) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
    v["last_rescan_at"].as_str().map(str::to_owned)
}

async fn last_scanned(rb: &Rebound) -> Option<u64> {
    let (_, v) = rb.api(Method::GET, "/api/v1/threat-lists", None).await;
    v["last_rescan_scanned"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_reads_only_the_links_on_the_listed_hosts_again() {
    let dir = temp_dir();
    let hosts = dir.path().join("blocked-hosts.txt");
    std::fs::write(&hosts, "bad.example\n").unwrap();
    let lists = format!("local=domains:{}", hosts.display());
    let env = [
        ("REBOUND_THREAT_LISTS", lists.as_str()),
        ("REBOUND_THREAT_REFRESH_SECS", "1"),
    ];
    let rb = Rebound::start(dir.path(), &env);
    rb.wait_ready().await;
    for (alias, url) in [
        ("fine", "https://fine.example/"),
        ("also", "https://also.fine.example/x"),
        ("other", "https://other.example/"),
    ] {
        rb.create_code(json!({"long_url": url, "custom_alias": alias})).await;
    }
    within_20_s("the first load's rescan", || async { last_rescan(&rb).await.is_some() }).await;
    assert_eq!(last_scanned(&rb).await, Some(0), "no link on bad.example");
    drop(rb);

    // The same lists after a restart: their entries looked up again, no link read (none is
    // on their hosts); refreshes of unchanged lists rescan nothing.
    let rb = Rebound::start(dir.path(), &env);
    rb.wait_ready().await;
    within_20_s("the lists loaded again", || async { last_rescan(&rb).await.is_some() }).await;
    let first = last_rescan(&rb).await.unwrap();
    assert_eq!(last_scanned(&rb).await, Some(0));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        last_rescan(&rb).await.as_deref(),
        Some(first.as_str()),
        "refreshes of unchanged lists rescan nothing"
    );

    // An entry added: the links on its host alone are read, and taken down.
    std::fs::write(&hosts, "bad.example\nfine.example\n").unwrap();
    within_20_s("the changed list rescanned", || async {
        status_of(&rb, "fine").await == 404 && status_of(&rb, "also").await == 404
    })
    .await;
    assert_eq!(last_scanned(&rb).await, Some(2), "the two links on fine.example alone");
    assert_eq!(status_of(&rb, "other").await, 302);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_back_to_content_it_held_before_takes_down_a_link_made_in_between() {
    // Issue 42, item 12: content A (holds w.example), then B (without it), a link to
    // w.example made under B, then A again.
    let dir = temp_dir();
    let hosts = dir.path().join("hosts.txt");
    let (a, b) = ("w.example\nx.example\n", "x.example\n");
    std::fs::write(&hosts, a).unwrap();
    let lists = format!("local=domains:{}", hosts.display());
    let rb = Rebound::start(
        dir.path(),
        &[("REBOUND_THREAT_LISTS", &lists), ("REBOUND_THREAT_REFRESH_SECS", "1")],
    );
    rb.wait_ready().await;
    let seen = Arc::new(Mutex::new(None));
    within_20_s("A rescanned", || async {
        *seen.lock().unwrap() = last_rescan(&rb).await;
        seen.lock().unwrap().is_some()
    })
    .await;
    let after_a = seen.lock().unwrap().clone().unwrap();
    std::fs::write(&hosts, b).unwrap();
    within_20_s("B rescanned", || async {
        last_rescan(&rb).await.is_some_and(|at| at != after_a)
    })
    .await;
    let (s, v) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://w.example/p", "custom_alias": "wlink"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(status_of(&rb, "wlink").await, 302);
    std::fs::write(&hosts, a).unwrap();
    within_20_s("the link made under B taken down", || async {
        status_of(&rb, "wlink").await == 404
    })
    .await;
    let (_, link) = rb.api(Method::GET, "/api/v1/links/wlink", None).await;
    assert_eq!(link["delete_reason"], "threat-list:local", "{link}");
    let (s, v) = rb
        .api(
            Method::POST,
            "/api/v1/links",
            Some(json!({"long_url": "https://w.example/q"})),
        )
        .await;
    assert_eq!(
        (s, &v["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("blocked_target"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anyone_reports_a_short_link_and_operators_see_the_reports() {
    let dir = temp_dir();
    let rb = Rebound::start(dir.path(), &[("REBOUND_MAX_BODY_BYTES", "4096")]);
    let code = rb.create_code(json!({"long_url": "https://example.com/odd"})).await;
    let short = format!("{}/{code}", rb.run.addr("redirect"));
    let report = |link: String, reason: &str| {
        let body = json!({"link": link, "reason": reason});
        let req = rb
            .http
            .post(format!("{}/api/v1/abuse-reports", rb.run.api()))
            .json(&body);
        async move {
            let res = req.send().await.unwrap();
            (res.status(), res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (s, v) = report(short.clone(), "a fake bank login page").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    let (s, v) = report(format!("{short}-not-a-link"), "x").await;
    assert_eq!((s, &v["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    // Size bounded: the body (api.max_body_bytes), and the reason.
    let (s, v) = report(short.clone(), &"x".repeat(1_001)).await;
    assert_eq!(
        (s, &v["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_reason"))
    );
    let huge = "x".repeat(5_000);
    let (s, _) = report(short.clone(), &huge).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    // Five at once (the report of a link that is not there took one), then 429.
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(report(short.clone(), "again").await.0);
    }
    assert_eq!(
        answers,
        [
            StatusCode::ACCEPTED,
            StatusCode::ACCEPTED,
            StatusCode::ACCEPTED,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "reports are rate limited per network"
    );
    let (s, v) = rb.api(Method::GET, "/api/v1/abuse-reports", None).await;
    assert_eq!(s, StatusCode::OK);
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 4, "{v}");
    assert_eq!(reports[3]["reason"], "a fake bank login page");
    assert_eq!(reports[3]["code"], code);
    assert_eq!(reports[3]["reporter"], "anonymous:127.0.0.1");
    let (ok, out, err) = cli(&rb.run.api(), Some(OPERATOR_KEY), &["abuse", "reports"]);
    assert!(
        ok && out.contains("a fake bank login page") && out.contains(&code),
        "{out}{err}"
    );
    // The CLI reports with no key; this network's reports are spent for now.
    let (ok, _, err) = cli(&rb.run.api(), None, &["abuse", "report", &short, "--reason", "spam"]);
    assert!(!ok && err.contains("429"), "{err}");
}
