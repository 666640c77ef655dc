//! The HTTP client of the API: bearer authentication, JSON bodies with exact numbers, the
//! error envelope decoded into [`CliError::Api`], Idempotency-Keys on every POST, retries
//! that never act twice, and list walking.
//!
//! Whether to retry is a pure function, [`next_action`]: a POST is only retried with the
//! same Idempotency-Key, so the server replays the first result instead of acting again.

use std::io::IsTerminal as _;
use std::time::Duration;

use mandate_protocol::{wire::ErrorBody, wire::ListPage};
use reqwest::Url;
use reqwest::blocking::RequestBuilder;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Resolved;
use crate::error::CliError;
use crate::output;

/// The request header carrying the idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Transport options shared by every command.
#[derive(Debug, Clone, Copy)]
pub struct HttpOptions {
    /// Per-request timeout.
    pub timeout: Duration,
    /// How many times a failed request is retried (network errors, 5xx, short 429s).
    pub retries: u32,
}

/// What one attempt ended with, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// No HTTP answer: connection refused or reset, TLS failure, timeout.
    Network,
    /// An HTTP answer with this status and, for a 429, its `Retry-After` in seconds.
    Status {
        /// The HTTP status.
        status: u16,
        /// The `Retry-After` header, whole seconds.
        retry_after: Option<u64>,
    },
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum NextAction {
    /// Send the same request again (same Idempotency-Key) after waiting this long.
    Retry(Duration),
    /// Report this outcome.
    Stop,
}

/// The longest `Retry-After` the CLI waits for on its own.
pub const MAX_RETRY_AFTER_SECS: u64 = 10;

/// Decides whether to retry after `retries_done` retries out of `max_retries`.
///
/// Network errors and 5xx answers are retried with exponential backoff (250 ms, 500 ms,
/// 1 s, ...); a 429 is retried after its `Retry-After` when that is at most
/// [`MAX_RETRY_AFTER_SECS`]. Everything else is final: a 4xx would only repeat itself.
pub fn next_action(attempt: Attempt, retries_done: u32, max_retries: u32) -> NextAction {
    if retries_done >= max_retries {
        return NextAction::Stop;
    }
    let backoff = Duration::from_millis(250u64 << retries_done.min(6));
    match attempt {
        Attempt::Network => NextAction::Retry(backoff),
        Attempt::Status { status, .. } if status >= 500 => NextAction::Retry(backoff),
        Attempt::Status {
            status: 429,
            retry_after: Some(secs),
        } if secs <= MAX_RETRY_AFTER_SECS => NextAction::Retry(Duration::from_secs(secs)),
        Attempt::Status { .. } => NextAction::Stop,
    }
}

/// A fresh random Idempotency-Key, `idem_` and 128 bits from the operating system.
pub fn new_idempotency_key() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        CliError::usage(format!(
            "cannot draw random bytes for an Idempotency-Key ({e}); pass --idempotency-key"
        ))
    })?;
    Ok(format!("idem_{}", mandate_protocol::id::base32(&bytes)))
}

/// Refuses to send credentials or fetch keys over plain HTTP except to this machine.
pub fn check_transport(url: &Url) -> Result<(), CliError> {
    match url.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = url.host_str().unwrap_or("");
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host == "localhost"
                || bare
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if loopback {
                Ok(())
            } else {
                Err(CliError::usage(format!(
                    "refusing plain http to {url}: use https (http is accepted only for localhost and 127.0.0.1)"
                )))
            }
        }
        other => Err(CliError::usage(format!(
            "unsupported URL scheme {other:?} in {url}: use https"
        ))),
    }
}

/// Parses a URL given by the user.
pub fn parse_url(text: &str) -> Result<Url, CliError> {
    let url =
        Url::parse(text).map_err(|e| CliError::usage(format!("invalid URL {text:?}: {e}")))?;
    check_transport(&url)?;
    Ok(url)
}

/// Builds the underlying HTTP client.
pub fn http_client(
    options: HttpOptions,
    redirects: reqwest::redirect::Policy,
) -> Result<reqwest::blocking::Client, CliError> {
    reqwest::blocking::Client::builder()
        .timeout(options.timeout)
        .redirect(redirects)
        .user_agent(concat!("mandate-cli/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| CliError::usage(format!("cannot set up the HTTP client: {e}")))
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status (2xx).
    pub status: u16,
    /// The JSON body as the server sent it, numbers kept exact: untyped because `--json`
    /// prints it as it came and the field lists show every member (members this CLI does
    /// not know included); read through the wire types with [`Response::read`].
    pub body: Value,
    /// The `Cache-Control` header, as sent (how long a JWK Set may be kept).
    pub cache_control: Option<String>,
}

impl Response {
    /// The body read as its wire type (`what` names it in the error).
    pub fn read<T: DeserializeOwned>(&self, what: &str) -> Result<T, CliError> {
        T::deserialize(&self.body).map_err(|e| not_the_type(self.status, what, &e))
    }
}

/// One object of an answer (an item of a list): read as its wire type, and kept as the
/// server sent it, which is what it serializes as (`--json` prints the list as it came).
#[derive(Debug, Clone)]
pub struct Sent<T> {
    /// The object, read as its wire type.
    pub object: T,
    /// The object as the server sent it.
    sent: Value,
}

impl<T> Serialize for Sent<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.sent.serialize(serializer)
    }
}

/// An answer with status `status` that does not read as its wire type (`what`): an
/// unexpected response, never a panic.
fn not_the_type(status: u16, what: &str, error: &serde_json::Error) -> CliError {
    CliError::UnexpectedResponse {
        status,
        detail: format!("the answer is not {what}: {error}"),
        request_id: None,
    }
}

/// An HTTP answer of any status, read whole.
struct Raw {
    status: u16,
    url: Url,
    request_id: Option<String>,
    replayed: bool,
    retry_after: Option<u64>,
    cache_control: Option<String>,
    text: String,
}

/// The API client of one command.
#[derive(Debug)]
pub struct Client {
    http: reqwest::blocking::Client,
    base_url: Url,
    api_key: String,
    retries: u32,
}

impl Client {
    /// A client for the resolved settings; fails when no key is configured.
    pub fn new(resolved: &Resolved, options: HttpOptions) -> Result<Self, CliError> {
        let api_key = resolved.api_key.clone().ok_or_else(|| {
            CliError::usage(
                "no API key: pass --api-key, set MANDATE_API_KEY, or store one with `mandate login --profile NAME --api-key KEY`",
            )
        })?;
        let base_url = parse_url(&resolved.base_url)?;
        Ok(Self {
            http: http_client(options, reqwest::redirect::Policy::none())?,
            base_url,
            api_key,
            retries: options.retries,
        })
    }

    /// The API key, as sent in `Authorization: Bearer` (`mandate audit` reads the log's
    /// tiles on the public host with it).
    pub fn bearer(&self) -> &str {
        &self.api_key
    }

    /// Whether the key is an agent's (`ak_…`), not the organization's.
    pub fn is_agent_key(&self) -> bool {
        self.api_key.starts_with("ak_")
    }

    fn url(&self, path: &str) -> Result<Url, CliError> {
        let text = format!("{}{path}", self.base_url.as_str().trim_end_matches('/'));
        Url::parse(&text).map_err(|e| CliError::usage(format!("invalid URL {text:?}: {e}")))
    }

    /// `GET base_url + path` with query parameters; the decoded 2xx body.
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Response, CliError> {
        let url = self.url(path)?;
        self.send(&url, None, || {
            self.http
                .get(url.clone())
                .query(query)
                .header(AUTHORIZATION, format!("Bearer {}", self.api_key))
        })
    }

    /// `GET base_url + path` for a streamed body (the NDJSON export): a 2xx answer is
    /// returned with its body unread, for the caller to copy in chunks; any other answer is
    /// read whole and decoded into [`CliError::Api`]. Retries (network errors, 5xx, short
    /// 429s) all happen before the first byte of a 2xx body: a body cut off later is the
    /// caller's to report. `--timeout` then applies to each read, not to the whole body.
    pub fn get_stream(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::blocking::Response, CliError> {
        let url = self.url(path)?;
        let attempt = || {
            let response = self
                .http
                .get(url.clone())
                .query(query)
                .header(AUTHORIZATION, format!("Bearer {}", self.api_key))
                .send()?;
            if response.status().is_success() {
                Ok(Streamed::Body(response))
            } else {
                read_whole(response).map(Streamed::Whole)
            }
        };
        let classify = |answer: &Streamed| match answer {
            Streamed::Body(response) => Attempt::Status {
                status: response.status().as_u16(),
                retry_after: None,
            },
            Streamed::Whole(raw) => raw.attempt(),
        };
        match retrying(attempt, classify, self.retries)
            .map_err(|e| network_error(&url, &e, None))?
        {
            Streamed::Body(response) => Ok(response),
            Streamed::Whole(raw) => match decode(raw) {
                // `decode` accepts only 2xx bodies, which never arrive here.
                Ok(response) => Err(CliError::UnexpectedResponse {
                    status: response.status,
                    detail: "not a streamed body".into(),
                    request_id: None,
                }),
                Err(e) => Err(e),
            },
        }
    }

    /// `DELETE base_url + path`; the decoded 2xx body. DELETE is idempotent by itself, so
    /// it carries no Idempotency-Key (a retry after a lost answer may read 404).
    pub fn delete(&self, path: &str) -> Result<Response, CliError> {
        let url = self.url(path)?;
        self.send(&url, None, || {
            self.http
                .delete(url.clone())
                .header(AUTHORIZATION, format!("Bearer {}", self.api_key))
        })
    }

    /// `POST base_url + path` with a JSON body under `idempotency_key`: a request type of
    /// `mandate_protocol::wire` (or a mandate draft as it was read and checked).
    pub fn post(
        &self,
        path: &str,
        body: &impl Serialize,
        idempotency_key: &str,
    ) -> Result<Response, CliError> {
        // Members sorted by name, as `wire::to_value` writes them: the Idempotency-Key's
        // digest is over the bytes, so the same request always sends the same ones.
        let text = mandate_protocol::wire::to_value(body)
            .map_err(|e| CliError::usage(format!("cannot encode JSON: {e}")))?
            .to_string();
        self.post_text(path, Some(text), idempotency_key)
    }

    /// `POST base_url + path` without a body under `idempotency_key`.
    pub fn post_empty(&self, path: &str, idempotency_key: &str) -> Result<Response, CliError> {
        self.post_text(path, None, idempotency_key)
    }

    fn post_text(
        &self,
        path: &str,
        text: Option<String>,
        idempotency_key: &str,
    ) -> Result<Response, CliError> {
        let url = self.url(path)?;
        self.send(&url, Some(idempotency_key), || {
            let request = self
                .http
                .post(url.clone())
                .header(AUTHORIZATION, format!("Bearer {}", self.api_key))
                .header(IDEMPOTENCY_HEADER, idempotency_key);
            match &text {
                Some(text) => request
                    .header(CONTENT_TYPE, "application/json")
                    .body(text.clone()),
                None => request,
            }
        })
    }

    fn send(
        &self,
        url: &Url,
        idempotency_key: Option<&str>,
        build: impl Fn() -> RequestBuilder,
    ) -> Result<Response, CliError> {
        let raw = with_retries(build, self.retries)
            .map_err(|e| network_error(url, &e, idempotency_key))?;
        if raw.replayed
            && let Some(key) = idempotency_key
        {
            output::note(&format!(
                "replayed the stored result of Idempotency-Key {key}: the request was not applied again"
            ));
        }
        decode(raw)
    }

    /// Lists `path`: one page (from `cursor`), or with `all` every page until `has_more`
    /// is false, merged into one envelope, each object read as its wire type `T` (`what`
    /// names it in the error). Progress goes to stderr when it is a terminal.
    pub fn list<T: DeserializeOwned>(
        &self,
        path: &str,
        filters: &[(&str, String)],
        paging: &Paging,
        what: &str,
    ) -> Result<ListPage<Sent<T>>, CliError> {
        let progress = paging.all && std::io::stderr().is_terminal();
        let result = self.walk(path, filters, paging, progress, what);
        if progress {
            output::progress_done();
        }
        result
    }

    fn walk<T: DeserializeOwned>(
        &self,
        path: &str,
        filters: &[(&str, String)],
        paging: &Paging,
        progress: bool,
        what: &str,
    ) -> Result<ListPage<Sent<T>>, CliError> {
        let mut cursor = paging.cursor.clone();
        let mut merged: Vec<Sent<T>> = Vec::new();
        let mut pages = 0u32;
        loop {
            let mut query: Vec<(&str, String)> = filters.to_vec();
            if let Some(limit) = paging.limit {
                query.push(("limit", limit.to_string()));
            }
            if let Some(cursor) = &cursor {
                query.push(("cursor", cursor.clone()));
            }
            let response = self.get(path, &query)?;
            // The envelope first, then each object: a page that is not a list and an
            // object that is not a `T` are told apart.
            let page: ListPage<Value> = serde_json::from_value(response.body).map_err(|e| {
                CliError::UnexpectedResponse {
                    status: response.status,
                    detail: format!("not a list envelope: {e}"),
                    request_id: None,
                }
            })?;
            pages += 1;
            for sent in page.data {
                let object =
                    T::deserialize(&sent).map_err(|e| not_the_type(response.status, what, &e))?;
                merged.push(Sent { object, sent });
            }
            if progress {
                output::progress(&format!(
                    "{} fetched ({})…",
                    merged.len(),
                    output::count(pages, "page", "pages")
                ));
            }
            match (paging.all, page.has_more, page.next_cursor) {
                (true, true, Some(next)) => cursor = Some(next),
                (true, true, None) => {
                    return Err(CliError::UnexpectedResponse {
                        status: response.status,
                        detail: "has_more is true but next_cursor is missing".into(),
                        request_id: None,
                    });
                }
                (true, false, _) => {
                    return Ok(ListPage {
                        data: merged,
                        has_more: false,
                        next_cursor: None,
                    });
                }
                (false, has_more, next_cursor) => {
                    return Ok(ListPage {
                        data: merged,
                        has_more,
                        next_cursor,
                    });
                }
            }
        }
    }
}

/// How a list is read.
#[derive(Debug, Clone, Default)]
pub struct Paging {
    /// Page size, 1 to 100 (the server's default is 20).
    pub limit: Option<u8>,
    /// Start from this cursor.
    pub cursor: Option<String>,
    /// Walk every page.
    pub all: bool,
}

/// Sends the request `build` makes, again after each retryable outcome (see
/// [`next_action`]); the last answer, or the last network error.
fn with_retries(
    build: impl Fn() -> RequestBuilder,
    max_retries: u32,
) -> Result<Raw, reqwest::Error> {
    retrying(|| read(build()), Raw::attempt, max_retries)
}

/// The retry loop: runs `attempt`, again while [`next_action`] says so for what `classify`
/// makes of its outcome; the last outcome.
fn retrying<T>(
    mut attempt: impl FnMut() -> Result<T, reqwest::Error>,
    classify: impl Fn(&T) -> Attempt,
    max_retries: u32,
) -> Result<T, reqwest::Error> {
    let mut retries_done = 0;
    loop {
        let result = attempt();
        let outcome = match &result {
            Ok(answer) => classify(answer),
            Err(_) => Attempt::Network,
        };
        match next_action(outcome, retries_done, max_retries) {
            NextAction::Retry(wait) => {
                retries_done += 1;
                std::thread::sleep(wait);
            }
            NextAction::Stop => return result,
        }
    }
}

impl Raw {
    fn attempt(&self) -> Attempt {
        Attempt::Status {
            status: self.status,
            retry_after: self.retry_after,
        }
    }
}

/// The answer to a streamed GET: a 2xx whose body is still to be read, or anything else,
/// read whole.
enum Streamed {
    Body(reqwest::blocking::Response),
    Whole(Raw),
}

fn read(request: RequestBuilder) -> Result<Raw, reqwest::Error> {
    read_whole(request.send()?)
}

fn read_whole(response: reqwest::blocking::Response) -> Result<Raw, reqwest::Error> {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id");
    let replayed = header("idempotency-replayed").as_deref() == Some("true");
    let retry_after = header(RETRY_AFTER.as_str()).and_then(|v| v.trim().parse().ok());
    let cache_control = header("cache-control");
    let status = response.status().as_u16();
    let url = response.url().clone();
    let text = response.text()?;
    Ok(Raw {
        status,
        url,
        request_id,
        replayed,
        retry_after,
        cache_control,
        text,
    })
}

/// Fetches a public document (the JWK Set) without credentials, following at most five
/// redirects that stay on https (or loopback http). Returns the final URL and the body.
pub fn fetch_public(url: &Url, options: HttpOptions) -> Result<(Url, Response), CliError> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= 5 {
            attempt.error("more than 5 redirects")
        } else if check_transport(attempt.url()).is_err() {
            attempt.error("redirected to plain http outside this machine")
        } else {
            attempt.follow()
        }
    });
    let http = http_client(options, policy)?;
    let raw = with_retries(|| http.get(url.clone()), options.retries)
        .map_err(|e| network_error(url, &e, None))?;
    let final_url = raw.url.clone();
    Ok((final_url, decode(raw)?))
}

fn decode(raw: Raw) -> Result<Response, CliError> {
    let parsed: Result<Value, _> = serde_json::from_str(&raw.text);
    if (200..300).contains(&raw.status) {
        return match parsed {
            Ok(body) => Ok(Response {
                status: raw.status,
                body,
                cache_control: raw.cache_control,
            }),
            Err(e) => Err(CliError::UnexpectedResponse {
                status: raw.status,
                detail: format!("the body is not JSON: {e}"),
                request_id: raw.request_id,
            }),
        };
    }
    match parsed {
        Ok(body) => match serde_json::from_value::<ErrorBody>(body.clone()) {
            Ok(envelope) => Err(CliError::Api {
                status: raw.status,
                detail: envelope.error,
                body,
            }),
            Err(_) => Err(unexpected(raw)),
        },
        Err(_) => Err(unexpected(raw)),
    }
}

fn unexpected(raw: Raw) -> CliError {
    let shown: String = raw.text.chars().take(200).collect();
    CliError::UnexpectedResponse {
        status: raw.status,
        detail: if shown.trim().is_empty() {
            "empty body, not the API's error envelope".to_owned()
        } else {
            format!("not the API's error envelope: {}", shown.trim())
        },
        request_id: raw.request_id,
    }
}

fn network_error(url: &Url, error: &reqwest::Error, idempotency_key: Option<&str>) -> CliError {
    // reqwest nests its causes; the innermost one says what actually happened.
    let mut cause: &dyn std::error::Error = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let message = if error.is_timeout() {
        "timed out (see --timeout)".to_owned()
    } else if error.is_connect() {
        format!("cannot connect: {cause}")
    } else {
        cause.to_string()
    };
    let mut shown = url.clone();
    shown.set_query(None);
    CliError::Network {
        url: shown.to_string(),
        message,
        idempotency_key: idempotency_key.map(str::to_owned),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn retries_network_and_5xx_with_backoff_until_the_budget_is_spent() {
        assert_eq!(
            next_action(Attempt::Network, 0, 2),
            NextAction::Retry(Duration::from_millis(250))
        );
        let five = Attempt::Status {
            status: 503,
            retry_after: None,
        };
        assert_eq!(
            next_action(five, 1, 2),
            NextAction::Retry(Duration::from_millis(500))
        );
        assert_eq!(next_action(five, 2, 2), NextAction::Stop);
        assert_eq!(next_action(Attempt::Network, 0, 0), NextAction::Stop);
    }

    #[test]
    fn client_errors_are_final_and_429_waits_only_briefly() {
        for status in [200, 201, 400, 401, 403, 404, 409] {
            let attempt = Attempt::Status {
                status,
                retry_after: None,
            };
            assert_eq!(next_action(attempt, 0, 5), NextAction::Stop, "{status}");
        }
        let short = Attempt::Status {
            status: 429,
            retry_after: Some(2),
        };
        assert_eq!(
            next_action(short, 0, 1),
            NextAction::Retry(Duration::from_secs(2))
        );
        let long = Attempt::Status {
            status: 429,
            retry_after: Some(60),
        };
        assert_eq!(next_action(long, 0, 1), NextAction::Stop);
    }

    #[test]
    fn plain_http_only_to_loopback() {
        assert!(parse_url("http://127.0.0.1:8080/v1").is_ok());
        assert!(parse_url("http://localhost/v1").is_ok());
        assert!(parse_url("http://[::1]:80/v1").is_ok());
        assert!(parse_url("https://api.example/v1").is_ok());
        assert!(parse_url("http://api.example/v1").is_err());
        assert!(parse_url("ftp://127.0.0.1/").is_err());
    }

    #[test]
    fn idempotency_keys_are_fresh() {
        let a = new_idempotency_key().unwrap();
        let b = new_idempotency_key().unwrap();
        assert!(a.starts_with("idem_") && a.len() > 20);
        assert_ne!(a, b);
    }
}
