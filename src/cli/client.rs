//! The HTTP calls to the control plane's API: one request, and a refusal read as one
//! clear line.

use super::{CliError, ClientArgs};
use rebound_api_types::ErrorBody;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub(super) struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// The path and query of an API call: `segments` each one path segment, percent-encoded
/// (a `/` or `%` in a code or a name stays inside its segment), and `query` form-encoded,
/// both by the url crate. `.` and `..`, which a URL's path cannot carry as a segment, are
/// refused rather than dropped.
pub(super) fn api_path(segments: &[&str], query: &[(&str, &str)]) -> Result<String, CliError> {
    if let Some(dots) = segments.iter().find(|s| matches!(**s, "." | "..")) {
        return Err(CliError(format!("{dots:?} cannot be a code or a name")));
    }
    let mut url = url::Url::parse("http://api.invalid/").expect("a URL");
    url.path_segments_mut()
        .expect("an http URL has a path")
        .clear()
        .extend(segments);
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url[url::Position::BeforePath..].to_owned())
}

/// `pairs` with the `(name, value)` of each given value; `?domain=` of a call on one link.
pub(super) fn given<'a>(pairs: &[(&'a str, Option<&'a str>)]) -> Vec<(&'a str, &'a str)> {
    pairs.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect()
}

impl Client {
    /// A client of the API at `--api-url`, with `--api-key` when given.
    pub(super) fn new(args: &ClientArgs) -> Result<Client, CliError> {
        Ok(Client {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(120))
                .build()
                .map_err(|e| CliError(e.to_string()))?,
            base: args.api_url.clone(),
            key: args.api_key.clone(),
        })
    }

    /// Sends one request; only a transport failure is an error here.
    pub(super) async fn request(
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
        let res = req.send().await.map_err(|e| {
            CliError(format!(
                "cannot reach the control plane at {}: {}",
                self.base,
                rebound_core::Causes(&e)
            ))
        })?;
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
    pub(super) fn refusal(&self, answer: &Answer) -> CliError {
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
    pub(super) async fn send_text(
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
    pub(super) async fn send<T: DeserializeOwned>(
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
pub(super) const NO_BODY: Option<&()> = None;

/// What the control plane answered.
pub(super) struct Answer {
    pub(super) status: u16,
    /// `Retry-After`, in seconds, when sent.
    pub(super) retry_after: Option<u64>,
    pub(super) text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_keeps_each_segment_whole_and_encodes_the_query() {
        assert_eq!(
            api_path(&["api", "v1", "links", "a/b c%"], &[]).unwrap(),
            "/api/v1/links/a%2Fb%20c%25"
        );
        assert_eq!(
            api_path(
                &["api", "v1", "links", "promo", "stats"],
                &given(&[
                    ("from", Some("2026-01-01")),
                    ("to", None),
                    ("domain", Some("bücher.example&x=1"))
                ])
            )
            .unwrap(),
            "/api/v1/links/promo/stats?from=2026-01-01&domain=b%C3%BCcher.example%26x%3D1"
        );
        assert_eq!(api_path(&["api", "v1", "domains"], &[]).unwrap(), "/api/v1/domains");
        assert!(api_path(&["api", "v1", "links", ".."], &[]).is_err());
    }
}
