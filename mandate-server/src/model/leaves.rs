//! The tokens this process answered, with their decision log leaf hashes, kept in memory
//! until the checkpoint worker logs them (docs/audit.md).
//!
//! The decision service hashes the token it answers (RFC 6962's leaf hash, one SHA-256)
//! once the decision is committed and leaves the token and its hash here; the worker
//! appends them as they were signed, without reading the decision's row, rebuilding its
//! token or verifying it. A decision the worker does not find here (made by another
//! process, before a restart, or pushed out by newer ones) is read from the store, its
//! token rebuilt and verified before it is appended, so this changes how fast a log is
//! extended, never what it holds: a stored token is rebuilt byte for byte as it was
//! answered.
//!
//! Two generations of at most [`GENERATION`] tokens each: when the newer is full it
//! becomes the older and the older is dropped, so memory stays bounded (about 800 bytes a
//! token, 50 MB at most) whether or not the worker keeps up.

use std::collections::HashMap;
use std::mem;
use std::sync::Mutex;

use mandate_core::DecisionId;
use mandate_protocol::tlog::LogHash;

/// Tokens in a generation, at most: two of them hold several seconds of decisions at the
/// rates one process reaches, more than the worker's default interval of 1 s.
pub const GENERATION: usize = 1 << 15;

/// A token as answered and its leaf hash.
pub type Token = (LogHash, Box<str>);

/// The tokens waiting for the checkpoint worker, by decision.
#[derive(Debug, Default)]
pub struct Answered {
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<DecisionId, Token>,
    older: HashMap<DecisionId, Token>,
}

impl Answered {
    /// Keeps the token answered for the committed decision `id`, with its leaf hash.
    pub fn keep(&self, id: DecisionId, token: Token) {
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if g.newer.len() >= GENERATION {
            let full = mem::take(&mut g.newer);
            g.older = full;
        }
        g.newer.insert(id, token);
    }

    /// The token of decision `id`, if this process kept it; it is not kept after.
    pub fn take(&self, id: &DecisionId) -> Option<Token> {
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        g.newer.remove(id).or_else(|| g.older.remove(id))
    }

    /// How many tokens are kept.
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

    fn token() -> Token {
        (mandate_protocol::tlog::leaf_hash(b"a.b.c"), "a.b.c".into())
    }

    #[test]
    fn a_token_is_taken_once() {
        let answered = Answered::default();
        answered.keep(id(1), token());
        assert_eq!(answered.take(&id(1)), Some(token()));
        assert_eq!(answered.take(&id(1)), None);
        assert!(answered.is_empty());
    }

    #[test]
    fn at_most_two_generations_are_kept_the_oldest_dropped_first() {
        let answered = Answered::default();
        for n in 0..GENERATION * 2 + 10 {
            answered.keep(id(n), token());
        }
        assert_eq!(answered.len(), GENERATION + 10);
        assert_eq!(answered.take(&id(0)), None);
        assert_eq!(answered.take(&id(GENERATION - 1)), None);
        assert_eq!(answered.take(&id(GENERATION)), Some(token()));
        assert_eq!(answered.take(&id(GENERATION * 2 + 9)), Some(token()));
    }
}
