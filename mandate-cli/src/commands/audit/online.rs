//! An online run of `mandate audit`: the log read as C2SP tlog-tiles from the public
//! host, checked against the auditor's mirror, and the API's decisions against the log.
//!
//! Each run, in order:
//!
//! 1. the log's checkpoint, signed by a log key of the key set, of the log audited (and
//!    cosigned as `--witness` requires);
//! 2. the level-0 tiles from the last accepted leaf's tile to the new size: the leaves
//!    already accepted must be the mirror's, and the mirror's tree extended with the new
//!    ones must make the checkpoint's root (its consistency with the one accepted,
//!    computed here, with no proof from the service);
//! 3. the entry bundles of the new leaves and of a sample of older ones (`--sample`
//!    bundles, or all with `--full`): each token hashes to its leaf, and each new one's
//!    verdict signature verifies against the service's verdict keys;
//! 4. the decisions the API serves at those indexes (the export in seq order) are the
//!    log's leaves, in the log's order, none missing ([`super::compare`]).
//!
//! Anything found refuses the checkpoint (exit 8), every finding naming the decision or
//! the leaf and what differs, the state kept and the checkpoint written beside it. Else
//! the mirror grows by the new leaves (and bundles with `--keep-entries`) and the state
//! moves to the new checkpoint.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use mandate_core::Checkpoint;
use mandate_protocol::tlog::{
    AuditError, AuditLeaf, AuditState, LogHash, TILE_WIDTH, TreeEdge, leaf_hash,
};

use super::compare::{self, Log};
use super::report::{refuse, say_accepted};
use super::setup::{Keys, first_origin, prefix, verified};
use super::state::{self, Stored};
use super::tiles::{LogReader, ReadError};
use super::{AuditArgs, verify_log};
use crate::client::Client;
use crate::error::{CliError, CmdResult, Exit};
use crate::output;

const WIDTH: u64 = TILE_WIDTH as u64;

/// How many times the API client retries a rate-limited request.
const RATE_LIMITED_RETRIES: u32 = 8;

/// What a run found wrong, each naming what changed.
type Findings = Vec<String>;

/// Runs an online audit.
pub fn run(args: &AuditArgs, ctx: &crate::commands::Context, set: &[u8]) -> CmdResult {
    // A first or `--full` run of a large log makes thousands of reads, and meets the key's
    // request rate (429, with a Retry-After of a second or so): they are waited out.
    let mut patient = ctx.clone();
    patient.http.retries = patient.http.retries.max(RATE_LIMITED_RETRIES);
    let client = patient.client()?;
    if client.is_agent_key() {
        return Err(CliError::usage(
            "an agent key exports its own decisions only, not the whole log: audit with an organization key (sk_…)",
        ));
    }
    let stored = state::read(&args.state)?;
    let kept_keys = stored
        .as_ref()
        .map(|s| s.verdict_keys.clone())
        .unwrap_or_default();
    let keys = Keys::from_set(set, &kept_keys)?;
    let policy = verify_log::witness_policy(&args.witnesses, args.witnesses_required)?;
    let origin = match &stored {
        Some(stored) => stored.audit.origin().to_owned(),
        None => match first_origin(args, &client)? {
            Some(origin) => origin,
            None => {
                output::note("the log has no checkpoint yet: nothing to audit");
                return Ok(Exit::Success);
            }
        },
    };
    let reader = LogReader::new(
        &prefix(args, &origin)?,
        (!args.public_log).then(|| client.bearer().to_owned()),
        ctx.http,
    )?;
    let Some(note) = reader.checkpoint()? else {
        output::note("the log has no checkpoint yet: nothing to audit");
        return Ok(Exit::Success);
    };
    let witnessed = match &policy {
        Some(policy) => Some(
            verify_log::require_witnesses(policy, &note)
                .map_err(|reason| CliError::LogRefused(format!("{reason}; the state is kept")))?,
        ),
        None => None,
    };
    let first = stored.is_none();
    let stored = stored.unwrap_or_else(|| Stored {
        audit: AuditState::new(origin.clone()),
        after: None,
        leaves: Some(Vec::new()),
        keep_entries: args.keep_entries,
        verdict_keys: Vec::new(),
        entries_from: None,
    });
    let checkpoint = verified(&keys.log, &note, &origin)?;
    let mut run = Run::new(args, &client, &reader, &keys, &stored, &checkpoint, &note);
    let accepted = run.audit()?;
    if !run.findings.is_empty() {
        return refuse(args, &checkpoint, &note, &run.findings);
    }
    let Some((audit, leaves, windows)) = accepted else {
        return refuse(
            args,
            &checkpoint,
            &note,
            &["the checkpoint was not accepted".into()],
        );
    };
    let after = run
        .entries
        .get(&audit.size().saturating_sub(1))
        .and_then(|t| compare::jti(t))
        .or(stored.after.clone());
    let next = Stored {
        audit,
        after,
        leaves: Some(leaves),
        keep_entries: stored.keep_entries || args.keep_entries,
        verdict_keys: keys.verdict_jwks.clone(),
        entries_from: Some(stored.entries_from.unwrap_or(run.unkept)),
    };
    // A version 1 state had no mirror: it is written whole.
    let kept = if stored.leaves.is_some() {
        stored.audit.size()
    } else {
        0
    };
    state::write(&args.state, &next, kept, &run.fetched)?;
    let old = stored.audit.size();
    say_accepted(args, ctx, first, old, &next, windows, witnessed)
}

/// One run's work.
struct Run<'a> {
    args: &'a AuditArgs,
    client: &'a Client,
    reader: &'a LogReader,
    keys: &'a Keys,
    stored: &'a Stored,
    checkpoint: &'a Checkpoint,
    note: &'a str,
    findings: Findings,
    /// The leaves the log serves, by index, as read this run.
    served: HashMap<u64, LogHash>,
    /// Leaves served that differ from the mirror's: the index, and the index whose
    /// accepted hash it has instead, if any.
    moved: BTreeMap<u64, Option<u64>>,
    /// Verdict tokens by leaf index, each the one the auditor's leaf holds.
    entries: HashMap<u64, String>,
    /// The decisions of the rewritten leaves, by index, as the log's entries name them.
    rewritten: HashMap<u64, String>,
    /// The bundles read, to keep with `--keep-entries`.
    fetched: Vec<(u64, Vec<String>)>,
    /// Where the bundles the log does not serve end, when they are a prefix of the log
    /// (leaves logged before the service kept entries), on a run that does not know yet.
    unkept: u64,
    /// Whether this run has read a bundle the log serves.
    kept_seen: bool,
}

impl<'a> Run<'a> {
    /// A run over the log read by `reader`, from `stored`, for `checkpoint` (`note`).
    fn new(
        args: &'a AuditArgs,
        client: &'a Client,
        reader: &'a LogReader,
        keys: &'a Keys,
        stored: &'a Stored,
        checkpoint: &'a Checkpoint,
        note: &'a str,
    ) -> Self {
        Self {
            args,
            client,
            reader,
            keys,
            stored,
            checkpoint,
            note,
            findings: Vec::new(),
            served: HashMap::new(),
            moved: BTreeMap::new(),
            entries: HashMap::new(),
            rewritten: HashMap::new(),
            fetched: Vec::new(),
            unkept: 0,
            kept_seen: false,
        }
    }
}

/// An accepted run: the new state, the mirror's leaves, the windows checked.
type Accepted = (AuditState, Vec<LogHash>, Vec<(u64, u64)>);

impl Run<'_> {
    /// Steps 2 to 4 of the module doc; findings are gathered in `self.findings`.
    fn audit(&mut self) -> Result<Option<Accepted>, CliError> {
        let old = self.stored.audit.size();
        let new = self.checkpoint.size();
        // From the tile of the last leaf both trees hold: its accepted leaves are read
        // again with the new ones (a version 1 state has no mirror: all are read).
        let from = match &self.stored.leaves {
            Some(_) => (old.min(new) / WIDTH) * WIDTH,
            None => 0,
        };
        if !self.read_leaves(from, new)? {
            return Ok(None);
        }
        // Borrowed from the state, not from `self` (which the checks below change).
        let stored: &Stored = self.stored;
        let mirror: Cow<'_, [LogHash]> = match &stored.leaves {
            Some(leaves) => Cow::Borrowed(leaves),
            None => Cow::Owned(
                (0..old.min(new))
                    .filter_map(|i| self.served.get(&i).copied())
                    .collect(),
            ),
        };
        self.compare_leaves(&mirror);
        let accepted = self.extend(&mirror, old, new);
        // The truth: the mirror, and the new leaves once they make the checkpoint's root.
        let truth: &[LogHash] = match &accepted {
            Some((_, leaves)) => leaves,
            None => &mirror,
        };
        let windows = self.windows(old, new, truth.len() as u64);
        for (start, end) in &windows {
            // An older window's tile, when not read yet: its leaves must be the mirror's.
            let upto = (*end).min(new);
            if *start < upto && !self.served.contains_key(start) {
                if !self.read_leaves(*start, upto)? {
                    continue;
                }
                self.compare_leaves(&mirror);
            }
        }
        self.read_entries(&windows, truth, old, new)?;
        self.name_moved();
        let log = Log {
            leaves: truth,
            entries: &self.entries,
            keys: &self.keys.verdicts,
        };
        for (start, end) in runs(&windows) {
            let found = compare::window(self.client, &log, start, end)?;
            self.findings.extend(found);
        }
        Ok(accepted.map(|(audit, leaves)| (audit, leaves, windows)))
    }

    /// Reads the served leaves `from..to` of the tree of the checkpoint; `false` (and
    /// the finding) when the log does not serve them.
    fn read_leaves(&mut self, from: u64, to: u64) -> Result<bool, CliError> {
        match self.reader.leaves(from, to, self.checkpoint.size()) {
            Ok(leaves) => {
                for (k, leaf) in leaves.into_iter().enumerate() {
                    self.served.insert(from + k as u64, leaf);
                }
                Ok(true)
            }
            Err(ReadError::Refused(reason)) => {
                self.findings.push(reason);
                Ok(false)
            }
            Err(ReadError::Cli(e)) => Err(e),
        }
    }

    /// Notes each served leaf the mirror holds another hash for.
    fn compare_leaves(&mut self, mirror: &[LogHash]) {
        let position: HashMap<&LogHash, u64> = mirror
            .iter()
            .enumerate()
            .map(|(i, h)| (h, i as u64))
            .collect();
        for (index, hash) in &self.served {
            let Some(accepted) = usize::try_from(*index).ok().and_then(|i| mirror.get(i)) else {
                continue;
            };
            if accepted != hash {
                self.moved.insert(*index, position.get(hash).copied());
            }
        }
    }

    /// The finding of the leaves that differ from the mirror's, naming the decisions
    /// the entries tell.
    fn name_moved(&mut self) {
        if self.moved.is_empty() {
            return;
        }
        let named =
            |run: &Self, index: u64| match run.entries.get(&index).and_then(|t| compare::jti(t)) {
                Some(id) => format!("leaf {index} (decision {id})"),
                None => format!("leaf {index}"),
            };
        let mut parts = Vec::new();
        for (index, was) in self.moved.iter().take(8) {
            parts.push(match was {
                Some(other) => format!(
                    "{} is served with the hash accepted at {}",
                    named(self, *index),
                    named(self, *other)
                ),
                None => match self.rewritten.get(index) {
                    Some(id) => {
                        format!("leaf {index} is now decision {id}'s verdict, not the one accepted")
                    }
                    None => format!("leaf {index} is not the one accepted"),
                },
            });
        }
        if self.moved.len() > 8 {
            parts.push(format!("and {} more leaves differ", self.moved.len() - 8));
        }
        let moved_only = self.moved.values().all(Option::is_some);
        let why = if moved_only {
            "leaves were moved in the service's log tables"
        } else {
            "the log no longer holds what it signed before"
        };
        self.findings.push(format!(
            "history was rewritten ({why}): {}",
            parts.join("; ")
        ));
    }

    /// The accepted state extended with the served leaves past the mirror, when they make
    /// the checkpoint's root; otherwise the finding that says why not.
    fn extend(
        &mut self,
        mirror: &[LogHash],
        old: u64,
        new: u64,
    ) -> Option<(AuditState, Vec<LogHash>)> {
        if self.stored.leaves.is_none() && old > 0 && old <= new {
            // A version 1 state: the leaves read must make the root it accepted.
            let edge = TreeEdge::from_leaves(mirror).ok()?;
            if edge.root() != self.stored.audit.root() {
                self.findings.push(format!(
                    "history was rewritten: the log's first {old} leaves do not make the checkpoint accepted before"
                ));
                return None;
            }
        }
        let fresh: Vec<LogHash> = (old..new)
            .filter_map(|i| self.served.get(&i).copied())
            .collect();
        match self
            .stored
            .audit
            .advance(&as_leaves(&fresh), self.note, &self.keys.log)
        {
            Ok(next) => {
                let mut leaves = mirror.to_vec();
                leaves.extend_from_slice(&fresh);
                Some((next, leaves))
            }
            Err(AuditError::RootMismatch { .. } | AuditError::Rewritten { .. }) => {
                let differ = self.moved.keys().any(|i| *i < old);
                self.findings.insert(0, if differ {
                    format!("the checkpoint of {new} decisions does not extend the one of {old} accepted before")
                } else {
                    format!(
                        "the log's tiles do not make its checkpoint of {new} decisions: the leaves it serves from {old} on are not those the checkpoint signs"
                    )
                });
                None
            }
            Err(e) => {
                self.findings.insert(0, e.to_string());
                None
            }
        }
    }

    /// The windows of leaf indexes whose entries and decisions are checked: the new
    /// leaves' bundles, and a sample of the older ones (all with `--full`), each window
    /// one bundle's leaves below `limit`.
    fn windows(&self, old: u64, new: u64, limit: u64) -> Vec<(u64, u64)> {
        let mut bundles = BTreeSet::new();
        if self.args.full {
            bundles.extend(0..limit.div_ceil(WIDTH));
        } else {
            bundles.extend(old / WIDTH..new.min(limit).div_ceil(WIDTH));
            bundles.extend(sample(old.min(limit).div_ceil(WIDTH), self.args.sample));
        }
        bundles
            .into_iter()
            .map(|b| (b * WIDTH, ((b + 1) * WIDTH).min(limit)))
            .filter(|(start, end)| start < end)
            .collect()
    }

    /// Reads the entries of each window (kept ones from the mirror, else from the log)
    /// and checks each against its leaf.
    fn read_entries(
        &mut self,
        windows: &[(u64, u64)],
        truth: &[LogHash],
        old: u64,
        new: u64,
    ) -> Result<(), CliError> {
        for (start, end) in windows {
            let bundle = start / WIDTH;
            let kept = if self.stored.keep_entries && *end <= old {
                state::kept_bundle(&self.args.state, bundle)
                    .filter(|t| t.len() as u64 >= end - start)
            } else {
                None
            };
            // The log's bundle when none is kept, or when some of its leaves were
            // rewritten: its entries name the decisions the log holds there now.
            let rewritten = self.moved.range(start..end).next().is_some();
            let from_log = if (kept.is_none() || rewritten) && *start < new {
                match self.reader.bundle(bundle, new) {
                    Ok(tokens) => Some(tokens),
                    // Leaves logged before the service kept entries have none: a prefix of
                    // the log, which the first run with a mirror finds and the state keeps.
                    // Their leaves are still checked. Any other bundle must be served.
                    Err(ReadError::Refused(reason)) if self.never_kept(*start, *end) => {
                        output::note(&format!(
                            "{reason}: leaves logged before the service kept entries, checked without them"
                        ));
                        None
                    }
                    Err(ReadError::Refused(reason)) => {
                        self.findings.push(reason);
                        None
                    }
                    Err(ReadError::Cli(e)) => return Err(e),
                }
            } else {
                None
            };
            for (tokens, is_log) in [(&kept, false), (&from_log, true)] {
                for (k, token) in tokens.iter().flatten().enumerate() {
                    self.check_entry(start + k as u64, token, truth, old, is_log);
                }
            }
            if let Some(tokens) = from_log {
                self.kept_seen = true;
                self.fetched.push((bundle, tokens));
            }
        }
        Ok(())
    }

    /// Whether the bundle of leaves `start..end` may be one the service never kept: below
    /// the leaf the state knows entries from, or, on a run that does not know it yet, in
    /// the prefix of bundles not served (none served before it).
    fn never_kept(&mut self, start: u64, end: u64) -> bool {
        match self.stored.entries_from {
            Some(from) => end <= from,
            None if !self.kept_seen && start == self.unkept => {
                self.unkept = end;
                true
            }
            None => false,
        }
    }

    /// One entry: the token of the auditor's leaf, or of the leaf the log serves (a
    /// rewritten leaf, already found), else a changed bundle; a new one's verdict must
    /// verify and be of this log's issuer.
    fn check_entry(
        &mut self,
        index: u64,
        token: &str,
        truth: &[LogHash],
        old: u64,
        from_log: bool,
    ) {
        let hash = leaf_hash(token.as_bytes());
        let id = compare::jti(token).unwrap_or_else(|| "(no jti)".to_owned());
        let ours = usize::try_from(index).ok().and_then(|i| truth.get(i));
        let theirs = self.served.get(&index);
        if ours != Some(&hash) {
            if theirs == Some(&hash) {
                self.rewritten.insert(index, id);
            } else if from_log {
                self.findings.push(format!(
                    "the log's entry {index} (decision {id}) is not the verdict token of its leaf {index}: the entry bundle was changed"
                ));
            }
            return;
        }
        if index >= old {
            if let Err(reason) = compare::verify_signature(token, &self.keys.verdicts) {
                self.findings.push(format!(
                    "the log's entry {index} (decision {id}): its verdict signature does not verify ({reason})"
                ));
            }
            let host = self
                .checkpoint
                .origin()
                .split("/log/")
                .next()
                .unwrap_or_default();
            let iss = compare::claims(token)
                .and_then(|c| c.get("iss")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            if iss.split_once("://").is_none_or(|(_, h)| h != host) {
                self.findings.push(format!(
                    "the log's entry {index} (decision {id}) is a verdict of {iss:?}, not of the log's host {host}"
                ));
            }
        }
        self.entries.insert(index, token.to_owned());
    }
}

/// How many adjacent windows one read of the export covers: a first or `--full` run reads
/// the export in runs of 4,096 decisions rather than a request a bundle (each export starts
/// a page of inclusion proofs on the server), and holds no more than a run in memory.
const WINDOWS_A_RUN: u64 = 16;

/// The windows, adjacent ones joined into runs of at most [`WINDOWS_A_RUN`].
fn runs(windows: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(start, end) in windows {
        match out.last_mut() {
            Some((first, last)) if *last == start && end - *first <= WINDOWS_A_RUN * WIDTH => {
                *last = end;
            }
            _ => out.push((start, end)),
        }
    }
    out
}

/// Leaves without entries, for [`AuditState::advance`].
fn as_leaves(hashes: &[LogHash]) -> Vec<AuditLeaf> {
    hashes
        .iter()
        .map(|hash| AuditLeaf {
            hash: *hash,
            entry: None,
        })
        .collect()
}

/// `k` distinct bundles of `0..count` drawn at random (all when `k >= count`).
fn sample(count: u64, k: usize) -> Vec<u64> {
    if k as u64 >= count {
        return (0..count).collect();
    }
    let mut chosen = BTreeSet::new();
    while chosen.len() < k {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            break;
        }
        chosen.insert(u64::from_le_bytes(bytes) % count);
    }
    chosen.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_windows_join_into_runs_of_sixteen_bundles() {
        let windows: Vec<(u64, u64)> = (0..20).map(|b| (b * WIDTH, (b + 1) * WIDTH)).collect();
        assert_eq!(runs(&windows), [(0, 16 * WIDTH), (16 * WIDTH, 20 * WIDTH)]);
        let apart = [(0, 256), (512, 768), (768, 800)];
        assert_eq!(runs(&apart), [(0, 256), (512, 800)]);
    }

    #[test]
    fn the_sample_is_distinct_bundles_or_all_of_them() {
        assert_eq!(sample(3, 4), [0, 1, 2]);
        let drawn = sample(1000, 4);
        assert_eq!(drawn.len(), 4);
        assert!(drawn.iter().all(|b| *b < 1000));
    }
}
