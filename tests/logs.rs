//! Black-box: the log on stderr (issue 44, item 7). Written to a pipe, as a container
//! runtime, systemd or a file gets it, it is plain text without a terminal's colour codes;
//! with `REBOUND_LOG_FORMAT=json` each line is one JSON object that a log shipper reads;
//! any other format is refused at start, naming the variable.

use rebound_test_support as common;

use common::rebound::Rebound;
use common::*;
use serde_json::{json, Value};

/// The log at `info` of an all-in-one started with `env`, given one link, then stopped.
async fn log_of(env: &[(&str, &str)]) -> Vec<String> {
    let dir = temp_dir();
    let env: Vec<(&str, &str)> = [("REBOUND_LOG", "info")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let mut rb = Rebound::start(dir.path(), &env);
    rb.wait_ready().await;
    rb.create_code(json!({"long_url": "https://example.com/logged"})).await;
    assert!(rb.run.terminate().success());
    rb.run.log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_on_a_pipe_is_plain_text_without_colour_codes() {
    let log = log_of(&[]).await;
    assert!(log.iter().any(|l| l.contains(" INFO ")), "{log:?}");
    for line in &log {
        assert!(!line.contains('\u{1b}'), "a terminal's escape code in {line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_json_format_every_line_is_one_object_with_its_level_target_and_fields() {
    let log = log_of(&[("REBOUND_LOG_FORMAT", "json")]).await;
    assert!(!log.is_empty());
    for line in &log {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        for field in ["timestamp", "level", "target"] {
            assert!(v[field].is_string(), "no {field} in {line}");
        }
    }
    // The message and the event's fields at the top level, as shippers index them.
    assert!(
        log.iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["level"] == "INFO" && v["message"].is_string()),
        "{log:?}"
    );
}

#[test]
fn a_log_format_that_is_neither_text_nor_json_is_refused_at_start() {
    let dir = temp_dir();
    let err = refused_start(&[], dir.path(), &[("REBOUND_LOG_FORMAT", "yaml")]);
    assert!(err.contains("REBOUND_LOG_FORMAT"), "{err}");
}
