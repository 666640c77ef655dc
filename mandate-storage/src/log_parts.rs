//! The decision log's plain data and pure steps, shared by the one-log steps (`log.rs`)
//! and the steps of many logs at once (`log_rounds.rs`): what a log's head, tail and
//! append are, how a stored row reads as one, and how leaves are cut into strips.

use std::collections::HashMap;

use mandate_core::DecisionId;
use mandate_protocol::tlog::{
    LogHash, ProofError, TILE_HEIGHT, TILE_WIDTH, TileId, TreeEdge, hashes_from_tiles,
};

use super::StorageError;
use super::engine::{Columns, Result};
use super::log_entries;
use crate::model::Env;

/// Where a log stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogHead {
    /// Leaves logged.
    pub size: u64,
    /// The organization's decisions read up to (logged, or left out before the log's
    /// start for want of a token).
    pub scanned_seq: i64,
    /// The newest signed checkpoint, of `size` leaves (`None` before the first).
    pub checkpoint: Option<String>,
    /// The size of the checkpoint readers are shown.
    pub shown_size: u64,
    /// When the newest checkpoint was signed, unix ms, by whichever process signed it
    /// (`None` before the first).
    pub signed_ms: Option<i64>,
}

/// What the checkpoint worker extends a log from: its head, its tree's edge, the rightmost
/// partial tile of each tile level above 0 (where the next nodes go), and the decisions
/// after the head up to the readers' watermark, oldest first.
#[derive(Debug, Clone, Default)]
pub struct LogTail {
    /// The head as read.
    pub head: LogHead,
    /// The edge of the tree of `head.size` leaves, read from the tiles.
    pub edge: TreeEdge,
    /// The partial tiles of levels 1 to 7, as stored.
    pub tiles: HashMap<TileId, Vec<LogHash>>,
    /// Decisions to log, oldest first: seq, id and the leaf hash stored with the row
    /// (PostgreSQL stores it; SQLite, one process, leaves it to the decision service's
    /// hand-over).
    pub decisions: Vec<(i64, DecisionId, Option<LogHash>)>,
    /// The log waits for a later round by the reader's [`Quiet`]: only its head was read
    /// (no decisions, no edge, no tiles).
    pub waiting: bool,
}

/// When a log may wait for a later round instead of being extended now: its newest
/// checkpoint is recent and few decisions wait. The checkpoint worker passes it with each
/// log it reads; a log then costs a round's reads and writes once for several rounds'
/// decisions instead of once a round for a few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// The newest checkpoint was signed after this, unix ms...
    pub signed_after_ms: i64,
    /// ...and not after this (a signing time ahead of the reader's clock does not count).
    pub signed_until_ms: i64,
    /// Fewer decisions than this wait (counted by seq, so at most this many).
    pub fewer_than: i64,
}

impl Quiet {
    /// Whether a log at `head`, whose decisions below the seq `below` are readable, waits:
    /// its checkpoint was signed within the window and from one to fewer than
    /// `fewer_than` seqs lie between the head and `below`. A log never signed, or with no
    /// seq waiting, does not.
    pub fn waits(&self, head: &LogHead, below: i64) -> bool {
        let seqs = below.saturating_sub(head.scanned_seq).saturating_sub(1);
        self.recent(head.signed_ms) && (1..self.fewer_than).contains(&seqs)
    }

    /// Whether a log waits without being read, judged by a process from what it knows: its
    /// newest checkpoint known to be signed at `signed_ms` (a later signing only makes it
    /// more recent) lies in the window, and fewer than `fewer_than` decisions of its own
    /// were committed to the log since the process last looked at it. Other processes'
    /// decisions are not counted: a log busy only across processes waits as a quiet one
    /// does, no longer than the window.
    pub fn holds(&self, signed_ms: Option<i64>, decisions: u64) -> bool {
        self.recent(signed_ms) && i64::try_from(decisions).is_ok_and(|d| d < self.fewer_than)
    }

    /// Whether a checkpoint signed at `signed_ms` lies in the window.
    fn recent(&self, signed_ms: Option<i64>) -> bool {
        signed_ms.is_some_and(|s| s > self.signed_after_ms && s <= self.signed_until_ms)
    }
}

/// What the checkpoint worker appends to a log and the checkpoint it signed of it.
#[derive(Debug, Clone)]
pub struct LogAppend {
    /// The organization.
    pub org: String,
    /// The environment.
    pub env: Env,
    /// The head it was decided on: size and scanned_seq. Nothing is written if the log
    /// moved since.
    pub from: (u64, i64),
    /// The new size.
    pub size: u64,
    /// The decisions read up to.
    pub scanned_seq: i64,
    /// The new leaves: index, seq, hash.
    pub leaves: Vec<(u64, i64, LogHash)>,
    /// The data of each new leaf, in the order of `leaves`: the verdict token it is the
    /// hash of, stored with the log ([`crate::log_entries`]). Nothing is written unless
    /// each hashes to its leaf.
    pub tokens: Vec<String>,
    /// The tiles of levels 1 to 7 that changed, whole.
    pub tiles: Vec<(TileId, Vec<LogHash>)>,
    /// The signed checkpoint of the new size (unchanged when no leaf was added).
    pub checkpoint: Option<String>,
    /// When it was signed, unix ms.
    pub signed_ms: i64,
}

/// A checkpoint readers are shown: its tree size and the signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownCheckpoint {
    /// Leaves it covers.
    pub size: u64,
    /// The signed note.
    pub note: String,
}

/// A checkpoint to show readers ([`crate::log::LogStore::show_checkpoints`]), as
/// [`crate::log::LogStore::show_checkpoint`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointShow {
    /// The organization.
    pub org: String,
    /// The environment.
    pub env: Env,
    /// Leaves it covers.
    pub size: u64,
    /// The checkpoint as stored.
    pub signed: String,
    /// As shown: `signed`, with the witnesses' cosignatures if any.
    pub note: String,
}

/// A log's decisions whose tokens to read ([`crate::log::LogStore::logs_tokens`]): its organization,
/// environment and ranges of seqs (above, below, at most), as [`crate::log::LogStore::log_tokens`]
/// takes them.
pub type TokenRead = (String, Env, Vec<(i64, i64, i64)>);

/// The tokens read of a log's decisions: seq and token (`None`: stored before tokens were
/// kept).
pub type TokensRead = Vec<(i64, Option<String>)>;

pub(crate) fn as_i64(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| StorageError::Corrupt(format!("{what} {value}")))
}

pub(crate) fn as_u64(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| StorageError::Corrupt(format!("{what} {value}")))
}

pub(crate) fn hash_of(bytes: &[u8]) -> Result<LogHash> {
    <[u8; 32]>::try_from(bytes)
        .map(LogHash::from_bytes)
        .map_err(|_| StorageError::Corrupt(format!("a log hash of {} bytes", bytes.len())))
}

pub(crate) fn hashes_of(bytes: &[u8]) -> Result<Vec<LogHash>> {
    if !bytes.len().is_multiple_of(32) {
        return Err(StorageError::Corrupt(format!(
            "a log tile of {} bytes",
            bytes.len()
        )));
    }
    bytes.chunks(32).map(hash_of).collect()
}

/// A head from the columns `at` on of a row: size, scanned_seq, checkpoint, shown_size,
/// signed_ms.
pub(crate) fn head_at(r: &dyn Columns, at: usize) -> Result<LogHead> {
    Ok(LogHead {
        size: as_u64(r.int(at)?, "log size")?,
        scanned_seq: r.int(at + 1)?,
        checkpoint: r.opt_text(at + 2)?,
        shown_size: as_u64(r.int(at + 3)?, "log shown size")?,
        signed_ms: r.opt_int(at + 4)?,
    })
}

/// A decision to log from the columns `at` on of a row: seq, id, the stored leaf hash.
pub(crate) fn decision_at(
    r: &dyn Columns,
    at: usize,
) -> Result<(i64, DecisionId, Option<LogHash>)> {
    let id = r.text(at + 1)?;
    let id = DecisionId::parse(&id)
        .map_err(|_| StorageError::Corrupt(format!("decision column id {id:?}")))?;
    let leaf = match r.opt_bytes(at + 2)? {
        None => None,
        Some(bytes) => Some(LogHash::from_bytes(bytes.try_into().map_err(|_| {
            StorageError::Corrupt(format!("decision {id} has a leaf hash not of 32 bytes"))
        })?)),
    };
    Ok((r.int(at)?, id, leaf))
}

/// A level-0 tile from position 0 (its first index `start`) as far as its strips (start
/// and hashes, in order) follow each other.
pub(crate) fn level0_of(start: i64, strips: Vec<(i64, Vec<LogHash>)>) -> Vec<LogHash> {
    let mut hashes = Vec::with_capacity(TILE_WIDTH);
    for (strip_start, strip) in strips {
        if strip_start != start + hashes.len() as i64 {
            break;
        }
        hashes.extend(strip);
    }
    hashes.truncate(TILE_WIDTH);
    hashes
}

/// The edge of the tree of `size` leaves from `tiles`, which hold its nodes.
pub(crate) fn edge_of(
    org: &str,
    env: Env,
    size: u64,
    tiles: &HashMap<TileId, Vec<LogHash>>,
) -> Result<TreeEdge> {
    let ids = TreeEdge::node_ids(size);
    let broken = |e: ProofError| {
        StorageError::Corrupt(format!(
            "the log of {org} ({}) does not hold its tree of {size} leaves: {e}",
            env.as_str()
        ))
    };
    let hashes = hashes_from_tiles(&ids, tiles).map_err(broken)?;
    TreeEdge::from_parts(size, hashes).map_err(broken)
}

/// The rightmost partial tile of each level above 0 in a tree of `size` leaves: where the
/// next complete subtrees of that level go.
pub(crate) fn partial_tiles(size: u64) -> Vec<TileId> {
    (1..=7u8)
        .filter_map(|level| {
            let nodes = size.checked_shr(u32::from(level * TILE_HEIGHT))?;
            (!nodes.is_multiple_of(TILE_WIDTH as u64))
                .then(|| TileId::new(level, nodes / TILE_WIDTH as u64))
        })
        .collect()
}

/// A strip as stored: its start, first seq, the later seqs as LEB128 deltas, the hashes,
/// and the entries (its tokens, each length-prefixed).
pub(crate) type Strip = (i64, i64, Vec<u8>, Vec<u8>, Vec<u8>);

/// The leaves and their tokens cut into strips as stored: never across a multiple of 256
/// leaves. Refused when the leaves are out of order, or a token is missing, too long for
/// an entry or not the data of its leaf.
pub(crate) fn strips<'a>(
    leaves: &'a [(u64, i64, LogHash)],
    tokens: &'a [String],
) -> impl Iterator<Item = Result<Strip>> + 'a {
    let mut rest = leaves;
    let mut rest_tokens = tokens;
    let mismatched = leaves.len() != tokens.len();
    std::iter::from_fn(move || {
        if mismatched {
            rest = &[];
            return Some(Err(StorageError::Corrupt(format!(
                "{} log leaves with {} tokens",
                leaves.len(),
                tokens.len()
            ))));
        }
        let &(start, first_seq, _) = rest.first()?;
        let room = TILE_WIDTH - (start % TILE_WIDTH as u64) as usize;
        let (strip, after) = rest.split_at(room.min(rest.len()));
        let (strip_tokens, after_tokens) = rest_tokens.split_at(strip.len());
        (rest, rest_tokens) = (after, after_tokens);
        let mut seqs = Vec::with_capacity(strip.len());
        let mut hashes = Vec::with_capacity(32 * strip.len());
        let mut entries = Vec::new();
        let mut previous = first_seq;
        for (i, ((index, seq, hash), token)) in strip.iter().zip(strip_tokens).enumerate() {
            if *index != start + i as u64 || (i > 0 && *seq <= previous) {
                return Some(Err(StorageError::Corrupt(format!(
                    "log leaves out of order at index {index} (seq {seq})"
                ))));
            }
            if let Err(e) = log_entries::push_entry(&mut entries, token.as_bytes(), hash) {
                return Some(Err(StorageError::Corrupt(format!(
                    "log leaf {index} (seq {seq}): {e}"
                ))));
            }
            if i > 0 {
                push_leb128(&mut seqs, (*seq - previous) as u64);
            }
            previous = *seq;
            hashes.extend_from_slice(hash.as_bytes());
        }
        Some(as_i64(start, "leaf index").map(|start| (start, first_seq, seqs, hashes, entries)))
    })
}

/// Appends `value` as unsigned LEB128.
pub(crate) fn push_leb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A strip's seqs: `first`, then each delta of `deltas` (LEB128) added in turn.
pub(crate) fn strip_seqs(first: i64, deltas: &[u8]) -> Result<Vec<i64>> {
    let corrupt = || StorageError::Corrupt(format!("the seqs of the log strip from seq {first}"));
    let mut seqs = vec![first];
    let (mut value, mut shift) = (0u64, 0u32);
    for byte in deltas {
        if shift > 56 {
            return Err(corrupt());
        }
        value |= u64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            let delta = i64::try_from(value).map_err(|_| corrupt())?;
            let last = *seqs.last().unwrap_or(&first);
            seqs.push(
                last.checked_add(delta)
                    .filter(|_| delta > 0)
                    .ok_or_else(corrupt)?,
            );
            (value, shift) = (0, 0);
        }
    }
    if shift != 0 || seqs.len() > TILE_WIDTH {
        return Err(corrupt());
    }
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_waits_only_when_signed_within_the_window_with_a_few_seqs_waiting() {
        let quiet = Quiet {
            signed_after_ms: 1_000,
            signed_until_ms: 3_000,
            fewer_than: 4,
        };
        let head = |signed_ms: Option<i64>| LogHead {
            scanned_seq: 10,
            signed_ms,
            ..LogHead::default()
        };
        // Seqs 11 to 13 readable (below 14): three wait.
        assert!(quiet.waits(&head(Some(2_000)), 14));
        assert!(quiet.waits(&head(Some(3_000)), 14));
        assert!(quiet.waits(&head(Some(1_001)), 12));
        // Four waiting, or none.
        assert!(!quiet.waits(&head(Some(2_000)), 15));
        assert!(!quiet.waits(&head(Some(2_000)), 11));
        assert!(!quiet.waits(&head(Some(2_000)), 5));
        // Never signed, signed at or before the window, or after it.
        assert!(!quiet.waits(&head(None), 14));
        assert!(!quiet.waits(&head(Some(1_000)), 14));
        assert!(!quiet.waits(&head(Some(3_001)), 14));
        // A window of 0: none waits.
        let none = Quiet {
            fewer_than: 0,
            ..quiet
        };
        assert!(!none.waits(&head(Some(2_000)), 12));
    }

    #[test]
    fn a_log_is_held_in_memory_only_when_known_signed_within_the_window_with_few_decisions() {
        let quiet = Quiet {
            signed_after_ms: 1_000,
            signed_until_ms: 3_000,
            fewer_than: 4,
        };
        // Three of this process's decisions, or none since it read the log.
        assert!(quiet.holds(Some(2_000), 3));
        assert!(quiet.holds(Some(3_000), 0));
        assert!(quiet.holds(Some(1_001), 1));
        // As many as the threshold: read.
        assert!(!quiet.holds(Some(2_000), 4));
        assert!(!quiet.holds(Some(2_000), u64::MAX));
        // Never seen signed, signed at or before the window, or after it.
        assert!(!quiet.holds(None, 1));
        assert!(!quiet.holds(Some(1_000), 1));
        assert!(!quiet.holds(Some(3_001), 1));
        // A threshold of 0: none is held.
        let none = Quiet {
            fewer_than: 0,
            ..quiet
        };
        assert!(!none.holds(Some(2_000), 0));
    }
}
