//! Records the commit the binary is built from, for `rebound_build_info{commit}`:
//! `REBOUND_COMMIT` when set (a container build without `.git`), else `git rev-parse`,
//! else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=REBOUND_COMMIT");
    let commit = std::env::var("REBOUND_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuilt when HEAD moves: HEAD itself and the branch it points at.
            for path in [git(&["rev-parse", "--git-path", "HEAD"]), {
                git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r]))
            }]
            .into_iter()
            .flatten()
            {
                println!("cargo:rerun-if-changed={path}");
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=REBOUND_COMMIT={commit}");
}
