//! What the commands print: aligned tables and field lists for people, and the API's JSON
//! with `--json`.

use serde::Serialize;
use serde_json::Value;

/// What a command prints.
pub(super) enum Printed {
    /// A table for people; with `--json`, the API's JSON instead.
    Table { json: Value, text: String },
    /// The same either way (the SVG of a QR code: it is what the command is for).
    Raw(String),
}

impl Printed {
    /// The output, as `--json` (`json`) asks.
    pub(super) fn render(self, json: bool) -> String {
        match self {
            Printed::Table { json: value, .. } if json => {
                format!("{}\n", serde_json::to_string_pretty(&value).unwrap_or_default())
            }
            Printed::Table { text, .. } | Printed::Raw(text) => text,
        }
    }
}

/// An API type as the JSON the API sent (for `--json` and the field tables).
pub(super) fn as_json(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

pub(super) fn show(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn fields(v: &Value, names: &[&str]) -> String {
    table(
        &names
            .iter()
            .map(|n| vec![format!("{n}:"), show(&v[*n])])
            .collect::<Vec<_>>(),
    )
}

pub(super) const LINK_FIELDS: &[&str] = &[
    "code",
    "domain",
    "short_url",
    "long_url",
    "redirect",
    "forward_query",
    "expires_at",
    "created_at",
    "created_by",
    "is_active",
    "version",
    "deleted_at",
    "deleted_by",
    "delete_reason",
];
