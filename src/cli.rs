//! The operator CLI: `rebound links …`, `rebound takedown …`, `rebound keys …`, talking
//! HTTP to the control plane. Readable tables by default, the API's JSON with `--json`.

use clap::{Args, Subcommand};
use rebound_api_types::{
    CreateKeyRequest, CreateLinkRequest, ErrorBody, ImportOutcome, ImportResults, KeyCreated, LinkCreated, LinkList,
    LinkStats, LinkView, TakedownRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Digest;

/// Where the control plane is and who we are.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Base URL of the control-plane API.
    #[arg(
        long,
        env = "REBOUND_API_URL",
        default_value = "http://127.0.0.1:8081",
        global = true
    )]
    pub api_url: String,
    /// API key (sent as a Bearer token).
    #[arg(long, env = "REBOUND_API_KEY", hide_env_values = true, global = true)]
    pub api_key: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum LinksCommand {
    /// Create a short link.
    Create {
        /// The target URL.
        long_url: String,
        /// A custom code instead of a generated one.
        #[arg(long)]
        alias: Option<String>,
        /// Expire after this many seconds.
        #[arg(long, conflicts_with = "expires_at")]
        ttl: Option<i64>,
        /// Expire at this RFC 3339 time.
        #[arg(long)]
        expires_at: Option<String>,
        /// 301, 302 (default), 307 or 308.
        #[arg(long)]
        redirect: Option<u16>,
        /// Append the visitor's query string to the target.
        #[arg(long)]
        forward_query: bool,
        /// Makes a retried create return the first answer.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Create many links from a file: CSV (RFC 4180: quote a field holding a comma; columns
    /// `long_url[,alias]`, or named by a header row among long_url, alias, expires_at,
    /// ttl_seconds, redirect, forward_query) or JSON lines with the fields of `create` (`-`
    /// reads standard input). Prints `code,short_url,long_url` per created link, also when a
    /// chunk fails; a refused line is named by its number; links over the rate limit are
    /// sent again when it allows; a chunk refused as a whole is named by its lines and exits
    /// non-zero. Each request carries an Idempotency-Key derived from the file and its
    /// lines, so running the same file again (same --batch) never creates a link twice.
    Import {
        /// The file (`.csv`, or JSON lines), or `-` for standard input.
        file: String,
        /// `csv` or `jsonl` (default: from the file name; standard input is JSON lines).
        #[arg(long)]
        format: Option<String>,
        /// Links per request (1 to 1000).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Show one link.
    Get { code: String },
    /// List links, newest first.
    List {
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Delete a link.
    Delete { code: String },
    /// The QR code of a link's short URL, as SVG on standard output
    /// (`rebound links qr CODE > code.svg`).
    Qr { code: String },
    /// Daily clicks of a link.
    Stats {
        code: String,
        /// First day, YYYY-MM-DD (default: 29 days before --to).
        #[arg(long)]
        from: Option<String>,
        /// Last day, YYYY-MM-DD (default: today, UTC).
        #[arg(long)]
        to: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key (shown once).
    Create {
        #[arg(long)]
        name: String,
        /// creator or operator.
        #[arg(long)]
        role: String,
    },
    /// Revoke an API key; it stops working at once.
    Revoke { id: String },
}

/// What the CLI was asked to do.
#[derive(Debug)]
pub enum ClientCommand {
    Links(LinksCommand),
    Takedown { code: String, reason: String },
    Keys(KeysCommand),
}

/// A failed CLI call, printed as one clear line.
#[derive(Debug)]
pub struct CliError(pub String);

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

fn encode_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

impl Client {
    /// Sends one request; only a transport failure is an error here.
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, CliError> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let mut req = self.http.request(method, &url);
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let res = req
            .send()
            .await
            .map_err(|e| CliError(format!("cannot reach the control plane at {}: {e}", self.base)))?;
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let text = res
            .text()
            .await
            .map_err(|e| CliError(format!("reading the answer: {e}")))?;
        Ok(Answer {
            status,
            retry_after,
            text,
        })
    }

    /// One clear line for a refused request.
    fn refusal(&self, answer: &Answer) -> CliError {
        let body = serde_json::from_str::<ErrorBody>(&answer.text).ok();
        let (code, message) = body
            .as_ref()
            .map_or(("error", "the control plane refused the request"), |b| {
                (b.error.code.as_str(), b.error.message.as_str())
            });
        let hint = if answer.status == 401 && self.key.is_none() {
            " (set REBOUND_API_KEY or pass --api-key)"
        } else {
            ""
        };
        CliError(format!("{} {code}: {message}{hint}", answer.status))
    }

    /// Sends `body` (any of the API's request types) and returns the success answer's
    /// text, or the refusal as one clear line.
    async fn send_text(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
        headers: &[(&str, &str)],
    ) -> Result<String, CliError> {
        let body = body
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| CliError(format!("encoding the request: {e}")))?;
        let answer = self.request(method, path, body, headers).await?;
        if answer.status >= 400 {
            return Err(self.refusal(&answer));
        }
        Ok(answer.text)
    }

    /// As [`Client::send_text`], reading the answer as the API's response type `T`.
    async fn send<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
        headers: &[(&str, &str)],
    ) -> Result<T, CliError> {
        let text = self.send_text(method, path, body, headers).await?;
        serde_json::from_str(&text)
            .map_err(|e| CliError(format!("the control plane answered what this CLI cannot read: {e}")))
    }
}

/// No request body.
const NO_BODY: Option<&()> = None;

/// What the control plane answered.
struct Answer {
    status: u16,
    /// `Retry-After`, in seconds, when sent.
    retry_after: Option<u64>,
    text: String,
}

/// An API type as the JSON the API sent (for `--json` and the field tables).
fn as_json(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn table(rows: &[Vec<String>]) -> String {
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

fn fields(v: &Value, names: &[&str]) -> String {
    table(
        &names
            .iter()
            .map(|n| vec![format!("{n}:"), show(&v[*n])])
            .collect::<Vec<_>>(),
    )
}

const LINK_FIELDS: &[&str] = &[
    "code",
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

/// An import file as read: what identifies it, and each link with the line it came from,
/// or why that line cannot be sent.
struct ImportFile {
    /// Hex SHA-256 of the whole file: with a chunk's lines, what its idempotency key is
    /// derived from, so that running the same file again replays instead of creating.
    identity: String,
    links: Vec<ImportLine>,
}

/// A link of an import file and the line it starts on, or why that line cannot be sent.
type ImportLine = (usize, Result<Value, String>);

/// Reads an import file. JSON lines go to the server as written (it judges each, shape and
/// values, as it judges an import's links); CSV is read as RFC 4180 says (quoted fields,
/// `""` inside quotes), its columns named by a header row or, without one, `long_url[,alias]`.
fn read_import(file: &str, format: Option<&str>) -> Result<ImportFile, CliError> {
    let text = if file == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| CliError(format!("reading standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(file).map_err(|e| CliError(format!("reading {file}: {e}")))?
    };
    let csv = match format {
        Some("csv") => true,
        Some("jsonl") | Some("json") => false,
        Some(other) => return Err(CliError(format!("--format {other}: use csv or jsonl"))),
        None => file.ends_with(".csv"),
    };
    let links = if csv {
        read_csv(&text)?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(i, line)| {
                let value = serde_json::from_str::<Value>(line).map_err(|e| format!("invalid_json: not JSON: {e}"));
                (i + 1, value)
            })
            .collect()
    };
    Ok(ImportFile {
        identity: hex::encode(sha2::Sha256::digest(text.as_bytes())),
        links,
    })
}

/// The columns a CSV header row may name (`alias` is `custom_alias`).
const CSV_COLUMNS: &[&str] = &[
    "long_url",
    "alias",
    "custom_alias",
    "expires_at",
    "ttl_seconds",
    "redirect",
    "forward_query",
];

/// CSV records as create requests. No record may have more fields than the header (or,
/// without one, the first record, `long_url[,alias]`): an unquoted comma in a URL makes one
/// more, and that line is refused by its number rather than read as another column.
fn read_csv(text: &str) -> Result<Vec<ImportLine>, CliError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut columns: Option<Vec<String>> = None;
    let mut links = Vec::new();
    for record in reader.records() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line() as usize);
                links.push((line, Err(format!("invalid_csv: {e}"))));
                continue;
            }
        };
        let line = record.position().map_or(0, |p| p.line() as usize);
        let columns = match &columns {
            Some(c) => c,
            None if record.iter().any(|f| f.eq_ignore_ascii_case("long_url")) => {
                let names: Vec<String> = record.iter().map(str::to_ascii_lowercase).collect();
                if let Some(unknown) = names.iter().find(|n| !CSV_COLUMNS.contains(&n.as_str())) {
                    return Err(CliError(format!(
                        "line {line}: unknown column {unknown:?} (the columns are {})",
                        CSV_COLUMNS.join(", ")
                    )));
                }
                columns = Some(names);
                continue;
            }
            None => columns.insert(
                ["long_url", "alias"]
                    .iter()
                    .take(record.len().clamp(1, 2))
                    .map(|c| c.to_string())
                    .collect(),
            ),
        };
        // Fewer is fine (the rest are empty); more is an unquoted comma, never a column.
        if record.len() > columns.len() {
            links.push((
                line,
                Err(format!(
                    "invalid_csv: {} fields where the file has {} ({}); quote a field that holds a comma",
                    record.len(),
                    columns.len(),
                    columns.join(",")
                )),
            ));
            continue;
        }
        let mut link = serde_json::Map::new();
        for (column, field) in columns.iter().zip(record.iter()) {
            if field.is_empty() {
                continue;
            }
            // A value of the wrong type goes as text: the server names what is wrong with it.
            let value = match column.as_str() {
                "ttl_seconds" | "redirect" => {
                    serde_json::from_str::<serde_json::Number>(field).map_or_else(|_| json!(field), Value::Number)
                }
                "forward_query" => match field.to_ascii_lowercase().as_str() {
                    "true" => json!(true),
                    "false" => json!(false),
                    _ => json!(field),
                },
                _ => json!(field),
            };
            let name = if column == "alias" { "custom_alias" } else { column };
            link.insert(name.to_owned(), value);
        }
        links.push((line, Ok(Value::Object(link))));
    }
    Ok(links)
}

/// The idempotency key of one import request: the file's identity and the chunk's lines
/// (numbers and values), so that the same lines of the same file always carry the same key.
fn chunk_key(identity: &str, lines: &[&(usize, Value)]) -> String {
    let mut hash = sha2::Sha256::new();
    hash.update(b"rebound-import\0");
    hash.update(identity.as_bytes());
    for (line, value) in lines {
        hash.update(format!("\0{line}\0{value}").as_bytes());
    }
    format!("import-{}", hex::encode(hash.finalize()))
}

/// An import request of lines as read: the API's `ImportRequest` shape, its links as
/// the file has them.
#[derive(Serialize)]
struct ImportChunk<'a> {
    links: Vec<&'a Value>,
}

/// Waits for the rate limit, in a row without any progress, before an import gives up.
const IMPORT_IDLE_WAITS: usize = 5;
/// Longest single wait for the rate limit.
const IMPORT_LONGEST_WAIT_SECS: u64 = 60;

/// Line numbers as runs, e.g. `2-4,7-7`.
fn line_runs(lines: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &l in lines {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == l => *end = l,
            _ => runs.push((l, l)),
        }
    }
    runs.iter()
        .map(|(a, b)| format!("{a}-{b}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Imports in chunks of `batch`, each request with an `Idempotency-Key` derived from the
/// file and the chunk's lines: running the same file again (after a crash, a lost answer)
/// answers the links created before as they were and creates only the others. Every
/// outcome is printed, also when a later chunk fails; a line that cannot be sent is named
/// by its number; links the rate limit did not cover are sent again, in the same request
/// with the same key (the server replays the others without charging them), once it says
/// they can be; a chunk refused as a whole (or given up) is named by its lines, and makes
/// the exit a failure after everything else was tried.
async fn import(
    client: &Client,
    file: &str,
    format: Option<&str>,
    batch: usize,
    json_out: bool,
) -> Result<(Value, String), CliError> {
    if !(1..=1000).contains(&batch) {
        return Err(CliError("--batch must be between 1 and 1000".into()));
    }
    let file = read_import(file, format)?;
    let mut out = String::new();
    let (mut created, mut failed) = (0u64, 0u64);
    let mut results = Vec::new();
    let mut failed_chunks = Vec::new();
    for chunk in file.links.chunks(batch) {
        let mut sendable: Vec<(usize, &Value)> = Vec::new();
        for (line, value) in chunk {
            match value {
                Ok(v) => sendable.push((*line, v)),
                Err(why) => {
                    failed += 1;
                    eprintln!("line {line}: {why}");
                    let (code, message) = why.split_once(": ").unwrap_or(("invalid_line", why));
                    if json_out {
                        results.push((*line, json!({ "error": { "code": code, "message": message } })));
                    }
                }
            }
        }
        if sendable.is_empty() {
            continue;
        }
        let owned: Vec<(usize, Value)> = sendable.iter().map(|(l, v)| (*l, (*v).clone())).collect();
        let refs: Vec<&(usize, Value)> = owned.iter().collect();
        let key = chunk_key(&file.identity, &refs);
        let body = ImportChunk {
            links: owned.iter().map(|(_, v)| v).collect(),
        };
        let body = serde_json::to_string(&body).map_err(|e| CliError(format!("encoding the request: {e}")))?;
        let mut done = vec![false; owned.len()];
        let mut idle_waits = 0;
        loop {
            let answer = client
                .request(
                    reqwest::Method::POST,
                    "/api/v1/links/import",
                    Some(body.clone()),
                    &[("idempotency-key", key.as_str())],
                )
                .await;
            let (wait, refusal) = match answer {
                Ok(a) if a.status == 429 => (a.retry_after.unwrap_or(1), Some(client.refusal(&a))),
                Ok(a) if a.status >= 400 => (0, Some(client.refusal(&a))),
                Ok(a) => {
                    let answer: ImportResults = serde_json::from_str(&a.text)
                        .map_err(|e| CliError(format!("the control plane answered what this CLI cannot read: {e}")))?;
                    let mut progress = false;
                    for ((item, r), done) in owned.iter().zip(&answer.results).zip(done.iter_mut()) {
                        match r {
                            _ if *done => continue,
                            ImportOutcome::Failed { error } if error.code == "rate_limited" => continue,
                            ImportOutcome::Created(link) => {
                                created += 1;
                                out.push_str(&format!("{},{},{}\n", link.code, link.short_url, link.long_url));
                            }
                            ImportOutcome::Failed { error } => {
                                failed += 1;
                                eprintln!("line {}: {}: {}", item.0, error.code, error.message);
                            }
                        }
                        *done = true;
                        progress = true;
                        if json_out {
                            results.push((item.0, as_json(r)));
                        }
                    }
                    if progress {
                        idle_waits = 0;
                    }
                    (answer.retry_after_secs.unwrap_or(1), None)
                }
                Err(e) => (0, Some(e)),
            };
            if done.iter().all(|d| *d) {
                break;
            }
            let rate_limited = wait > 0;
            if !rate_limited || idle_waits >= IMPORT_IDLE_WAITS {
                let lines: Vec<usize> = owned
                    .iter()
                    .zip(&done)
                    .filter(|(_, d)| !**d)
                    .map(|((l, _), _)| *l)
                    .collect();
                let why = refusal.map_or_else(|| "the rate limit did not cover them".to_owned(), |e| e.0);
                let runs = line_runs(&lines);
                eprintln!("lines {runs} not imported: {why}");
                failed += lines.len() as u64;
                failed_chunks.push(json!({ "lines": runs, "error": why }));
                break;
            }
            idle_waits += usize::from(refusal.is_some());
            tokio::time::sleep(std::time::Duration::from_secs(wait.min(IMPORT_LONGEST_WAIT_SECS))).await;
        }
    }
    eprintln!("imported {created}, failed {failed}");
    // In line order, whatever order they were answered in (a link the rate limit held back).
    results.sort_by_key(|(line, _)| *line);
    let results: Vec<Value> = results.into_iter().map(|(_, r)| r).collect();
    let value = json!({ "created": created, "failed": failed, "results": results, "failed_chunks": failed_chunks });
    if !failed_chunks.is_empty() {
        // What was created must not be lost with the failure exit: print it first.
        if json_out {
            println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
        } else {
            print!("{out}");
        }
        let lines: Vec<String> = failed_chunks.iter().map(|c| show(&c["lines"])).collect();
        return Err(CliError(format!("lines {} not imported", lines.join(","))));
    }
    if failed > 0 && created == 0 {
        return Err(CliError("nothing was imported".into()));
    }
    Ok((value, out))
}

/// Runs one CLI command and returns what to print.
pub async fn run(args: &ClientArgs, command: ClientCommand) -> Result<String, CliError> {
    let client = Client {
        http: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(120))
            .build()
            .map_err(|e| CliError(e.to_string()))?,
        base: args.api_url.clone(),
        key: args.api_key.clone(),
    };
    use reqwest::Method;
    let (value, text) = match command {
        ClientCommand::Links(LinksCommand::Create {
            long_url,
            alias,
            ttl,
            expires_at,
            redirect,
            forward_query,
            idempotency_key,
        }) => {
            let body = CreateLinkRequest {
                long_url,
                custom_alias: alias,
                expires_at,
                ttl_seconds: ttl,
                redirect,
                forward_query: forward_query.then_some(true),
            };
            let headers: Vec<(&str, &str)> = idempotency_key
                .as_deref()
                .map(|k| vec![("idempotency-key", k)])
                .unwrap_or_default();
            let created: LinkCreated = client
                .send(Method::POST, "/api/v1/links", Some(&body), &headers)
                .await?;
            let v = as_json(&created);
            let text = fields(
                &v,
                &[
                    "code",
                    "short_url",
                    "long_url",
                    "redirect",
                    "forward_query",
                    "expires_at",
                    "created_at",
                ],
            );
            (v, text)
        }
        ClientCommand::Links(LinksCommand::Import { file, format, batch }) => {
            import(&client, &file, format.as_deref(), batch, args.json).await?
        }
        ClientCommand::Links(LinksCommand::Get { code }) => {
            let link: LinkView = client
                .send(
                    Method::GET,
                    &format!("/api/v1/links/{}", encode_segment(&code)),
                    NO_BODY,
                    &[],
                )
                .await?;
            let v = as_json(&link);
            let text = fields(&v, LINK_FIELDS);
            (v, text)
        }
        ClientCommand::Links(LinksCommand::List { limit, cursor }) => {
            let mut query = Vec::new();
            if let Some(l) = limit {
                query.push(format!("limit={l}"));
            }
            if let Some(c) = cursor {
                query.push(format!("cursor={}", encode_segment(&c)));
            }
            let path = if query.is_empty() {
                "/api/v1/links".to_owned()
            } else {
                format!("/api/v1/links?{}", query.join("&"))
            };
            let list: LinkList = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec![
                "CODE".into(),
                "STATE".into(),
                "CREATED".into(),
                "EXPIRES".into(),
                "TARGET".into(),
            ]];
            for l in &list.links {
                let state = if l.is_active { "active" } else { "deleted" };
                rows.push(vec![
                    l.code.clone(),
                    state.into(),
                    l.created_at.clone(),
                    l.expires_at.clone().unwrap_or_else(|| "-".into()),
                    l.long_url.clone(),
                ]);
            }
            let mut text = table(&rows);
            if let Some(c) = &list.next_cursor {
                text.push_str(&format!("more: --cursor {c}\n"));
            }
            (as_json(&list), text)
        }
        ClientCommand::Links(LinksCommand::Delete { code }) => {
            client
                .send_text(
                    Method::DELETE,
                    &format!("/api/v1/links/{}", encode_segment(&code)),
                    NO_BODY,
                    &[],
                )
                .await?;
            (json!({"deleted": code}), format!("deleted {code}\n"))
        }
        ClientCommand::Links(LinksCommand::Qr { code }) => {
            let path = format!("/api/v1/links/{}/qr.svg", encode_segment(&code));
            // The SVG itself, also with --json: it is what the command is for.
            return client.send_text(Method::GET, &path, NO_BODY, &[]).await;
        }
        ClientCommand::Links(LinksCommand::Stats { code, from, to }) => {
            let mut query = Vec::new();
            if let Some(f) = from {
                query.push(format!("from={}", encode_segment(&f)));
            }
            if let Some(t) = to {
                query.push(format!("to={}", encode_segment(&t)));
            }
            let path = format!("/api/v1/links/{}/stats?{}", encode_segment(&code), query.join("&"));
            let stats: LinkStats = client.send(Method::GET, &path, NO_BODY, &[]).await?;
            let mut rows = vec![vec!["DAY".into(), "CLICKS".into()]];
            for d in stats.days.iter().filter(|d| d.clicks != 0) {
                rows.push(vec![d.day.clone(), d.clicks.to_string()]);
            }
            rows.push(vec!["total".into(), stats.total.to_string()]);
            let text = table(&rows);
            (as_json(&stats), text)
        }
        ClientCommand::Takedown { code, reason } => {
            let path = format!("/api/v1/links/{}/takedown", encode_segment(&code));
            let down: LinkView = client
                .send(Method::POST, &path, Some(&TakedownRequest { reason }), &[])
                .await?;
            let v = as_json(&down);
            let text = fields(
                &v,
                &[
                    "code",
                    "is_active",
                    "version",
                    "deleted_at",
                    "deleted_by",
                    "delete_reason",
                ],
            );
            (v, text)
        }
        ClientCommand::Keys(KeysCommand::Create { name, role }) => {
            let key: KeyCreated = client
                .send(
                    Method::POST,
                    "/api/v1/keys",
                    Some(&CreateKeyRequest { name, role }),
                    &[],
                )
                .await?;
            let v = as_json(&key);
            let mut text = fields(&v, &["id", "name", "role", "key"]);
            text.push_str("The key is shown only once; store it now.\n");
            (v, text)
        }
        ClientCommand::Keys(KeysCommand::Revoke { id }) => {
            client
                .send_text(
                    Method::DELETE,
                    &format!("/api/v1/keys/{}", encode_segment(&id)),
                    NO_BODY,
                    &[],
                )
                .await?;
            (json!({"revoked": id}), format!("revoked key {id}\n"))
        }
    };
    if args.json {
        Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        ))
    } else {
        Ok(text)
    }
}
