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

pub(super) fn encode_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
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
                rebound_store::Causes(&e)
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
