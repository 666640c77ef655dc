//! `mandate audit`: follow an organization's decision log (docs/audit.md) and refuse any
//! checkpoint that does not extend the last one accepted, or a log whose decisions the API
//! no longer serves as logged.
//!
//! Online (the default), [`online`] reads the log as C2SP tlog-tiles from the public host
//! and keeps a mirror of its leaves beside the state file ([`state`]), so that a change to
//! anything accepted before is found, not only what is new: each run checks the new
//! checkpoint against the mirror, the new entries' signatures, and the decisions the API
//! serves against the log ([`compare`]), the new ones and a sample of older ones (all with
//! `--full`).
//!
//! Offline (`--export FILE`), a run checks the exported lines after the last one accepted
//! against the checkpoint given (`AuditState::advance` in the protocol crate), with no
//! mirror: what it accepted before is not checked again. A refusal exits 8, names the
//! decision or the sizes, leaves the state as it was and writes the refused checkpoint
//! beside it as evidence.

mod compare;
mod online;
mod report;
mod setup;
mod state;
mod tiles;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use clap::Args;
use mandate_core::Checkpoint;
use mandate_protocol::tlog::{AuditError, AuditLeaf, AuditState, SignedNote, WitnessKey};
use mandate_protocol::wire::Decision;
use serde::Serialize;

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
  mandate audit --state audit-live.json --full       # every decision, not a sample
  mandate audit --state audit-live.json --export decisions.ndjson --checkpoint head.note
  mandate audit --state audit-live.json --witness 'w1.example+…' --witness 'w2.example+…' \\
      --witnesses-required 1

Exit codes: 0 the checkpoint extends the one accepted before (or is it); 8 refused: a
decision deleted, changed or reordered, a leaf of the log changed, the log shrank or forked
(the state is kept, the refused checkpoint and findings are written beside it), or the
checkpoint lacks the
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
    /// Check every decision the API serves against the log, not the new ones and a sample
    #[arg(long, conflicts_with = "export")]
    pub full: bool,
    /// How many older entry bundles (256 decisions each) to check against the API each
    /// run, drawn at random
    #[arg(
        long,
        value_name = "BUNDLES",
        default_value_t = 4,
        conflicts_with = "export"
    )]
    pub sample: usize,
    /// Keep the log's entry bundles (the verdict tokens) in the mirror too, beside its leaf
    /// hashes (`<state>.entries/`)
    #[arg(long, conflicts_with = "export")]
    pub keep_entries: bool,
    /// Where the log's tiles are read (`https://<verdicts host>/log/<org>/<env>`)
    /// [default: the origin, on the scheme of the key set's URL]
    #[arg(long, value_name = "URL", conflicts_with = "export")]
    pub log_url: Option<String>,
    /// Read the log's tiles without the organization key (the operator serves the logs
    /// publicly, or --log-url is a mirror)
    #[arg(long, conflicts_with = "export")]
    pub public_log: bool,
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

/// Runs `mandate audit`: online with the mirror, or offline from an export.
pub fn run(args: AuditArgs, ctx: &Context) -> CmdResult {
    let set = key_set(&args)?;
    match &args.export {
        None => online::run(&args, ctx, &set),
        Some(path) => offline_run(&args, ctx, path, &set),
    }
}

/// An offline run: the lines of `path` after the last one accepted, and the checkpoint.
fn offline_run(args: &AuditArgs, ctx: &Context, path: &Path, set: &[u8]) -> CmdResult {
    let stored = state::read(&args.state)?;
    if stored.as_ref().is_some_and(|s| s.leaves.is_some()) {
        return Err(CliError::usage(format!(
            "{} keeps a mirror of the log's tiles: audit it online (an export cannot extend the mirror), or offline with another --state",
            args.state.display()
        )));
    }
    let keys = setup::Keys::from_set(set, &[])?.log;
    let policy = verify_log::witness_policy(&args.witnesses, args.witnesses_required)?;
    let after = stored.as_ref().and_then(|s| s.after.clone());
    let presented = offline(path, args.checkpoint.as_deref())?;
    let Some(note) = presented.note.clone() else {
        output::note("the log has no checkpoint yet: nothing to audit");
        return Ok(Exit::Success);
    };
    let first = stored.is_none();
    let state = match stored {
        Some(stored) => stored.audit,
        None => AuditState::new(first_origin(args, &note)?),
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
            let exit = accept(args, first, &state, accepted, &ids, after, ctx.json)?;
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

/// The bytes of the key set: `--jwks FILE`, or the cached set as fetched.
fn key_set(args: &AuditArgs) -> Result<Vec<u8>, CliError> {
    match &args.jwks {
        Some(path) => std::fs::read(path)
            .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display()))),
        None => {
            let (path, entry) = jwks_cache::load_for(None)?;
            let entry = entry.ok_or_else(|| {
                CliError::usage(format!(
                    "no key set: pass --jwks FILE, or fetch one with `mandate jwks fetch URL` (cache {})",
                    path.display()
                ))
            })?;
            serde_json::to_vec(&entry.jwks)
                .map_err(|e| CliError::usage(format!("the cached key set cannot be read: {e}")))
        }
    }
}

/// A signed note, as given or in base64.
pub(crate) fn decode_note(bytes: &[u8]) -> Option<String> {
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
    state::write_v1(&args.state, &accepted, after)?;
    let head = format!(
        "accepted: the log {} at {} decisions ({} new)",
        accepted.origin(),
        accepted.size(),
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
            origin: accepted.origin(),
            root: accepted.root().to_base64(),
            size: accepted.size(),
        })?;
    } else {
        println!("{message}");
    }
    Ok(Exit::Success)
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
