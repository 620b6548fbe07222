//! Correctness on the agent list and time per parse, for each parser built in.
//!
//! `compare ACCURACY` prints each parser's verdicts against the expected ones;
//! `compare TIME N` parses the list N times with each parser and prints ns per parse (the
//! best of 5 rounds); `compare ONE PARSER N` parses it N times with one (for callgrind).
//! The uap parsers read their regexes.yaml from `UAPARSER_REGEXES` and `UA_PARSER_REGEXES`.

use std::hint::black_box;
use std::time::Instant;
use user_agent_parsers::agents::AGENTS;
#[allow(unused_imports)]
use user_agent_parsers::*;

#[allow(dead_code)]
fn regexes(var: &str) -> &'static str {
    let path = std::env::var(var).unwrap_or_else(|_| panic!("{var}: the path of a regexes.yaml"));
    Box::leak(
        std::fs::read_to_string(&path)
            .expect("read regexes.yaml")
            .into_boxed_str(),
    )
}

type Verdicts = Box<dyn Fn(&str) -> Verdict>;
type Raw = Box<dyn Fn(&str) -> usize>;

fn parsers(only: Option<&str>) -> Vec<(&'static str, Verdicts, Raw)> {
    #[allow(unused_mut)]
    let mut out: Vec<(&'static str, Verdicts, Raw)> = Vec::new();
    let wanted = |name: &str| only.is_none_or(|o| o == name);
    #[cfg(feature = "woothee")]
    if wanted("woothee") {
        let p: &'static _ = Box::leak(Box::new(woothee_parser::parser()));
        out.push((
            "woothee",
            Box::new(|a| woothee_parser::verdict(p, a)),
            Box::new(|a| woothee_parser::raw(p, a).map_or(0, |r| r.name.len())),
        ));
    }
    #[cfg(feature = "uaparser")]
    if wanted("uaparser") {
        let start = Instant::now();
        let p: &'static _ = Box::leak(Box::new(uaparser_parser::parser(
            regexes("UAPARSER_REGEXES").as_bytes(),
        )));
        eprintln!("uaparser: built in {:?}", start.elapsed());
        out.push((
            "uaparser",
            Box::new(|a| uaparser_parser::verdict(p, a)),
            Box::new(|a| uaparser_parser::raw(p, a)),
        ));
    }
    #[cfg(feature = "ua-parser")]
    if wanted("ua-parser") {
        let start = Instant::now();
        let p: &'static _ = Box::leak(Box::new(ua_parser_parser::parser(regexes("UA_PARSER_REGEXES"))));
        eprintln!("ua-parser: built in {:?}", start.elapsed());
        out.push((
            "ua-parser",
            Box::new(|a| ua_parser_parser::verdict(p, a)),
            Box::new(|a| ua_parser_parser::raw(p, a)),
        ));
    }
    let _ = wanted;
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("ACCURACY") => {
            for (name, verdict, _) in parsers(None) {
                let (mut device, mut browser, mut os) = (0, 0, 0);
                for &(agent, d, b, o) in AGENTS {
                    let v = verdict(agent);
                    let marks = [v.device == d, v.browser == b, v.os == o];
                    device += marks[0] as usize;
                    browser += marks[1] as usize;
                    os += marks[2] as usize;
                    if marks.contains(&false) {
                        println!("{name}\t{}/{}/{}\twant {d}/{b}/{o}\t{agent}", v.device, v.browser, v.os);
                    }
                }
                let n = AGENTS.len();
                println!("{name}: device {device}/{n}, browser {browser}/{n}, os {os}/{n}");
            }
        }
        Some("TIME") => {
            let n: usize = args[2].parse().unwrap();
            for (name, _, raw) in parsers(None) {
                let best = (0..5)
                    .map(|_| {
                        let start = Instant::now();
                        for _ in 0..n {
                            for &(agent, ..) in AGENTS {
                                black_box(raw(black_box(agent)));
                            }
                        }
                        start.elapsed().as_nanos() as f64 / (n * AGENTS.len()) as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                println!(
                    "{name}: {best:.0} ns per parse (mean over the {} agents, best of 5 rounds of {n})",
                    AGENTS.len()
                );
            }
        }
        Some("ONE") => {
            let n: usize = args[3].parse().unwrap();
            for (_, _, raw) in parsers(Some(&args[2])) {
                for _ in 0..n {
                    for &(agent, ..) in AGENTS {
                        black_box(raw(black_box(agent)));
                    }
                }
            }
        }
        _ => eprintln!("usage: compare ACCURACY | TIME N | ONE PARSER N"),
    }
}
