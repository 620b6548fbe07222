//! Black-box: the real `rebound` refuses to start on a URL-valued setting that is not
//! valid as the value it stands for, and names the setting on stderr.

use rebound_test_support as common;

use common::*;

/// Starts the all-in-one with `vars` on port 0 and returns its stderr once it has exited
/// unsuccessfully; a process that serves instead fails the test.
fn refused(vars: &[(&str, &str)]) -> String {
    let dir = temp_dir();
    refused_start(&[], dir.path(), vars)
}

#[test]
fn a_dead_end_url_on_the_own_host_is_refused_at_start_with_its_setting_named() {
    for name in ["REBOUND_NOT_FOUND_URL", "REBOUND_EXPIRED_URL", "REBOUND_ROOT_URL"] {
        let err = refused(&[("REBOUND_PUBLIC_BASE_URL", "http://sho.rt"), (name, "http://SHO.RT./")]);
        assert!(err.contains(name) && err.contains("own short links"), "{name}: {err}");
    }
}

#[test]
fn a_public_base_url_with_a_line_break_is_refused_at_start() {
    let err = refused(&[("REBOUND_PUBLIC_BASE_URL", "http://sho.rt/\r\n")]);
    assert!(err.contains("REBOUND_PUBLIC_BASE_URL"), "{err}");
}

#[test]
fn a_blocklist_entry_that_is_no_host_is_refused_at_start() {
    let err = refused(&[("REBOUND_BLOCKED_DOMAINS", "example.com, a..b")]);
    assert!(err.contains("REBOUND_BLOCKED_DOMAINS"), "{err}");
}
