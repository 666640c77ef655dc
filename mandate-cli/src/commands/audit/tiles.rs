//! Reading a log as C2SP tlog-tiles from the public host: its checkpoint, level-0 hash
//! tiles and entry bundles, under the log's prefix (`<verdicts URL>/log/<org>/<env>`).
//!
//! Only what the auditor needs is read: the leaf hashes (level 0) and the entries, never
//! the upper levels, since the auditor hashes the tree itself from its leaves. A tile is
//! read at the width the tree of the checkpoint audited gives it (`.p/<W>` for the last,
//! partial one), as the spec asks of a client.

use mandate_protocol::tlog::{LogHash, TILE_WIDTH, TilePath};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, RETRY_AFTER};

use crate::client::{HttpOptions, check_transport, http_client};
use crate::error::CliError;

/// Where a log's tiles are read, and with which key.
pub struct LogReader {
    http: reqwest::blocking::Client,
    /// The prefix, without a final `/`: `https://verdicts.example.com/log/org_…/live`.
    prefix: String,
    /// The organization's secret key, sent as bearer; `None` for a public log.
    key: Option<String>,
}

/// What a read of the log found wrong with the service, not with the caller: a refusal.
pub enum ReadError {
    /// The caller cannot read (a usage, network or permission problem).
    Cli(CliError),
    /// The service does not serve what its checkpoint covers.
    Refused(String),
}

impl From<CliError> for ReadError {
    fn from(e: CliError) -> Self {
        Self::Cli(e)
    }
}

/// The width of tile `index` in a tree of `size` leaves: 256, or the last one's.
fn width(index: u64, size: u64) -> usize {
    let left = size.saturating_sub(index * TILE_WIDTH as u64);
    usize::try_from(left.min(TILE_WIDTH as u64)).unwrap_or(TILE_WIDTH)
}

impl LogReader {
    /// A reader of the log under `prefix`, sending `key` as bearer when given.
    pub fn new(prefix: &str, key: Option<String>, options: HttpOptions) -> Result<Self, CliError> {
        let url = reqwest::Url::parse(prefix)
            .map_err(|e| CliError::usage(format!("invalid log URL {prefix:?}: {e}")))?;
        check_transport(&url)?;
        Ok(Self {
            http: http_client(options, reqwest::redirect::Policy::none())?,
            prefix: prefix.trim_end_matches('/').to_owned(),
            key,
        })
    }

    /// The checkpoint shown to readers, as a signed note; `None` before the first.
    pub fn checkpoint(&self) -> Result<Option<String>, CliError> {
        match self.get("checkpoint") {
            Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                CliError::Rejected(format!(
                    "{}/checkpoint is not text: not a signed note",
                    self.prefix
                ))
            }),
            Err(ReadError::Refused(_)) => Ok(None),
            Err(ReadError::Cli(e)) => Err(e),
        }
    }

    /// The leaf hashes `from..to` of the tree of `size` leaves, from its level-0 tiles.
    pub fn leaves(&self, from: u64, to: u64, size: u64) -> Result<Vec<LogHash>, ReadError> {
        let mut out = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
        let first = from / TILE_WIDTH as u64;
        let mut tile = first;
        while tile * (TILE_WIDTH as u64) < to {
            let path = TilePath {
                level: Some(0),
                index: tile,
                width: width(tile, size),
            };
            let bytes = self.get(&format!("tile/{path}"))?;
            if bytes.len() != path.width * 32 {
                return Err(ReadError::Refused(format!(
                    "the log's tile {path} holds {} bytes where {} hashes of 32 bytes are due",
                    bytes.len(),
                    path.width
                )));
            }
            let start = tile * TILE_WIDTH as u64;
            for (i, chunk) in bytes.chunks_exact(32).enumerate() {
                let index = start + i as u64;
                if (from..to).contains(&index) {
                    let mut hash = [0u8; 32];
                    hash.copy_from_slice(chunk);
                    out.push(LogHash::from_bytes(hash));
                }
            }
            tile += 1;
        }
        Ok(out)
    }

    /// The verdict tokens of entry bundle `bundle` of the tree of `size` leaves.
    pub fn bundle(&self, bundle: u64, size: u64) -> Result<Vec<String>, ReadError> {
        let path = TilePath {
            level: None,
            index: bundle,
            width: width(bundle, size),
        };
        let bytes = self.get(&format!("tile/{path}"))?;
        let tokens = parse_bundle(&bytes).ok_or_else(|| {
            ReadError::Refused(format!(
                "the log's entry bundle {path} is not a bundle of length-prefixed tokens"
            ))
        })?;
        if tokens.len() != path.width {
            return Err(ReadError::Refused(format!(
                "the log's entry bundle {path} holds {} entries where {} are due",
                tokens.len(),
                path.width
            )));
        }
        Ok(tokens)
    }

    /// `GET <prefix>/<path>`: the body of a 200; a 404 is the service not serving what it
    /// should (a refusal); 401 and 403 are the caller's key. A 429 (the key's request
    /// rate, which a first or `--full` run of a large log reaches) is waited out as its
    /// `Retry-After` says, up to [`RATE_LIMITED_TRIES`] times.
    fn get(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        let url = format!("{}/{path}", self.prefix);
        let mut tries = 0;
        loop {
            let (status, retry_after, body) = self.send(&url)?;
            tries += 1;
            if status == StatusCode::TOO_MANY_REQUESTS && tries < RATE_LIMITED_TRIES {
                let wait = retry_after.unwrap_or(1).clamp(1, 60);
                std::thread::sleep(std::time::Duration::from_secs(wait));
                continue;
            }
            return answer(&url, status, body);
        }
    }

    /// One request: its status, `Retry-After` in seconds, and body.
    fn send(&self, url: &str) -> Result<(StatusCode, Option<u64>, Vec<u8>), ReadError> {
        let mut request = self.http.get(url);
        if let Some(key) = &self.key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = request.send().map_err(|e| {
            ReadError::Cli(CliError::Network {
                url: url.to_owned(),
                message: e.to_string(),
                idempotency_key: None,
            })
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse().ok());
        let body = response
            .bytes()
            .map_err(|e| ReadError::Cli(CliError::Incomplete(format!("{url} was cut off: {e}"))))?;
        Ok((status, retry_after, body.to_vec()))
    }
}

/// How many times a rate-limited read is tried.
const RATE_LIMITED_TRIES: u32 = 20;

/// What an answer of the log's host means.
fn answer(url: &str, status: StatusCode, body: Vec<u8>) -> Result<Vec<u8>, ReadError> {
    match status {
        StatusCode::OK => Ok(body),
        StatusCode::NOT_FOUND => Err(ReadError::Refused(format!(
            "{url} is not served (404) though the checkpoint covers it"
        ))),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Err(ReadError::Cli(CliError::usage(format!(
                "{url} answered {status}: an organization's log is read with one of its secret keys of the log's environment (sk_…); pass --public-log only if the operator serves the logs publicly"
            ))))
        }
        other => Err(ReadError::Cli(CliError::UnexpectedResponse {
            status: other.as_u16(),
            detail: format!("reading {url}"),
            request_id: None,
        })),
    }
}

/// The tokens of an entry bundle: each prefixed by its length, a big-endian 16-bit
/// integer; `None` when the bytes are not that, or a token is not text.
pub fn parse_bundle(bytes: &[u8]) -> Option<Vec<String>> {
    let mut tokens = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let token = tail.get(..len)?;
        tokens.push(String::from_utf8(token.to_vec()).ok()?);
        rest = &tail[len..];
    }
    Some(tokens)
}

/// The bytes of an entry bundle holding `tokens` (each at most 65,535 bytes, as the
/// service's are).
pub fn bundle_bytes<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for token in tokens {
        let len = u16::try_from(token.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&token.as_bytes()[..usize::from(len)]);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bundles_read_back_and_refuse_a_cut_one() {
        let bytes = bundle_bytes(["a.b.c", "dd.ee.ff"]);
        assert_eq!(parse_bundle(&bytes).unwrap(), ["a.b.c", "dd.ee.ff"]);
        assert_eq!(parse_bundle(&bytes[..bytes.len() - 1]), None);
        assert_eq!(parse_bundle(&[0]), None);
        assert_eq!(width(0, 40), 40);
        assert_eq!(width(1, 600), 256);
        assert_eq!(width(2, 600), 88);
    }
}
