//! The right edge of a tree: what extends it leaf by leaf and gives its root.
//!
//! [`TreeEdge`] holds the roots of a tree's complete subtrees, one per set bit of its size
//! (at most 64 hashes, whatever the size).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::hash::{LogHash, fold_right};
use super::proof::{NodeId, ProofError};

/// The right edge of a tree of `size` leaves: the roots of its complete subtrees, largest
/// (leftmost) first, one per set bit of `size`. From it the tree's root is computed and
/// leaves are appended; nothing else of the tree is needed for either.
///
/// An auditor keeps it between runs to extend the tree it checked; the service's
/// checkpoint worker reads it from the stored nodes ([`TreeEdge::node_ids`]), appends the
/// new leaves and stores the nodes each append completes.
///
/// ```
/// use mandate_protocol::tlog::{TreeEdge, leaf_hash, node_hash};
///
/// let mut edge = TreeEdge::new();
/// for token in ["a.b.c", "d.e.f", "g.h.i"] {
///     edge.push(leaf_hash(token.as_bytes()))?;
/// }
/// assert_eq!(edge.size(), 3);
/// // Two complete subtrees: leaves 0-1 and leaf 2.
/// assert_eq!(edge.nodes().len(), 2);
/// let expected = node_hash(
///     &node_hash(&leaf_hash(b"a.b.c"), &leaf_hash(b"d.e.f")),
///     &leaf_hash(b"g.h.i"),
/// );
/// assert_eq!(edge.root(), expected);
/// # Ok::<(), mandate_protocol::tlog::ProofError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeEdge {
    size: u64,
    nodes: Vec<LogHash>,
}

impl TreeEdge {
    /// The edge of the empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// The edge of a tree of `size` leaves from its complete subtrees' roots, in the order
    /// of [`TreeEdge::node_ids`]; refused when their number is not the number of set bits
    /// of `size`.
    pub fn from_parts(size: u64, nodes: Vec<LogHash>) -> Result<Self, ProofError> {
        let expected = size.count_ones() as usize;
        if nodes.len() != expected {
            return Err(ProofError::HashCount {
                expected,
                found: nodes.len(),
            });
        }
        Ok(Self { size, nodes })
    }

    /// The edge of the tree of these leaf hashes.
    pub fn from_leaves<'a>(
        leaves: impl IntoIterator<Item = &'a LogHash>,
    ) -> Result<Self, ProofError> {
        let mut edge = Self::new();
        for leaf in leaves {
            edge.push(*leaf)?;
        }
        Ok(edge)
    }

    /// Which complete subtrees make up the edge of a tree of `size` leaves, largest first:
    /// what to read from a store of complete subtree hashes to rebuild the edge.
    pub fn node_ids(size: u64) -> Vec<NodeId> {
        let mut ids = Vec::with_capacity(size.count_ones() as usize);
        let mut start = 0u64;
        for level in (0..64u8).rev() {
            if size & (1u64 << level) != 0 {
                ids.push(NodeId::new(level, start >> level));
                start += 1u64 << level;
            }
        }
        ids
    }

    /// How many leaves the tree holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The roots of the complete subtrees, largest first.
    pub fn nodes(&self) -> &[LogHash] {
        &self.nodes
    }

    /// Appends a leaf; returns every complete subtree this append completes, the leaf
    /// itself first, then each parent up to the largest, with its hash: what a store of
    /// complete subtree hashes writes for this leaf. Refused only when the tree already
    /// holds 2^64 - 1 leaves.
    pub fn push(&mut self, leaf: LogHash) -> Result<Vec<(NodeId, LogHash)>, ProofError> {
        let index = self.size;
        let size = index.checked_add(1).ok_or(ProofError::TreeFull)?;
        let mut completed = vec![(NodeId::new(0, index), leaf)];
        let mut hash = leaf;
        let mut level = 0u8;
        // Each set low bit of the old size is a complete subtree of that level just left of
        // the new leaf: merge them, lowest first.
        while index & (1u64 << level) != 0 {
            let left = self.nodes.pop().ok_or(ProofError::TreeFull)?;
            hash = LogHash::node(&left, &hash);
            level += 1;
            completed.push((NodeId::new(level, index >> level), hash));
        }
        self.nodes.push(hash);
        self.size = size;
        Ok(completed)
    }

    /// The tree's root (RFC 9162 §2.1.1: the complete subtrees folded from the right).
    pub fn root(&self) -> LogHash {
        fold_right(&self.nodes).unwrap_or_else(LogHash::empty)
    }
}

#[derive(Serialize, Deserialize)]
struct TreeEdgeWire {
    size: u64,
    nodes: Vec<LogHash>,
}

impl Serialize for TreeEdge {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TreeEdgeWire {
            size: self.size,
            nodes: self.nodes.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TreeEdge {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = TreeEdgeWire::deserialize(deserializer)?;
        Self::from_parts(wire.size, wire.nodes).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The root of `leaves` by the definition of RFC 9162 §2.1.1, recursively: the split
    /// at the largest power of two below the size.
    fn reference_root(leaves: &[LogHash]) -> LogHash {
        match leaves.len() {
            0 => LogHash::empty(),
            1 => leaves[0],
            n => {
                let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
                LogHash::node(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
            }
        }
    }

    fn leaves(n: usize) -> Vec<LogHash> {
        (0..n).map(|i| LogHash::leaf(&i.to_be_bytes())).collect()
    }

    #[test]
    fn the_edge_gives_the_root_of_the_definition_at_every_size() {
        let all = leaves(70);
        let mut edge = TreeEdge::new();
        assert_eq!(edge.root(), reference_root(&[]));
        for (i, leaf) in all.iter().enumerate() {
            edge.push(*leaf).unwrap();
            assert_eq!(edge.root(), reference_root(&all[..=i]), "size {}", i + 1);
            assert_eq!(edge.nodes().len(), (i + 1).count_ones() as usize);
        }
    }

    #[test]
    fn push_reports_each_completed_subtree_with_the_hash_of_its_leaves() {
        let all = leaves(16);
        let mut edge = TreeEdge::new();
        for leaf in &all {
            for (id, hash) in edge.push(*leaf).unwrap() {
                let (start, end) = id.leaves();
                assert_eq!(
                    hash,
                    reference_root(&all[start as usize..end as usize]),
                    "{id:?}"
                );
            }
        }
        // Leaf 7 completes leaves 6-7, 4-7 and 0-7.
        let mut edge = TreeEdge::from_leaves(&all[..7]).unwrap();
        let ids: Vec<NodeId> = edge
            .push(all[7])
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            ids,
            [
                NodeId::new(0, 7),
                NodeId::new(1, 3),
                NodeId::new(2, 1),
                NodeId::new(3, 0)
            ]
        );
    }

    #[test]
    fn node_ids_name_the_edge_that_push_builds() {
        let all = leaves(45);
        for size in 0..all.len() {
            let edge = TreeEdge::from_leaves(&all[..size]).unwrap();
            let ids = TreeEdge::node_ids(size as u64);
            let hashes: Vec<LogHash> = ids
                .iter()
                .map(|id| {
                    let (start, end) = id.leaves();
                    reference_root(&all[start as usize..end as usize])
                })
                .collect();
            assert_eq!(hashes, edge.nodes(), "size {size}");
            assert_eq!(TreeEdge::from_parts(size as u64, hashes).unwrap(), edge);
        }
    }

    #[test]
    fn an_edge_with_the_wrong_number_of_nodes_is_refused() {
        assert_eq!(
            TreeEdge::from_parts(5, leaves(1)),
            Err(ProofError::HashCount {
                expected: 2,
                found: 1
            })
        );
        let text = r#"{"size":3,"nodes":[]}"#;
        assert!(serde_json::from_str::<TreeEdge>(text).is_err());
    }

    #[test]
    fn a_full_tree_refuses_another_leaf() {
        let mut edge = TreeEdge::from_parts(u64::MAX, vec![LogHash::empty(); 64]).unwrap();
        assert_eq!(edge.push(LogHash::empty()), Err(ProofError::TreeFull));
        assert_eq!(edge.size(), u64::MAX);
    }
}
