//! What an online run starts from: the service's keys (log keys and verdict keys, those
//! an earlier run kept included), the log audited and where its tiles are read, and the
//! checkpoint's signature and origin.

use mandate_core::{Checkpoint, JwkSet, LogKeys};
use mandate_protocol::tlog::SignedNote;
use serde_json::Value;

use super::AuditArgs;
use crate::client::Client;
use crate::error::CliError;
use crate::jwks_cache;
use crate::output;

/// The service's keys: the log keys and the verdict keys (those of the set as read, and
/// those earlier runs kept), with the verdict keys' JWKs to keep.
pub struct Keys {
    pub log: LogKeys,
    pub verdicts: JwkSet,
    pub verdict_jwks: Vec<Value>,
}

impl Keys {
    /// From a JWK Set's bytes and the verdict keys a state kept.
    pub fn from_set(bytes: &[u8], kept: &[Value]) -> Result<Self, CliError> {
        let log = LogKeys::from_jwks_json(bytes)
            .map_err(|e| CliError::usage(format!("the key set is not valid: {e}")))?;
        if log.is_empty() {
            return Err(CliError::usage(
                "the key set has no log key (use tlog-checkpoint): fetch the service's set again with `mandate jwks fetch URL`",
            ));
        }
        let set: Value = serde_json::from_slice(bytes)
            .map_err(|e| CliError::usage(format!("the key set is not JSON: {e}")))?;
        let mut verdict_jwks: Vec<Value> = kept.to_vec();
        let current = set
            .get("keys")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for key in current {
            let is_log = key.get("use").and_then(Value::as_str) == Some("tlog-checkpoint");
            let kid = key.get("kid").cloned();
            if !is_log && !verdict_jwks.iter().any(|k| k.get("kid") == kid.as_ref()) {
                verdict_jwks.push(key);
            }
        }
        let json = serde_json::json!({ "keys": verdict_jwks }).to_string();
        let verdicts = JwkSet::from_json(json.as_bytes()).map_err(|e| {
            CliError::usage(format!("the key set's verdict keys are not valid: {e}"))
        })?;
        Ok(Self {
            log,
            verdicts,
            verdict_jwks,
        })
    }
}

/// The checkpoint of `note`, signed by one of the log keys, of the log `origin`.
pub fn verified(keys: &LogKeys, note: &str, origin: &str) -> Result<Checkpoint, CliError> {
    let checkpoint = keys.verify(note).map_err(|e| {
        CliError::LogRefused(format!(
            "the log's checkpoint is not signed by a log key of the key set: {e}; the state is kept"
        ))
    })?;
    if checkpoint.origin() != origin {
        return Err(CliError::LogRefused(format!(
            "the checkpoint is of the log {:?}, not {origin:?}; the state is kept",
            checkpoint.origin()
        )));
    }
    Ok(checkpoint)
}

/// The log named on a first run: `--origin`, else that of the checkpoint the export's
/// header carries (the export itself is not read).
pub fn first_origin(args: &AuditArgs, client: &Client) -> Result<Option<String>, CliError> {
    if let Some(origin) = &args.origin {
        return Ok(Some(origin.clone()));
    }
    let response = client.get_stream("/exports/decisions", &[])?;
    let Some(header) = response.headers().get("mandate-log-checkpoint") else {
        return Ok(None);
    };
    let origin = super::decode_note(header.as_bytes())
        .and_then(|n| SignedNote::parse(&n).ok())
        .and_then(|n| Checkpoint::parse(n.text()).ok())
        .map(|c| c.origin().to_owned())
        .ok_or_else(|| {
            CliError::Rejected(
                "the export's Mandate-Log-Checkpoint header is not a signed checkpoint".into(),
            )
        })?;
    output::note(&format!("first run: auditing the log {origin}"));
    Ok(Some(origin))
}

/// Where the log's tiles are read: `--log-url`, else the origin under the scheme of the
/// verdicts URL the key set was fetched from (https when it was another host's).
pub fn prefix(args: &AuditArgs, origin: &str) -> Result<String, CliError> {
    if let Some(url) = &args.log_url {
        return Ok(url.trim_end_matches('/').to_owned());
    }
    let (host, path) = origin.split_once("/log/").ok_or_else(|| {
        CliError::usage(format!(
            "the origin {origin:?} is not a Mandate log's (<verdicts host>/log/<org>/<env>): give the tiles' URL with --log-url"
        ))
    })?;
    let issuer = jwks_cache::load_for(None)
        .ok()
        .and_then(|(_, entry)| entry?.issuer);
    let base = match issuer {
        Some(issuer) if issuer.split_once("://").is_some_and(|(_, h)| h == host) => issuer,
        _ => format!("https://{host}"),
    };
    Ok(format!("{base}/log/{path}"))
}
