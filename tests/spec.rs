//! Citations of the specification stay followable. In every text file of the repository
//! (git's tracked and new files; this file aside), each `docs/spec.md §X` citation (and each
//! `§Y` chained to it, as in `§5, §11` or `§4 I1/I2, §8`) names a section of docs/spec.md,
//! which carries one `<a id="sX"></a>` anchor per section, and each link `spec.md#id` names
//! an anchor; the citation form of the old out-of-tree specification is refused; and the
//! anchors of docs/spec.md are unique and every in-page link `(#id)` there names one.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const CITE: &str = "docs/spec.md §";

/// The old form, built so that this file does not hold it.
fn old_form() -> [String; 2] {
    ["SPEC", "SPEC.md"].map(|s| format!("{s} §"))
}

/// The section token at the start of `s`: digits and an optional lowercase letter (`3a`).
fn section(s: &str) -> &str {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let letter = s[digits..]
        .chars()
        .next()
        .filter(|c| digits > 0 && c.is_ascii_lowercase());
    &s[..digits + letter.map_or(0, char::len_utf8)]
}

/// Every section a line cites: `docs/spec.md §X`, then each `§Y` that follows it before
/// the parenthesis, sentence or clause closes (or an RFC is named).
fn cited(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices(CITE) {
        let rest = &line[at + CITE.len()..];
        found.push(section(rest));
        let tail = rest.split([')', ';', ':', '.']).next().unwrap_or("");
        let tail = tail.split("RFC").next().unwrap_or(""); // `§5, RFC 9110 §15` is not ours
        found.extend(tail.split('§').skip(1).map(section));
    }
    found
}

/// The tracked files and the new ones git does not ignore.
fn files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_citation_names_a_section_of_the_spec() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join("docs/spec.md")).expect("docs/spec.md exists");
    let mut anchors = BTreeSet::new();
    let mut bad = Vec::new();
    for (n, line) in spec.lines().enumerate() {
        for piece in line.split("<a id=\"").skip(1) {
            let id = piece.split('"').next().unwrap();
            if !anchors.insert(id.to_owned()) {
                bad.push(format!("docs/spec.md:{}: anchor `{id}` given twice", n + 1));
            }
        }
    }
    for (n, line) in spec.lines().enumerate() {
        for piece in line.split("](#").skip(1) {
            let id = piece.split(')').next().unwrap();
            if !anchors.contains(id) {
                bad.push(format!("docs/spec.md:{}: link to `#{id}`, no such anchor", n + 1));
            }
        }
    }
    let old = old_form();
    let mut citations = 0;
    for file in files(root) {
        if file == "tests/spec.rs" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
            continue; // binary, or deleted from the work tree
        };
        for (n, line) in text.lines().enumerate() {
            for s in cited(line) {
                citations += 1;
                if !anchors.contains(&format!("s{s}")) {
                    bad.push(format!("{file}:{}: `§{s}` is no section of docs/spec.md", n + 1));
                }
            }
            for piece in line.split("spec.md#").skip(1) {
                let id: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !anchors.contains(&id) {
                    bad.push(format!("{file}:{}: link to `spec.md#{id}`, no such anchor", n + 1));
                }
            }
            for o in &old {
                if line.contains(o.as_str()) {
                    bad.push(format!("{file}:{}: `{o}…` cites the old spec: write `{CITE}N`", n + 1));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} bad citation(s):\n{}", bad.len(), bad.join("\n"));
    assert!(citations > 0, "no citation of docs/spec.md found: is the walk broken?");
}

#[test]
fn citations_are_read_as_meant() {
    assert_eq!(
        cited("the rule (docs/spec.md §5, §11): 400 (RFC 9110 §15.5.20)"),
        ["5", "11"]
    );
    assert_eq!(cited("faults (docs/spec.md §4 I1/I2, §8): real"), ["4", "8"]);
    assert_eq!(cited("docs/spec.md §3a. Then docs/spec.md §3 step 4"), ["3a", "3"]);
    assert_eq!(cited("docs/spec.md §99"), ["99"]);
    assert_eq!(cited("docs/spec.md §"), [""]);
}
