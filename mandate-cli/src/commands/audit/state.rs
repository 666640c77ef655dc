//! The auditor's state: the accepted checkpoint and its tree's edge (the state file, JSON),
//! and the mirror of the log it checked, beside it: every leaf hash in
//! `<state>.leaves` (32 bytes a decision, in leaf order) and, with `--keep-entries`, the
//! entry bundles in `<state>.entries/<N>` (the verdict tokens, as the log serves them).
//!
//! A run writes the mirror first (the leaves appended and synced, the bundles each
//! written to a temporary file and renamed), then the state file (the same way): the
//! state file names how many leaves are accepted, so leaves a crashed run appended past
//! that are cut off by the next. Reading a state checks that the mirror's leaves make the
//! accepted checkpoint's root: an altered or cut mirror is refused, not trusted.
//!
//! Version 1 states (written before the mirror, or by an offline audit) have no mirror:
//! the next online run reads the accepted leaves from the log and keeps them only if they
//! make the root accepted.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use mandate_protocol::tlog::{AuditState, LogHash, TreeEdge};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tiles::{bundle_bytes, parse_bundle};
use crate::error::CliError;

/// What a run starts from.
pub struct Stored {
    /// The accepted checkpoint and its edge.
    pub audit: AuditState,
    /// The id of the decision at index `size - 1`.
    pub after: Option<String>,
    /// The mirror's leaf hashes, one per accepted decision; `None` for a version 1 state.
    pub leaves: Option<Vec<LogHash>>,
    /// Whether the mirror keeps the entry bundles.
    pub keep_entries: bool,
    /// Every verdict key (a JWK) seen in the service's key set by an earlier run: entries
    /// signed by a key since retired still verify.
    pub verdict_keys: Vec<Value>,
    /// The leaf from which the log serves every entry, as the first run with a mirror
    /// found (the leaves before it were logged before the service kept entries); `None`
    /// until such a run.
    pub entries_from: Option<u64>,
}

/// The state file.
#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    audit: AuditState,
    after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mirror: Option<MirrorFile>,
}

/// What the state file says of its mirror (version 2).
#[derive(Serialize, Deserialize)]
struct MirrorFile {
    /// Whether the entry bundles are kept too.
    entries: bool,
    /// The verdict keys seen.
    #[serde(default)]
    verdict_keys: Vec<Value>,
    /// The leaf from which every entry is served.
    #[serde(default)]
    entries_from: Option<u64>,
}

/// The leaves' file of the state at `path`.
pub fn leaves_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.leaves", path.display()))
}

/// The entry bundles' directory of the state at `path`.
pub fn entries_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.entries", path.display()))
}

/// Reads the state at `path`; `None` on a first run (no file).
pub fn read(path: &Path) -> Result<Option<Stored>, CliError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let file: StateFile = serde_json::from_slice(&bytes).map_err(|e| {
        CliError::usage(format!(
            "{} is not an audit state file (or was altered): {e}",
            path.display()
        ))
    })?;
    if !matches!(file.version, 1 | 2) {
        return Err(CliError::usage(format!(
            "{} is of version {}, this mandate knows 1 and 2",
            path.display(),
            file.version
        )));
    }
    let (leaves, keep_entries, verdict_keys, entries_from) = match file.mirror {
        Some(mirror) if file.version == 2 => (
            Some(read_leaves(path, &file.audit)?),
            mirror.entries,
            mirror.verdict_keys,
            mirror.entries_from,
        ),
        _ => (None, false, Vec::new(), None),
    };
    Ok(Some(Stored {
        audit: file.audit,
        after: file.after,
        leaves,
        keep_entries,
        verdict_keys,
        entries_from,
    }))
}

/// The mirror's leaves of the accepted tree, checked against its root.
fn read_leaves(path: &Path, audit: &AuditState) -> Result<Vec<LogHash>, CliError> {
    let file = leaves_path(path);
    let bytes = std::fs::read(&file).map_err(|e| {
        CliError::usage(format!(
            "cannot read the mirror {} of {}: {e}; restore it, or remove {} to audit from the start",
            file.display(),
            path.display(),
            path.display()
        ))
    })?;
    let size = usize::try_from(audit.size()).unwrap_or(usize::MAX);
    let held = bytes.get(..size.saturating_mul(32)).ok_or_else(|| {
        CliError::usage(format!(
            "the mirror {} holds {} leaves, the state accepted {}: it was cut; restore it, or remove {} to audit from the start",
            file.display(),
            bytes.len() / 32,
            size,
            path.display()
        ))
    })?;
    let leaves: Vec<LogHash> = held
        .chunks_exact(32)
        .map(|chunk| {
            let mut hash = [0u8; 32];
            hash.copy_from_slice(chunk);
            LogHash::from_bytes(hash)
        })
        .collect();
    let edge = TreeEdge::from_leaves(&leaves)
        .map_err(|e| CliError::usage(format!("the mirror {}: {e}", file.display())))?;
    if edge.root() != audit.root() {
        return Err(CliError::usage(format!(
            "the mirror {} does not make the root of the checkpoint accepted in {} (it was altered): restore both from the same run, or remove them to audit from the start",
            file.display(),
            path.display()
        )));
    }
    Ok(leaves)
}

/// Writes the accepted state: the mirror's new leaves (after the `kept` first ones), the
/// bundles given, then the state file.
pub fn write(
    path: &Path,
    stored: &Stored,
    kept: u64,
    bundles: &[(u64, Vec<String>)],
) -> Result<(), CliError> {
    let leaves = stored.leaves.as_deref().unwrap_or_default();
    let fail = |what: &Path, e: std::io::Error| {
        CliError::usage(format!("cannot write {}: {e}", what.display()))
    };
    let file = leaves_path(path);
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&file)
        .map_err(|e| fail(&file, e))?;
    out.set_len(kept * 32).map_err(|e| fail(&file, e))?;
    out.seek(SeekFrom::End(0)).map_err(|e| fail(&file, e))?;
    let start = usize::try_from(kept).unwrap_or(usize::MAX);
    let new: Vec<u8> = leaves
        .get(start..)
        .unwrap_or_default()
        .iter()
        .flat_map(|h| *h.as_bytes())
        .collect();
    out.write_all(&new)
        .and_then(|()| out.sync_all())
        .map_err(|e| fail(&file, e))?;
    if stored.keep_entries && !bundles.is_empty() {
        let dir = entries_path(path);
        std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, e))?;
        for (index, tokens) in bundles {
            let target = dir.join(index.to_string());
            replace(&target, &bundle_bytes(tokens.iter().map(String::as_str)))?;
        }
    }
    let state = StateFile {
        version: 2,
        audit: stored.audit.clone(),
        after: stored.after.clone(),
        mirror: Some(MirrorFile {
            entries: stored.keep_entries,
            verdict_keys: stored.verdict_keys.clone(),
            entries_from: stored.entries_from,
        }),
    };
    let text = serde_json::to_vec_pretty(&state)
        .map_err(|e| CliError::usage(format!("cannot encode the state: {e}")))?;
    replace(path, &text)
}

/// Writes a version 1 state (no mirror): what an offline audit keeps.
pub fn write_v1(path: &Path, audit: &AuditState, after: Option<String>) -> Result<(), CliError> {
    let state = StateFile {
        version: 1,
        audit: audit.clone(),
        after,
        mirror: None,
    };
    let text = serde_json::to_vec_pretty(&state)
        .map_err(|e| CliError::usage(format!("cannot encode the state: {e}")))?;
    replace(path, &text)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`.
fn replace(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))
}

/// The tokens of bundle `index` kept in the mirror, if any.
pub fn kept_bundle(path: &Path, index: u64) -> Option<Vec<String>> {
    let bytes = std::fs::read(entries_path(path).join(index.to_string())).ok()?;
    parse_bundle(&bytes)
}
