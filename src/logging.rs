//! The log on stderr: plain text (with colours only when stderr is a terminal, so a file,
//! a pipe or a container runtime gets no escape codes), or one JSON object per line
//! (`REBOUND_LOG_FORMAT=json`, with the fields of the spans an event happened in) for the
//! log shippers of Kubernetes and CloudWatch users. `REBOUND_LOG` filters either.

use std::io::IsTerminal;

/// The variable that picks the format.
pub const FORMAT_VARIABLE: &str = "REBOUND_LOG_FORMAT";
/// The variable that filters the log (a `tracing` filter).
pub const FILTER_VARIABLE: &str = "REBOUND_LOG";

/// How each event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// A line of text: time, level, target, message and fields.
    Text,
    /// A JSON object a line: `timestamp`, `level`, `target`, the message and the event's
    /// fields at the top level, `span` (the innermost span's name and fields) and `spans`
    /// (every enclosing span, outermost first).
    Json,
}

impl LogFormat {
    /// The format `value` names (`text` or `json`, any case; unset or empty: text).
    pub fn parse(value: Option<&str>) -> Result<LogFormat, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
            Some(other) => Err(format!("{FORMAT_VARIABLE} must be text or json, not {other:?}")),
        }
    }

    /// The format the environment asks for.
    pub fn from_env() -> Result<LogFormat, String> {
        match std::env::var(FORMAT_VARIABLE) {
            Ok(v) => LogFormat::parse(Some(&v)),
            Err(std::env::VarError::NotPresent) => LogFormat::parse(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{FORMAT_VARIABLE} is not UTF-8")),
        }
    }
}

/// Installs the process's log on stderr, in `format`, filtered by `REBOUND_LOG` (default
/// `info`).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(FILTER_VARIABLE).unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_text_or_json_and_anything_else_is_refused_by_name() {
        let cases: &[(Option<&str>, Result<LogFormat, ()>)] = &[
            (None, Ok(LogFormat::Text)),
            (Some(""), Ok(LogFormat::Text)),
            (Some("text"), Ok(LogFormat::Text)),
            (Some("JSON"), Ok(LogFormat::Json)),
            (Some(" json "), Ok(LogFormat::Json)),
            (Some("yaml"), Err(())),
            (Some("jsonl"), Err(())),
        ];
        for (value, want) in cases {
            let got = LogFormat::parse(*value);
            assert_eq!(got.as_ref().ok(), want.as_ref().ok(), "{value:?}");
            assert_eq!(got.is_err(), want.is_err(), "{value:?}");
            if let Err(e) = got {
                assert!(e.contains(FORMAT_VARIABLE), "{e}");
            }
        }
    }
}
