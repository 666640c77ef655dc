//! A transparency log of verdicts: RFC 6962 Merkle trees, C2SP signed checkpoints,
//! inclusion and consistency proofs, and the auditor's checks, all pure.
//!
//! Each organization and environment has an append-only log whose leaves are its verdict
//! tokens in `seq` order. The service signs checkpoints of it (c2sp.org/tlog-checkpoint in
//! a c2sp.org/signed-note, with a log key published in the JWK Set); a decision read
//! carries its [`LogEntry`] (index, checkpoint, inclusion proof) once a checkpoint covers
//! it. With this module:
//!
//! - a counterparty checks that a verdict is in the log ([`LogEntry::verify`], or
//!   [`crate::counterparty::Counterparty::require_log`]);
//! - an auditor following the export checks that each new checkpoint extends the last one
//!   it accepted with exactly the decisions exported since ([`AuditState::advance`]);
//! - the service makes proofs from the complete subtree hashes it stores ([`ProofPlan`],
//!   [`TreeEdge::push`], kept as C2SP tiles: [`TileId`]) and signs checkpoints with its
//!   log key ([`sign_checkpoint`]);
//! - a witness cosigns a checkpoint it checked ([`WitnessSigner::cosign`],
//!   c2sp.org/tlog-cosignature), and a verifier requires k of n named witnesses
//!   ([`WitnessPolicy::check`]).
//!
//! Hashing (RFC 9162 §2.1.1): a leaf is SHA-256(0x00 || token bytes), a node
//! SHA-256(0x01 || left || right). Nothing here reads a clock, a file or a random number.
//!
//! ```
//! use mandate_protocol::jws::P256Signer;
//! use mandate_protocol::tlog::{self, LogHash, LogKey, ProofPlan, TreeEdge};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The service: four verdicts logged, their subtrees stored, a checkpoint signed.
//! let tokens = ["t0.a.b", "t1.a.b", "t2.a.b", "t3.a.b"];
//! let mut stored = std::collections::HashMap::new();
//! let mut edge = TreeEdge::new();
//! for token in tokens {
//!     stored.extend(edge.push(tlog::leaf_hash(token.as_bytes()))?);
//! }
//! let log_key = P256Signer::from_secret_bytes("log-1", &[9; 32])?;
//! let origin = "verdicts.example.com/log/org_4Fq2/live";
//! let checkpoint = tlog::checkpoint(origin, edge.size(), edge.root())?;
//! let note = tlog::sign_checkpoint(&checkpoint, &log_key)?;
//!
//! // A decision read carries the third verdict's entry.
//! let plan = ProofPlan::inclusion(2, edge.size())?;
//! let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| stored[id]).collect();
//! let entry = tlog::log_entry(2, note, plan.assemble(&hashes)?);
//!
//! // A counterparty, with the log keys of the service's JWK Set.
//! let keys = tlog::log_keys(vec![LogKey::of_signer(&log_key)]);
//! assert_eq!(entry.verify("t2.a.b", &keys)?.origin(), origin);
//! assert!(entry.verify("t3.a.b", &keys).is_err());
//! # Ok(())
//! # }
//! ```

mod audit;
mod checkpoint;
mod cosignature;
mod edge;
mod entry;
mod hash;
mod key;
mod note;
mod proof;
mod tile;
mod tile_path;

pub use audit::{AuditError, AuditLeaf, AuditState};
pub use checkpoint::{Checkpoint, CheckpointError};
pub use cosignature::{
    CosignatureError, WitnessCosignature, WitnessKey, WitnessPolicy, WitnessSigner,
};
pub use edge::TreeEdge;
pub use entry::{LogEntry, LogError};
pub use hash::LogHash;
pub use key::{LogKey, LogKeys, sign_checkpoint};
pub use note::{NoteError, NoteSignature, SignedNote};
pub use proof::{NodeId, ProofError, ProofPlan, verify_consistency, verify_inclusion};
pub use tile::{TILE_HEIGHT, TILE_WIDTH, TileId, hashes_from_tiles, tiles_of};
pub use tile_path::TilePath;

// What Mandate's server and CLI compute with this module's types beyond their methods
// an embedder sees through mandate-core.

/// The checkpoint of the log `origin` at `size` leaves with root `root`; refused when
/// the origin is empty or holds a control character (a newline among them).
pub fn checkpoint(
    origin: impl Into<String>,
    size: u64,
    root: LogHash,
) -> Result<Checkpoint, CheckpointError> {
    Checkpoint::new(origin, size, root)
}

/// A checkpoint with one more extension line (non-empty, no control character).
pub fn with_extension(
    checkpoint: Checkpoint,
    line: impl Into<String>,
) -> Result<Checkpoint, CheckpointError> {
    checkpoint.with_extension(line)
}

/// The hash of a leaf: SHA-256(0x00 || data).
pub fn leaf_hash(data: &[u8]) -> LogHash {
    LogHash::leaf(data)
}

/// The hash of an interior node: SHA-256(0x01 || left || right).
pub fn node_hash(left: &LogHash, right: &LogHash) -> LogHash {
    LogHash::node(left, right)
}

/// The root of the empty tree: SHA-256 of no bytes.
pub fn empty_root() -> LogHash {
    LogHash::empty()
}

/// A checkpoint's tree root.
pub fn root_of(checkpoint: &Checkpoint) -> &LogHash {
    checkpoint.root()
}

/// A verdict's entry in the log: its leaf `index`, the signed checkpoint's text and
/// the inclusion proof (what a decision read carries as `log`).
pub fn log_entry(index: u64, checkpoint: String, inclusion_proof: Vec<LogHash>) -> LogEntry {
    LogEntry::new(index, checkpoint, inclusion_proof)
}

/// A set of these log keys.
pub fn log_keys(keys: Vec<LogKey>) -> LogKeys {
    LogKeys::new(keys)
}

/// The keys of a set.
pub fn keys_of(keys: &LogKeys) -> &[LogKey] {
    keys.keys()
}
