//! `rebound links import` against a real control plane on port 0: CSV as RFC 4180 reads it,
//! JSON lines judged one by one, and re-running an import that may have half-happened
//! (a retry, an interrupted run) never makes a link twice.

use rebound_test_support as common;

use common::*;
use serde_json::Value;

/// The CLI runs as the operator.
const OP: Option<&str> = Some(OPERATOR_KEY);

/// Every stored link's target, as the API lists them.
fn targets(api: &str) -> Vec<String> {
    let (ok, out, err) = cli(api, OP, &["links", "list", "--limit", "1000", "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut t: Vec<String> = v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["long_url"].as_str().unwrap().to_owned())
        .collect();
    t.sort();
    t
}

#[test]
fn rerunning_an_import_of_the_same_file_creates_no_link_twice() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let file = dir.path().join("links.jsonl");
    let text: String = (0..7)
        .map(|i| format!("{{\"long_url\": \"https://example.com/{i}\"}}\n"))
        .collect();
    std::fs::write(&file, text).unwrap();
    let (ok, first, err) = cli(&api, OP, &["links", "import", file.to_str().unwrap(), "--batch", "3"]);
    assert!(ok, "{err}");
    assert_eq!(targets(&api).len(), 7);
    // The same file again, as after a run killed before its answers came back: each chunk
    // carries the same Idempotency-Key, so the first answers come back and nothing is made.
    let (ok, again, err) = cli(&api, OP, &["links", "import", file.to_str().unwrap(), "--batch", "3"]);
    assert!(ok, "{err}");
    assert_eq!(targets(&api).len(), 7, "no link was created twice");
    assert_eq!(again, first, "the same codes are reported again");
    // The same lines in another file are another import.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, "{\"long_url\": \"https://example.com/0\"}\n").unwrap();
    let (ok, _, err) = cli(&api, OP, &["links", "import", other.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(targets(&api).len(), 8);
}

#[test]
fn csv_fields_are_read_as_rfc_4180_quotes_them_and_a_line_with_too_many_is_refused() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let file = dir.path().join("links.csv");
    std::fs::write(
        &file,
        "\"https://example.com/q?a=1,b=2\"\n\
         https://example.com/plain\n\
         https://example.com/?tags=red,blue\n\
         \"https://example.com/say?q=\"\"hi\"\"\"\n",
    )
    .unwrap();
    let (ok, out, err) = cli(&api, OP, &["links", "import", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}\n{err}");
    assert!(err.contains("line 3:"), "the line with a stray comma is named: {err}");
    assert!(err.contains("imported 3, failed 1"), "{err}");
    assert_eq!(
        targets(&api),
        [
            "https://example.com/plain",
            "https://example.com/q?a=1,b=2",
            "https://example.com/say?q=%22hi%22",
        ],
        "nothing was split into a link of its own"
    );
}

#[test]
fn a_csv_header_row_names_the_columns() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let file = dir.path().join("links.csv");
    std::fs::write(
        &file,
        "alias,long_url,redirect\n\
         hdr-one,https://example.com/1,301\n\
         ,\"https://example.com/2,x\",\n\
         hdr-three,https://example.com/3,301,extra\n",
    )
    .unwrap();
    let (ok, out, err) = cli(&api, OP, &["links", "import", file.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["created"], 2, "{v}");
    assert_eq!(v["results"][0]["code"], "hdr-one");
    assert_eq!(v["results"][0]["redirect"], 301);
    assert_eq!(v["results"][1]["long_url"], "https://example.com/2,x");
    assert!(err.contains("line 4:"), "{err}");
}

#[test]
fn a_json_line_of_the_wrong_shape_fails_alone_and_is_named() {
    let dir = temp_dir();
    let rb = start(&["control-plane"], dir.path(), &[], &["API"]);
    let api = rb.api();
    let file = dir.path().join("links.jsonl");
    let mut text = String::new();
    for i in 1..=10 {
        text.push_str(&match i {
            4 => "{\"long_url\": \"https://example.com/4\", \"bogus\": 1}\n".to_owned(),
            7 => "{\"long_url\": 7}\n".to_owned(),
            9 => "[\"https://example.com/9\"]\n".to_owned(),
            _ => format!("{{\"long_url\": \"https://example.com/{i}\"}}\n"),
        });
    }
    std::fs::write(&file, text).unwrap();
    let (ok, out, err) = cli(&api, OP, &["links", "import", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 7, "{out}\n{err}");
    for line in [4, 7, 9] {
        assert!(err.contains(&format!("line {line}: invalid_json")), "{err}");
    }
    assert!(err.contains("imported 7, failed 3"), "{err}");
    assert_eq!(targets(&api).len(), 7);
}
