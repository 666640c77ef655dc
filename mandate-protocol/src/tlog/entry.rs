//! A verdict's place in its log, as a decision read carries it: `log: {index, checkpoint,
//! inclusion_proof}`, and the check that the token is there.

use serde::{Deserialize, Serialize};

use super::checkpoint::{Checkpoint, CheckpointError};
use super::hash::LogHash;
use super::key::LogKeys;
use super::proof::verify_inclusion;

/// Where a verdict is in its organization's log, with the proof: the `log` member of a
/// decision read and of an export's line.
///
/// ```json
/// {
///   "index": 2,
///   "checkpoint": "verdicts.example.com/log/org_4Fq2/live\n3\n<root>\n\n— verdicts.example.com/log/org_4Fq2/live <signature>\n",
///   "inclusion_proof": ["<base64 hash>", "…"]
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogEntry {
    /// The verdict's leaf index in the log, from 0 (its decision's place in `seq` order).
    pub index: u64,
    /// A signed checkpoint of the log whose tree holds the leaf: the signed note's text.
    pub checkpoint: String,
    /// The hashes from the leaf up to the checkpoint's root (RFC 9162 §2.1.3), standard
    /// base64.
    pub(crate) inclusion_proof: Vec<LogHash>,
}

/// Why a verdict is not proven to be in the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The checkpoint is malformed or not signed by a log key of the key set.
    #[error("{0}")]
    Checkpoint(#[from] CheckpointError),
    /// The proof does not put the token at the index in the checkpoint's tree.
    #[error("the token is not leaf {index} of the checkpoint's tree of {size}: {reason}")]
    NotIncluded {
        /// The index claimed.
        index: u64,
        /// The checkpoint's tree size.
        size: u64,
        /// What failed, in words (the proof's hashes are the issuer's business).
        reason: String,
    },
}

impl LogEntry {
    /// An entry: the leaf `index`, the signed checkpoint's text and the inclusion proof.
    pub(crate) fn new(index: u64, checkpoint: String, inclusion_proof: Vec<LogHash>) -> Self {
        Self {
            index,
            checkpoint,
            inclusion_proof,
        }
    }

    /// Checks that `token` is leaf `index` of the tree a checkpoint signed by one of `keys`
    /// commits to; returns that checkpoint. What the checkpoint's origin must be (which
    /// organization's log) is the caller's to compare.
    pub fn verify(&self, token: &str, keys: &LogKeys) -> Result<Checkpoint, LogError> {
        let checkpoint = keys.verify(&self.checkpoint)?;
        self.verify_against(&LogHash::leaf(token.as_bytes()), &checkpoint)?;
        Ok(checkpoint)
    }

    /// Checks that `leaf` is leaf `index` of `checkpoint`'s tree (its signature already
    /// checked by the caller).
    pub(crate) fn verify_against(
        &self,
        leaf: &LogHash,
        checkpoint: &Checkpoint,
    ) -> Result<(), LogError> {
        verify_inclusion(
            leaf,
            self.index,
            checkpoint.size(),
            &self.inclusion_proof,
            checkpoint.root(),
        )
        .map_err(|reason| LogError::NotIncluded {
            index: self.index,
            size: checkpoint.size(),
            reason: reason.to_string(),
        })
    }
}
