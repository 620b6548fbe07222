//! Operating Rebound, black-box: the metrics of the three kinds of process (the all-in-one,
//! a control plane with its click consumer, a proxy) pass `promtool check metrics` and
//! cover every metric the Grafana dashboard queries; the CloudFormation template makes
//! exactly what `rebound provision` makes, and a control plane and a proxy run on it; the
//! global tables' template declares the same tables.
//! The processes run on the Redis and moto that `scripts/test` starts.

use rebound_test_support as common;

use common::fleet::{aws_conf, clicks, get, provision, start_control_plane, start_proxy};
use common::services::*;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits until `check` holds for `p`'s scrape, at most `limit`.
async fn wait_for_scrape(p: &Running, what: &str, limit: Duration, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = scrape(p).await;
        if check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{what} never showed in the scrape:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The three kinds of process, each with traffic through every part it runs.
struct Fleet {
    all_in_one: Running,
    control_plane: Running,
    proxy: Running,
    _dirs: Vec<tempfile::TempDir>,
}

async fn fleet() -> Fleet {
    let (aio_dir, cp_dir, proxy_dir) = (temp_dir(), temp_dir(), temp_dir());
    let all_in_one = start(&[], aio_dir.path(), &[], &["API", "redirect", "metrics"]);
    wait_ready(&all_in_one).await;
    let link = create_link(&all_in_one, json!({"long_url": "https://example.com/aio"})).await;
    let code = link["code"].as_str().unwrap();
    assert_eq!(get(&all_in_one, code).await.status(), StatusCode::FOUND);

    let id = unique_id();
    let env = distributed_env(
        &shared_aws_url(),
        Some(&shared_redis_url()),
        &format!("m{id}_"),
        &format!("m{id}-clicks"),
    );
    provision(&env);
    let control_plane = start_control_plane(cp_dir.path(), &env);
    let proxy = start_proxy(proxy_dir.path(), &env).await;
    let link = create_link(&control_plane, json!({"long_url": "https://example.com/fleet"})).await;
    let code = link["code"].as_str().unwrap();
    for _ in 0..2 {
        assert_eq!(get(&proxy, code).await.status(), StatusCode::FOUND);
    }
    // The click travels proxy → SQS → consumer: every consumer metric has a sample then.
    wait_for_scrape(
        &control_plane,
        "an applied click batch",
        Duration::from_secs(40),
        |text| metric_in(text, "rebound_consumer_batches_applied_total") > 0.0,
    )
    .await;
    Fleet {
        all_in_one,
        control_plane,
        proxy,
        _dirs: vec![aio_dir, cp_dir, proxy_dir],
    }
}

#[tokio::test]
#[ignore = "needs REBOUND_TEST_PROMTOOL, REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL (scripts/test sets them)"]
async fn every_process_exports_metrics_that_promtool_accepts() {
    let promtool = env_or_panic("REBOUND_TEST_PROMTOOL");
    let fleet = fleet().await;
    let everywhere = [
        "rebound_build_info",
        "rebound_ready",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_threads",
        "rebound_edge_open_connections",
        "rebound_adapter_calls_total",
        "rebound_adapter_call_duration_seconds_bucket",
    ];
    let own: [(&str, &Running, &[&str]); 3] = [
        (
            "all-in-one",
            &fleet.all_in_one,
            &[
                "rebound_redirect_requests_total",
                "rebound_api_requests_total",
                "rebound_api_writes_total",
                "rebound_kgs_leases_total",
                "rebound_bloom_current",
                "rebound_issued_high_water",
            ],
        ),
        (
            "control plane",
            &fleet.control_plane,
            &[
                "rebound_api_requests_total",
                "rebound_api_request_duration_seconds_bucket",
                "rebound_consumer_messages_received_total",
                "rebound_click_queue_messages",
                "rebound_consumer_oldest_message_age_seconds",
                "rebound_redis_breaker_open",
                "rebound_redis_identity_changes_total",
            ],
        ),
        (
            "proxy",
            &fleet.proxy,
            &[
                "rebound_redirect_requests_total",
                "rebound_invalidation_channel_healthy",
                "rebound_redis_breaker_open",
                "rebound_redis_identity_changes_total",
                "rebound_bloom_current",
                "rebound_issued_high_water",
            ],
        ),
    ];
    for (what, process, names) in own {
        let text = scrape(process).await;
        let present = sample_names(&text);
        for name in everywhere.iter().chain(names.iter()) {
            assert!(present.contains(*name), "the {what} does not export {name}");
        }
        let mut check = std::process::Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run promtool");
        use std::io::Write;
        check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = check.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool check metrics refuses the {what}'s metrics:\n{said}"
        );
    }
    // Each adapter is counted where it runs.
    let calls = |adapter: &str, operation: &str| {
        format!("rebound_adapter_calls_total{{adapter=\"{adapter}\",operation=\"{operation}\",outcome=\"ok\"}}")
    };
    let aio = scrape(&fleet.all_in_one).await;
    assert!(metric_in(&aio, &calls("sqlite", "insert_link")) >= 1.0);
    let cp = scrape(&fleet.control_plane).await;
    assert!(metric_in(&cp, &calls("dynamodb", "insert_link")) >= 1.0);
    assert!(metric_in(&cp, &calls("redis", "announce_created")) >= 1.0);
    assert!(metric_in(&cp, &calls("sqs", "receive_message")) >= 1.0);
    let proxy = scrape(&fleet.proxy).await;
    // Every operation's `ok` series is printed from the start (0 until called): the proxy
    // found the link in Redis or read it from DynamoDB.
    assert!(
        metric_in(&proxy, &calls("redis", "get_record")) >= 1.0
            || metric_in(&proxy, &calls("dynamodb", "get_link")) >= 1.0,
        "the proxy read the link from Redis or DynamoDB"
    );
    assert!(metric_in(&proxy, &calls("sqs", "send_message_batch")) >= 1.0);
}

/// The metric names a PromQL expression reads (label names, functions, keywords left out).
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    let mut text = String::new();
    // Drop label matchers, range selectors and quoted strings.
    let mut depth_brace = 0;
    let mut depth_bracket = 0;
    let mut in_string = false;
    for c in expr.chars() {
        match c {
            '"' if depth_brace > 0 || in_string => in_string = !in_string,
            _ if in_string => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            c => text.push(c),
        }
        if matches!(c, '}' | ']') {
            text.push(' ');
        }
    }
    let mut names = BTreeSet::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut grouping = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let rest: String = chars[i..].iter().collect();
            let rest = rest.trim_start();
            let aggregation = rest.starts_with('(') || rest.starts_with("by ") || rest.starts_with("without ");
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                grouping = true;
            } else if aggregation || grouping {
                // A function or an aggregation (`sum by (…) (…)`), or a label inside `by (…)`.
            } else if !matches!(word.as_str(), "and" | "or" | "unless" | "bool" | "offset") {
                names.insert(word);
            }
        } else {
            if c == ')' {
                grouping = false;
            }
            i += 1;
        }
    }
    names
}

#[test]
fn promql_names_leave_out_labels_functions_and_ranges() {
    let names = promql_metric_names(
        r#"histogram_quantile(0.99, sum by (route, le) (rate(rebound_api_request_duration_seconds_bucket{instance=~"$instance",x="a{b}"}[$__rate_interval]))) / on (x) process_threads and up"#,
    );
    let expected: BTreeSet<String> = ["rebound_api_request_duration_seconds_bucket", "process_threads", "up"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}

/// Every query of the dashboard, by the title of the row it is in.
fn dashboard_queries(path: &Path) -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut row = String::new();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            row = panel["title"].as_str().unwrap().to_owned();
            continue;
        }
        for target in panel["targets"].as_array().unwrap() {
            queries.push((row.clone(), target["expr"].as_str().unwrap().to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = variable["query"]["query"].as_str() {
            // label_values(metric, label)
            let metric = q.trim_start_matches("label_values(").split(',').next().unwrap().trim();
            queries.push(("Backends and processes".to_owned(), metric.to_owned()));
        }
    }
    queries
}

#[tokio::test]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and REBOUND_TEST_REDIS_URL (scripts/test sets them)"]
async fn every_metric_the_dashboard_queries_is_exported_by_the_processes_it_is_about() {
    let queries = dashboard_queries(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/rebound.json"));
    assert!(queries.len() > 20, "the dashboard has its panels");
    let fleet = fleet().await;
    let aio = sample_names(&scrape(&fleet.all_in_one).await);
    let cp = sample_names(&scrape(&fleet.control_plane).await);
    let proxy = sample_names(&scrape(&fleet.proxy).await);
    // Which processes each row of the dashboard is about: each must export every metric
    // the row queries.
    let exporters = |row: &str| -> Vec<(&str, &BTreeSet<String>)> {
        match row {
            "Redirects" | "Clicks" => vec![("all-in-one", &aio), ("proxy", &proxy)],
            "API" => vec![("all-in-one", &aio), ("control plane", &cp)],
            "Click consumer" => vec![("control plane", &cp)],
            "Distributed health" => vec![("proxy", &proxy)],
            // A fleet of one region, the all-in-one too, shows its own region (at 0 before
            // any delete), not "No data".
            "Regions" => vec![("all-in-one", &aio), ("control plane", &cp)],
            "Backends and processes" => vec![("all-in-one", &aio), ("control plane", &cp), ("proxy", &proxy)],
            other => panic!("the test does not know which processes the dashboard row {other:?} is about"),
        }
    };
    let mut checked = 0;
    for (row, expr) in &queries {
        let names = promql_metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        for name in names {
            for (what, present) in exporters(row) {
                assert!(
                    present.contains(&name),
                    "the dashboard's row {row:?} queries {name}, which the {what} does not export ({expr})"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50);
}

/// A table as DescribeTable states it, in an order-free form.
#[derive(Debug, PartialEq, Eq)]
struct TableShape {
    keys: Vec<(String, String)>,
    attributes: BTreeMap<String, String>,
    indexes: BTreeMap<String, (Vec<(String, String)>, String)>,
    billing: String,
}

async fn table_shape(client: &aws_sdk_dynamodb::Client, name: &str) -> TableShape {
    let t = client.describe_table().table_name(name).send().await.unwrap();
    let t = t.table().unwrap();
    let keys = |schema: &[aws_sdk_dynamodb::types::KeySchemaElement]| {
        schema
            .iter()
            .map(|k| (k.attribute_name().to_owned(), k.key_type().as_str().to_owned()))
            .collect::<Vec<_>>()
    };
    TableShape {
        keys: keys(t.key_schema()),
        attributes: t
            .attribute_definitions()
            .iter()
            .map(|a| (a.attribute_name().to_owned(), a.attribute_type().as_str().to_owned()))
            .collect(),
        indexes: t
            .global_secondary_indexes()
            .iter()
            .map(|g| {
                let projection = g
                    .projection()
                    .and_then(|p| p.projection_type())
                    .map_or("", |p| p.as_str());
                (
                    g.index_name().unwrap_or_default().to_owned(),
                    (keys(g.key_schema()), projection.to_owned()),
                )
            })
            .collect(),
        billing: t
            .billing_mode_summary()
            .and_then(|b| b.billing_mode())
            .map_or("PROVISIONED", |b| b.as_str())
            .to_owned(),
    }
}

/// The tables whose names start with `prefix`, without it.
async fn tables_named(client: &aws_sdk_dynamodb::Client, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut start: Option<String> = None;
    loop {
        let page = client
            .list_tables()
            .set_exclusive_start_table_name(start.clone())
            .send()
            .await
            .unwrap();
        names.extend(
            page.table_names()
                .iter()
                .filter_map(|n| n.strip_prefix(prefix).map(String::from)),
        );
        match page.last_evaluated_table_name() {
            Some(last) => start = Some(last.to_owned()),
            None => return names,
        }
    }
}

/// The TTL attribute of each table the template declares (moto's CloudFormation does not
/// apply `TimeToLiveSpecification`, so the template's own text is what is compared).
fn template_ttls(template: &serde_yaml::Value) -> BTreeMap<String, Option<String>> {
    let mut ttls = BTreeMap::new();
    for (_, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::DynamoDB::Table") {
            continue;
        }
        let props = &resource["Properties"];
        let name = match &props["TableName"] {
            serde_yaml::Value::Tagged(sub) => sub.value.as_str().unwrap().to_owned(),
            other => panic!("TableName is not a !Sub of the prefix: {other:?}"),
        };
        let table = name
            .strip_prefix("${TablePrefix}")
            .expect("every table is named <prefix><table>")
            .to_owned();
        let ttl = &props["TimeToLiveSpecification"];
        let attribute =
            (ttl["Enabled"].as_bool() == Some(true)).then(|| ttl["AttributeName"].as_str().unwrap().to_owned());
        ttls.insert(table, attribute);
    }
    ttls
}

/// The DynamoDB tables a template declares as resources of type `kind`: each one's
/// properties, by logical id.
fn template_tables<'a>(template: &'a serde_yaml::Value, kind: &str) -> BTreeMap<String, &'a serde_yaml::Value> {
    template["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, resource)| resource["Type"].as_str() == Some(kind))
        .map(|(id, resource)| (id.as_str().unwrap().to_owned(), &resource["Properties"]))
        .collect()
}

/// `!Name [items…]` as (`Name`, items).
fn intrinsic(value: &serde_yaml::Value) -> (String, &[serde_yaml::Value]) {
    match value {
        serde_yaml::Value::Tagged(tagged) => (
            tagged.tag.to_string().trim_start_matches('!').to_owned(),
            tagged.value.as_sequence().map_or(&[][..], |s| s.as_slice()),
        ),
        other => panic!("not an intrinsic function: {other:?}"),
    }
}

/// The index `!Select [n, …]` picks.
fn selected_index(select: &serde_yaml::Value) -> u64 {
    let (name, args) = intrinsic(select);
    assert_eq!(name, "Select");
    args[0].as_u64().unwrap()
}

#[test]
fn the_global_tables_are_the_tables_of_the_regional_template() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| -> serde_yaml::Value {
        serde_yaml::from_str(&std::fs::read_to_string(root.join(path)).unwrap()).unwrap()
    };
    let regional = read("deploy/aws/rebound.yaml");
    let global = read("deploy/aws/rebound-global.yaml");
    let tables = template_tables(&regional, "AWS::DynamoDB::Table");
    let global_tables = template_tables(&global, "AWS::DynamoDB::GlobalTable");
    assert_eq!(tables.len(), 9, "rebound.yaml declares the nine tables");
    assert_eq!(
        tables.keys().collect::<Vec<_>>(),
        global_tables.keys().collect::<Vec<_>>(),
        "rebound-global.yaml declares the same tables, and nothing else is a table there"
    );
    let mut first_replicas: Option<(&str, &serde_yaml::Value)> = None;
    for (id, table) in &tables {
        let global_table = global_tables[id];
        for property in [
            "TableName",
            "BillingMode",
            "KeySchema",
            "AttributeDefinitions",
            "GlobalSecondaryIndexes",
            "TimeToLiveSpecification",
        ] {
            assert_eq!(
                table.get(property),
                global_table.get(property),
                "{id}: {property} differs between rebound.yaml and rebound-global.yaml"
            );
        }
        // Replication reads the table's stream.
        assert_eq!(
            global_table["StreamSpecification"]["StreamViewType"].as_str(),
            Some("NEW_AND_OLD_IMAGES"),
            "{id}"
        );
        // Every table is replicated to the same regions: the stack's own, then entry n of
        // ReplicaRegions under condition Replica<n+1>.
        let replicas = &global_table["Replicas"];
        match first_replicas {
            None => first_replicas = Some((id.as_str(), replicas)),
            Some((first, theirs)) => assert_eq!(replicas, theirs, "{id} and {first} have different replicas"),
        }
        let replicas = replicas.as_sequence().unwrap();
        assert_eq!(
            replicas[0]["Region"],
            serde_yaml::from_str::<serde_yaml::Value>("!Ref AWS::Region").unwrap(),
            "{id}: the first replica is the stack's own region"
        );
        assert_eq!(replicas.len(), 16, "{id}: one replica per region slot");
        for (n, replica) in replicas.iter().enumerate().skip(1) {
            let (name, args) = intrinsic(replica);
            assert_eq!(name, "If", "{id}: replica {n}");
            let condition = format!("Replica{n}");
            assert_eq!(args[0].as_str(), Some(condition.as_str()), "{id}: replica {n}");
            assert_eq!(selected_index(&args[1]["Region"]), n as u64 - 1, "{id}: replica {n}");
            // The condition tests the entry the replica takes.
            let (not, negated) = intrinsic(&global["Conditions"][condition.as_str()]);
            assert_eq!(not, "Not");
            let (equals, compared) = intrinsic(&negated[0]);
            assert_eq!(equals, "Equals");
            assert_eq!(
                compared[0], args[1]["Region"],
                "{condition} tests the region replica {n} takes"
            );
        }
    }
}

async fn ttl_attribute(client: &aws_sdk_dynamodb::Client, table: &str) -> Option<String> {
    let out = client.describe_time_to_live().table_name(table).send().await.unwrap();
    let d = out.time_to_live_description()?;
    (d.time_to_live_status() == Some(&aws_sdk_dynamodb::types::TimeToLiveStatus::Enabled))
        .then(|| d.attribute_name().unwrap_or_default().to_owned())
}

/// A queue's visibility timeout, and its redrive policy's receive count and target queue name.
async fn queue_shape(client: &aws_sdk_sqs::Client, name: &str) -> (String, Option<(String, String)>) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let url = client.get_queue_url().queue_name(name).send().await.unwrap();
    let attrs = client
        .get_queue_attributes()
        .queue_url(url.queue_url().unwrap())
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attrs = attrs.attributes().unwrap();
    let redrive = attrs.get(&QueueAttributeName::RedrivePolicy).map(|p| {
        let p: Value = serde_json::from_str(p).unwrap();
        let count = match &p["maxReceiveCount"] {
            Value::String(s) => s.clone(),
            n => n.to_string(),
        };
        let target = p["deadLetterTargetArn"].as_str().unwrap().rsplit(':').next().unwrap();
        (count, target.to_owned())
    });
    (attrs[&QueueAttributeName::VisibilityTimeout].clone(), redrive)
}

#[tokio::test]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL and python3 with boto3 (moto's; scripts/test sets it up)"]
async fn the_cloudformation_template_makes_what_provision_makes_and_rebound_runs_on_it() {
    let aws_url = shared_aws_url();
    let id = unique_id();
    let (stack, template_prefix, template_queue) =
        (format!("rebound-{id}"), format!("t{id}_"), format!("t{id}-clicks"));
    let (provisioned_prefix, provisioned_queue) = (format!("p{id}_"), format!("p{id}-clicks"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let template_env = distributed_env(&aws_url, None, &template_prefix, &template_queue);
    let deployed = std::process::Command::new(root.join("scripts/cfn-deploy"))
        .args([&stack, &template_prefix, &template_queue])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .envs(template_env.iter().cloned())
        .output()
        .unwrap();
    assert!(
        deployed.status.success(),
        "the stack did not deploy: {}",
        String::from_utf8_lossy(&deployed.stderr)
    );
    provision(&distributed_env(
        &aws_url,
        None,
        &provisioned_prefix,
        &provisioned_queue,
    ));

    let conf = aws_conf(&aws_url).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&conf);
    let from_template = tables_named(&dynamodb, &template_prefix).await;
    let from_provision = tables_named(&dynamodb, &provisioned_prefix).await;
    assert_eq!(from_template, from_provision, "the same tables");
    assert_eq!(from_template.len(), 9);
    let template: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("deploy/aws/rebound.yaml")).unwrap()).unwrap();
    let declared_ttls = template_ttls(&template);
    for table in &from_template {
        assert_eq!(
            table_shape(&dynamodb, &format!("{template_prefix}{table}")).await,
            table_shape(&dynamodb, &format!("{provisioned_prefix}{table}")).await,
            "table {table}: keys, attributes, indexes and billing as provision makes them"
        );
        assert_eq!(
            declared_ttls[table],
            ttl_attribute(&dynamodb, &format!("{provisioned_prefix}{table}")).await,
            "table {table}: the TTL attribute provision enables"
        );
    }
    let sqs = aws_sdk_sqs::Client::new(&conf);
    let (visibility, redrive) = queue_shape(&sqs, &template_queue).await;
    let (provisioned_visibility, provisioned_redrive) = queue_shape(&sqs, &provisioned_queue).await;
    assert_eq!(visibility, provisioned_visibility);
    assert_eq!(redrive, Some(("3".to_owned(), format!("{template_queue}-dlq"))));
    assert_eq!(
        provisioned_redrive,
        Some(("3".to_owned(), format!("{provisioned_queue}-dlq")))
    );
    assert_eq!(queue_shape(&sqs, &format!("{template_queue}-dlq")).await.1, None);

    // Provision finds everything there, and a control plane and a proxy run on it.
    let again = provision(&template_env);
    assert!(
        !again.contains("created"),
        "provision created something the template lacks: {again}"
    );
    let (cp_dir, proxy_dir) = (temp_dir(), temp_dir());
    let cp = start_control_plane(cp_dir.path(), &template_env);
    let proxy = start_proxy(proxy_dir.path(), &template_env).await;
    let link = create_link(&cp, json!({"long_url": "https://example.com/on-the-stack"})).await;
    let code = link["code"].as_str().unwrap();
    let hit = get(&proxy, code).await;
    assert_eq!(hit.status(), StatusCode::FOUND);
    assert_eq!(hit.headers()["location"], "https://example.com/on-the-stack");
    // The click goes through the stack's queue to the stack's rollups.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let total = clicks(&cp, code).await;
        if total == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the click never reached the stats: {total}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
