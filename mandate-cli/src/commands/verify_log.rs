//! `mandate verify --log FILE`: the proof that a verdict is in its issuer's decision log
//! (docs/audit.md). FILE holds the decision as read (`mandate decisions get ID --json`, or
//! `GET /v1/decisions/{id}`) or its `log` member alone; the log keys are those of the same
//! key set as the verdict keys (`"use": "tlog-checkpoint"`). The core's
//! `Counterparty::require_log` and `check_logged` check it with everything else. With
//! `--witness VKEY…` (`verify` and `audit`), the checkpoint must also carry the
//! cosignatures of k of those witnesses (`--witnesses-required`, default all).

use std::path::Path;

use mandate_core::{Checkpoint, LogEntry, LogKeys};
use mandate_protocol::tlog::{SignedNote, WitnessKey, WitnessPolicy};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use crate::error::CliError;
use crate::jwks_cache;

/// The `log` entry in `path` (`-` for stdin): a decision's `log` member, or the entry alone.
pub fn read_entry(path: &Path) -> Result<LogEntry, CliError> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| CliError::usage(format!("cannot read the log entry from stdin: {e}")))?
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?
    };
    serde_json::from_str::<IgnoredAny>(&text)
        .map_err(|e| CliError::usage(format!("{} is not JSON: {e}", path.display())))?;
    let neither = |e: serde_json::Error| {
        CliError::usage(format!(
            "{} holds neither a decision with a log member nor a log entry (index, checkpoint, inclusion_proof): {e}",
            path.display()
        ))
    };
    match serde_json::from_str::<Logged>(&text).map_err(neither)?.log {
        Some(Some(entry)) => Ok(entry),
        Some(None) => Err(CliError::Rejected(
            "the decision's log is null: no checkpoint covers it yet (read it again in a few seconds)"
                .into(),
        )),
        None => serde_json::from_str(&text).map_err(neither),
    }
}

/// A decision as read, for its `log` member alone: `Some(None)` when it is `null`, `None`
/// when absent (the file is then the entry alone).
#[derive(Deserialize)]
struct Logged {
    #[serde(default, deserialize_with = "present")]
    log: Option<Option<LogEntry>>,
}

/// A member that is present, even as `null`: `Some(None)` for `null`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<LogEntry>>, D::Error> {
    Option::<LogEntry>::deserialize(d).map(Some)
}

/// `--log-origin`: refuses (exit 6, before anything is checked or recorded) an entry whose
/// checkpoint is of another log than `origin`, or not a checkpoint at all.
pub fn require_origin(entry: &LogEntry, origin: &str) -> Result<(), CliError> {
    let note = SignedNote::parse(&entry.checkpoint).map_err(|e| {
        CliError::Rejected(format!(
            "not proven to be in the log: its checkpoint is not a signed note: {e}"
        ))
    })?;
    let checkpoint = Checkpoint::parse(note.text()).map_err(|e| {
        CliError::Rejected(format!(
            "not proven to be in the log: its checkpoint cannot be read: {e}"
        ))
    })?;
    if checkpoint.origin() != origin {
        return Err(CliError::Rejected(format!(
            "not proven to be in the log {origin}: the checkpoint is of the log {} (--log-origin)",
            checkpoint.origin()
        )));
    }
    Ok(())
}

/// The log keys of the key set `verify` uses: `--jwks FILE`, or the cached set of `issuer`
/// (as fetched: the cache keeps every member).
pub fn keys(jwks: Option<&Path>, issuer: Option<&str>) -> Result<LogKeys, CliError> {
    let bytes = match jwks {
        Some(path) => std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?,
        None => {
            let (path, entry) = jwks_cache::load_for(issuer)?;
            let entry = entry.ok_or_else(|| {
                CliError::usage(format!(
                    "no key set cached (cache {}): fetch it with `mandate jwks fetch URL`",
                    path.display()
                ))
            })?;
            serde_json::to_vec(&entry.jwks)
                .map_err(|e| CliError::usage(format!("cached key set cannot be read: {e}")))?
        }
    };
    let keys = LogKeys::from_jwks_json(&bytes)
        .map_err(|e| CliError::usage(format!("the key set is not valid: {e}")))?;
    if keys.is_empty() {
        return Err(CliError::usage(
            "the key set has no log key (use tlog-checkpoint): fetch the service's set again with `mandate jwks fetch URL`",
        ));
    }
    Ok(keys)
}

/// What an accepted proof says: the log and the leaf, for a merchant to compare with the
/// log it expects.
pub fn accepted(checkpoint: &Checkpoint, entry: &LogEntry) -> String {
    format!(
        "in log {}, leaf {} of {}",
        checkpoint.origin(),
        entry.index,
        checkpoint.size()
    )
}

/// Reads a `--witness` verifier key (clap's value parser): the error says what is wrong.
pub fn parse_witness(vkey: &str) -> Result<WitnessKey, String> {
    WitnessKey::from_verifier_key(vkey).map_err(|e| e.to_string())
}

/// `--witness` and `--witnesses-required K`: the policy, `None` when no witness is given;
/// K defaults to all of them.
pub fn witness_policy(
    witnesses: &[WitnessKey],
    required: Option<usize>,
) -> Result<Option<WitnessPolicy>, CliError> {
    if witnesses.is_empty() {
        return Ok(None);
    }
    let required = required.unwrap_or(witnesses.len());
    WitnessPolicy::new(witnesses.to_vec(), required)
        .map(Some)
        .map_err(|e| CliError::usage(format!("--witness, --witnesses-required: {e}")))
}

/// Checks that the signed checkpoint `note` carries the cosignatures `policy` requires;
/// what to print when it does ("cosigned by …"), the refusal's reason when not.
pub fn require_witnesses(policy: &WitnessPolicy, note: &str) -> Result<String, String> {
    let found = policy
        .check(note)
        .map_err(|e| format!("not witnessed as required: {e}"))?;
    let names: Vec<&str> = found.iter().map(|c| c.name()).collect();
    Ok(format!(
        "cosigned by {} of {} witnesses ({} required): {}",
        found.len(),
        policy.witnesses().len(),
        policy.required(),
        names.join(", ")
    ))
}
