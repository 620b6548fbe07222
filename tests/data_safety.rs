//! Black-box tests of what keeps a data directory's links safe across starts: the code
//! permutation key is fixed for the life of a store (a different configured key stops the
//! start, naming the settings and never the key), and the data directory is held by one
//! process at a time (a second start fails at once; `--upgrade` takes it over).

use rebound_test_support as common;

use common::fleet::{create, get};
use common::rebound::ALL_PORTS;
use common::*;
use rebound_store::LinkReads;
use reqwest::StatusCode;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "00112233445566778899aabbccddeeff";
const OTHER_KEY: &str = "ffeeddccbbaa99887766554433221100";

/// Creates a link with a generated code; returns the code.
async fn generated_link(p: &Running) -> String {
    create(p, json!({"long_url": "https://example.com/kept"})).await
}

/// What the redirect port answers for `/code`, once the process is ready (its issued-code
/// filter loaded, so a code it believes never issued is a 404).
async fn redirect_status(p: &Running, code: &str) -> StatusCode {
    wait_ready(p).await;
    get(p, code).await.status()
}

/// The permutation key the store of `data` keeps (hex), read with no process running.
async fn stored_key(data: &Path) -> String {
    let store = rebound_sqlite::SqliteStore::open(data.join("rebound.db")).unwrap();
    store
        .read_setting(rebound_core::generated::CODE_KEY_SETTING)
        .await
        .unwrap()
        .expect("a stored key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_key_other_than_the_stored_one_stops_the_start_without_printing_a_key() {
    let dir = temp_dir();
    let data = data_path(&dir);
    let mut first = start(&[], &data, &[], ALL_PORTS);
    let code = generated_link(&first).await;
    assert_eq!(redirect_status(&first, &code).await, StatusCode::FOUND);
    assert!(first.terminate().success());
    let stored = stored_key(&data).await;

    for args in [&[][..], &["control-plane"][..]] {
        let log = refused_start(args, &data, &[("REBOUND_CODE_KEY", KEY)]);
        assert!(log.contains("REBOUND_CODE_KEY"), "{args:?} names the variable: {log}");
        assert!(log.contains("api.code_key"), "{args:?} names the file key: {log}");
        assert!(
            log.contains("code_permutation_key"),
            "{args:?} names the stored key: {log}"
        );
        assert!(
            log.contains(&data.display().to_string()),
            "{args:?} names the data directory: {log}"
        );
        for secret in [KEY, stored.as_str()] {
            assert!(!log.to_lowercase().contains(secret), "{args:?} printed a key: {log}");
        }
    }

    // Without the variable, the stored key still finds every code.
    let again = start(&[], &data, &[], ALL_PORTS);
    assert_eq!(redirect_status(&again, &code).await, StatusCode::FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_made_with_a_code_key_keeps_its_codes_when_started_without_it() {
    let dir = temp_dir();
    let data = data_path(&dir);
    let mut first = start(&[], &data, &[("REBOUND_CODE_KEY", KEY)], ALL_PORTS);
    let code = generated_link(&first).await;
    assert!(first.terminate().success());

    let mut without = start(&[], &data, &[], ALL_PORTS);
    assert_eq!(redirect_status(&without, &code).await, StatusCode::FOUND);
    // A code generated now is under the same key: the first key still finds both.
    let later = generated_link(&without).await;
    assert!(without.terminate().success());
    assert_eq!(
        stored_key(&data).await,
        KEY,
        "the first start recorded the configured key"
    );
    let with = start(&[], &data, &[("REBOUND_CODE_KEY", KEY)], ALL_PORTS);
    for c in [&code, &later] {
        assert_eq!(redirect_status(&with, c).await, StatusCode::FOUND, "code {c}");
    }
    drop(with);

    let log = refused_start(&[], &data, &[("REBOUND_CODE_KEY", OTHER_KEY)]);
    assert!(log.contains("REBOUND_CODE_KEY"), "{log}");
    assert!(!log.to_lowercase().contains(OTHER_KEY) && !log.contains(KEY), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_a_data_directory_in_use_fails_at_once_naming_the_holder() {
    let dir = temp_dir();
    let data = data_path(&dir);
    let first = start(&[], &data, &[], ALL_PORTS);
    let code = generated_link(&first).await;

    for args in [&[][..], &["control-plane"][..]] {
        let started = std::time::Instant::now();
        let log = refused_start(args, &data, &[]);
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?} failed at once");
        assert!(
            log.contains(&data.display().to_string()),
            "{args:?} names the directory: {log}"
        );
        assert!(
            log.contains(&format!("pid {}", first.pid())),
            "{args:?} names the holder: {log}"
        );
    }
    // The first one was not disturbed.
    assert_eq!(redirect_status(&first, &code).await, StatusCode::FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_starts_beside_the_holder_and_holds_the_directory_once_it_exits() {
    let dir = temp_dir();
    let data = dir.path().join("data");
    let sock = dir.path().join("upgrade.sock");
    let env = upgradable_env(&sock);
    let env = as_pairs(&env);
    let mut old = start(&[], &data, &env, ALL_PORTS);
    let code = generated_link(&old).await;
    // The old process serves its redirect port before it is upgraded: its listener is in
    // the hand-over table only once its redirect service has started (on a loaded machine
    // the API can answer before that, and a QUIT then hands over nothing).
    assert_eq!(redirect_status(&old, &code).await, StatusCode::FOUND);

    let new = upgrade(&mut old, &data, &env).await;
    assert_eq!(redirect_status(&new, &code).await, StatusCode::FOUND);

    // The new process now holds the directory: a third start is refused, naming it.
    let holder = format!("pid {}", new.pid());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let other = [("REBOUND_UPGRADE_SOCK", sock.to_str().unwrap())];
        let log = refused_start(&[], &data, &other);
        if log.contains(&holder) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new process never held the directory: {log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
async fn a_proxy_or_control_plane_with_a_code_key_other_than_the_stored_one_is_refused() {
    let d = common::fleet::Deployment::new(&shared_aws_url(), None);
    let dir = temp_dir();
    let cp = d.control_plane(dir.path(), &[]);
    let code = generated_link(&cp).await;
    let env = d.with(&[("REBOUND_CODE_KEY", KEY)]);
    for args in [["proxy"], ["control-plane"]] {
        let log = refused_start(&args, dir.path(), &as_pairs(&env));
        for named in ["REBOUND_CODE_KEY", "api.code_key", "code_permutation_key", &d.prefix] {
            assert!(log.contains(named), "{args:?} names {named}: {log}");
        }
        assert!(!log.to_lowercase().contains(KEY), "{args:?} printed the key: {log}");
    }
    // Without the variable, a proxy reads the codes with the stored key.
    let p = d.proxy(dir.path(), &[]).await;
    assert_eq!(redirect_status(&p, &code).await, StatusCode::FOUND);
}
