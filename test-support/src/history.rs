//! The history of a fault test: every operation (create, delete, edit) and every probe of a
//! proxy, with when it started and ended on this process's monotonic clock and what it
//! answered; and the checker that decides from the history alone whether docs/spec.md §4's I1 (for
//! a deleted link, and for an edited link's old target, docs/spec.md §12, also where the
//! link's rules chose it, §14) or I2 broke.

use crate::{http, Running, OPERATOR_KEY};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A create of `code` through a control plane; `ok` when it answered success.
    Create { code: String, ok: bool },
    /// A delete or takedown of `code`; `ok` when it answered success.
    Delete { code: String, ok: bool },
    /// An edit of `code` away from the target `from`; `ok` when it answered success. With
    /// `agent` `None` (an edit of `long_url`) no visitor may be sent to `from` once it
    /// returned; with a User-Agent (an edit of the rules) a visitor sending it may not, and
    /// others still may (a rule for iOS added to a link takes an iPhone away from
    /// `long_url`; a desktop keeps it).
    Edit {
        code: String,
        from: String,
        agent: Option<String>,
        ok: bool,
    },
    /// A request of `code` on proxy `proxy`, with the User-Agent `agent` (`None`: none
    /// sent), answered `status` (0: no answer) and, for a redirect, `location`.
    Probe {
        code: String,
        proxy: String,
        status: u16,
        location: Option<String>,
        agent: Option<String>,
    },
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
    /// every redirect to a target that began after an edit of its code away from that
    /// target had returned success (I1 for the old target; for an edit of the rules, only
    /// a probe sent as the visitor the edit names), and every 404 that began after a create
    /// of its code had returned success, with no delete of that code begun before the
    /// probe ended (I2).
    pub fn violations(&self) -> Vec<Violation> {
        let events = self.events();
        // What may break a promise, per code, in the order recorded.
        let mut causes: HashMap<&str, Vec<&Event>> = HashMap::new();
        for event in &events {
            let code = match &event.op {
                Op::Create { code, .. } | Op::Delete { code, .. } | Op::Edit { code, .. } => code,
                Op::Probe { .. } | Op::Fault { .. } => continue,
            };
            causes.entry(code.as_str()).or_default().push(event);
        }
        let mut found = Vec::new();
        for probe in &events {
            let Op::Probe {
                code,
                status,
                location,
                agent: sent_as,
                ..
            } = &probe.op
            else {
                continue;
            };
            for &cause in causes.get(code.as_str()).into_iter().flatten() {
                if cause.end >= probe.start {
                    continue;
                }
                match &cause.op {
                    Op::Delete { ok: true, .. } if is_redirect(*status) => found.push(Violation {
                        what: "I1: redirected after a successful delete",
                        cause: cause.clone(),
                        probe: probe.clone(),
                    }),
                    Op::Edit {
                        from,
                        agent: None,
                        ok: true,
                        ..
                    } if location.as_ref() == Some(from) => found.push(Violation {
                        what: "I1: redirected to the old target after a successful edit",
                        cause: cause.clone(),
                        probe: probe.clone(),
                    }),
                    Op::Edit {
                        from,
                        agent: Some(agent),
                        ok: true,
                        ..
                    } if location.as_ref() == Some(from) && sent_as.as_ref() == Some(agent) => found.push(Violation {
                        what: "I1: redirected a visitor to its old target after a successful edit of the rules",
                        cause: cause.clone(),
                        probe: probe.clone(),
                    }),
                    Op::Create { ok: true, .. } if *status == 404 => {
                        let deleted = causes[code.as_str()]
                            .iter()
                            .any(|d| matches!(d.op, Op::Delete { .. }) && d.start < probe.end);
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

// The operations of a fault test, each recorded in the history.

/// Probes `code` on `proxy` and records the answer.
pub async fn probe(history: &History, proxy: &Running, name: &str, code: &str) -> u16 {
    probe_with(history, &http(), &proxy.addr("redirect"), name, code).await
}

/// Probes `code` at `proxy` (its redirect port's URL) with `client` and records the
/// answer (0 when none came: a stopped proxy, with a client's short timeout).
pub async fn probe_with(history: &History, client: &reqwest::Client, proxy: &str, name: &str, code: &str) -> u16 {
    probe_answer(history, client, proxy, name, code).await.0
}

/// [`probe_with`], returning the `Location` too.
pub async fn probe_answer(
    history: &History,
    client: &reqwest::Client,
    proxy: &str,
    name: &str,
    code: &str,
) -> (u16, Option<String>) {
    probe_as(history, client, proxy, name, code, None).await
}

/// [`probe_answer`] as a visitor sending the User-Agent `agent` (`None`: none but the
/// client's own, if any), recorded with it: the answer a link's rules choose for that
/// visitor (docs/spec.md §14).
pub async fn probe_as(
    history: &History,
    client: &reqwest::Client,
    proxy: &str,
    name: &str,
    code: &str,
    agent: Option<&str>,
) -> (u16, Option<String>) {
    let start = Instant::now();
    let mut req = client.get(format!("{proxy}/{code}"));
    if let Some(agent) = agent {
        req = req.header("user-agent", agent);
    }
    let (answer, location) = match req.send().await {
        Ok(r) => {
            let location = r
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(str::to_owned);
            (r.status().as_u16(), location)
        }
        Err(_) => (0, None),
    };
    let op = Op::Probe {
        code: code.to_owned(),
        proxy: name.to_owned(),
        status: answer,
        location: location.clone(),
        agent: agent.map(str::to_owned),
    };
    history.record(op, start, Instant::now());
    (answer, location)
}

/// Creates a link through `cp` and records it; returns its code.
pub async fn create_recorded(history: &History, cp: &Running, i: usize) -> String {
    create_at(history, &http(), &cp.api(), i)
        .await
        .expect("the control plane created the link")
}

/// Deletes (or takes down) `code` through `cp` and records whether the API answered success.
pub async fn delete_recorded(history: &History, cp: &Running, code: &str, takedown: bool) -> bool {
    matches!(
        delete_at(history, &http(), &cp.api(), code, takedown).await,
        Changed::Ok
    )
}

/// Creates a link through the API at `api` and records it; `None` when the control plane
/// did not answer success (killed by the schedule, say).
pub async fn create_at(history: &History, client: &reqwest::Client, api: &str, i: usize) -> Option<String> {
    let body = json!({"long_url": format!("https://example.com/fault/{i}")});
    create_body_at(history, client, api, &body).await
}

/// [`create_at`] with the request's whole body (`long_url`, `rules`, ...).
pub async fn create_body_at(history: &History, client: &reqwest::Client, api: &str, body: &Value) -> Option<String> {
    let start = Instant::now();
    let res = client
        .post(format!("{api}/api/v1/links"))
        .bearer_auth(OPERATOR_KEY)
        .json(body)
        .send()
        .await
        .ok()?;
    if !res.status().is_success() {
        return None;
    }
    let code = res.json::<Value>().await.ok()?["code"].as_str()?.to_owned();
    history.record(
        Op::Create {
            code: code.clone(),
            ok: true,
        },
        start,
        Instant::now(),
    );
    Some(code)
}

/// How a delete or an edit through the schedule ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Ok,
    /// 503 `invalidation_failed`: durable in the store, its propagation left to the
    /// reconcilers.
    Pending,
    /// Anything else (no answer from a killed control plane, say).
    Unknown,
}

impl Changed {
    async fn of(answer: reqwest::Result<reqwest::Response>) -> Changed {
        match answer {
            Ok(res) if res.status().is_success() => Changed::Ok,
            Ok(res) => match res.json::<serde_json::Value>().await {
                Ok(v) if v["error"]["code"] == "invalidation_failed" => Changed::Pending,
                _ => Changed::Unknown,
            },
            Err(_) => Changed::Unknown,
        }
    }
}

/// Deletes (or takes down) `code` through the API at `api` and records whether it answered
/// success.
pub async fn delete_at(history: &History, client: &reqwest::Client, api: &str, code: &str, takedown: bool) -> Changed {
    let start = Instant::now();
    let req = match takedown {
        false => client.delete(format!("{api}/api/v1/links/{code}")),
        true => client
            .post(format!("{api}/api/v1/links/{code}/takedown"))
            .json(&json!({"reason": "spam"})),
    };
    let answer = Changed::of(req.bearer_auth(OPERATOR_KEY).send().await).await;
    let op = Op::Delete {
        code: code.to_owned(),
        ok: matches!(answer, Changed::Ok),
    };
    history.record(op, start, Instant::now());
    answer
}

/// Edits `code` at `version` (`If-Match`) from the target `from` to `to` through `cp`, and
/// records whether the API answered success.
pub async fn edit_recorded(history: &History, cp: &Running, code: &str, version: u64, from: &str, to: &str) -> bool {
    let edit = (version, from, to);
    edit_at(history, &http(), &cp.api(), code, edit).await == Changed::Ok
}

/// Edits `code` through the API at `api`: at `version` (`If-Match`), from the target
/// `from` to `to`; records whether it answered success. A 503 `invalidation_failed` edit
/// is durable and its propagation left to the reconcilers, like a delete's.
pub async fn edit_at(
    history: &History,
    client: &reqwest::Client,
    api: &str,
    code: &str,
    (version, from, to): (u64, &str, &str),
) -> Changed {
    let body = json!({"long_url": to});
    patch_at(history, client, api, code, version, &body, &[(from, None)]).await
}

/// Edits `code` through the API at `api` at `version` (`If-Match`) with the PATCH body
/// `body` (`long_url`, `rules`, ...), and records, for each `(from, agent)` of `away`, an
/// edit away from the target `from` for the visitor `agent` (`None`: every visitor; see
/// [`Op::Edit`]), with whether it answered success.
pub async fn patch_at(
    history: &History,
    client: &reqwest::Client,
    api: &str,
    code: &str,
    version: u64,
    body: &Value,
    away: &[(&str, Option<&str>)],
) -> Changed {
    let start = Instant::now();
    let req = client
        .patch(format!("{api}/api/v1/links/{code}"))
        .bearer_auth(OPERATOR_KEY)
        .header("if-match", format!("\"{version}\""))
        .json(body);
    let answer = Changed::of(req.send().await).await;
    let end = Instant::now();
    for (from, agent) in away {
        let op = Op::Edit {
            code: code.to_owned(),
            from: (*from).to_owned(),
            agent: agent.map(str::to_owned),
            ok: answer == Changed::Ok,
        };
        history.record(op, start, end);
    }
    answer
}
