//! Reading a process's `/metrics`: one series' value, strictly (a series the process does
//! not export fails the test, naming the nearest ones it does export), or leniently where a
//! labelled counter may not have been touched yet.

use crate::{http, Running};
use std::collections::BTreeSet;

/// Store reads on the redirect path (each a lookup past L1 and L2).
pub const STORE_READS: &str = r#"rebound_lookups_total{result="read",tier="store"}"#;

/// A process's `/metrics` scrape.
pub async fn scrape(p: &Running) -> String {
    let res = http()
        .get(format!("{}/metrics", p.addr("metrics")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK, "GET /metrics");
    res.text().await.unwrap()
}

/// The value of one series (`name` or `name{label="value",...}`, labels in the order the
/// scrape prints them) on a process's `/metrics`. A series the process does not export fails
/// the test, naming the series of the same metric it does export: a renamed metric or label
/// must not read as a zero.
pub async fn metric(p: &Running, series: &str) -> f64 {
    metric_in(&scrape(p).await, series)
}

/// The value of one labelled series, 0 when it is absent: a labelled counter whose labels
/// are not known in advance is printed only once something touched it. Still fails the
/// test when the series has no labels (those are always printed), or when the metric is
/// printed with other label names.
pub async fn metric_absent_or_zero(p: &Running, series: &str) -> f64 {
    metric_in_absent_or_zero(&scrape(p).await, series)
}

/// [`metric`] on a scrape already read.
pub fn metric_in(text: &str, series: &str) -> f64 {
    series_value(text, series).unwrap_or_else(|| panic!("{}", missing_series(text, series)))
}

/// [`metric_absent_or_zero`] on a scrape already read.
pub fn metric_in_absent_or_zero(text: &str, series: &str) -> f64 {
    if let Some(value) = series_value(text, series) {
        return value;
    }
    let (family, labels) = split_series(series);
    assert!(!labels.is_empty(), "{}", missing_series(text, series));
    let printed = label_names_printed(text, family);
    assert!(
        printed.is_empty() || printed.contains(&label_names(labels)),
        "{}",
        missing_series(text, series)
    );
    0.0
}

/// The metric names of a scrape's samples (histograms' `_bucket`, `_sum`, `_count` included).
pub fn sample_names(text: &str) -> BTreeSet<String> {
    samples(text).map(|s| split_series(s).0.to_owned()).collect()
}

/// The value of `series` in a Prometheus text scrape.
fn series_value(text: &str, series: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))?;
    // The value, then an optional timestamp.
    let value = line[series.len()..].split_whitespace().next().unwrap_or_default();
    Some(
        value
            .parse()
            .unwrap_or_else(|e| panic!("{series}: value {value:?}: {e}")),
    )
}

/// `name{a="x"}` as (`name`, `a="x"`).
fn split_series(series: &str) -> (&str, &str) {
    match series.split_once('{') {
        Some((family, rest)) => (family, rest.trim_end_matches('}')),
        None => (series, ""),
    }
}

/// The label names of `a="x",b="y"`, in order (a value may hold an escaped quote).
fn label_names(labels: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').to_owned());
        let mut escaped = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map_or(after.len(), |(i, _)| i + 1);
        rest = &after[end..];
    }
    names
}

/// Every set of label names `family`'s samples are printed with.
fn label_names_printed(text: &str, family: &str) -> Vec<Vec<String>> {
    samples(text)
        .filter(|s| split_series(s).0 == family)
        .map(|s| label_names(split_series(s).1))
        .collect()
}

/// The series of each sample line of a scrape (`name` or `name{...}`).
fn samples(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| match l.rfind('}') {
            Some(end) => &l[..=end],
            None => l.split(' ').next().unwrap_or(l),
        })
}

/// The failure message for a series that is not in the scrape: the series whose name shares
/// the longest prefix with it.
fn missing_series(text: &str, series: &str) -> String {
    let samples: Vec<&str> = samples(text).collect();
    let (family, _) = split_series(series);
    let shared = |s: &str| {
        let (other, _) = split_series(s);
        family.chars().zip(other.chars()).take_while(|(a, b)| a == b).count()
    };
    let best = samples.iter().map(|s| shared(s)).max().unwrap_or(0);
    let nearby: Vec<&str> = samples.into_iter().filter(|s| shared(s) == best).take(20).collect();
    format!("the process exports no series {series}; nearest: {nearby:#?}")
}
