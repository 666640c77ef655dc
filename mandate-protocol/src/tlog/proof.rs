//! Inclusion and consistency proofs (RFC 9162 §2.1.3 and §2.1.4): made from stored node
//! hashes, and verified.
//!
//! Making a proof is split in two so that the caller can read what it needs in one go:
//! [`ProofPlan::inclusion`] or [`ProofPlan::consistency`] names the complete subtrees whose
//! hashes the proof is made of ([`ProofPlan::nodes`]); the caller reads them from wherever
//! it keeps them (one query for all), and [`ProofPlan::assemble`] makes the proof. Each
//! hash of a proof is the root of an RFC 6962 subtree; when that subtree is not complete
//! (it runs into the tree's right edge) it is computed from the complete subtrees that
//! make it up, so only complete subtrees are ever stored.
//!
//! [`verify_inclusion`] and [`verify_consistency`] are the algorithms of RFC 9162
//! §2.1.3.2 and §2.1.4.2, with the proof's length checked first so that a proof one hash
//! short or long is named as such.

use super::hash::{LogHash, fold_right};

/// A complete subtree of a log's tree: the `2^level` leaves from `index * 2^level`.
/// Level 0 is a leaf. Its hash never changes once the tree holds all its leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// Height above the leaves (0 to 63).
    pub level: u8,
    /// Position among the subtrees of its level, from the left.
    pub index: u64,
}

impl NodeId {
    /// The subtree of `2^level` leaves at `index` of that level.
    pub const fn new(level: u8, index: u64) -> Self {
        Self { level, index }
    }

    /// The leaves it covers, `[start, end)`. Saturates at `u64::MAX` for a subtree that
    /// would end past it (no tree of a `u64` size holds one).
    pub fn leaves(&self) -> (u64, u64) {
        let start = self
            .index
            .checked_shl(self.level.into())
            .unwrap_or(u64::MAX);
        let width = 1u64.checked_shl(self.level.into()).unwrap_or(u64::MAX);
        (start, start.saturating_add(width))
    }
}

/// Why a proof could not be made or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The leaf index is not below the tree size.
    #[error("leaf index {index} is not in a tree of {size} leaves")]
    IndexOutOfRange {
        /// The leaf's index.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("a tree of {old} leaves cannot grow into one of {new}")]
    Shrinks {
        /// The older tree's size.
        old: u64,
        /// The newer tree's size.
        new: u64,
    },
    /// A consistency proof from the empty tree: there is nothing to prove (RFC 9162
    /// defines none), so any such proof is refused.
    #[error("a consistency proof from the empty tree proves nothing: check the leaves instead")]
    FromEmpty,
    /// The proof has another number of hashes than this index and size need.
    #[error("the proof has {found} hashes where {expected} are needed")]
    WrongLength {
        /// How many the index and size need.
        expected: usize,
        /// How many it has.
        found: usize,
    },
    /// The proof does not lead from the leaf (or the old root) to the root given.
    #[error(
        "the proof does not lead to the root: the leaf, the index, the size or a hash is wrong"
    )]
    RootMismatch,
    /// The old root of a consistency proof is not the one the proof leads to.
    #[error("the proof does not lead to the old root: the trees are not consistent")]
    OldRootMismatch,
    /// Another number of hashes than the plan or the edge needs.
    #[error("{found} hashes given where {expected} are needed")]
    HashCount {
        /// How many are needed.
        expected: usize,
        /// How many were given.
        found: usize,
    },
    /// The tree already holds 2^64 - 1 leaves.
    #[error("the tree is full")]
    TreeFull,
    /// A tile a node needs was not given, or is narrower than the node needs.
    #[error(
        "tile {index} of level {level} is missing or too short: the store does not hold this tree"
    )]
    MissingTile {
        /// The tile's level.
        level: u8,
        /// Its index.
        index: u64,
    },
}

/// How to make one proof from stored node hashes: which complete subtrees to read, and how
/// to put their hashes together.
///
/// ```
/// use mandate_protocol::tlog::{LogHash, ProofPlan, TreeEdge, leaf_hash, verify_inclusion};
///
/// // A store of complete subtree hashes, as the checkpoint worker writes it.
/// let leaves: Vec<LogHash> = (0u8..7).map(|i| leaf_hash(&[i])).collect();
/// let mut stored = std::collections::HashMap::new();
/// let mut edge = TreeEdge::new();
/// for leaf in &leaves {
///     stored.extend(edge.push(*leaf)?);
/// }
///
/// let plan = ProofPlan::inclusion(2, 7)?;
/// let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| stored[id]).collect();
/// let proof = plan.assemble(&hashes)?;
/// verify_inclusion(&leaves[2], 2, 7, &proof, &edge.root())?;
/// # Ok::<(), mandate_protocol::tlog::ProofError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofPlan {
    nodes: Vec<NodeId>,
    /// How many consecutive nodes make each hash of the proof, in proof order.
    parts: Vec<usize>,
}

impl ProofPlan {
    /// The plan of the inclusion proof of leaf `index` in the tree of `size` leaves
    /// (RFC 9162 §2.1.3.1).
    pub fn inclusion(index: u64, size: u64) -> Result<Self, ProofError> {
        Ok(Self::from_ranges(inclusion_ranges(index, size)?))
    }

    /// The plan of the consistency proof from the tree of `old_size` leaves to the tree of
    /// `new_size` (RFC 9162 §2.1.4.1). Empty when the sizes are equal.
    pub fn consistency(old_size: u64, new_size: u64) -> Result<Self, ProofError> {
        Ok(Self::from_ranges(consistency_ranges(old_size, new_size)?))
    }

    fn from_ranges(ranges: Vec<(u64, u64)>) -> Self {
        let mut nodes = Vec::new();
        let mut parts = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            let before = nodes.len();
            complete_subtrees(start, end, &mut nodes);
            parts.push(nodes.len() - before);
        }
        Self { nodes, parts }
    }

    /// The complete subtrees to read, in the order [`ProofPlan::assemble`] takes their
    /// hashes. None appears twice.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// How many hashes the proof has.
    pub fn proof_len(&self) -> usize {
        self.parts.len()
    }

    /// The proof, from the hashes of [`ProofPlan::nodes`] in that order.
    pub fn assemble(&self, hashes: &[LogHash]) -> Result<Vec<LogHash>, ProofError> {
        if hashes.len() != self.nodes.len() {
            return Err(ProofError::HashCount {
                expected: self.nodes.len(),
                found: hashes.len(),
            });
        }
        let mut proof = Vec::with_capacity(self.parts.len());
        let mut rest = hashes;
        for &count in &self.parts {
            let (part, after) = rest.split_at(count);
            proof.push(fold_right(part).ok_or(ProofError::HashCount {
                expected: self.nodes.len(),
                found: hashes.len(),
            })?);
            rest = after;
        }
        Ok(proof)
    }
}

/// The largest power of two below `n` (`n` at least 2).
fn split_point(n: u64) -> u64 {
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The leaf ranges whose roots make the inclusion proof of `index` in a tree of `size`,
/// in proof order (from the leaf up): RFC 9162's PATH, unrolled.
fn inclusion_ranges(index: u64, size: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let mut ranges = Vec::new();
    let (mut start, mut end) = (0u64, size);
    while end - start > 1 {
        let k = split_point(end - start);
        if index - start < k {
            ranges.push((start + k, end));
            end = start + k;
        } else {
            ranges.push((start, start + k));
            start += k;
        }
    }
    ranges.reverse();
    Ok(ranges)
}

/// The leaf ranges whose roots make the consistency proof from `old` to `new` leaves, in
/// proof order: RFC 9162's SUBPROOF(old, D\[new\], true), unrolled.
fn consistency_ranges(old: u64, new: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if old > new {
        return Err(ProofError::Shrinks { old, new });
    }
    if old == 0 {
        return Err(ProofError::FromEmpty);
    }
    let mut ranges = Vec::new();
    let (mut start, mut end) = (0u64, new);
    // Whether the subtree in hand is one the verifier already knows (the old root itself).
    let mut known = true;
    loop {
        let (n, m) = (end - start, old - start);
        if m == n {
            if !known {
                ranges.push((start, end));
            }
            break;
        }
        let k = split_point(n);
        if m <= k {
            ranges.push((start + k, end));
            end = start + k;
        } else {
            ranges.push((start, start + k));
            start += k;
            known = false;
        }
    }
    ranges.reverse();
    Ok(ranges)
}

/// Appends the complete subtrees that make up the leaves `[start, end)`, largest first.
/// For the ranges of a proof `start` is a multiple of the largest power of two not above
/// the length, so these are its RFC 6962 subtrees, and folding their hashes from the right
/// gives its root.
fn complete_subtrees(start: u64, end: u64, out: &mut Vec<NodeId>) {
    let mut at = start;
    while at < end {
        let fits = 63 - (end - at).leading_zeros();
        let aligned = at.trailing_zeros().min(63);
        let level = fits.min(aligned) as u8;
        out.push(NodeId::new(level, at >> level));
        at += 1u64 << level;
    }
}

/// Checks that `leaf` is the leaf at `index` of the tree of `size` leaves whose root is
/// `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    leaf: &LogHash,
    index: u64,
    size: u64,
    proof: &[LogHash],
    root: &LogHash,
) -> Result<(), ProofError> {
    let expected = inclusion_ranges(index, size)?.len();
    if proof.len() != expected {
        return Err(ProofError::WrongLength {
            expected,
            found: proof.len(),
        });
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return Err(ProofError::RootMismatch);
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = LogHash::node(p, &r);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = LogHash::node(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn == 0 && r == *root {
        Ok(())
    } else {
        Err(ProofError::RootMismatch)
    }
}

/// Checks that the tree of `new_size` leaves with root `new_root` extends the tree of
/// `old_size` leaves with root `old_root`: its first `old_size` leaves are those of the
/// older tree (RFC 9162 §2.1.4.2). Equal sizes need equal roots and an empty proof; a
/// proof from the empty tree is refused ([`ProofError::FromEmpty`]).
pub fn verify_consistency(
    old_size: u64,
    old_root: &LogHash,
    new_size: u64,
    new_root: &LogHash,
    proof: &[LogHash],
) -> Result<(), ProofError> {
    let expected = consistency_ranges(old_size, new_size)?.len();
    if proof.len() != expected {
        return Err(ProofError::WrongLength {
            expected,
            found: proof.len(),
        });
    }
    if old_size == new_size {
        return if old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::RootMismatch)
        };
    }
    // When the old tree is a complete subtree, the verifier knows its root: it starts the
    // path (step 2 of §2.1.4.2).
    let mut path = Vec::with_capacity(proof.len() + 1);
    if old_size.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::RootMismatch);
    };
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if sn == 0 {
            return Err(ProofError::RootMismatch);
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = LogHash::node(c, &fr);
            sr = LogHash::node(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = LogHash::node(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 || sr != *new_root {
        return Err(ProofError::RootMismatch);
    }
    if fr != *old_root {
        return Err(ProofError::OldRootMismatch);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::tlog::TreeEdge;
    use std::collections::HashMap;

    fn tree(n: u64) -> (Vec<LogHash>, HashMap<NodeId, LogHash>, TreeEdge) {
        let leaves: Vec<LogHash> = (0..n).map(|i| LogHash::leaf(&i.to_be_bytes())).collect();
        let mut stored = HashMap::new();
        let mut edge = TreeEdge::new();
        for leaf in &leaves {
            stored.extend(edge.push(*leaf).unwrap());
        }
        (leaves, stored, edge)
    }

    fn make(plan: &ProofPlan, stored: &HashMap<NodeId, LogHash>) -> Vec<LogHash> {
        let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| stored[id]).collect();
        plan.assemble(&hashes).unwrap()
    }

    #[test]
    fn every_inclusion_proof_of_small_trees_verifies_and_only_at_its_index() {
        for size in 1..=33u64 {
            let (leaves, stored, edge) = tree(size);
            for index in 0..size {
                let plan = ProofPlan::inclusion(index, size).unwrap();
                let proof = make(&plan, &stored);
                let leaf = &leaves[index as usize];
                assert_eq!(
                    verify_inclusion(leaf, index, size, &proof, &edge.root()),
                    Ok(())
                );
                let other = (index + 1) % size;
                if other != index {
                    assert!(verify_inclusion(leaf, other, size, &proof, &edge.root()).is_err());
                }
            }
        }
    }

    #[test]
    fn every_consistency_proof_of_small_trees_verifies() {
        let (_, stored, _) = tree(33);
        for new in 1..=33u64 {
            let new_root = TreeEdge::from_parts(
                new,
                TreeEdge::node_ids(new)
                    .iter()
                    .map(|id| stored[id])
                    .collect(),
            )
            .unwrap()
            .root();
            for old in 1..=new {
                let old_root = TreeEdge::from_parts(
                    old,
                    TreeEdge::node_ids(old)
                        .iter()
                        .map(|id| stored[id])
                        .collect(),
                )
                .unwrap()
                .root();
                let proof = make(&ProofPlan::consistency(old, new).unwrap(), &stored);
                assert_eq!(
                    verify_consistency(old, &old_root, new, &new_root, &proof),
                    Ok(()),
                    "{old} -> {new}"
                );
            }
        }
    }

    #[test]
    fn plans_read_few_nodes() {
        // A leaf in a tree of a million: at most one node a level, plus the right edge.
        let plan = ProofPlan::inclusion(123_456, 1_000_000).unwrap();
        assert_eq!(plan.proof_len(), 20);
        assert!(plan.nodes().len() <= 40, "{}", plan.nodes().len());
        let plan = ProofPlan::consistency(999_999, 1_000_000).unwrap();
        assert!(plan.nodes().len() <= 40, "{}", plan.nodes().len());
    }

    #[test]
    fn bad_arguments_are_named() {
        assert_eq!(
            ProofPlan::inclusion(5, 5),
            Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
        );
        assert_eq!(
            ProofPlan::consistency(6, 5),
            Err(ProofError::Shrinks { old: 6, new: 5 })
        );
        assert_eq!(ProofPlan::consistency(0, 5), Err(ProofError::FromEmpty));
        let plan = ProofPlan::inclusion(0, 4).unwrap();
        assert_eq!(
            plan.assemble(&[]),
            Err(ProofError::HashCount {
                expected: 2,
                found: 0
            })
        );
        let root = LogHash::empty();
        assert_eq!(
            verify_inclusion(&root, 0, 4, &[root], &root),
            Err(ProofError::WrongLength {
                expected: 2,
                found: 1
            })
        );
    }

    #[test]
    fn node_ids_cover_their_leaves() {
        assert_eq!(NodeId::new(0, 7).leaves(), (7, 8));
        assert_eq!(NodeId::new(3, 2).leaves(), (16, 24));
        assert_eq!(NodeId::new(63, 1).leaves(), (1 << 63, u64::MAX));
    }
}
