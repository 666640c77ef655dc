//! The auditor's state machine: accept a new checkpoint only if it extends the last one
//! accepted with exactly the decisions exported since.
//!
//! An auditor follows an organization's export. It keeps an [`AuditState`]: the last
//! checkpoint it accepted and the right edge of that tree ([`TreeEdge`]), enough to extend
//! it without keeping a single decision. Given the decisions exported after it, in order,
//! and a newer signed checkpoint, [`AuditState::advance`] recomputes the tree and returns
//! the new state, or an [`AuditError`] that names what is wrong: the log shrank, a second
//! checkpoint of the same size has another root (a fork), a decision the checkpoint counts
//! is missing from the export or out of its place, a decision is not the one the log holds
//! at its index, or history before the accepted checkpoint was rewritten. It reads no
//! clock and no file: the caller stores the state between runs (serde).
//!
//! What each decision's `log` entry adds: with only the tokens, a mismatch is known but not
//! where; with the entries (each token's index and inclusion proof), the first decision
//! out of place or changed is named by its index.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::checkpoint::{Checkpoint, CheckpointError};
use super::edge::TreeEdge;
use super::entry::{LogEntry, LogError};
use super::hash::LogHash;
use super::key::LogKeys;

/// One exported decision, as the auditor sees it: its leaf hash, and its `log` entry when
/// the export carried one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLeaf {
    /// The leaf hash of its verdict token.
    pub hash: LogHash,
    /// Its `log` member, if not `null`.
    pub entry: Option<LogEntry>,
}

impl AuditLeaf {
    /// The leaf of a verdict token, with its `log` entry if the export gave one.
    pub fn token(token: &str, entry: Option<LogEntry>) -> Self {
        Self {
            hash: LogHash::leaf(token.as_bytes()),
            entry,
        }
    }
}

/// Why a checkpoint was not accepted. Indexes are leaf indexes in the log (a decision's
/// place in its organization's `seq` order, from 0).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The checkpoint is malformed or not signed by a log key.
    #[error("{0}")]
    Checkpoint(#[from] CheckpointError),
    /// The checkpoint is of another log.
    #[error("the checkpoint is of the log {found:?}, not {expected:?}")]
    OtherLog {
        /// The origin audited.
        expected: String,
        /// The checkpoint's.
        found: String,
    },
    /// The log is smaller than a checkpoint accepted before.
    #[error(
        "the log shrank from {accepted} to {presented} decisions: decisions were deleted or the database was rolled back"
    )]
    Shrank {
        /// The size accepted.
        accepted: u64,
        /// The size presented.
        presented: u64,
    },
    /// Two signed checkpoints of one size with different roots.
    #[error(
        "two signed checkpoints of {size} decisions have different roots ({accepted} and {presented}): the log forked"
    )]
    Fork {
        /// Their size.
        size: u64,
        /// The root accepted (or seen first).
        accepted: LogHash,
        /// The other root.
        presented: LogHash,
    },
    /// The checkpoint counts a decision the export does not have at its place.
    #[error(
        "the checkpoint counts {size} decisions, but the export has no decision at index {index}: it was deleted"
    )]
    Missing {
        /// The first index with no decision.
        index: u64,
        /// The checkpoint's size.
        size: u64,
    },
    /// The decision logged at `index` is exported at another place.
    #[error(
        "the decision logged at index {index} is exported at index {found_at}: decisions were reordered"
    )]
    Reordered {
        /// Its index in the log.
        index: u64,
        /// Where the export has it.
        found_at: u64,
    },
    /// The decision exported at `index` is not the one the log holds there.
    #[error(
        "the decision at index {index} is not the one the log holds there ({reason}): it was changed"
    )]
    Changed {
        /// Its index.
        index: u64,
        /// Why its inclusion proof failed.
        reason: LogError,
    },
    /// Every new decision is in the log where exported, yet the tree is not an extension
    /// of the one accepted: what came before was changed.
    #[error(
        "the decisions after index {accepted_size} are in the log as exported, but the log's first {accepted_size} decisions are not the ones accepted: history was rewritten"
    )]
    Rewritten {
        /// The size of the checkpoint accepted before.
        accepted_size: u64,
    },
    /// The decisions do not make the checkpoint's root, and no inclusion proof tells which
    /// one differs.
    #[error("the decisions at indexes {from} to {last} do not make the checkpoint's root: one of them was changed, deleted or reordered (no inclusion proof tells which)", last = to - 1)]
    RootMismatch {
        /// The first index of the run.
        from: u64,
        /// One past its last.
        to: u64,
    },
}

/// What an auditor keeps between runs: the last checkpoint it accepted (the signed note,
/// as evidence) and the right edge of that tree.
///
/// ```
/// use mandate_protocol::tlog::{self, AuditLeaf, AuditState, LogKey, TreeEdge};
/// use mandate_protocol::jws::P256Signer;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let signer = P256Signer::from_secret_bytes("log-1", &[9; 32])?;
/// let keys = tlog::log_keys(vec![LogKey::of_signer(&signer)]);
/// let origin = "verdicts.example.com/log/org_4Fq2/live";
/// let tokens = ["t0.a.b", "t1.a.b", "t2.a.b"];
/// let leaves: Vec<AuditLeaf> = tokens.iter().map(|t| AuditLeaf::token(t, None)).collect();
/// let sign = |n: usize| {
///     let edge = TreeEdge::from_leaves(leaves[..n].iter().map(|l| &l.hash))?;
///     let checkpoint = tlog::checkpoint(origin, n as u64, edge.root())?;
///     Ok::<_, Box<dyn std::error::Error>>(tlog::sign_checkpoint(&checkpoint, &signer)?)
/// };
///
/// let state = AuditState::new(origin).advance(&leaves[..2], &sign(2)?, &keys)?;
/// let state = state.advance(&leaves[2..], &sign(3)?, &keys)?;
/// assert_eq!(state.size(), 3);
///
/// // A checkpoint of 2 again, after 3 were accepted: refused, naming both sizes.
/// let error = state.advance(&[], &sign(2)?, &keys).unwrap_err();
/// assert!(error.to_string().starts_with("the log shrank from 3 to 2 decisions"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditState {
    origin: String,
    edge: TreeEdge,
    checkpoint: Option<String>,
}

impl AuditState {
    /// An auditor of the log `origin` that has accepted nothing yet.
    pub fn new(origin: impl Into<String>) -> Self {
        Self {
            origin: origin.into(),
            edge: TreeEdge::new(),
            checkpoint: None,
        }
    }

    /// The log audited.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How many decisions the accepted checkpoint holds.
    pub fn size(&self) -> u64 {
        self.edge.size()
    }

    /// The accepted tree's root.
    pub fn root(&self) -> LogHash {
        self.edge.root()
    }

    /// The accepted checkpoint, as signed; `None` before the first.
    pub fn checkpoint(&self) -> Option<&str> {
        self.checkpoint.as_deref()
    }

    /// Accepts `note`, a signed checkpoint of this log, if it extends the accepted one with
    /// `leaves`: the exported decisions from index [`AuditState::size`] on, in order (more
    /// than the checkpoint counts may be given; the rest are left for the next run: the
    /// new size tells how many were used). See the module doc for what is refused.
    pub fn advance(
        &self,
        leaves: &[AuditLeaf],
        note: &str,
        keys: &LogKeys,
    ) -> Result<AuditState, AuditError> {
        let checkpoint = self.verified(note, keys)?;
        let (old, new) = (self.size(), checkpoint.size());
        if new < old {
            return Err(AuditError::Shrank {
                accepted: old,
                presented: new,
            });
        }
        if new == old && *checkpoint.root() != self.root() {
            return Err(AuditError::Fork {
                size: new,
                accepted: self.root(),
                presented: *checkpoint.root(),
            });
        }
        let need = usize::try_from(new - old).unwrap_or(usize::MAX);
        let run = &leaves[..need.min(leaves.len())];
        check_places(run, leaves, old, new)?;
        let all_proven = self.check_entries(run, &checkpoint, note, keys)?;
        if run.len() < need {
            return Err(AuditError::Missing {
                index: old + run.len() as u64,
                size: new,
            });
        }
        let mut edge = self.edge.clone();
        for leaf in run {
            edge.push(leaf.hash)
                .map_err(|_| AuditError::RootMismatch { from: old, to: new })?;
        }
        if edge.root() != *checkpoint.root() {
            return Err(if all_proven {
                AuditError::Rewritten { accepted_size: old }
            } else {
                AuditError::RootMismatch { from: old, to: new }
            });
        }
        Ok(AuditState {
            origin: self.origin.clone(),
            edge,
            checkpoint: Some(note.to_owned()),
        })
    }

    /// The checkpoint of `note`, signed by one of `keys`, of this log.
    fn verified(&self, note: &str, keys: &LogKeys) -> Result<Checkpoint, AuditError> {
        let checkpoint = keys.verify(note)?;
        if checkpoint.origin() != self.origin {
            return Err(AuditError::OtherLog {
                expected: self.origin.clone(),
                found: checkpoint.origin().to_owned(),
            });
        }
        Ok(checkpoint)
    }

    /// Checks each leaf's entry, if any: its checkpoint signed and of this log, not a fork
    /// of the one audited, and its inclusion proof. Whether every leaf of the run is proven
    /// in the checkpoint audited.
    fn check_entries(
        &self,
        run: &[AuditLeaf],
        audited: &Checkpoint,
        audited_note: &str,
        keys: &LogKeys,
    ) -> Result<bool, AuditError> {
        // Most entries share a few checkpoints: each is verified once.
        let mut seen: HashMap<&str, Checkpoint> = HashMap::new();
        seen.insert(audited_note, audited.clone());
        let mut all_proven = !run.is_empty();
        for leaf in run {
            let Some(entry) = &leaf.entry else {
                all_proven = false;
                continue;
            };
            let checkpoint = match seen.get(entry.checkpoint.as_str()) {
                Some(checkpoint) => checkpoint.clone(),
                None => {
                    let checkpoint = self.verified(&entry.checkpoint, keys)?;
                    seen.insert(&entry.checkpoint, checkpoint.clone());
                    checkpoint
                }
            };
            if checkpoint.size() == audited.size() && checkpoint.root() != audited.root() {
                return Err(AuditError::Fork {
                    size: audited.size(),
                    accepted: *audited.root(),
                    presented: *checkpoint.root(),
                });
            }
            entry
                .verify_against(&leaf.hash, &checkpoint)
                .map_err(|reason| AuditError::Changed {
                    index: entry.index,
                    reason,
                })?;
            all_proven &= checkpoint == *audited;
        }
        Ok(all_proven)
    }
}

/// Checks that each leaf of the run that carries an entry is logged at its place
/// (`start + i`): a decision logged later than its place means the one logged there is
/// missing, or was moved (when another leaf claims the place).
fn check_places(
    run: &[AuditLeaf],
    leaves: &[AuditLeaf],
    start: u64,
    size: u64,
) -> Result<(), AuditError> {
    for (i, leaf) in run.iter().enumerate() {
        let place = start + i as u64;
        let Some(entry) = &leaf.entry else { continue };
        if entry.index == place {
            continue;
        }
        let moved = leaves
            .iter()
            .position(|l| l.entry.as_ref().is_some_and(|e| e.index == place));
        return Err(match moved {
            Some(at) => AuditError::Reordered {
                index: place,
                found_at: start + at as u64,
            },
            None => AuditError::Missing { index: place, size },
        });
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct AuditStateWire {
    origin: String,
    edge: TreeEdge,
    checkpoint: Option<String>,
}

impl Serialize for AuditState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        AuditStateWire {
            origin: self.origin.clone(),
            edge: self.edge.clone(),
            checkpoint: self.checkpoint.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AuditState {
    /// Reads a stored state, refusing one whose edge is not the tree of its checkpoint
    /// (the signature was checked when it was accepted; the shape is checked again here).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire = AuditStateWire::deserialize(deserializer)?;
        match &wire.checkpoint {
            None if wire.edge.size() != 0 => {
                return Err(D::Error::custom(
                    "an audit state with decisions needs its checkpoint",
                ));
            }
            None => {}
            Some(note) => {
                let text = super::note::SignedNote::parse(note).map_err(D::Error::custom)?;
                let checkpoint = Checkpoint::parse(text.text()).map_err(D::Error::custom)?;
                let matches = checkpoint.origin() == wire.origin
                    && checkpoint.size() == wire.edge.size()
                    && *checkpoint.root() == wire.edge.root();
                if !matches {
                    return Err(D::Error::custom(
                        "the audit state's tree is not the one its checkpoint signs",
                    ));
                }
            }
        }
        Ok(Self {
            origin: wire.origin,
            edge: wire.edge,
            checkpoint: wire.checkpoint,
        })
    }
}
