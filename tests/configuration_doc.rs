//! The documentation that is checked against the code: docs/configuration.md is what the
//! declarations in src/config/declared.rs write; the table of the crates in
//! docs/architecture.md is the workspace; the README's first session is what the program
//! prints.

#[test]
fn the_configuration_page_is_the_declarations() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let written = std::fs::read_to_string(path).unwrap();
    let generated = rebound::config::document();
    let (old, new) = (written.lines(), generated.lines());
    let same = old.zip(new).take_while(|(a, b)| a == b).count();
    assert!(
        written == generated,
        "docs/configuration.md is stale from line {} on: regenerate it with\n\n    \
         cargo run -p rebound -- config docs > docs/configuration.md\n",
        same + 1
    );
}

/// The table of the crates in docs/architecture.md ("Crates") is the one list of the crates
/// and their jobs: it names every member of the workspace (the root `Cargo.toml`'s
/// `[workspace] members`, each by its package name and folder) and the root package
/// `rebound` (folder `src/`), each once, and no crate or folder that is not there.
#[test]
fn the_crate_table_is_the_workspace() {
    use std::collections::BTreeMap;
    use std::path::Path;

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = |dir: &Path| -> toml::Table {
        let path = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let package_name = |table: &toml::Table, dir: &str| -> String {
        table
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or_else(|| panic!("{dir}Cargo.toml has no [package] name"))
            .to_string()
    };

    // The workspace: package name -> folder, as the table writes it (`core/`).
    let top = manifest(root);
    let members = top["workspace"]["members"]
        .as_array()
        .expect("[workspace] members is a list");
    let mut workspace = BTreeMap::new();
    for member in members {
        let folder = member.as_str().expect("a member is a path");
        let folder = format!("{}/", folder.trim_end_matches('/'));
        let name = package_name(&manifest(&root.join(&folder)), &folder);
        workspace.insert(name, folder);
    }
    // The root package: its sources are the folder of its binary (src/main.rs).
    let bin = top["bin"].as_array().and_then(|b| b.first());
    let main = bin.and_then(|b| b.get("path")).and_then(|p| p.as_str());
    let src = main.map_or("src/".to_string(), |p| {
        format!("{}/", Path::new(p).parent().unwrap().display())
    });
    workspace.insert(package_name(&top, ""), src);

    // The table: the rows of the section "## Crates", one crate per row.
    let page = root.join("docs/architecture.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Crates\n"))
        .expect("docs/architecture.md has a section \"## Crates\"");
    let ticked = |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    let mut table = BTreeMap::new();
    let mut problems = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').collect();
        let (names, folders) = (ticked(cells[1]), ticked(cells[2]));
        let ([name], [folder]) = (names.as_slice(), folders.as_slice()) else {
            problems.push(format!(
                "a row names {names:?} in {folders:?}: one crate and its folder per row"
            ));
            continue;
        };
        if !root.join(folder).is_dir() {
            problems.push(format!("`{name}`: the folder `{folder}` does not exist"));
        }
        if table.insert(name.clone(), folder.clone()).is_some() {
            problems.push(format!("`{name}` has two rows"));
        }
    }
    assert!(
        !table.is_empty(),
        "no rows in docs/architecture.md's table of the crates"
    );

    for (name, folder) in &workspace {
        match table.get(name) {
            None => problems.push(format!("`{name}` (`{folder}`) is missing from the table")),
            Some(f) if f != folder => problems.push(format!("`{name}` is in `{folder}`, the table says `{f}`")),
            Some(_) => {}
        }
    }
    for (name, folder) in &table {
        if !workspace.contains_key(name) {
            problems.push(format!(
                "the table names `{name}` (`{folder}`), which is no crate of the workspace"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's table of the crates (\"Crates\") and the workspace (Cargo.toml) \
         disagree:\n  {}\n",
        problems.join("\n  ")
    );
}

/// The README's first session ("## A first session") is what the program prints: the
/// all-in-one is started on an empty data directory (every port on port 0, as the README's
/// `cargo run --release` but for the ports), its standard output is compared with the
/// first block, and each command of the other blocks is run (`rebound` is this build's
/// binary, the README's ports the real ones) and its output compared with the lines under
/// it. What changes from run to run is replaced on both sides first: the API key, times,
/// the day, the `date` header, and the real ports by the README's.
#[test]
fn the_readme_session_is_what_the_program_prints() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("A first session\n"))
        .expect("README.md has a section \"## A first session\"");
    // The ```console blocks of the section, each as its lines.
    let blocks: Vec<Vec<&str>> = section
        .split("```console\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap().lines().collect())
        .collect();
    assert!(
        blocks.len() >= 2,
        "the session has a block for the server and one for the client"
    );

    let varying = |text: &str, addrs: &[(String, &str)]| -> Vec<String> {
        let mut text = text.replace('\r', "");
        for (real, shown) in addrs {
            text = text.replace(real.as_str(), shown);
        }
        // Each line ends with a newline: the last one is no line of its own.
        text.strip_suffix('\n')
            .unwrap_or(&text)
            .split('\n')
            .map(|line| {
                let mut out = String::new();
                let mut rest = line;
                // rbk_… (the README) or rbk_<the key> (a run) -> rbk_KEY
                while let Some(at) = rest.find("rbk_") {
                    out.push_str(&rest[..at]);
                    out.push_str("rbk_KEY");
                    rest = rest[at + 4..].trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '…');
                }
                out.push_str(rest);
                if out.to_ascii_lowercase().starts_with("date: ") {
                    return "date: DATE".to_string();
                }
                // 2026-12-06T05:46:03.103Z -> TIME, then 2026-12-06 -> DAY
                let b = out.as_bytes();
                let is_day = |at: usize| {
                    b.len() >= at + 10
                        && (0..10).all(|i| match i {
                            4 | 7 => b[at + i] == b'-',
                            _ => b[at + i].is_ascii_digit(),
                        })
                };
                let (mut norm, mut at) = (String::new(), 0);
                while at < b.len() {
                    if is_day(at) && b.get(at + 10) == Some(&b'T') {
                        let z = out[at..].find('Z').map_or(b.len(), |z| at + z + 1);
                        norm.push_str("TIME");
                        at = z;
                    } else if is_day(at) {
                        norm.push_str("DAY");
                        at += 10;
                    } else {
                        let c = out[at..].chars().next().unwrap();
                        norm.push(c);
                        at += c.len_utf8();
                    }
                }
                norm
            })
            .collect()
    };

    // The server: an empty data directory, no bootstrap key.
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REBOUND_DATA_DIR", dir.path().join("data"))
        .env("REBOUND_REDIRECT_ADDR", "127.0.0.1:0")
        .env("REBOUND_API_ADDR", "127.0.0.1:0")
        .env("REBOUND_METRICS_ADDR", "127.0.0.1:0")
        .env("REBOUND_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rebound");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = server.stdout.take().unwrap();
    let server = Kill(server);
    let (first, printed) = blocks[0].split_first().unwrap();
    assert!(
        first.starts_with("$ cargo run"),
        "the first block starts the all-in-one: {first}"
    );
    let mut lines = BufReader::new(stdout).lines();
    let got: Vec<String> = (0..printed.len())
        .map(|_| {
            lines
                .next()
                .expect("rebound printed fewer lines than the README")
                .unwrap()
        })
        .collect();
    let addr = |what: &str| -> String {
        let prefix = format!("rebound: {what} listening on ");
        got.iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {got:?}"))
            .to_string()
    };
    let addrs = [
        (addr("redirect"), "127.0.0.1:8080"),
        (addr("API"), "127.0.0.1:8081"),
        (addr("metrics"), "127.0.0.1:9090"),
    ];
    let key = got
        .iter()
        .find_map(|l| l.split("export REBOUND_API_KEY=").nth(1))
        .expect("the first start prints the key")
        .to_string();
    assert_eq!(
        varying(&got.join("\n"), &addrs),
        varying(&printed.join("\n"), &[]),
        "what `rebound` prints at its first start"
    );

    // The client: each command, its output compared with the lines under it.
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_rebound"))
        .parent()
        .unwrap()
        .to_owned();
    for block in &blocks[1..] {
        let mut i = 0;
        while i < block.len() {
            let line = block[i];
            let mut command = line
                .strip_prefix("$ ")
                .unwrap_or_else(|| panic!("not a command: {line}"))
                .to_string();
            i += 1;
            while command.ends_with('\\') {
                command.pop();
                command.push_str(block[i]);
                i += 1;
            }
            let start = i;
            while i < block.len() && !block[i].starts_with("$ ") {
                i += 1;
            }
            let expected: String = block[start..i].iter().map(|l| format!("{l}\n")).collect();
            if command.starts_with("export REBOUND_API_KEY=") {
                continue;
            }
            let mut run = command.clone();
            for (real, shown) in &addrs {
                run = run.replace(shown, real);
            }
            let out = Command::new("bash")
                .arg("-c")
                .arg(&run)
                .env(
                    "PATH",
                    format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default()),
                )
                .env("REBOUND_API_KEY", &key)
                .env("REBOUND_API_URL", format!("http://{}", addrs[1].0))
                .output()
                .unwrap();
            assert!(out.status.success(), "`{command}` failed: {out:?}");
            assert_eq!(
                varying(&String::from_utf8_lossy(&out.stdout), &addrs),
                varying(&expected, &[]),
                "the output of `{command}`"
            );
        }
    }
    drop(server);
}
