//! The module graph of every crate of the workspace has no circle: no file imports
//! another that imports it back, directly or around a longer circle, so each file can be
//! read after the ones it uses. A module and its own descendants are one room (a parent
//! declares and re-exports its children, a child reads its parent's items), so only edges
//! between modules where neither contains the other count; test modules are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path in its crate: `["links", "edit"]` for `src/links/edit.rs`.
type Module = Vec<String>;

/// The module of `file` under `src`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The code of a file without its test module (`#[cfg(test)] mod tests`, at the end by
/// this repository's habit) and without comments (a doc link is no import).
fn without_tests(code: &str) -> String {
    let code = code.find("#[cfg(test)]\nmod ").map_or(code, |at| &code[..at]);
    code.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file names from the crate's root (`crate::a::b::C`, the items of
/// `crate::{a::B, c}`) and from its parent (`super::x`), as module paths of its crate.
fn named_paths(code: &str, module: &Module) -> Vec<Module> {
    let mut found = Vec::new();
    let ident = |s: &str| -> Module {
        s.split("::")
            .map(|p| {
                p.trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p| !p.is_empty())
            .collect()
    };
    // `super` of a file's module: its parent.
    let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent)] {
        for (at, _) in code.match_indices(prefix) {
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue; // `rebound_core::crate::`-like tails are not ours
            }
            let rest = &code[at + prefix.len()..];
            let groups: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => {
                    let end = group.find('}').unwrap_or(group.len());
                    group[..end].split(',').map(str::to_owned).collect()
                }
                None => vec![rest.to_owned()],
            };
            for g in groups {
                let mut path = base.clone();
                path.extend(ident(&g));
                found.push(path);
            }
        }
    }
    found
}

/// The longest module of `modules` that `path` starts with.
fn resolve(path: &Module, modules: &BTreeSet<Module>) -> Module {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

fn contains(outer: &Module, inner: &Module) -> bool {
    inner.starts_with(outer)
}

/// Each circle of `edges` (as the modules on it), found from every module once.
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    let mut found: BTreeSet<Vec<Module>> = BTreeSet::new();
    for start in edges.keys() {
        // Breadth-first from `start`, remembering how each module was reached.
        let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(at) = queue.pop_front() {
            for next in edges.get(at).into_iter().flatten() {
                if next == start {
                    let mut circle = vec![at.clone()];
                    let mut back = at;
                    while back != start {
                        back = came_from[back];
                        circle.push(back.clone());
                    }
                    circle.sort();
                    found.insert(circle);
                } else if !came_from.contains_key(next) {
                    came_from.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The edges between the modules of the crate at `src`.
fn module_edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // `src/bin/*.rs` are crates of their own.
    files.retain(|f| !f.strip_prefix(src).unwrap().starts_with("bin"));
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let code = std::fs::read_to_string(file).unwrap();
        for path in named_paths(&without_tests(&code), &from) {
            let to = resolve(&path, &modules);
            if !contains(&from, &to) && !contains(&to, &from) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

#[test]
fn no_two_modules_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let metadata = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .unwrap();
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let mut problems = Vec::new();
    let mut crates = 0;
    for package in metadata["packages"].as_array().unwrap() {
        let manifest = Path::new(package["manifest_path"].as_str().unwrap());
        let src = manifest.parent().unwrap().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        for circle in circles(&module_edges(&src)) {
            let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            problems.push(format!("{}: {}", package["name"].as_str().unwrap(), names.join(" ↔ ")));
        }
    }
    assert!(crates >= 10, "the workspace's crates were found: {crates}");
    assert!(
        problems.is_empty(),
        "modules that import each other:\n{}",
        problems.join("\n")
    );
}

/// The checker finds what it is for: a direct circle, a longer one, none through a
/// parent and its child.
#[test]
fn the_checker_finds_circles_and_only_circles() {
    let m = |s: &str| -> Module { s.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect() };
    let graph = |pairs: &[(&str, &str)]| -> BTreeMap<Module, BTreeSet<Module>> {
        let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(m(a)).or_default().insert(m(b));
        }
        g
    };
    assert_eq!(circles(&graph(&[("a", "b"), ("b", "a")])), vec![vec![m("a"), m("b")]]);
    assert_eq!(
        circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec![m("a"), m("b"), m("c")]]
    );
    assert!(circles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    let modules: BTreeSet<Module> = [m(""), m("links"), m("links::edit"), m("names")].into();
    assert_eq!(resolve(&m("links::edit::stale"), &modules), m("links::edit"));
    assert_eq!(resolve(&m("links::LinkService"), &modules), m("links"));
    assert_eq!(resolve(&m("ControlPlane"), &modules), m(""));
    let code = "use crate::{links::LinkService, names::DomainNames};\nuse super::extract::ApiJson;\n";
    let named = named_paths(code, &m("http::links"));
    assert_eq!(
        named,
        vec![
            m("links::LinkService"),
            m("names::DomainNames"),
            m("http::extract::ApiJson")
        ]
    );
}
