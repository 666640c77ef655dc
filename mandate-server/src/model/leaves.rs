//! The decision log's leaf hashes of the decisions this process stored, kept in memory until
//! the checkpoint worker logs them (docs/audit.md).
//!
//! The decision service hashes the token it answers (RFC 6962's leaf hash, one SHA-256)
//! once the decision is committed and leaves the hash here; the worker takes it instead of
//! reading the decision's row and rebuilding its token. A decision the worker does not find
//! here (made by another process, before a restart, or pushed out by newer ones) is read
//! from the store as before, so this changes how fast a log is extended, never what it
//! holds: a stored token is rebuilt byte for byte as it was answered.
//!
//! Two generations of at most [`GENERATION`] hashes each: when the newer is full it
//! becomes the older and the older is dropped, so memory stays bounded (about 100 bytes a
//! hash) whether or not the worker keeps up.

use std::collections::HashMap;
use std::mem;
use std::sync::Mutex;

use mandate_core::DecisionId;
use mandate_protocol::tlog::LogHash;

/// Hashes in a generation, at most: two of them hold several seconds of decisions at the
/// rates one process reaches, more than the worker's default interval of 1 s.
pub const GENERATION: usize = 1 << 16;

/// The leaf hashes waiting for the checkpoint worker, by decision.
#[derive(Debug, Default)]
pub struct LeafHashes {
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<DecisionId, LogHash>,
    older: HashMap<DecisionId, LogHash>,
}

impl LeafHashes {
    /// Keeps the leaf hash of the committed decision `id`.
    pub fn keep(&self, id: DecisionId, leaf: LogHash) {
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if g.newer.len() >= GENERATION {
            let full = mem::take(&mut g.newer);
            g.older = full;
        }
        g.newer.insert(id, leaf);
    }

    /// The leaf hash of decision `id`, if this process kept it; it is not kept after.
    pub fn take(&self, id: &DecisionId) -> Option<LogHash> {
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        g.newer.remove(id).or_else(|| g.older.remove(id))
    }

    /// How many hashes are kept.
    pub fn len(&self) -> usize {
        let g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        g.newer.len() + g.older.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id(n: usize) -> DecisionId {
        DecisionId::parse(&format!("dec_{n:026}")).unwrap()
    }

    #[test]
    fn a_hash_is_taken_once() {
        let leaves = LeafHashes::default();
        let leaf = mandate_protocol::tlog::leaf_hash(b"a.b.c");
        leaves.keep(id(1), leaf);
        assert_eq!(leaves.take(&id(1)), Some(leaf));
        assert_eq!(leaves.take(&id(1)), None);
        assert!(leaves.is_empty());
    }

    #[test]
    fn at_most_two_generations_are_kept_the_oldest_dropped_first() {
        let leaves = LeafHashes::default();
        let leaf = mandate_protocol::tlog::leaf_hash(b"a.b.c");
        for n in 0..GENERATION * 2 + 10 {
            leaves.keep(id(n), leaf);
        }
        assert_eq!(leaves.len(), GENERATION + 10);
        assert_eq!(leaves.take(&id(0)), None);
        assert_eq!(leaves.take(&id(GENERATION - 1)), None);
        assert_eq!(leaves.take(&id(GENERATION)), Some(leaf));
        assert_eq!(leaves.take(&id(GENERATION * 2 + 9)), Some(leaf));
    }
}
