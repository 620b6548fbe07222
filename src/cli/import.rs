//! `rebound links import`: a CSV or JSON-lines file sent in chunks, each with an
//! idempotency key derived from the file, so that running it again creates nothing twice.

use super::client::Client;
use super::output::{as_json, show};
use super::CliError;
use rebound_api_types::{ImportOutcome, ImportResults};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Digest;

/// An import file as read: what identifies it, and each link with the line it came from,
/// or why that line cannot be sent.
struct ImportFile {
    /// Hex SHA-256 of the whole file (of its lines with passwords left out, when it has
    /// any: [`file_identity`]): with a chunk's lines, what its idempotency key is derived
    /// from, so that running the same file again replays instead of creating.
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
        identity: file_identity(&text, &links),
        links,
    })
}

/// What identifies an import file in its idempotency keys: the SHA-256 of its text; for
/// a file that names a password anywhere, of its lines with every password left out
/// ([`keyed_value`]; a line that cannot be read counts by its number alone). The server
/// keeps a key as it was sent, so a fast hash of a password in it would let whoever reads
/// the store test guesses; the server compares the passwords themselves, keyed, so a file
/// run again with another password is still told apart (409).
fn file_identity(text: &str, links: &[ImportLine]) -> String {
    if !text.contains("password") {
        // As before passwords: the same file keeps its keys across an upgrade.
        return hex::encode(sha2::Sha256::digest(text.as_bytes()));
    }
    let mut hash = sha2::Sha256::new();
    hash.update(b"rebound-import-lines\0");
    for (line, value) in links {
        match value {
            Ok(value) => hash.update(format!("{line}\0{}\0", keyed_value(value)).as_bytes()),
            Err(_) => hash.update(format!("{line}\0!\0").as_bytes()),
        }
    }
    hex::encode(hash.finalize())
}

/// A link as it goes into an idempotency key: its password, if any, as `"(given)"`.
fn keyed_value(value: &Value) -> std::borrow::Cow<'_, Value> {
    match value.get("password") {
        Some(_) => {
            let mut value = value.clone();
            value["password"] = json!("(given)");
            std::borrow::Cow::Owned(value)
        }
        None => std::borrow::Cow::Borrowed(value),
    }
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
    "domain",
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
/// (numbers and values, passwords left out: [`keyed_value`]), so that the same lines of the
/// same file always carry the same key.
fn chunk_key(identity: &str, lines: &[&(usize, Value)]) -> String {
    let mut hash = sha2::Sha256::new();
    hash.update(b"rebound-import\0");
    hash.update(identity.as_bytes());
    for (line, value) in lines {
        hash.update(format!("\0{line}\0{}", keyed_value(value)).as_bytes());
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
pub(super) async fn run(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The idempotency keys of every chunk of `text` (JSON lines), one link per chunk.
    fn keys_of(text: &str) -> Vec<String> {
        let path = std::env::temp_dir().join(format!("rebound-import-keys-{}.jsonl", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let file = read_import(path.to_str().unwrap(), None).unwrap();
        std::fs::remove_file(&path).unwrap();
        let owned: Vec<(usize, Value)> = file
            .links
            .iter()
            .filter_map(|(l, v)| v.as_ref().ok().map(|v| (*l, v.clone())))
            .collect();
        owned.iter().map(|line| chunk_key(&file.identity, &[line])).collect()
    }

    #[test]
    fn an_import_key_holds_no_fast_hash_of_a_password() {
        let with = |password: &str| {
            format!(
                "{{\"long_url\":\"https://e.com/a\",\"password\":\"{password}\"}}\n{{\"long_url\":\"https://e.com/b\"}}\n"
            )
        };
        // Keys that differ only by the password would let a reader of the store (which
        // keeps them) test guesses at SHA-256's speed: the password is not in them.
        assert_eq!(keys_of(&with("first secret")), keys_of(&with("other secret")));
        // Still a file of its own: a link with a password is not the same link without.
        let without = "{\"long_url\":\"https://e.com/a\"}\n{\"long_url\":\"https://e.com/b\"}\n";
        assert_ne!(keys_of(&with("first secret"))[0], keys_of(without)[0]);
        // A file without passwords keeps the keys it always had.
        let identity = hex::encode(sha2::Sha256::digest(without.as_bytes()));
        let old = |line: usize, value: &str| {
            let mut hash = sha2::Sha256::new();
            hash.update(b"rebound-import\0");
            hash.update(identity.as_bytes());
            hash.update(format!("\0{line}\0{value}").as_bytes());
            format!("import-{}", hex::encode(hash.finalize()))
        };
        assert_eq!(
            keys_of(without),
            [
                old(1, r#"{"long_url":"https://e.com/a"}"#),
                old(2, r#"{"long_url":"https://e.com/b"}"#)
            ]
        );
    }
}
