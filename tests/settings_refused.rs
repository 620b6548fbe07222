//! Black-box: the real `rebound` refuses to start on a URL-valued setting that is not
//! valid as the value it stands for, and names the setting on stderr.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Starts the all-in-one with `vars` on port 0 and returns its stderr once it has exited
/// unsuccessfully; a process still running after ten seconds started, and fails the test.
fn refused_start(vars: &[(&str, &str)]) -> String {
    let dir = temp_dir();
    let mut cmd = Command::new(bin());
    cmd.env_clear()
        .env("REBOUND_DATA_DIR", data_path(&dir))
        .env("REBOUND_API_ADDR", "127.0.0.1:0")
        .env("REBOUND_REDIRECT_ADDR", "127.0.0.1:0")
        .env("REBOUND_METRICS_ADDR", "127.0.0.1:0")
        .env("REBOUND_LOG", "warn")
        .env("REBOUND_BOOTSTRAP_KEY", OPERATOR_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start rebound");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("rebound started with {vars:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{vars:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_dead_end_url_on_the_own_host_is_refused_at_start_with_its_setting_named() {
    for name in ["REBOUND_NOT_FOUND_URL", "REBOUND_EXPIRED_URL", "REBOUND_ROOT_URL"] {
        let err = refused_start(&[("REBOUND_PUBLIC_BASE_URL", "http://sho.rt"), (name, "http://SHO.RT./")]);
        assert!(err.contains(name) && err.contains("own short links"), "{name}: {err}");
    }
}

#[test]
fn a_public_base_url_with_a_line_break_is_refused_at_start() {
    let err = refused_start(&[("REBOUND_PUBLIC_BASE_URL", "http://sho.rt/\r\n")]);
    assert!(err.contains("REBOUND_PUBLIC_BASE_URL"), "{err}");
}

#[test]
fn a_blocklist_entry_that_is_no_host_is_refused_at_start() {
    let err = refused_start(&[("REBOUND_BLOCKED_DOMAINS", "example.com, a..b")]);
    assert!(err.contains("REBOUND_BLOCKED_DOMAINS"), "{err}");
}
