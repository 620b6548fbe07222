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
