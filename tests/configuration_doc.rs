//! docs/configuration.md is what the declarations in src/config/declared.rs write.

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
