//! The User-Agent parsers compared for issue 45, each behind one function that returns the
//! three dimensions Rebound keeps (device class, browser family, OS family), with one
//! normalisation of the parsers' names and one device rule shared by all, so that what
//! differs between rows is the parser.

pub mod agents;

/// Device class, browser family and OS family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub device: &'static str,
    pub browser: String,
    pub os: String,
}

/// One name per browser (as `proxy/src/visitor.rs`'s `browser_family`).
pub fn normalise_browser(name: &str) -> String {
    match name {
        "Mobile Safari" | "Safari" => "Safari",
        "Chrome" | "Chrome Mobile" | "Chrome Mobile iOS" => "Chrome",
        "Firefox" | "Firefox Mobile" | "Firefox iOS" => "Firefox",
        "Edge" | "Edge Mobile" => "Edge",
        "Chrome Mobile WebView" => "Android WebView",
        "Mobile Safari UI/WKWebView" => "iOS WebView",
        // woothee's names for the same browsers.
        "SamsungBrowser" => "Samsung Internet",
        "UNKNOWN" | "" => "Other",
        other => other,
    }
    .to_owned()
}

/// One name per OS family (as `proxy/src/visitor.rs`'s `os_family`).
pub fn normalise_os(name: &str) -> String {
    match name {
        "Windows Phone" | "Windows Mobile" => name,
        n if n.starts_with("Windows") => "Windows",
        "Mac OS X" => "macOS",
        "Chrome OS" => "ChromeOS",
        "Ubuntu" | "Kubuntu" | "Debian" | "Fedora" | "Red Hat" | "CentOS" | "openSUSE" | "Gentoo" | "Mint" => "Linux",
        n if n.contains("Linux") => "Linux",
        // woothee's names for the same systems.
        "Mac OSX" => "macOS",
        "iPhone" | "iPad" | "iPod" => "iOS",
        "ChromeOS" => "ChromeOS",
        "UNKNOWN" | "" => "Other",
        other => other,
    }
    .to_owned()
}

/// The device class from the OS family and a few tokens (as `proxy/src/visitor.rs`'s
/// `device_class`): neither parser has a tablet class (uap names the model, woothee says
/// "smartphone"). An iPad says so; an Android tablet's browser leaves "Mobile" out (Chrome's
/// and Samsung's convention); consoles and TVs are not desktops.
pub fn device_class(os: &str, agent: &str) -> &'static str {
    let appliance = [
        "Xbox",
        "PlayStation",
        "Nintendo",
        "SMART-TV",
        "SmartTV",
        "Android TV",
        "BRAVIA",
    ]
    .iter()
    .any(|token| agent.contains(token));
    match os {
        _ if appliance => "other",
        "iOS" if agent.contains("iPad") => "tablet",
        "iOS" | "Windows Phone" | "Windows Mobile" | "KaiOS" => "mobile",
        "Android" if agent.contains("Mobile") => "mobile",
        "Android" => "tablet",
        "Windows" | "macOS" | "Linux" | "ChromeOS" => "desktop",
        _ => "other",
    }
}

#[cfg(feature = "woothee")]
pub mod woothee_parser {
    use super::*;

    pub fn parser() -> woothee::parser::Parser {
        woothee::parser::Parser::new()
    }

    /// The parser's own call, for timing.
    pub fn raw<'a>(p: &woothee::parser::Parser, agent: &'a str) -> Option<woothee::parser::WootheeResult<'a>> {
        p.parse(agent)
    }

    pub fn verdict(p: &woothee::parser::Parser, agent: &str) -> Verdict {
        let (browser, os) = match p.parse(agent) {
            Some(r) => (normalise_browser(r.name), normalise_os(r.os)),
            None => ("Other".to_owned(), "Other".to_owned()),
        };
        Verdict {
            device: device_class(&os, agent),
            browser,
            os,
        }
    }
}

#[cfg(feature = "uaparser")]
pub mod uaparser_parser {
    use super::*;
    use uaparser::Parser as _;

    /// uap-core 0.15.0's regexes.yaml, as the crate packages it (not compiled in).
    pub fn parser(regexes: &[u8]) -> uaparser::UserAgentParser {
        uaparser::UserAgentParser::from_bytes(regexes).expect("uap-core regexes")
    }

    /// What Rebound would call: the browser and the OS (the device regexes are not needed).
    pub fn raw(p: &uaparser::UserAgentParser, agent: &str) -> usize {
        p.parse_user_agent(agent).family.len() + p.parse_os(agent).family.len()
    }

    pub fn verdict(p: &uaparser::UserAgentParser, agent: &str) -> Verdict {
        let browser = normalise_browser(&p.parse_user_agent(agent).family);
        let os = normalise_os(&p.parse_os(agent).family);
        Verdict {
            device: device_class(&os, agent),
            browser,
            os,
        }
    }
}

#[cfg(feature = "ua-parser")]
pub mod ua_parser_parser {
    use super::*;

    /// The extractors of the browser and the OS from uap-core 0.18.0's regexes.yaml (the
    /// crate packages the file but leaves loading it to its user).
    pub struct Uap {
        pub ua: ua_parser::user_agent::Extractor<'static>,
        pub os: ua_parser::os::Extractor<'static>,
    }

    pub fn parser(regexes: &'static str) -> Uap {
        let r: ua_parser::Regexes<'static> = serde_yaml::from_str(regexes).expect("uap-core regexes");
        let e = ua_parser::Extractor::try_from(r).expect("extractor");
        Uap { ua: e.ua, os: e.os }
    }

    pub fn raw(p: &Uap, agent: &str) -> usize {
        p.ua.extract(agent).map_or(0, |v| v.family.len()) + p.os.extract(agent).map_or(0, |v| v.os.len())
    }

    pub fn verdict(p: &Uap, agent: &str) -> Verdict {
        let browser = normalise_browser(&p.ua.extract(agent).map(|v| v.family.into_owned()).unwrap_or_default());
        let os = normalise_os(&p.os.extract(agent).map(|v| v.os.into_owned()).unwrap_or_default());
        Verdict {
            device: device_class(&os, agent),
            browser,
            os,
        }
    }
}
