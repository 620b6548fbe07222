//! Rules on a link (docs/spec.md §14): an ordered list; the first rule that matches the
//! visitor decides the target, otherwise the link's own target answers.
//!
//! A rule matches on any of the visitor's country, OS family, device class and preferred
//! language (every condition it names must hold; within one, any value), and sends the
//! visitor to one target or splits visitors across 2–10 weighted targets. A split is
//! sticky: the variant is chosen by a hash of the link's key, the client's address and its
//! User-Agent, so one person on one device and network sees one variant on every proxy. The
//! key and the agent are digested by [SipHash-1-3] with fixed keys (the key once per cache
//! fill, the agent once per agent and thread), and mixed with the address by [`mix`]: every
//! proxy of every version computes the same (a table test pins the values).
//!
//! [`Rule`] is the record's form (the store, Redis and the API carry it as JSON);
//! [`RuleSet`] is the form a proxy evaluates, built once per cache fill: countries and
//! languages as small arrays, OS and device as bit sets, split weights as a cumulative
//! table. [`RuleSet::choose`] asks the visitor only for what some rule needs
//! ([`Visitor`]), so a rule set on device alone never looks up a country.
//!
//! [SipHash-1-3]: https://docs.rs/siphasher

pub use crate::dimensions::Decided;
use crate::dimensions::{Country, DeviceClass};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::Hasher;

/// Rules a link may carry at most.
pub const MAX_RULES: usize = 20;
/// Variants of a split: at least, at most.
pub const MIN_VARIANTS: usize = 2;
pub const MAX_VARIANTS: usize = 10;
/// Countries one rule may name at most (every ISO 3166-1 code fits).
pub const MAX_COUNTRIES: usize = 250;
/// Languages one rule may name at most, and the distinct languages of a link's rules.
pub const MAX_LANGUAGES: usize = 32;
/// The largest weight of one variant.
pub const MAX_WEIGHT: u32 = 10_000;
/// The longest language tag accepted (`zh-Hant-TW` is 10).
pub const MAX_LANGUAGE_LEN: usize = 35;
/// The most bytes a link's rules take as JSON (what the record, Redis and L1 hold of them).
pub const MAX_RULES_BYTES: usize = 32_768;
/// `Accept-Language` items read at most (a longer header is read to here).
const MAX_ACCEPT_ITEMS: usize = 32;

/// An operating system family a rule can name. A User-Agent's family (uap-core's name) maps
/// onto one of these by [`Os::of_family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Os {
    Ios,
    Android,
    Windows,
    Macos,
    Linux,
    Chromeos,
    /// Everything else, and no User-Agent.
    Other,
}

impl Os {
    pub const ALL: [Os; 7] = [
        Os::Ios,
        Os::Android,
        Os::Windows,
        Os::Macos,
        Os::Linux,
        Os::Chromeos,
        Os::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Os::Ios => "ios",
            Os::Android => "android",
            Os::Windows => "windows",
            Os::Macos => "macos",
            Os::Linux => "linux",
            Os::Chromeos => "chromeos",
            Os::Other => "other",
        }
    }

    pub fn parse(name: &str) -> Option<Os> {
        Os::ALL.into_iter().find(|o| o.as_str().eq_ignore_ascii_case(name))
    }

    /// The family a User-Agent parser names (uap-core's `os.family`): `iOS` and `iPadOS`
    /// are iOS, `Mac OS X` and `macOS` macOS, `Windows` (not `Windows Phone`) Windows, the
    /// Linux distributions Linux.
    pub fn of_family(family: &[u8]) -> Os {
        match family {
            b"iOS" | b"iPadOS" => Os::Ios,
            b"Android" => Os::Android,
            b"Mac OS X" | b"macOS" | b"Mac OS" => Os::Macos,
            b"Chrome OS" | b"ChromeOS" => Os::Chromeos,
            b"Linux" | b"Ubuntu" | b"Debian" | b"Fedora" | b"Red Hat" | b"SUSE" | b"openSUSE" | b"Arch Linux"
            | b"Linux Mint" | b"Gentoo" | b"Mandriva" | b"Slackware" | b"CentOS" | b"Kubuntu" | b"Xubuntu"
            | b"Mageia" => Os::Linux,
            f if f.starts_with(b"Windows") && f != b"Windows Phone" && f != b"Windows Mobile" => Os::Windows,
            _ => Os::Other,
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A device class a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Desktop,
    Mobile,
    Tablet,
    Other,
}

impl Device {
    pub const ALL: [Device; 4] = [Device::Desktop, Device::Mobile, Device::Tablet, Device::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Device::Desktop => "desktop",
            Device::Mobile => "mobile",
            Device::Tablet => "tablet",
            Device::Other => "other",
        }
    }

    pub fn parse(name: &str) -> Option<Device> {
        Device::ALL.into_iter().find(|d| d.as_str().eq_ignore_ascii_case(name))
    }

    pub fn of_class(class: DeviceClass) -> Device {
        match class {
            DeviceClass::Desktop => Device::Desktop,
            DeviceClass::Mobile => Device::Mobile,
            DeviceClass::Tablet => Device::Tablet,
            DeviceClass::Other => Device::Other,
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// One target of a split, and its share.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub target: String,
    pub weight: u32,
}

/// One rule as the record keeps it: the conditions (an empty list is no condition) and
/// either a `target` or a `split`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// ISO 3166-1 alpha-2 codes, upper case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub countries: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub os: Vec<Os>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// Language ranges (`fr`, `pt-BR`), lower case: `fr` matches `fr`, `fr-CA`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub languages: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<Variant>,
}

impl Rule {
    /// True when the rule names no condition: it matches every visitor.
    pub fn is_unconditional(&self) -> bool {
        self.countries.is_empty() && self.os.is_empty() && self.devices.is_empty() && self.languages.is_empty()
    }

    /// Every target the rule can send a visitor to.
    pub fn targets(&self) -> impl Iterator<Item = &str> {
        self.target
            .iter()
            .map(String::as_str)
            .chain(self.split.iter().map(|v| v.target.as_str()))
    }

    /// Whether every visitor it matches runs iOS or Android (what an app's own scheme
    /// needs: a desktop browser cannot open it).
    pub fn only_for_apps(&self) -> bool {
        !self.os.is_empty() && self.os.iter().all(|o| matches!(o, Os::Ios | Os::Android))
    }
}

/// Whether `target` is a web address (`http:`/`https:`), as every link's own target is; a
/// rule's target may instead be an app's own scheme (`intent:`, `myapp:`).
pub fn is_web(target: &str) -> bool {
    let starts =
        |prefix: &[u8]| target.len() >= prefix.len() && target.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix);
    starts(b"http://") || starts(b"https://")
}

/// The JSON a store, and L1, keep a link's rules as; `None` for a link without rules (most),
/// which keeps none.
pub fn stored_json(rules: &[Rule]) -> Option<String> {
    (!rules.is_empty()).then(|| serde_json::to_string(rules).expect("rules serialize"))
}

/// Every target of `rules`.
pub fn targets(rules: &[Rule]) -> impl Iterator<Item = &str> {
    rules.iter().flat_map(Rule::targets)
}

/// Why a rule set is refused; the message names the rule (1-based) and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(pub String);

fn refuse(at: usize, field: &str, why: impl fmt::Display) -> RuleError {
    match field {
        "" => RuleError(format!("rules[{}]: {why}", at + 1)),
        field => RuleError(format!("rules[{}].{field}: {why}", at + 1)),
    }
}

/// `rules` checked and brought to their canonical form (countries upper case, languages
/// lower case, lists without repeats), or why not. Targets are not checked here: the
/// caller checks each of [`targets`] with the policy a link's own target obeys.
pub fn normalize(mut rules: Vec<Rule>) -> Result<Vec<Rule>, RuleError> {
    if rules.len() > MAX_RULES {
        return Err(RuleError(format!(
            "a link has at most {MAX_RULES} rules, not {}",
            rules.len()
        )));
    }
    let mut languages: Vec<String> = Vec::new();
    for (at, rule) in rules.iter_mut().enumerate() {
        if rule.countries.len() > MAX_COUNTRIES {
            return Err(refuse(at, "countries", format!("at most {MAX_COUNTRIES}")));
        }
        for c in rule.countries.iter_mut() {
            let b = c.as_bytes();
            if b.len() != 2 || !b.iter().all(u8::is_ascii_alphabetic) {
                return Err(refuse(
                    at,
                    "countries",
                    format!("{c:?} is not an ISO 3166-1 alpha-2 code (two letters)"),
                ));
            }
            c.make_ascii_uppercase();
        }
        dedup(&mut rule.countries);
        dedup(&mut rule.os);
        dedup(&mut rule.devices);
        if rule.languages.len() > MAX_LANGUAGES {
            return Err(refuse(at, "languages", format!("at most {MAX_LANGUAGES}")));
        }
        for l in rule.languages.iter_mut() {
            if !is_language_range(l) {
                return Err(refuse(
                    at,
                    "languages",
                    format!("{l:?} is not a language tag (letters and digits in subtags of 1-8 joined by '-', the first letters only, at most {MAX_LANGUAGE_LEN} bytes)"),
                ));
            }
            l.make_ascii_lowercase();
            if !languages.contains(l) {
                languages.push(l.clone());
            }
        }
        dedup(&mut rule.languages);
        match (&rule.target, rule.split.len()) {
            (Some(_), 0) => {}
            (None, 0) => return Err(refuse(at, "target", "give a target or a split")),
            (Some(_), _) => return Err(refuse(at, "split", "give a target or a split, not both")),
            (None, n) if !(MIN_VARIANTS..=MAX_VARIANTS).contains(&n) => {
                return Err(refuse(
                    at,
                    "split",
                    format!("a split has {MIN_VARIANTS} to {MAX_VARIANTS} variants, not {n}"),
                ))
            }
            (None, _) => {
                for (v, variant) in rule.split.iter().enumerate() {
                    if !(1..=MAX_WEIGHT).contains(&variant.weight) {
                        return Err(refuse(
                            at,
                            &format!("split[{}].weight", v + 1),
                            format!("a weight is 1 to {MAX_WEIGHT}, not {}", variant.weight),
                        ));
                    }
                }
            }
        }
    }
    if languages.len() > MAX_LANGUAGES {
        return Err(RuleError(format!(
            "a link's rules name at most {MAX_LANGUAGES} distinct languages, not {}",
            languages.len()
        )));
    }
    let bytes = serde_json::to_string(&rules).map_or(usize::MAX, |j| j.len());
    if bytes > MAX_RULES_BYTES {
        return Err(RuleError(format!(
            "a link's rules take at most {MAX_RULES_BYTES} bytes as JSON, not {bytes}"
        )));
    }
    if let Some(at) = rules.iter().position(Rule::is_unconditional) {
        if at + 1 < rules.len() {
            return Err(refuse(
                at + 1,
                "",
                format!(
                    "can never match: rule {} has no condition and matches every visitor",
                    at + 1
                ),
            ));
        }
    }
    Ok(rules)
}

fn dedup<T: PartialEq>(list: &mut Vec<T>) {
    let mut i = 0;
    while i < list.len() {
        if list[..i].contains(&list[i]) {
            list.remove(i);
        } else {
            i += 1;
        }
    }
}

/// A language range as a rule names it: RFC 5646's shape, loosely (subtags of 1-8 letters
/// or digits joined by `-`, the first of letters only), no `*`.
fn is_language_range(tag: &str) -> bool {
    tag.len() <= MAX_LANGUAGE_LEN
        && tag.split('-').enumerate().all(|(i, sub)| {
            (1..=8).contains(&sub.len())
                && match i {
                    0 => sub.bytes().all(|b| b.is_ascii_alphabetic()),
                    _ => sub.bytes().all(|b| b.is_ascii_alphanumeric()),
                }
        })
}

/// What a rule set asks of a visitor, each only when some rule needs it.
pub trait Visitor {
    /// The country, or unknown.
    fn country(&mut self) -> Country;
    /// The OS family and device class of the User-Agent.
    fn agent(&mut self) -> (Os, Device);
    /// The bits of `rules`' languages that the visitor's preferred language matches
    /// ([`RuleSet::preferred`] of its `Accept-Language`; 0 without one). A data plane may
    /// remember each header's [`AcceptLanguage`] reading and answer with
    /// [`RuleSet::preferred_in`].
    fn language(&mut self, rules: &RuleSet) -> u32;
    /// What a split is sticky on: [`visitor_digest`] of the client's address and its
    /// User-Agent's [`agent_digest`].
    fn stickiness(&mut self) -> u64;
}

/// One rule as a proxy evaluates it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Compiled {
    /// Sorted country codes; empty: any.
    countries: Box<[[u8; 2]]>,
    /// OS bits; 0: any.
    os: u8,
    /// Device bits; 0: any.
    devices: u8,
    /// Bits of the set's languages this rule names; 0: any.
    languages: u32,
    /// A target (one entry, weight 0) or a split: `(cumulative weight, target)`.
    targets: Box<[(u32, Box<str>)]>,
    /// Where its targets start in [`RuleSet::all_targets`].
    first: u16,
}

/// A link's rules as a proxy evaluates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    /// SipHash-1-3 (`SPLIT_KEYS`) of the link's key: what a split mixes with the visitor's
    /// digest, so that another link splits the same visitors anew.
    key: u64,
    rules: Box<[Compiled]>,
    /// Every language the rules name (index = bit).
    languages: Box<[Box<str>]>,
    /// Their primary subtags ([`primary_word`]), each once: an `Accept-Language` item with
    /// none of these is passed over without comparing it with each language.
    primaries: Box<[u64]>,
    /// [`primary_bit`] of each of `primaries`: a header none of whose items' bits is here
    /// names none of the set's languages, which one AND tells.
    primary_bits: u64,
    needs_country: bool,
    needs_agent: bool,
}

/// SipHash keys of the split's hash: fixed, so every proxy agrees (not a secret: the
/// variant a visitor sees is no secret from that visitor).
const SPLIT_KEYS: (u64, u64) = (0x7265_626f_756e_6421, 0x7370_6c69_7421_0001);

/// The digest of a User-Agent a split is sticky on (SipHash-1-3, fixed keys): a data plane
/// remembers it per agent, so a split hashes the link, the address and these 8 bytes, not
/// the whole header.
pub fn agent_digest(agent: &[u8]) -> u64 {
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(SPLIT_KEYS.1, SPLIT_KEYS.0);
    hasher.write(agent);
    hasher.finish()
}

/// The digest of a visitor a split is sticky on: the client's `address` (none: a fixed
/// value) and its User-Agent's [`agent_digest`], mixed by [`mix`]. Every proxy of every
/// version computes the same.
pub fn visitor_digest(address: Option<std::net::IpAddr>, agent: u64) -> u64 {
    let address = match address {
        None => 0,
        Some(std::net::IpAddr::V4(a)) => u64::from(u32::from(a)) | 1 << 32,
        Some(std::net::IpAddr::V6(a)) => {
            let a = u128::from(a);
            mix((a >> 64) as u64 ^ 2 << 32) ^ a as u64
        }
    };
    mix(address ^ mix(agent))
}

/// MurmurHash3's 64-bit finalizer (`fmix64`): a bijection in which every input bit flips
/// each output bit with probability about one half. A split's point is `mix` of the link's
/// key digest and the visitor's: the choice of a split rose by under 30 instructions a
/// redirect under callgrind, where SipHash-1-3 of the key, the address and the agent's
/// digest took about 210 (benches/results/2026-12-06k-callgrind-rules-costs.md).
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ x >> 33
}

impl RuleSet {
    /// The form of `rules` (already [`normalize`]d) a proxy evaluates, for the link whose
    /// key is `key`.
    pub fn compile(key: &str, rules: &[Rule]) -> RuleSet {
        let mut languages: Vec<Box<str>> = Vec::new();
        for l in rules.iter().flat_map(|r| &r.languages) {
            if !languages.iter().any(|x| **x == **l) {
                languages.push(l.as_str().into());
            }
        }
        let mut compiled = rules
            .iter()
            .map(|r| {
                let mut countries: Vec<[u8; 2]> = r
                    .countries
                    .iter()
                    .filter_map(|c| <[u8; 2]>::try_from(c.as_bytes()).ok())
                    .map(|c| c.map(|b| b.to_ascii_uppercase()))
                    .collect();
                countries.sort_unstable();
                let targets: Vec<(u32, Box<str>)> = match &r.target {
                    Some(t) => vec![(0, t.as_str().into())],
                    None => {
                        let mut sum = 0u32;
                        r.split
                            .iter()
                            .map(|v| {
                                sum += v.weight;
                                (sum, v.target.as_str().into())
                            })
                            .collect()
                    }
                };
                Compiled {
                    countries: countries.into(),
                    os: r.os.iter().fold(0, |b, o| b | o.bit()),
                    devices: r.devices.iter().fold(0, |b, d| b | d.bit()),
                    languages: r
                        .languages
                        .iter()
                        .filter_map(|l| languages.iter().position(|x| **x == **l))
                        .take(32)
                        .fold(0, |b, i| b | 1 << i),
                    first: 0,
                    targets: targets.into(),
                }
            })
            .collect::<Vec<_>>();
        let mut first = 0u16;
        for rule in compiled.iter_mut() {
            rule.first = first;
            first = first.saturating_add(rule.targets.len() as u16);
        }
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(SPLIT_KEYS.0, SPLIT_KEYS.1);
        hasher.write(key.as_bytes());
        let mut primaries: Vec<u64> = languages.iter().filter_map(|l| primary_word(l.as_bytes())).collect();
        primaries.sort_unstable();
        primaries.dedup();
        RuleSet {
            primary_bits: primaries.iter().fold(0, |bits, &p| bits | primary_bit(p)),
            primaries: primaries.into(),
            key: hasher.finish(),
            needs_country: compiled.iter().any(|r| !r.countries.is_empty()),
            needs_agent: compiled.iter().any(|r| r.os != 0 || r.devices != 0),
            rules: compiled.into(),
            languages: languages.into(),
        }
    }

    /// Bytes the set holds on the heap, itself included: what a link with rules adds to L1.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<RuleSet>()
            + self.languages.iter().map(|l| 16 + l.len()).sum::<usize>()
            + 8 * self.primaries.len()
            + self
                .rules
                .iter()
                .map(|r| {
                    std::mem::size_of::<Compiled>()
                        + 2 * r.countries.len()
                        + r.targets.iter().map(|(_, t)| 24 + t.len()).sum::<usize>()
                })
                .sum::<usize>()
    }

    /// The target for `visitor` of the link, and which rule chose it; `None`: no rule
    /// matched (the link's own target answers). Inlined into the data plane's caller, with
    /// its visitor's methods.
    #[inline(always)]
    pub fn choose(&self, visitor: &mut impl Visitor) -> Option<(&str, Decided)> {
        let country = match self.needs_country {
            true => Some(visitor.country()),
            false => None,
        };
        let (os, device) = match self.needs_agent {
            true => {
                let (os, device) = visitor.agent();
                (os.bit(), device.bit())
            }
            false => (0, 0),
        };
        let language = match self.languages.is_empty() {
            true => 0,
            false => visitor.language(self),
        };
        for (at, rule) in self.rules.iter().enumerate() {
            if !rule.countries.is_empty() {
                let Some(code) = country.and_then(|c| c.letters()) else {
                    continue;
                };
                if rule.countries.binary_search(&code).is_err() {
                    continue;
                }
            }
            if rule.os != 0 && rule.os & os == 0 {
                continue;
            }
            if rule.devices != 0 && rule.devices & device == 0 {
                continue;
            }
            if rule.languages != 0 && rule.languages & language == 0 {
                continue;
            }
            let rule_no = (at + 1) as u8;
            if rule.targets.len() == 1 && rule.targets[0].0 == 0 {
                return Some((
                    &rule.targets[0].1,
                    Decided {
                        rule: rule_no,
                        variant: 0,
                    },
                ));
            }
            let total = rule.targets.last().map_or(1, |t| t.0).max(1);
            let point = (mix(self.key ^ visitor.stickiness()) % u64::from(total)) as u32;
            let v = rule.targets.partition_point(|t| t.0 <= point);
            let v = v.min(rule.targets.len() - 1);
            return Some((
                &rule.targets[v].1,
                Decided {
                    rule: rule_no,
                    variant: (v + 1) as u8,
                },
            ));
        }
        None
    }

    /// Every rule's targets, rule by rule and variant by variant: what a data plane prepares
    /// an answer for once per set ([`RuleSet::target_index`] finds one).
    pub fn all_targets(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().flat_map(|r| r.targets.iter().map(|(_, t)| &**t))
    }

    /// Where the target that `decided` (what [`RuleSet::choose`] returned) is in
    /// [`RuleSet::all_targets`]; `None` for the link's own target (no rule decided).
    #[inline]
    pub fn target_index(&self, decided: Decided) -> Option<usize> {
        let rule = self.rules.get(usize::from(decided.rule).checked_sub(1)?)?;
        let v = usize::from(decided.variant.saturating_sub(1));
        (v < rule.targets.len()).then(|| usize::from(rule.first) + v)
    }

    /// The bits of the set's languages that the visitor's preferred language matches: the
    /// `Accept-Language` item of the highest `q` (the first, among equals) that some
    /// rule's language range matches (RFC 4647 basic filtering: `fr` matches `fr-CA`).
    pub fn preferred(&self, header: &[u8]) -> u32 {
        self.preferred_in(header, &AcceptLanguage::read(header))
    }

    /// [`RuleSet::preferred`] of `header`, already `read`: its items in order of preference,
    /// each whose primary subtag none of the set's languages has passed over with one
    /// comparison of words. A data plane remembers each header's reading, so a redirect by
    /// a language rule compares the header with the one remembered instead of reading it:
    /// Chrome's `en-US,en;q=0.9` read on every redirect cost 265 instructions under callgrind
    /// (benches/results/2026-12-06x-callgrind-rules-language-memo.md).
    #[inline]
    pub fn preferred_in(&self, header: &[u8], read: &AcceptLanguage) -> u32 {
        // Most headers name none of a set's languages: one AND passes them over (71
        // instructions a redirect under callgrind for Chrome's two items, called and
        // compared item by item; benches/results/2026-12-07d-callgrind-rules-margin.md).
        if read.primary_bits & self.primary_bits == 0 {
            return 0;
        }
        self.preferred_among(header, read)
    }

    /// [`RuleSet::preferred_in`] past its filter: item by item.
    #[inline(never)]
    fn preferred_among(&self, header: &[u8], read: &AcceptLanguage) -> u32 {
        for item in &read.items {
            if self.primaries.contains(&item.primary) {
                let bits = self.bits_of(&header[item.tag.0 as usize..item.tag.1 as usize]);
                if bits != 0 {
                    return bits;
                }
            }
        }
        0
    }

    /// The bits of the set's languages that `tag` matches (RFC 4647 basic filtering).
    #[cold]
    #[inline(never)]
    fn bits_of(&self, tag: &[u8]) -> u32 {
        let mut bits = 0u32;
        if tag.len() <= MAX_LANGUAGE_LEN {
            for (i, range) in self.languages.iter().enumerate() {
                let r = range.as_bytes();
                if tag.len() >= r.len()
                    && tag[..r.len()].eq_ignore_ascii_case(r)
                    && (tag.len() == r.len() || tag[r.len()] == b'-')
                {
                    bits |= 1 << i;
                }
            }
        }
        bits
    }
}

/// An `Accept-Language` header read for language rules, independent of any rule set: its
/// items (of the first 32) whose primary subtag is 1-8 letters and whose
/// `q` is above 0, highest `q` first (header order among equals), each with its primary
/// subtag as a word (as `primary_word` makes it) and where its tag lies in the header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcceptLanguage {
    items: Vec<PreferredItem>,
    /// [`primary_bit`] of each item's primary subtag.
    primary_bits: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PreferredItem {
    primary: u64,
    /// The tag (the item before any `;`, trimmed): `header[tag.0..tag.1]`.
    tag: (u32, u32),
    /// In thousandths.
    q: u16,
}

impl AcceptLanguage {
    /// Reads `header` in one pass.
    pub fn read(header: &[u8]) -> AcceptLanguage {
        let mut items = Vec::new();
        let (n, mut at) = (header.len(), 0);
        for _ in 0..MAX_ACCEPT_ITEMS {
            while at < n && header[at].is_ascii_whitespace() {
                at += 1;
            }
            let start = at;
            let (mut primary, mut letters) = (0u64, 0usize);
            while at < n && header[at].is_ascii_alphabetic() {
                if letters < 8 {
                    primary |= u64::from(header[at] | 0x20) << (8 * letters);
                }
                letters += 1;
                at += 1;
            }
            while at < n && header[at] != b',' {
                at += 1;
            }
            if (1..=8).contains(&letters) {
                let item = &header[start..at];
                let mut parts = item.split(|&b| b == b';');
                let tag = parts.next().unwrap_or_default();
                // The tag trimmed: it starts at `start` (no leading space), ends before
                // its trailing spaces.
                let end = start + tag.trim_ascii_end().len();
                let mut q = 1000u16;
                for param in parts {
                    let param = param.trim_ascii();
                    if let Some(value) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                        q = quality(value);
                    }
                }
                if q > 0 {
                    items.push(PreferredItem {
                        primary,
                        tag: (start as u32, end as u32),
                        q,
                    });
                }
            }
            if at >= n {
                break;
            }
            at += 1;
        }
        // Stable: among equal `q`, header order.
        items.sort_by_key(|item| std::cmp::Reverse(item.q));
        let primary_bits = items.iter().fold(0, |bits, item| bits | primary_bit(item.primary));
        AcceptLanguage { items, primary_bits }
    }
}

/// The primary subtag of a language range (up to its first `-`) as one word, each byte
/// with 0x20 set, as [`RuleSet::preferred`] reads a tag's letters: equal for two subtags of
/// letters exactly when they are equal in any case (a byte with the bit set is a
/// lower-case letter only if it was a letter). `None` for an empty subtag or one longer
/// than 8 bytes, which no range has.
fn primary_word(tag: &[u8]) -> Option<u64> {
    let len = tag.iter().position(|&b| b == b'-').unwrap_or(tag.len());
    if !(1..=8).contains(&len) {
        return None;
    }
    let mut bytes = [0u8; 8];
    for (to, &from) in bytes.iter_mut().zip(&tag[..len]) {
        *to = from | 0x20;
    }
    Some(u64::from_le_bytes(bytes))
}

/// One of 64 bits for a [`primary_word`] (Fibonacci hashing: the multiplied word's top 6
/// bits): two equal words have the same bit, so a header and a rule set whose bits do not
/// meet share no primary subtag.
fn primary_bit(word: u64) -> u64 {
    1 << (word.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58)
}

/// A `q` value in thousandths (`0`, `0.5`, `1.000`); malformed: 0 (the item is ignored).
fn quality(value: &[u8]) -> u16 {
    match value {
        [b'1', rest @ ..] if rest.is_empty() || (rest[0] == b'.' && rest[1..].iter().all(|&b| b == b'0')) => 1000,
        [b'0'] => 0,
        [b'0', b'.', digits @ ..] if digits.len() <= 3 && digits.iter().all(u8::is_ascii_digit) => {
            let mut q = 0u16;
            for i in 0..3 {
                q = q * 10 + digits.get(i).map_or(0, |d| u16::from(d - b'0'));
            }
            q
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Rule {
        serde_json::from_str(json).unwrap()
    }

    struct Fake {
        country: &'static [u8],
        os: Os,
        device: Device,
        language: Option<&'static str>,
        id: u32,
        asked: Vec<&'static str>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                country: b"US",
                os: Os::Windows,
                device: Device::Desktop,
                language: None,
                id: 0,
                asked: Vec::new(),
            }
        }
    }

    impl Visitor for Fake {
        fn country(&mut self) -> Country {
            self.asked.push("country");
            Country::from_code(self.country)
        }
        fn agent(&mut self) -> (Os, Device) {
            self.asked.push("agent");
            (self.os, self.device)
        }
        fn language(&mut self, rules: &RuleSet) -> u32 {
            self.language.map_or(0, |header| rules.preferred(header.as_bytes()))
        }
        fn stickiness(&mut self) -> u64 {
            self.asked.push("stickiness");
            let [_, a, b, c] = self.id.to_be_bytes();
            visitor_digest(
                Some(std::net::IpAddr::from([10, a, b, c])),
                agent_digest(b"Mozilla/5.0"),
            )
        }
    }

    fn set(rules: &[&str]) -> RuleSet {
        keyed("abc", rules)
    }

    fn keyed(key: &str, rules: &[&str]) -> RuleSet {
        RuleSet::compile(key, &normalize(rules.iter().map(|r| rule(r)).collect()).unwrap())
    }

    #[test]
    fn the_first_rule_that_matches_decides() {
        let rules = set(&[
            r#"{"countries":["de","AT"],"os":["ios"],"target":"https://de-ios.example/"}"#,
            r#"{"countries":["DE"],"target":"https://de.example/"}"#,
            r#"{"os":["android","ios"],"devices":["mobile"],"target":"https://app.example/"}"#,
            r#"{"languages":["fr"],"target":"https://fr.example/"}"#,
        ]);
        type Case<'a> = (&'a [u8], Os, Device, Option<&'a str>, Option<(&'a str, &'a str)>);
        let cases: &[Case] = &[
            (
                b"DE",
                Os::Ios,
                Device::Mobile,
                None,
                Some(("https://de-ios.example/", "1")),
            ),
            (
                b"AT",
                Os::Ios,
                Device::Tablet,
                None,
                Some(("https://de-ios.example/", "1")),
            ),
            (
                b"DE",
                Os::Android,
                Device::Mobile,
                None,
                Some(("https://de.example/", "2")),
            ),
            (
                b"US",
                Os::Android,
                Device::Mobile,
                None,
                Some(("https://app.example/", "3")),
            ),
            (b"US", Os::Android, Device::Tablet, None, None),
            (
                b"US",
                Os::Windows,
                Device::Desktop,
                Some("fr-CA,en;q=0.5"),
                Some(("https://fr.example/", "4")),
            ),
            (
                b"US",
                Os::Windows,
                Device::Desktop,
                Some("en, fr;q=0.9"),
                Some(("https://fr.example/", "4")),
            ),
            (b"US", Os::Windows, Device::Desktop, Some("fra"), None),
            (b"US", Os::Windows, Device::Desktop, Some("fr;q=0"), None),
            (b"XX", Os::Windows, Device::Desktop, None, None),
            (
                b"T1",
                Os::Ios,
                Device::Mobile,
                None,
                Some(("https://app.example/", "3")),
            ),
        ];
        for &(country, os, device, language, want) in cases {
            let mut v = Fake {
                country,
                os,
                device,
                language,
                ..Fake::new()
            };
            let got = rules.choose(&mut v).map(|(t, d)| (t, d.label()));
            let want = want.map(|(t, l)| (t, crate::dimensions::Label::truncated(l)));
            assert_eq!(
                got,
                want,
                "{:?} {os:?} {device:?} {language:?}",
                String::from_utf8_lossy(country)
            );
        }
    }

    #[test]
    fn the_target_a_decision_names_is_the_one_chosen() {
        let rules = set(&[
            r#"{"os":["ios"],"target":"myapp://open/1"}"#,
            r#"{"os":["android"],"target":"intent://open/1#Intent;scheme=myapp;end"}"#,
            r#"{"countries":["US"],"target":"https://us.example/"}"#,
            r#"{"split":[{"target":"HTTPS://a.example/","weight":1},{"target":"myapp://b","weight":1},{"target":"http://c.example/","weight":1}]}"#,
        ]);
        let mut seen = std::collections::BTreeSet::new();
        for (country, os) in [
            (&b"US"[..], Os::Ios),
            (b"US", Os::Android),
            (b"US", Os::Windows),
            (b"FR", Os::Windows),
        ] {
            for id in 0..200 {
                let mut v = Fake {
                    country,
                    os,
                    id,
                    ..Fake::new()
                };
                let (want, decided) = rules.choose(&mut v).unwrap();
                let at = rules.target_index(decided).unwrap();
                assert_eq!(rules.all_targets().nth(at), Some(want), "{decided:?}");
                seen.insert((decided.rule, decided.variant));
            }
        }
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert_eq!(rules.all_targets().count(), 6);
        assert_eq!(rules.target_index(Decided::DEFAULT), None);
        assert_eq!(rules.target_index(Decided { rule: 5, variant: 0 }), None);
        assert_eq!(rules.target_index(Decided { rule: 4, variant: 4 }), None);
    }

    #[test]
    fn the_preferred_language_is_the_best_q_the_rules_can_match() {
        let rules = set(&[
            r#"{"languages":["pt-br"],"target":"https://br.example/"}"#,
            r#"{"languages":["pt"],"target":"https://pt.example/"}"#,
            r#"{"languages":["de"],"target":"https://de.example/"}"#,
        ]);
        let cases: &[(&str, Option<&str>)] = &[
            ("pt-BR", Some("https://br.example/")),
            ("pt-PT", Some("https://pt.example/")),
            ("pt", Some("https://pt.example/")),
            ("PT-br-x-foo", Some("https://br.example/")),
            ("en-US,de;q=0.8,pt;q=0.9", Some("https://pt.example/")),
            ("en-US,de;q=0.9,pt;q=0.9", Some("https://de.example/")),
            ("de;q=0.1, *", Some("https://de.example/")),
            ("ptx, deu", None),
            ("", None),
            ("de;q=garbage", None),
            ("de;q=1.0", Some("https://de.example/")),
            ("en;q=0.5, de ; q=0.55", Some("https://de.example/")),
            // Items whose primary subtag no rule names are passed over whole.
            ("zh-Hant-TW, en-US;q=0.9, DE;Q=0.1", Some("https://de.example/")),
            ("*;q=1, pT-bR;q=0.2", Some("https://br.example/")),
            ("ptbr, p, pt_BR, de-", Some("https://de.example/")),
            ("verylongprimary, de", Some("https://de.example/")),
            (",,,, ;q=1, pt;q=0.7", Some("https://pt.example/")),
        ];
        for &(header, want) in cases {
            let mut v = Fake {
                language: Some(header),
                ..Fake::new()
            };
            assert_eq!(rules.choose(&mut v).map(|(t, _)| t), want, "{header:?}");
        }
    }

    /// The reading of `Accept-Language` before the one-pass scan: every item split and
    /// trimmed, its tag compared with each language (what `preferred` must equal).
    fn preferred_by_splitting(rules: &RuleSet, header: &[u8]) -> u32 {
        let (mut best_q, mut best) = (0u16, 0u32);
        for item in header.split(|&b| b == b',').take(MAX_ACCEPT_ITEMS) {
            let mut parts = item.split(|&b| b == b';');
            let tag = parts.next().unwrap_or_default().trim_ascii();
            if tag.is_empty() || tag == b"*" || tag.len() > MAX_LANGUAGE_LEN {
                continue;
            }
            let mut q = 1000u16;
            for param in parts {
                let param = param.trim_ascii();
                if let Some(value) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                    q = quality(value);
                }
            }
            if q <= best_q {
                continue;
            }
            let mut bits = 0u32;
            for (i, range) in rules.languages.iter().enumerate() {
                let r = range.as_bytes();
                if tag.len() >= r.len()
                    && tag[..r.len()].eq_ignore_ascii_case(r)
                    && (tag.len() == r.len() || tag[r.len()] == b'-')
                {
                    bits |= 1 << i;
                }
            }
            if bits != 0 {
                best_q = q;
                best = bits;
                if q == 1000 {
                    break;
                }
            }
        }
        best
    }

    #[test]
    fn the_one_pass_reading_of_accept_language_equals_splitting_it() {
        let rules = set(&[
            r#"{"languages":["pt-br","de"],"target":"https://a.example/"}"#,
            r#"{"languages":["pt","en-gb","x"],"target":"https://b.example/"}"#,
        ]);
        // Headers of pieces that exercise every branch (case, spaces, parameters, empty
        // items, `*`, long and odd tags), drawn by a fixed-seed xorshift.
        const PIECES: &[&str] = &[
            "pt",
            "PT",
            "pt-BR",
            "pt-br-x",
            "de",
            "De-AT",
            "en-GB",
            "en",
            "x",
            "X-y",
            "xx",
            "*",
            "",
            " ",
            "\t",
            ",",
            ";",
            ";q=0.5",
            ";Q=1",
            ";q=0",
            "; q=0.9 ",
            ";q=garbage",
            ";level=1",
            "-",
            "1de",
            "de1",
            "ptbr",
            "abcdefghi",
            "abcdefgh-x",
            "é",
            "\x0c",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let pieces = 1 + next() % 12;
            let header: String = (0..pieces)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let header = header.as_bytes();
            assert_eq!(
                rules.preferred(header),
                preferred_by_splitting(&rules, header),
                "{:?}",
                String::from_utf8_lossy(header)
            );
        }
        // Past the items a header is read for.
        let long = format!("{}de", "en,".repeat(MAX_ACCEPT_ITEMS));
        assert_eq!(rules.preferred(long.as_bytes()), 0);
        let within = format!("{}de", "en,".repeat(MAX_ACCEPT_ITEMS - 1));
        assert_ne!(rules.preferred(within.as_bytes()), 0);
    }

    #[test]
    fn a_visitor_is_asked_only_what_some_rule_needs() {
        let rules = set(&[r#"{"languages":["fr"],"target":"https://fr.example/"}"#]);
        let mut v = Fake::new();
        rules.choose(&mut v);
        assert!(v.asked.is_empty(), "{:?}", v.asked);
        let rules = set(&[r#"{"devices":["mobile"],"target":"https://m.example/"}"#]);
        rules.choose(&mut v);
        assert_eq!(v.asked, ["agent"]);
    }

    #[test]
    fn the_split_digests_never_change_between_versions() {
        // Every proxy of every version must put one visitor in one variant: these values
        // are the formula's, and a change of them is a change of every running split.
        let agent = agent_digest(b"Mozilla/5.0 (iPhone)");
        let cases: &[(Option<std::net::IpAddr>, u64)] = &[
            (None, 0x0f4a_ca70_79d4_099f),
            (Some([192, 0, 2, 1].into()), 0xd432_083b_e789_93fa),
            (Some("2001:db8::1".parse().unwrap()), 0xcafd_d6e0_d876_922c),
        ];
        for &(address, want) in cases {
            assert_eq!(visitor_digest(address, agent), want, "{address:?}");
        }
        assert_eq!(keyed("abc", &[]).key, 0xfce2_a2d0_8bdf_781e);
    }

    #[test]
    fn a_split_lands_within_its_weights_and_is_sticky() {
        let rules = set(&[
            r#"{"split":[{"target":"https://a.example/","weight":70},{"target":"https://b.example/","weight":20},{"target":"https://c.example/","weight":10}]}"#,
        ]);
        let mut counts = [0u32; 3];
        for id in 0..30_000 {
            let mut v = Fake { id, ..Fake::new() };
            let (target, decided) = rules.choose(&mut v).unwrap();
            assert_eq!(decided.rule, 1);
            counts[decided.variant as usize - 1] += 1;
            for _ in 0..2 {
                let mut again = Fake { id, ..Fake::new() };
                assert_eq!(rules.choose(&mut again).unwrap().0, target, "sticky for {id}");
            }
        }
        for (count, weight) in counts.iter().zip([70.0, 20.0, 10.0]) {
            let share = f64::from(*count) / 300.0;
            assert!((share - weight).abs() < 1.5, "{counts:?}");
        }
        // Another link splits the same visitors anew.
        let other = keyed(
            "xyz",
            &[
                r#"{"split":[{"target":"https://a.example/","weight":70},{"target":"https://b.example/","weight":20},{"target":"https://c.example/","weight":10}]}"#,
            ],
        );
        let moved = (0..1_000)
            .filter(|&id| {
                let a = rules.choose(&mut Fake { id, ..Fake::new() }).unwrap().0;
                let b = other.choose(&mut Fake { id, ..Fake::new() }).unwrap().0;
                a != b
            })
            .count();
        assert!(moved > 300, "{moved}");
    }

    #[test]
    fn labels_name_the_rule_and_the_variant() {
        for (d, want) in [
            (Decided::DEFAULT, "default"),
            (Decided { rule: 1, variant: 0 }, "1"),
            (Decided { rule: 20, variant: 10 }, "20/10"),
        ] {
            assert_eq!(d.label().as_str(), want);
        }
        // Every value a label can hold, against the formatter's.
        for rule in 1..=u8::MAX {
            for variant in 0..=u8::MAX {
                let want = match variant {
                    0 => format!("{rule}"),
                    v => format!("{rule}/{v}"),
                };
                assert_eq!(Decided { rule, variant }.label().as_str(), want);
            }
        }
    }

    #[test]
    fn bad_rule_sets_are_refused_with_the_rule_and_the_field() {
        let many = format!(
            "[{}]",
            vec![r#"{"os":["ios"],"target":"https://a.example/"}"#; 21].join(",")
        );
        let cases: Vec<(String, &str)> = vec![
            (many, "at most 20 rules"),
            (r#"[{"countries":["USA"],"target":"https://a/"}]"#.into(), "rules[1].countries"),
            (r#"[{"os":["ios"]}]"#.into(), "rules[1].target: give a target or a split"),
            (
                r#"[{"os":["ios"],"target":"https://a/","split":[{"target":"https://b/","weight":1},{"target":"https://c/","weight":1}]}]"#.into(),
                "not both",
            ),
            (r#"[{"split":[{"target":"https://b/","weight":1}]}]"#.into(), "2 to 10 variants, not 1"),
            (
                r#"[{"split":[{"target":"https://b/","weight":0},{"target":"https://c/","weight":1}]}]"#.into(),
                "rules[1].split[1].weight",
            ),
            (
                r#"[{"target":"https://a/"},{"os":["ios"],"target":"https://b/"}]"#.into(),
                "rules[2]: can never match: rule 1",
            ),
            (r#"[{"languages":["fr_FR"],"target":"https://a/"}]"#.into(), "rules[1].languages"),
            (r#"[{"languages":["1fr"],"target":"https://a/"}]"#.into(), "rules[1].languages"),
            (
                format!(r#"[{{"os":["ios"],"target":"https://a/{}"}}]"#, "x".repeat(MAX_RULES_BYTES)),
                "at most 32768 bytes as JSON",
            ),
        ];
        for (json, want) in cases {
            let rules: Vec<Rule> = serde_json::from_str(&json).unwrap();
            let err = normalize(rules).unwrap_err().0;
            assert!(err.contains(want), "{json}: {err}");
        }
        // Unknown fields and OS names are refused by the record's shape itself.
        assert!(serde_json::from_str::<Rule>(r#"{"os":["symbian"],"target":"https://a/"}"#).is_err());
        assert!(serde_json::from_str::<Rule>(r#"{"country":["US"],"target":"https://a/"}"#).is_err());
    }

    #[test]
    fn normalizing_brings_lists_to_one_spelling() {
        let rules = normalize(vec![rule(
            r#"{"countries":["de","DE","at"],"languages":["PT-br","pt-BR"],"os":["ios","ios"],"target":"https://a/"}"#,
        )])
        .unwrap();
        assert_eq!(rules[0].countries, ["DE", "AT"]);
        assert_eq!(rules[0].languages, ["pt-br"]);
        assert_eq!(rules[0].os, [Os::Ios]);
        // A normalized set is a fixed point.
        assert_eq!(normalize(rules.clone()).unwrap(), rules);
    }

    #[test]
    fn agent_families_map_to_the_rules_names() {
        for (family, os) in [
            ("iOS", Os::Ios),
            ("Android", Os::Android),
            ("Windows", Os::Windows),
            ("Windows Phone", Os::Other),
            ("Mac OS X", Os::Macos),
            ("Chrome OS", Os::Chromeos),
            ("Ubuntu", Os::Linux),
            ("Linux", Os::Linux),
            ("Other", Os::Other),
        ] {
            assert_eq!(Os::of_family(family.as_bytes()), os, "{family}");
        }
    }
}
