//! The short-code rule: `[A-Za-z0-9_-]{3,32}`, and the words no alias may take.

/// Shortest code accepted.
pub const MIN_LEN: usize = 3;
/// Longest code accepted.
pub const MAX_LEN: usize = 32;

/// Aliases refused case-insensitively because the service's own paths use them: the
/// words of docs/spec.md §5, every fixed segment of the API's routes (a fixed route such as
/// `/api/v1/links/import` would shadow the link of that code), and the console's.
pub const RESERVED_WORDS: &[&str] = &[
    "api",
    "admin",
    "metrics",
    "healthz",
    "readyz",
    "static",
    "assets",
    "login",
    "logout",
    "dashboard",
    "docs",
    "openapi",
    // Fixed segments of the API's routes (control-plane tests check every one is here).
    "links",
    "import",
    "takedown",
    "stats",
    "keys",
    "domains",
    "reinstate",
    "abuse-reports",
    "threat-lists",
    "app-links",
    // Pages the console (docs/spec.md §10) may use (`qr`, `v1` or `qr.svg` are no codes anyway).
    "console",
    "audit",
    "search",
    "new",
    "export",
    "abuse",
];

/// Why a string is not a usable code or alias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    #[error("must be between 3 and 32 characters long")]
    Length,
    #[error("may contain only letters, digits, '-' and '_'")]
    Charset,
    #[error("is a reserved word")]
    Reserved,
}

/// True when `code` follows the code rule. This is the data plane's check before any lookup.
#[inline]
pub fn is_valid_code(code: &[u8]) -> bool {
    (MIN_LEN..=MAX_LEN).contains(&code.len())
        && code
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

/// Checks the code rule, with the reason when it fails.
pub fn check_code(code: &str) -> Result<(), CodeError> {
    if !code
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(CodeError::Charset);
    }
    if !(MIN_LEN..=MAX_LEN).contains(&code.len()) {
        return Err(CodeError::Length);
    }
    Ok(())
}

/// True when `alias` is one of [`RESERVED_WORDS`], ignoring case.
pub fn is_reserved(alias: &str) -> bool {
    RESERVED_WORDS.iter().any(|w| w.eq_ignore_ascii_case(alias))
}

/// Checks a custom alias: the code rule and the reserved words.
pub fn check_alias(alias: &str) -> Result<(), CodeError> {
    check_code(alias)?;
    if is_reserved(alias) {
        return Err(CodeError::Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_rule_table() {
        let cases: &[(&str, Result<(), CodeError>)] = &[
            ("abc", Ok(())),
            ("aB3_-", Ok(())),
            ("0123456789012345678901234567890X", Ok(())),
            ("ab", Err(CodeError::Length)),
            ("", Err(CodeError::Length)),
            ("0123456789012345678901234567890XY", Err(CodeError::Length)),
            ("ab.c", Err(CodeError::Charset)),
            ("ab c", Err(CodeError::Charset)),
            ("ab/c", Err(CodeError::Charset)),
            ("abc%20", Err(CodeError::Charset)),
            ("héllo", Err(CodeError::Charset)),
            ("ééééééééééééééééééé", Err(CodeError::Charset)),
            ("ab\u{0}", Err(CodeError::Charset)),
        ];
        for (input, want) in cases {
            assert_eq!(check_code(input), *want, "input {input:?}");
            assert_eq!(is_valid_code(input.as_bytes()), want.is_ok(), "input {input:?}");
        }
    }

    #[test]
    fn reserved_words_are_refused_in_any_case() {
        for w in RESERVED_WORDS {
            assert_eq!(check_alias(w), Err(CodeError::Reserved));
            assert_eq!(check_alias(&w.to_uppercase()), Err(CodeError::Reserved));
        }
        assert_eq!(check_alias("Metrics"), Err(CodeError::Reserved));
        assert_eq!(check_alias("iMpOrT"), Err(CodeError::Reserved));
        assert_eq!(check_alias("apis"), Ok(()));
        assert_eq!(check_alias("my-docs"), Ok(()));
    }
}
