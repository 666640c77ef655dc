//! The Mandate API as `mandate mcp` calls it: async (the MCP server runs on tokio), with the
//! agent key held here and only sent as the `Authorization` header, every POST carrying an
//! Idempotency-Key, and the retry rule of the CLI (`client::next_action`): network errors
//! and 5xx retried with the same key, a 429 retried after its `Retry-After` when that is
//! short. What fails is a [`Failure`]: a sentence for the model, with the API's message.

use std::time::Duration;

use mandate_protocol::wire::ErrorBody;
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use crate::client::{Attempt, IDEMPOTENCY_HEADER, NextAction, next_action};

/// A request that did not succeed, as the tool reports it: never the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Connecting must succeed within this, so an unreachable server is a tool error within
/// seconds, not a hung call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A whole request (a decision is answered in milliseconds).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries after the first attempt.
const RETRIES: u32 = 2;

/// The API of one agent.
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never shown, not even in a debug print.
        f.debug_struct("Api").field("base", &self.base).finish()
    }
}

impl Api {
    /// The API at `base` (ending in `/v1`) with the agent key `key`.
    pub fn new(base: String, key: String) -> Result<Self, Failure> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("mandate-mcp/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Self { http, base, key })
    }

    /// `GET {base}{path}` with the query.
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        self.send(Method::GET, path, query, None).await
    }

    /// `POST {base}{path}` with the JSON `body` and the Idempotency-Key `key`: retried with
    /// the same key, so the server acts once however often it is sent.
    pub async fn post(&self, path: &str, body: String, key: &str) -> Result<Value, Failure> {
        self.send(Method::POST, path, &[], Some((body, key))).await
    }

    /// A public URL without credentials (the JWK Set).
    /// The body and the `Cache-Control` header of a public document (the JWK Set).
    pub async fn get_public(&self, url: &str) -> Result<(Vec<u8>, Option<String>), Failure> {
        let answer = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| Failure(format!("cannot fetch {url}: {}", reason(&e))))?;
        if !answer.status().is_success() {
            return Err(Failure(format!("{url} answered {}", answer.status())));
        }
        let cache_control = answer
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = answer
            .bytes()
            .await
            .map_err(|e| Failure(format!("cannot read {url}: {}", reason(&e))))?;
        Ok((bytes.to_vec(), cache_control))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<(String, &str)>,
    ) -> Result<Value, Failure> {
        let url = Url::parse(&format!("{}{path}", self.base))
            .map_err(|e| Failure(format!("invalid API URL {}{path}: {e}", self.base)))?;
        let mut retries = 0;
        loop {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .bearer_auth(&self.key)
                .query(query);
            if let Some((body, key)) = &body {
                request = request
                    .header("content-type", "application/json")
                    .header(IDEMPOTENCY_HEADER, *key)
                    .body(body.clone());
            }
            let (attempt, outcome) = match request.send().await {
                Err(e) => (
                    Attempt::Network,
                    Err(Failure(format!(
                        "cannot reach the Mandate API at {}: {}{}",
                        self.base,
                        reason(&e),
                        if body.is_some() {
                            " (nothing was decided that this call knows of; calling again with the same idempotency_key is safe)"
                        } else {
                            ""
                        }
                    ))),
                ),
                Ok(answer) => {
                    let status = answer.status();
                    let retry_after = answer
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok());
                    let text = answer.text().await.unwrap_or_default();
                    let attempt = Attempt::Status {
                        status: status.as_u16(),
                        retry_after,
                    };
                    (attempt, judge(status, retry_after, &text))
                }
            };
            if outcome.is_ok() {
                return outcome;
            }
            match next_action(attempt, retries, RETRIES) {
                NextAction::Retry(wait) => {
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                NextAction::Stop => return outcome,
            }
        }
    }
}

/// The answer's body, or the failure it reports: the error envelope's code and message.
fn judge(status: StatusCode, retry_after: Option<u64>, text: &str) -> Result<Value, Failure> {
    if status.is_success() {
        return serde_json::from_str(text).map_err(|e| {
            Failure(format!(
                "the API answered {status} with unreadable JSON: {e}"
            ))
        });
    }
    let envelope = serde_json::from_str::<ErrorBody>(text).ok();
    let code = envelope.as_ref().map_or("error", |e| e.error.code.as_str());
    let message = envelope.as_ref().map_or_else(
        || text.chars().take(200).collect(),
        |e| e.error.message.clone(),
    );
    let mut sentence = format!(
        "the Mandate API refused the request ({} {code}): {message}",
        status.as_u16()
    );
    if let Some(secs) = retry_after {
        sentence.push_str(&format!(" (Retry-After: {secs} s)"));
    }
    Err(Failure(sentence))
}

/// Why a request got no answer, in a few words (reqwest's chain of sources).
fn reason(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(error);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind} ({detail})")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_apis_code_and_message_and_the_wait() {
        let body = r#"{"error":{"code":"rate_limited","message":"more than 3 requests a second","request_id":"req_1"}}"#;
        let failure = judge(StatusCode::TOO_MANY_REQUESTS, Some(2), body).unwrap_err();
        assert_eq!(
            failure.0,
            "the Mandate API refused the request (429 rate_limited): more than 3 requests a second (Retry-After: 2 s)"
        );
        let failure = judge(StatusCode::BAD_REQUEST, None, "not json").unwrap_err();
        assert!(failure.0.contains("400 error): not json"), "{failure}");
        assert_eq!(
            judge(StatusCode::OK, None, "{}").unwrap(),
            serde_json::json!({})
        );
    }

    #[test]
    fn the_key_is_not_in_the_debug_print() {
        let api = Api::new("http://127.0.0.1:1/v1".into(), "ak_secret".into()).unwrap();
        assert!(!format!("{api:?}").contains("ak_secret"));
    }
}
