//! The history of a fault test: every operation (create, delete) and every probe of a proxy,
//! with when it started and ended on this process's monotonic clock and what it answered;
//! and the checker that decides from the history alone whether SPEC §4's I1 or I2 broke.
#![allow(dead_code)]

use std::sync::Mutex;
use std::time::Instant;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A create of `code` through a control plane; `ok` when it answered success.
    Create { code: String, ok: bool },
    /// A delete or takedown of `code`; `ok` when it answered success.
    Delete { code: String, ok: bool },
    /// A request of `code` on proxy `proxy`, answered `status` (0: no answer).
    Probe { code: String, proxy: String, status: u16 },
    /// A fault the test injected, from its start to its end.
    Fault { what: String },
}

#[derive(Debug, Clone)]
pub struct Event {
    pub op: Op,
    pub start: Instant,
    pub end: Instant,
}

/// Events recorded from any task.
#[derive(Default)]
pub struct History {
    events: Mutex<Vec<Event>>,
}

/// A broken promise, with the events that show it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub what: &'static str,
    pub cause: Event,
    pub probe: Event,
}

impl History {
    pub fn record(&self, op: Op, start: Instant, end: Instant) {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Event { op, start, end });
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Every redirect that began after a delete of its code had returned success (I1),
    /// and every 404 that began after a create of its code had returned success, with no
    /// delete of that code begun before the probe ended (I2).
    pub fn violations(&self) -> Vec<Violation> {
        let events = self.events();
        let mut found = Vec::new();
        for probe in &events {
            let Op::Probe { code, status, .. } = &probe.op else {
                continue;
            };
            for cause in &events {
                match &cause.op {
                    Op::Delete { code: c, ok: true }
                        if c == code && cause.end < probe.start && is_redirect(*status) =>
                    {
                        found.push(Violation {
                            what: "I1: redirected after a successful delete",
                            cause: cause.clone(),
                            probe: probe.clone(),
                        })
                    }
                    Op::Create { code: c, ok: true } if c == code && cause.end < probe.start && *status == 404 => {
                        let deleted = events
                            .iter()
                            .any(|d| matches!(&d.op, Op::Delete { code: dc, .. } if dc == code) && d.start < probe.end);
                        if !deleted {
                            found.push(Violation {
                                what: "I2: 404 after a successful create",
                                cause: cause.clone(),
                                probe: probe.clone(),
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        found
    }

    /// Panics with the first violations, if any; returns how many probes were checked.
    pub fn assert_clean(&self, label: &str) -> usize {
        let v = self.violations();
        let events = self.events();
        let probes = events.iter().filter(|e| matches!(e.op, Op::Probe { .. })).count();
        if v.is_empty() {
            return probes;
        }
        let zero = events.iter().map(|e| e.start).min().unwrap();
        let ms = |t: Instant| t.duration_since(zero).as_millis();
        let shown: Vec<String> = v
            .iter()
            .take(5)
            .map(|x| {
                format!(
                    "{}: {:?} [{}-{} ms], then {:?} [{}-{} ms]",
                    x.what,
                    x.cause.op,
                    ms(x.cause.start),
                    ms(x.cause.end),
                    x.probe.op,
                    ms(x.probe.start),
                    ms(x.probe.end)
                )
            })
            .collect();
        let faults: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.op {
                Op::Fault { what } => Some(format!("{what} [{}-{} ms]", ms(e.start), ms(e.end))),
                _ => None,
            })
            .collect();
        panic!(
            "{label}: {} violations in {probes} probes; the first:\n{}\nfaults: {}",
            v.len(),
            shown.join("\n"),
            faults.join(", ")
        );
    }
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 307 | 308)
}
