//! docs/configuration.md, written from the declarations: one table row per setting, in
//! the order `declared::read` reads them, between the few paragraphs below.

use super::setting::{Setting, Value};
use super::{declared, ConfigError, Source};
use std::fmt::Write;

/// One setting as the docs list it.
struct Row {
    key: &'static str,
    var: Option<&'static str>,
    default: String,
    accepts: String,
    doc: &'static str,
}

/// Every setting at its default, described.
#[derive(Default)]
struct Describe(Vec<Row>);

impl Source for Describe {
    fn written<T: Value>(&mut self, s: &Setting<T>) -> Result<T, ConfigError> {
        let value = (s.default)();
        let default = match s.shown {
            Some(shown) => shown(),
            None if value.is_unset() => "unset".into(),
            None => format!("`{}`", value.shown()),
        };
        self.0.push(Row {
            key: s.key,
            var: s.var,
            default,
            accepts: s.check.described().unwrap_or_else(T::accepts),
            doc: s.doc,
        });
        Ok(value)
    }
}

const HEAD: &str = "\
# Configuration

<!-- Written by `rebound config docs` from src/config/declared.rs: edit that file, then run
     `cargo run -p rebound -- config docs > docs/configuration.md`. -->

Every setting, with its key in the TOML file, its environment variable, its default, the
values it accepts and what it does. Each is declared once, in `src/config/declared.rs`,
which drives the reading, the checks, the error messages and this page; a default owned by
a library crate is that crate's (`EdgeLimits` in `edge/src/limits.rs`, `Config` in
`proxy/src/config.rs`, `ApiSettings` in `control-plane/src/config.rs`).
`deploy/rebound.example.toml` is a commented file with every key (a unit test loads it, so
it stays valid).

## How settings are read

- The file is optional: `rebound --config FILE`, or `REBOUND_CONFIG=FILE`. Unknown keys are
  an error.
- A `REBOUND_*` variable wins over the file's key; a variable set to the empty string
  counts as unset. `REBOUND_BLOCKED_DOMAINS` is the one exception: it adds to the file's
  list.
- Booleans in variables: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`, in any case.
  Numbers and addresses in variables may have blanks around them; text is taken as written.
- Everything is checked at start-up. A bad setting stops the process with
  `rebound: invalid configuration: <setting>: <problem>` and exit code 2, the setting named
  by its key and variable (`edge.h2c (REBOUND_H2C)`); a value not of the setting's type
  also says where it was written (`<setting>, in the environment: <problem>`).
- Some settings have no variable, only a file key; they are marked \"file only\" below.
- The operator CLI commands (`rebound links …`, `takedown`, `keys …`, `domains …`) do not
  read the configuration; they take the flags and variables listed at the end.
";

/// Each table: its key prefix, its heading and the paragraphs before and after it.
fn sections() -> [(&'static str, &'static str, String, String); 7] {
    [
        ("", "## Top level", String::new(), String::new()),
        (
            "edge",
            "## `[edge]`: the defences of every port",
            "Each refusal is counted in `rebound_edge_refusals_total{port, reason}`.\n\
             [The edge: protocols, TLS and defences](edge.md#the-edge-protocols-tls-and-defences)\n\
             explains each one and the limits that are built in.\n"
                .into(),
            format!(
                "At start the process raises its soft open-file limit to the hard one and refuses to start\n\
                 when the caps of its ports plus {} descriptors do not fit under it (`src/listen.rs`,\n\
                 `edge/src/fd_limit.rs`).\n",
                rebound_edge::fd_limit::RESERVED_DESCRIPTORS
            ),
        ),
        ("api", "## `[api]`: the control plane", String::new(), String::new()),
        (
            "redirect",
            "## `[redirect]`: the data plane",
            String::new(),
            String::new(),
        ),
        (
            "acme",
            "## `[acme]`: certificates ordered and renewed over ACME",
            "[Certificates over ACME](edge.md#certificates-over-acme) in edge.md has the\n\
             steps for a public CA (DNS, ports 80 and 443, staging first, rate limits).\n"
                .into(),
            String::new(),
        ),
        (
            "threats",
            "## `[threats]`: threat lists",
            "[A link's life](guide.md#a-links-life-edits-bots-abuse) in guide.md\n\
             says what a list does to creates, edits and live links, and how an operator reinstates one.\n"
                .into(),
            String::new(),
        ),
        (
            "clicks",
            "## `[clicks]`: the click stream",
            "[The click stream](analytics.md#the-click-stream) in analytics.md has the event's\n\
             fields and how to land the stream in a warehouse.\n"
                .into(),
            String::new(),
        ),
    ]
}

const TAIL: &str = "\
## Other variables

| variable | read by | what it does |
| --- | --- | --- |
| `REBOUND_CONFIG` | every serving process | the configuration file, as `--config` |
| `REBOUND_LOG` | every serving process | the `tracing` filter of the log on stderr (default `info`), e.g. `warn` or `rebound_proxy=debug` |
| `REBOUND_LOG_FORMAT` | every serving process | `text` (default: a line per event, coloured only when stderr is a terminal) or `json` (an object per line: `timestamp`, `level`, `target`, the message and the event's fields, `span` and `spans` with the fields of the spans it happened in); anything else is refused at start |
| `REBOUND_API_URL` | the CLI (`--api-url`) | the control plane's base URL, default `http://127.0.0.1:8081` |
| `REBOUND_API_KEY` | the CLI (`--api-key`) | the API key sent as a Bearer token |
| `AWS_ENDPOINT_URL`, `AWS_REGION`, the credential chain | DynamoDB, SQS and Kinesis adapters, `rebound provision` | the AWS SDK's own configuration: where AWS (or a DynamoDB-, SQS- or Kinesis-compatible server) is, and who calls it |

The variables that only tests and scripts read (`REBOUND_TEST_*`, `REBOUND_FUZZ_*`) are
listed in [contributing.md](contributing.md#tests).
";

/// docs/configuration.md as the declarations make it.
pub fn document() -> String {
    let mut rows = Describe::default();
    declared::read(&mut rows).expect("the defaults are complete");
    let mut out = String::from(HEAD);
    for (table, heading, before, after) in sections() {
        let _ = write!(out, "\n{heading}\n\n");
        if !before.is_empty() {
            let _ = writeln!(out, "{before}");
        }
        out.push_str("| file key | variable | default | accepts | what it does |\n");
        out.push_str("| --- | --- | --- | --- | --- |\n");
        let in_table = |row: &&Row| row.key.split_once('.').map_or("", |(t, _)| t) == table;
        for row in rows.0.iter().filter(in_table) {
            let var = row.var.map_or_else(|| "file only".into(), |v| format!("`{v}`"));
            let _ = writeln!(
                out,
                "| `{}` | {var} | {} | {} | {} |",
                row.key, row.default, row.accepts, row.doc
            );
        }
        if !after.is_empty() {
            let _ = write!(out, "\n{after}");
        }
    }
    out.push('\n');
    out.push_str(TAIL);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys the example file (and its copy deploy/k8s/rebound.toml) does not show yet.
    const NOT_IN_THE_EXAMPLE_YET: &[&str] = &["redis_ca"];

    #[test]
    fn the_example_file_shows_every_key() {
        let example = include_str!("../../deploy/rebound.example.toml");
        let mut rows = Describe::default();
        declared::read(&mut rows).unwrap();
        let mut missing = vec![];
        for row in rows.0 {
            let (table, leaf) = row.key.split_once('.').unwrap_or(("", row.key));
            let at = match table {
                "" => 0,
                t => example.find(&format!("[{t}]")).unwrap_or_else(|| panic!("[{t}]")),
            };
            let shown = [format!("\n{leaf} ="), format!("\n# {leaf} =")];
            if !shown.iter().any(|line| example[at..].contains(line.as_str())) {
                missing.push(row.key);
            }
        }
        assert_eq!(
            missing, NOT_IN_THE_EXAMPLE_YET,
            "the keys deploy/rebound.example.toml lacks"
        );
    }
}
