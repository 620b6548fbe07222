//! What declares a setting ([`Setting`]: file key, variable, default, check, doc), the
//! checks, and how each type of value is read from a variable or the file.

use super::ConfigError;
use std::net::SocketAddr;
use std::path::PathBuf;

/// One setting, declared once: where it is read from, its default, what it accepts and
/// what it does. Built with `const` calls, e.g.
/// `Setting::new("edge.h2c", || edge().h2c).var("REBOUND_H2C").doc("…")`.
pub struct Setting<T: 'static> {
    /// The file key, dotted under its table: `redirect_addr`, `edge.max_connections`.
    pub key: &'static str,
    /// The environment variable, if the setting has one.
    pub var: Option<&'static str>,
    /// The default: a value the owning crate's `Default` gives, or the binary's own.
    pub default: fn() -> T,
    /// What a value must be.
    pub check: Check,
    /// What it does, one line of the generated docs/configuration.md.
    pub doc: &'static str,
    /// The default as the docs tell it, when it depends on more than the value.
    pub shown: Option<fn() -> String>,
}

impl<T: Value> Setting<T> {
    /// A file-only setting, checked for nothing but its type.
    pub const fn new(key: &'static str, default: fn() -> T) -> Self {
        Setting {
            key,
            var: None,
            default,
            check: Check::Any,
            doc: "",
            shown: None,
        }
    }

    /// … that its variable sets too.
    pub const fn var(mut self, name: &'static str) -> Self {
        self.var = Some(name);
        self
    }

    /// … whose values must pass `check`.
    pub const fn check(mut self, check: Check) -> Self {
        self.check = check;
        self
    }

    /// … documented so.
    pub const fn doc(mut self, doc: &'static str) -> Self {
        self.doc = doc;
        self
    }

    /// … whose default the docs tell so.
    pub const fn shown(mut self, shown: fn() -> String) -> Self {
        self.shown = Some(shown);
        self
    }

    /// The setting as errors name it: `edge.h2c (REBOUND_H2C)`, or the key alone.
    pub fn name(&self) -> String {
        match self.var {
            Some(var) => format!("{} ({var})", self.key),
            None => self.key.to_owned(),
        }
    }

    /// `problem` about this setting.
    pub fn refused(&self, problem: impl Into<String>) -> ConfigError {
        ConfigError::Setting {
            setting: self.name(),
            problem: problem.into(),
        }
    }

    /// Refuses `value` unless it passes the check.
    pub fn verify(&self, value: &T) -> Result<(), ConfigError> {
        if value.is_unset() {
            return Ok(());
        }
        let number = value.number().unwrap_or(f64::NAN);
        let passes = match self.check {
            Check::Any => true,
            Check::Between(low, high) => (low as f64..=high as f64).contains(&number),
            Check::AtMost(high) => number <= high as f64,
            Check::Positive => number.is_finite() && number > 0.0,
            Check::Fraction => number > 0.0 && number <= 1.0,
            Check::Text(_, test) => value.text().is_some_and(test),
            Check::Elsewhere(_) => true,
        };
        match passes {
            true => Ok(()),
            false => Err(self.refused(format!("must be {}", self.check.message()))),
        }
    }
}

/// What values a setting accepts beyond its type.
#[derive(Clone, Copy)]
pub enum Check {
    Any,
    /// A number from the first to the second, both included.
    Between(u64, u64),
    AtMost(u64),
    /// A number above zero (and finite).
    Positive,
    /// A number above 0 and at most 1.
    Fraction,
    /// Text that passes the test; the words say what passes.
    Text(&'static str, fn(&str) -> bool),
    /// What the words say, checked once every setting is read (against the others, in
    /// `check_relations`) or by the adapter that uses it.
    Elsewhere(&'static str),
}

impl Check {
    /// The rule, as an error completes "must be …".
    fn message(self) -> String {
        match self {
            Check::Any => "of its type".into(),
            Check::Between(low, high) => format!("between {low} and {high}"),
            Check::AtMost(high) => format!("at most {high}"),
            Check::Positive => "positive".into(),
            Check::Fraction => "a fraction above 0 and at most 1".into(),
            Check::Text(words, _) | Check::Elsewhere(words) => words.into(),
        }
    }

    /// The rule as the docs tell it, if there is one.
    pub fn described(self) -> Option<String> {
        Some(match self {
            Check::Any => return None,
            Check::Between(low, high) => format!("{} to {}", thousands(low), thousands(high)),
            Check::AtMost(high) => format!("at most {}", thousands(high)),
            Check::Fraction => "above 0, at most 1".into(),
            check => check.message(),
        })
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A type of setting: how a variable's text and the file's value become one, and how the
/// docs show it.
pub trait Value: Sized {
    /// A variable's text (never empty: an empty variable counts as unset).
    fn from_var(text: &str) -> Result<Self, String>;
    /// The file's value.
    fn from_file(value: toml::Value) -> Result<Self, String>;
    /// The value as the docs show it.
    fn shown(&self) -> String;
    /// What values of the type look like, for the docs.
    fn kind() -> &'static str;
    /// The values the type accepts, for the docs, when no check says more.
    fn accepts() -> String {
        Self::kind().into()
    }
    /// The value as a number, for the checks of numbers.
    fn number(&self) -> Option<f64> {
        None
    }
    /// The value as text, for the checks of text.
    fn text(&self) -> Option<&str> {
        None
    }
    /// An unset optional value, which no check refuses.
    fn is_unset(&self) -> bool {
        false
    }
    /// The variable's value wins over the file's.
    fn layer(file: Option<Self>, var: Option<Self>) -> Option<Self> {
        var.or(file)
    }
}

/// The file's value through serde, as the type's `Deserialize` takes it from TOML.
pub(crate) fn deserialized<T: serde::de::DeserializeOwned>(value: toml::Value) -> Result<T, String> {
    value.try_into().map_err(|e: toml::de::Error| e.message().to_owned())
}

/// A variable's text parsed, blanks around it ignored.
fn parsed<T: std::str::FromStr>(text: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.trim().parse().map_err(|e| format!("{text:?} is not valid: {e}"))
}

macro_rules! numbers {
    ($($t:ty: $kind:literal),*) => {$(
        impl Value for $t {
            fn from_var(text: &str) -> Result<Self, String> {
                parsed(text)
            }
            fn from_file(value: toml::Value) -> Result<Self, String> {
                deserialized(value)
            }
            fn shown(&self) -> String {
                format!("{self:?}")
            }
            fn kind() -> &'static str {
                $kind
            }
            fn number(&self) -> Option<f64> {
                Some(*self as f64)
            }
        }
    )*};
}
numbers!(u32: "a whole number", u64: "a whole number", usize: "a whole number", f64: "a number");

impl Value for bool {
    fn from_var(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(format!("{text:?} is not true or false")),
        }
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        deserialized(value)
    }
    fn shown(&self) -> String {
        self.to_string()
    }
    fn kind() -> &'static str {
        "`true` or `false`"
    }
}

impl Value for SocketAddr {
    fn from_var(text: &str) -> Result<Self, String> {
        parsed(text)
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        parsed(&deserialized::<String>(value)?)
    }
    fn shown(&self) -> String {
        self.to_string()
    }
    fn kind() -> &'static str {
        "an IP address and port"
    }
}

/// A setting that chooses among named options (the store, the click queue, the ACME
/// challenge): its own enum, parsed once from exactly one of its words, and matched
/// exhaustively where it is used; any other word is refused with the setting's name and
/// the words it takes.
pub trait Choice: Copy + PartialEq + 'static {
    /// Each option with its word, in the order the docs list them.
    const OPTIONS: &'static [(&'static str, Self)];

    /// The option's word.
    fn word(self) -> &'static str {
        Self::OPTIONS
            .iter()
            .find(|(_, option)| *option == self)
            .map_or("", |(word, _)| word)
    }
}

/// The option `text` names (blanks around it ignored).
pub(crate) fn chosen<T: Choice>(text: &str) -> Result<T, String> {
    let word = text.trim();
    T::OPTIONS
        .iter()
        .find(|(w, _)| *w == word)
        .map(|(_, option)| *option)
        .ok_or_else(|| {
            let words: Vec<&str> = T::OPTIONS.iter().map(|(w, _)| *w).collect();
            format!("{word:?} is not {}", words.join(" or "))
        })
}

/// [`Value`] for each [`Choice`].
macro_rules! choices {
    ($($t:ty),*) => {$(
        impl $crate::config::setting::Value for $t {
            fn from_var(text: &str) -> Result<Self, String> {
                $crate::config::setting::chosen(text)
            }
            fn from_file(value: toml::Value) -> Result<Self, String> {
                $crate::config::setting::chosen(&$crate::config::setting::deserialized::<String>(value)?)
            }
            fn shown(&self) -> String {
                $crate::config::setting::Choice::word(*self).to_owned()
            }
            fn kind() -> &'static str {
                "a word"
            }
            fn accepts() -> String {
                use $crate::config::setting::Choice;
                let words: Vec<String> = <$t as Choice>::OPTIONS.iter().map(|(w, _)| format!("`{w}`")).collect();
                words.join(" or ")
            }
            fn text(&self) -> Option<&str> {
                Some($crate::config::setting::Choice::word(*self))
            }
        }

        /// A list of the options (comma-separated in a variable).
        impl $crate::config::setting::Value for Vec<$t> {
            fn from_var(text: &str) -> Result<Self, String> {
                text.split(',').filter(|w| !w.trim().is_empty()).map($crate::config::setting::chosen).collect()
            }
            fn from_file(value: toml::Value) -> Result<Self, String> {
                let words: Vec<String> = $crate::config::setting::deserialized(value)?;
                words.iter().map(|w| $crate::config::setting::chosen(w)).collect()
            }
            fn shown(&self) -> String {
                let words: Vec<&str> = self.iter().map(|c| $crate::config::setting::Choice::word(*c)).collect();
                format!("{words:?}")
            }
            fn kind() -> &'static str {
                "a list"
            }
            fn accepts() -> String {
                format!("a list of {}", <$t as $crate::config::setting::Value>::accepts())
            }
        }
    )*};
}
pub(crate) use choices;

/// Text is taken as written: a blank or a control character is the checks' to refuse.
impl Value for String {
    fn from_var(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        deserialized(value)
    }
    fn shown(&self) -> String {
        self.clone()
    }
    fn kind() -> &'static str {
        "text"
    }
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl Value for PathBuf {
    fn from_var(text: &str) -> Result<Self, String> {
        Ok(PathBuf::from(text))
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        deserialized(value)
    }
    fn shown(&self) -> String {
        self.display().to_string()
    }
    fn kind() -> &'static str {
        "a path"
    }
}

/// A key of 16 bytes in 32 hexadecimal characters; a secret, never repeated in an error.
impl Value for [u8; 16] {
    fn from_var(text: &str) -> Result<Self, String> {
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<Vec<u8>>>();
        bytes
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| "must be 32 hexadecimal characters (16 bytes)".into())
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        Self::from_var(&deserialized::<String>(value)?)
    }
    fn shown(&self) -> String {
        "(a secret, not shown)".into()
    }
    fn kind() -> &'static str {
        "32 hexadecimal characters"
    }
}

/// A list: comma-separated in a variable, whose entries are added to the file's.
impl Value for Vec<String> {
    fn from_var(text: &str) -> Result<Self, String> {
        Ok(text
            .split(',')
            .map(|d| d.trim().to_owned())
            .filter(|d| !d.is_empty())
            .collect())
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        deserialized(value)
    }
    fn shown(&self) -> String {
        format!("{self:?}")
    }
    fn kind() -> &'static str {
        "a list"
    }
    fn layer(file: Option<Self>, var: Option<Self>) -> Option<Self> {
        match (file, var) {
            (Some(mut file), Some(var)) => {
                file.extend(var);
                Some(file)
            }
            (file, var) => var.or(file),
        }
    }
}

/// Networks (a CIDR, or an address alone), comma-separated in a variable; the variable
/// replaces the file's list, as for every setting but `blocked_domains`.
impl Value for rebound_core::client::TrustedNetworks {
    fn from_var(text: &str) -> Result<Self, String> {
        text.split(',')
            .filter(|n| !n.trim().is_empty())
            .map(rebound_core::client::TrustedNetworks::parse_network)
            .collect::<Result<_, _>>()
            .map(rebound_core::client::TrustedNetworks::new)
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        let nets: Vec<String> = deserialized(value)?;
        nets.iter()
            .map(|n| rebound_core::client::TrustedNetworks::parse_network(n))
            .collect::<Result<_, _>>()
            .map(rebound_core::client::TrustedNetworks::new)
    }
    fn shown(&self) -> String {
        let nets: Vec<String> = self.networks().iter().map(ToString::to_string).collect();
        format!("{nets:?}")
    }
    fn kind() -> &'static str {
        "a list of networks (`10.0.0.0/8`, `2001:db8::/32`, or an address alone)"
    }
}

/// A setting that may be left unset.
impl<T: Value> Value for Option<T> {
    fn from_var(text: &str) -> Result<Self, String> {
        T::from_var(text).map(Some)
    }
    fn from_file(value: toml::Value) -> Result<Self, String> {
        T::from_file(value).map(Some)
    }
    fn shown(&self) -> String {
        self.as_ref().map_or_else(|| "unset".into(), T::shown)
    }
    fn kind() -> &'static str {
        T::kind()
    }
    fn number(&self) -> Option<f64> {
        self.as_ref()?.number()
    }
    fn text(&self) -> Option<&str> {
        self.as_ref()?.text()
    }
    fn is_unset(&self) -> bool {
        self.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_setting_and_say_the_rule() {
        let s = Setting::new("edge.max_headers", || 100usize)
            .var("REBOUND_MAX_HEADERS")
            .check(Check::Between(8, 1000));
        assert!(s.verify(&8).is_ok() && s.verify(&1000).is_ok());
        assert_eq!(
            s.verify(&7).unwrap_err().to_string(),
            "edge.max_headers (REBOUND_MAX_HEADERS): must be between 8 and 1000"
        );
        let share = Setting::new("redirect.click_write_share", || 0.01).check(Check::Fraction);
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY] {
            assert!(share.verify(&bad).is_err(), "{bad}");
        }
        let hold = Setting::new("redirect.click_max_hold_ms", || None::<u64>).check(Check::Positive);
        assert!(hold.verify(&None).is_ok() && hold.verify(&Some(0)).is_err());
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Colour {
        Red,
        Blue,
    }
    impl Choice for Colour {
        const OPTIONS: &'static [(&'static str, Self)] = &[("red", Colour::Red), ("blue", Colour::Blue)];
    }
    choices!(Colour);

    #[test]
    fn a_choice_is_one_of_its_words_exactly() {
        assert_eq!(Colour::from_var(" blue "), Ok(Colour::Blue));
        assert_eq!(Colour::from_file(toml::Value::String("red".into())), Ok(Colour::Red));
        // No default arm: any other word, another case or a number is refused, with the words.
        for bad in ["green", "Red", ""] {
            assert_eq!(Colour::from_var(bad), Err(format!("{bad:?} is not red or blue")));
        }
        assert!(Colour::from_file(toml::Value::Integer(1)).is_err());
        assert_eq!(
            (Colour::Blue.shown(), Colour::accepts()),
            ("blue".into(), "`red` or `blue`".into())
        );
    }

    #[test]
    fn values_from_variables_and_the_file() {
        assert_eq!(bool::from_var(" Yes "), Ok(true));
        assert!(bool::from_var("perhaps").unwrap_err().contains("perhaps"));
        assert_eq!(u64::from_var(" 42 "), Ok(42));
        assert!(u64::from_file(toml::Value::Integer(-1)).is_err());
        assert!(u64::from_file(toml::Value::String("5".into())).is_err());
        assert_eq!(f64::from_file(toml::Value::Integer(50)), Ok(50.0));
        assert_eq!(String::from_var(" x "), Ok(" x ".into()));
        assert!(SocketAddr::from_file(toml::Value::Integer(5)).is_err());
        assert!(<[u8; 16]>::from_var("000102030405060708090a0b0c0d0e0f").is_ok());
        let refused = <[u8; 16]>::from_var("secret-but-not-hex").unwrap_err();
        assert!(!refused.contains("secret"), "{refused}");
        let list = Vec::<String>::from_var("a.example, ,b.example").unwrap();
        assert_eq!(
            Vec::layer(Some(vec!["f".into()]), Some(list)).unwrap(),
            ["f", "a.example", "b.example"]
        );
    }

    #[test]
    fn ranges_in_the_docs_have_thousands_separators() {
        assert_eq!(Check::Between(1, 3_600_000).described().unwrap(), "1 to 3,600,000");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1000), "1,000");
    }
}
