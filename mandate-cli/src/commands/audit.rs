//! `mandate audit`: follow an organization's decision log (docs/audit.md) and refuse any
//! checkpoint that does not extend the last one accepted.
//!
//! Each run reads the decisions exported since the last run (`GET
//! /v1/exports/decisions?after=…` with the organization key, or `--export FILE` offline)
//! and the log's newest checkpoint (the export's `Mandate-Log-Checkpoint` header, or
//! `--checkpoint FILE`), recomputes the tree from the accepted edge and the new decisions'
//! tokens (`AuditState::advance` in the core), and accepts the checkpoint only if it is
//! signed by a log key of the service's JWK Set and extends the accepted one with exactly
//! those decisions. The state file keeps the accepted checkpoint and the tree's right edge
//! (at most 64 hashes): written to a temporary file and renamed, only after a checkpoint is
//! accepted. A refusal exits 8, names the decision or the sizes, leaves the state as it
//! was and writes the refused checkpoint and lines beside it as evidence.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::Args;
use mandate_core::{Checkpoint, LogKeys};
use mandate_protocol::tlog::{AuditError, AuditLeaf, AuditState, SignedNote, WitnessKey};
use mandate_protocol::wire::Decision;
use serde::{Deserialize, Serialize};

use super::{Context, verify_log};
use crate::error::{CliError, CmdResult, Exit};
use crate::jwks_cache;
use crate::output;

/// `mandate audit`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  mandate jwks fetch https://verdicts.example.com
  mandate audit --state audit-live.json              # with an organization key
  mandate audit --state audit-live.json --export decisions.ndjson --checkpoint head.note
  mandate audit --state audit-live.json --witness 'w1.example+…' --witness 'w2.example+…' \\
      --witnesses-required 1

Exit codes: 0 the checkpoint extends the one accepted before (or is it); 8 refused: a
decision deleted, changed or reordered, the log shrank or forked (the state is kept, the
refused checkpoint and lines are written beside it), or the checkpoint lacks the
cosignatures of the witnesses required (--witness); 2 usage (no key, an agent key, an
unreadable or altered state file, no log key in the key set); 1 API; 3 network.")]
pub struct AuditArgs {
    /// The state file: the last checkpoint accepted and its tree's edge (made on the
    /// first run)
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The log expected on the first run (`<verdicts host>/log/<org>/<env>`) [default: the
    /// checkpoint's]
    #[arg(long, value_name = "ORIGIN")]
    pub origin: Option<String>,
    /// Offline: the export's lines from this file (`-` for stdin), instead of the API
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// Offline: the checkpoint (the signed note, or its base64 as the header carries it)
    /// [default: the one the lines' log members carry]
    #[arg(long, value_name = "FILE", requires = "export")]
    pub checkpoint: Option<PathBuf>,
    /// JWK Set file holding the log keys, instead of the cache `mandate jwks fetch` wrote
    #[arg(long, value_name = "FILE")]
    pub jwks: Option<PathBuf>,
    /// A witness whose cosignature the checkpoint must carry, by its verifier key
    /// (`<name>+<key id>+<key>`, as `mandate witness init` prints it); repeat for each
    #[arg(long = "witness", value_name = "VKEY", value_parser = verify_log::parse_witness)]
    pub witnesses: Vec<WitnessKey>,
    /// With --witness: how many of those witnesses must have cosigned [default: all]
    #[arg(long, value_name = "K", requires = "witnesses")]
    pub witnesses_required: Option<usize>,
}

/// The state file.
#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    audit: AuditState,
    /// The id of the decision at index `size - 1`: where the next export resumes.
    after: Option<String>,
}

/// What a run audits: the checkpoint and the exported lines.
struct Presented {
    note: Option<String>,
    lines: Vec<Line>,
}

/// One line of the export: its text as read (written as evidence on a refusal) and the
/// decision it holds.
struct Line {
    text: String,
    decision: Decision<'static>,
}

impl Line {
    /// The verdict token the decision was answered with: its leaf in the log.
    fn token(&self) -> Option<&str> {
        self.decision.verdict_token.as_ref()?.as_deref()
    }
}

/// `mandate audit --json`'s answer, members sorted by name.
#[derive(Serialize)]
struct Accepted<'a> {
    new: usize,
    origin: &'a str,
    root: String,
    size: u64,
}

/// Runs `mandate audit`.
pub fn run(args: AuditArgs, ctx: &Context) -> CmdResult {
    let stored = read_state(&args.state)?;
    let keys = log_keys(&args)?;
    let policy = verify_log::witness_policy(&args.witnesses, args.witnesses_required)?;
    let after = stored.as_ref().and_then(|s| s.after.clone());
    let presented = match &args.export {
        Some(path) => offline(path, args.checkpoint.as_deref())?,
        None => online(
            ctx,
            after.as_deref(),
            stored.as_ref().map_or(0, |s| s.audit.size()),
        )?,
    };
    let Some(note) = presented.note.clone() else {
        output::note("the log has no checkpoint yet: nothing to audit");
        return Ok(Exit::Success);
    };
    let first = stored.is_none();
    let state = match stored {
        Some(stored) => stored.audit,
        None => AuditState::new(first_origin(&args, &note)?),
    };
    // A checkpoint without the cosignatures required is not accepted, whatever it holds:
    // the state stays as it was.
    let witnessed = match &policy {
        Some(policy) => Some(
            verify_log::require_witnesses(policy, &note)
                .map_err(|reason| CliError::LogRefused(format!("{reason}; the state is kept")))?,
        ),
        None => None,
    };
    let (leaves, ids) = leaves(&presented.lines);
    match state.advance(&leaves, &note, &keys) {
        Ok(accepted) => {
            let exit = accept(&args, first, &state, accepted, &ids, after, ctx.json)?;
            if let Some(line) = witnessed {
                if ctx.json {
                    output::note(&line);
                } else {
                    output::line(&line)?;
                }
            }
            Ok(exit)
        }
        Err(e) => refuse(&args.state, &state, &e, &ids, &presented),
    }
}

fn read_state(path: &Path) -> Result<Option<StateFile>, CliError> {
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
    let state: StateFile = serde_json::from_slice(&bytes).map_err(|e| {
        CliError::usage(format!(
            "{} is not an audit state file (or was altered): {e}",
            path.display()
        ))
    })?;
    if state.version != 1 {
        return Err(CliError::usage(format!(
            "{} is of version {}, this mandate knows 1",
            path.display(),
            state.version
        )));
    }
    Ok(Some(state))
}

/// The log keys of the key set: `--jwks FILE`, or the cached set as fetched.
fn log_keys(args: &AuditArgs) -> Result<LogKeys, CliError> {
    let bytes = match &args.jwks {
        Some(path) => std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?,
        None => {
            let (path, entry) = jwks_cache::load_for(None)?;
            let entry = entry.ok_or_else(|| {
                CliError::usage(format!(
                    "no key set: pass --jwks FILE, or fetch one with `mandate jwks fetch URL` (cache {})",
                    path.display()
                ))
            })?;
            serde_json::to_vec(&entry.jwks).unwrap_or_default()
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

/// The export since `after` and its checkpoint header, with the organization key. When
/// `after` is gone (404: the database was rolled back to before it), the whole export is
/// read and its first `accepted` decisions left out, so that the checkpoint is still
/// compared with the one accepted (a shrunk, forked or rewritten log is refused).
fn online(ctx: &Context, after: Option<&str>, accepted: u64) -> Result<Presented, CliError> {
    let client = ctx.client()?;
    if client.is_agent_key() {
        return Err(CliError::usage(
            "an agent key exports its own decisions only, not the whole log: audit with an organization key (sk_…)",
        ));
    }
    let query: Vec<(&str, String)> = after.map(|a| ("after", a.to_owned())).into_iter().collect();
    let (response, skip) = match client.get_stream("/exports/decisions", &query) {
        Err(CliError::Api { status: 404, .. }) if after.is_some() => {
            output::note(&format!(
                "the decision {} the last run ended at is not in the export: reading the whole export",
                after.unwrap_or_default()
            ));
            (client.get_stream("/exports/decisions", &[])?, accepted)
        }
        other => (other?, 0),
    };
    let note = match response.headers().get("mandate-log-checkpoint") {
        None => None,
        Some(value) => Some(decode_note(value.as_bytes()).ok_or_else(|| {
            CliError::Rejected(
                "the export's Mandate-Log-Checkpoint header is not a signed note in base64".into(),
            )
        })?),
    };
    let mut body = String::new();
    BufReader::new(response)
        .read_to_string(&mut body)
        .map_err(|e| CliError::Incomplete(format!("the export was cut off: {e}")))?;
    if !body.is_empty() && !body.ends_with('\n') {
        return Err(CliError::Incomplete(
            "the export was cut off: its last line is unfinished".into(),
        ));
    }
    let mut lines = parse_lines(body.lines())?;
    let covered = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.token().is_some())
        .nth(
            usize::try_from(skip)
                .unwrap_or(usize::MAX)
                .saturating_sub(1),
        )
        .map(|(i, _)| i + 1);
    match (skip, covered) {
        (0, _) => {}
        (_, Some(end)) => drop(lines.drain(..end)),
        (_, None) => lines.clear(),
    }
    Ok(Presented { note, lines })
}

/// A signed note, as given or in base64.
fn decode_note(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    if SignedNote::parse(text).is_ok() || text.contains('\n') {
        return Some(format!("{text}\n"));
    }
    let decoded = STANDARD.decode(text).ok()?;
    String::from_utf8(decoded).ok()
}

fn offline(path: &Path, checkpoint: Option<&Path>) -> Result<Presented, CliError> {
    let reader: Box<dyn std::io::Read> = if path == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(path)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?,
        )
    };
    let texts: Vec<String> = BufReader::new(reader)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display())))?;
    let lines = parse_lines(texts.iter().map(String::as_str))?;
    let note = match checkpoint {
        Some(file) => {
            let bytes = std::fs::read(file)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
            Some(decode_note(&bytes).ok_or_else(|| {
                CliError::usage(format!("{} is not a signed note", file.display()))
            })?)
        }
        None => lines
            .iter()
            .find_map(|l| Some(l.decision.log.as_ref()?.as_ref()?.checkpoint.clone())),
    };
    Ok(Presented { note, lines })
}

fn parse_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Result<Vec<Line>, CliError> {
    lines
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            let decision = serde_json::from_str(l).map_err(|e: serde_json::Error| {
                let what = if e.is_data() { "a decision" } else { "JSON" };
                CliError::usage(format!("line {} of the export is not {what}: {e}", i + 1))
            })?;
            Ok(Line {
                text: l.to_owned(),
                decision,
            })
        })
        .collect()
}

/// The log expected on a first run: `--origin`, else the checkpoint's own.
fn first_origin(args: &AuditArgs, note: &str) -> Result<String, CliError> {
    if let Some(origin) = &args.origin {
        return Ok(origin.clone());
    }
    let parsed = SignedNote::parse(note)
        .ok()
        .and_then(|n| Checkpoint::parse(n.text()).ok())
        .ok_or_else(|| CliError::Rejected("the checkpoint is not a signed checkpoint".into()))?;
    output::note(&format!("first run: auditing the log {}", parsed.origin()));
    Ok(parsed.origin().to_owned())
}

/// The exported decisions with a token, as leaves, and their ids in the same order.
fn leaves(lines: &[Line]) -> (Vec<AuditLeaf>, Vec<String>) {
    let mut leaves = Vec::new();
    let mut ids = Vec::new();
    for line in lines {
        let Some(token) = line.token() else {
            continue;
        };
        leaves.push(AuditLeaf::token(token, line.decision.log.clone().flatten()));
        ids.push(line.decision.id.to_string());
    }
    (leaves, ids)
}

/// Stores the accepted state and says so: on the first run (no state file before), that
/// this checkpoint is the one later runs hold the log to; afterwards, that the log extends
/// the checkpoint accepted before.
fn accept(
    args: &AuditArgs,
    first: bool,
    before: &AuditState,
    accepted: AuditState,
    ids: &[String],
    after: Option<String>,
    as_json: bool,
) -> CmdResult {
    let used = (accepted.size() - before.size()) as usize;
    let after = match used {
        0 => after,
        n => ids.get(n - 1).cloned(),
    };
    let state = StateFile {
        version: 1,
        audit: accepted,
        after,
    };
    write_state(&args.state, &state)?;
    let head = format!(
        "accepted: the log {} at {} decisions ({} new)",
        state.audit.origin(),
        state.audit.size(),
        used
    );
    let message = if first {
        format!(
            "{head}, its first checkpoint in {}: later runs check that the log extends it",
            args.state.display()
        )
    } else {
        format!("{head} extends the checkpoint accepted before")
    };
    if as_json {
        output::json(&Accepted {
            new: used,
            origin: state.audit.origin(),
            root: state.audit.root().to_base64(),
            size: state.audit.size(),
        })?;
    } else {
        println!("{message}");
    }
    Ok(Exit::Success)
}

fn write_state(path: &Path, state: &StateFile) -> Result<(), CliError> {
    let text = serde_json::to_vec_pretty(state)
        .map_err(|e| CliError::usage(format!("cannot encode the state: {e}")))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))
}

/// The refusal: the evidence written beside the state, the reason naming the decision.
fn refuse(
    state_path: &Path,
    state: &AuditState,
    error: &AuditError,
    ids: &[String],
    presented: &Presented,
) -> CmdResult {
    let size = presented
        .note
        .as_deref()
        .and_then(|n| SignedNote::parse(n).ok())
        .and_then(|n| Checkpoint::parse(n.text()).ok())
        .map_or(0, |c| c.size());
    let evidence = PathBuf::from(format!("{}.refused-{size}", state_path.display()));
    let mut text = presented.note.clone().unwrap_or_default();
    text.push('\n');
    for line in &presented.lines {
        text.push_str(&line.text);
        text.push('\n');
    }
    let saved = std::fs::write(&evidence, text).is_ok();
    let named = named_decision(state, error, ids);
    let mut reason = format!("{error}{named}");
    if saved {
        reason.push_str(&format!(
            "; the refused checkpoint and lines are in {}",
            evidence.display()
        ));
    }
    Err(CliError::LogRefused(reason))
}

/// `(decision dec_…)` for a refusal that names an index of the exported decisions.
fn named_decision(state: &AuditState, error: &AuditError, ids: &[String]) -> String {
    let index = match error {
        AuditError::Missing { index, .. }
        | AuditError::Changed { index, .. }
        | AuditError::Reordered { index, .. } => *index,
        AuditError::RootMismatch { from, .. } => *from,
        _ => return String::new(),
    };
    let at = index.checked_sub(state.size()).map(|i| i as usize);
    match at.and_then(|i| ids.get(i)) {
        Some(id) if !matches!(error, AuditError::Missing { .. }) => {
            format!(" (decision {id})")
        }
        Some(id) => format!(" (the export has {id} there)"),
        None => String::new(),
    }
}
