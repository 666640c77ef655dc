//! Properties of inclusion and consistency proofs on random trees, against a reference
//! written straight from RFC 9162's recursive definitions (MTH, PATH, SUBPROOF): for every
//! index, the proof made from stored subtrees is the reference proof and verifies; a
//! flipped bit, another index, a changed leaf, a proof one hash short or long are refused;
//! another size is refused exactly when it changes the proof's shape (the sides its hashes
//! are on: RFC 6962 roots do not commit to the size, which is why a checkpoint signs the
//! size with the root).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::HashMap;

use mandate_protocol::tlog::LogHash;
use mandate_protocol::{
    tlog::NodeId, tlog::ProofPlan, tlog::TreeEdge, tlog::verify_consistency, tlog::verify_inclusion,
};
use proptest::prelude::*;

/// A random tree: distinct leaves, the reference's memo, and the stored subtrees.
struct Tree {
    leaves: Vec<LogHash>,
    memo: HashMap<(u64, u64), LogHash>,
    stored: HashMap<NodeId, LogHash>,
}

impl Tree {
    fn new(seed: u64, size: u64) -> Self {
        let leaves: Vec<LogHash> = (0..size)
            .map(|i| mandate_protocol::tlog::leaf_hash(format!("{seed}.{i}.token").as_bytes()))
            .collect();
        let mut stored = HashMap::new();
        let mut edge = TreeEdge::new();
        for leaf in &leaves {
            stored.extend(edge.push(*leaf).unwrap());
        }
        Self {
            leaves,
            memo: HashMap::new(),
            stored,
        }
    }

    /// MTH(D[lo:hi]) by the definition.
    fn mth(&mut self, lo: u64, hi: u64) -> LogHash {
        if let Some(hash) = self.memo.get(&(lo, hi)) {
            return *hash;
        }
        let hash = match hi - lo {
            0 => mandate_protocol::tlog::empty_root(),
            1 => self.leaves[lo as usize],
            n => {
                let k = split(n);
                let (left, right) = (self.mth(lo, lo + k), self.mth(lo + k, hi));
                mandate_protocol::tlog::node_hash(&left, &right)
            }
        };
        self.memo.insert((lo, hi), hash);
        hash
    }

    fn root(&mut self, size: u64) -> LogHash {
        self.mth(0, size)
    }

    fn hashes(&mut self, ranges: &[(u64, u64)]) -> Vec<LogHash> {
        ranges.iter().map(|&(lo, hi)| self.mth(lo, hi)).collect()
    }

    /// The proof of a plan, from the stored complete subtrees only.
    fn stored_proof(&self, plan: &ProofPlan) -> Vec<LogHash> {
        let hashes: Vec<LogHash> = plan.nodes().iter().map(|id| self.stored[id]).collect();
        plan.assemble(&hashes).unwrap()
    }
}

/// The largest power of two below `n`.
fn split(n: u64) -> u64 {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// PATH(m, D[lo:hi]) as the leaf ranges of its hashes, by the definition.
fn path(m: u64, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    if hi - lo <= 1 {
        return Vec::new();
    }
    let k = split(hi - lo);
    if m < k {
        let mut out = path(m, lo, lo + k);
        out.push((lo + k, hi));
        out
    } else {
        let mut out = path(m - k, lo + k, hi);
        out.push((lo, lo + k));
        out
    }
}

/// SUBPROOF(m, D[lo:hi], b) as leaf ranges, by the definition.
fn subproof(m: u64, lo: u64, hi: u64, known: bool) -> Vec<(u64, u64)> {
    let n = hi - lo;
    if m == n {
        return if known { Vec::new() } else { vec![(lo, hi)] };
    }
    let k = split(n);
    if m <= k {
        let mut out = subproof(m, lo, lo + k, known);
        out.push((lo + k, hi));
        out
    } else {
        let mut out = subproof(m - k, lo + k, hi, false);
        out.push((lo, lo + k));
        out
    }
}

/// The sides of an inclusion proof's hashes: whether each is left of the leaf.
fn inclusion_shape(index: u64, size: u64) -> Vec<bool> {
    path(index, 0, size)
        .iter()
        .map(|&(lo, _)| lo < index)
        .collect()
}

/// What a consistency verifier's computation depends on: whether the old tree is complete
/// (its root starts the path), and the sides of the hashes (left of the old size or not).
fn consistency_shape(old: u64, new: u64) -> (bool, Vec<bool>) {
    let sides = subproof(old, 0, new, true)
        .iter()
        .map(|&(lo, _)| lo < old)
        .collect();
    (old.is_power_of_two(), sides)
}

fn flip(proof: &[LogHash], at: usize, bit: u8) -> Vec<LogHash> {
    let mut out = proof.to_vec();
    let mut bytes = *out[at].as_bytes();
    bytes[(bit / 8) as usize % 32] ^= 1 << (bit % 8);
    out[at] = LogHash::from_bytes(bytes);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_inclusion_proof_is_the_reference_and_only_it_verifies(
        seed in any::<u64>(),
        size in 1u64..300,
        bit in any::<u8>(),
        other_size in 1u64..600,
    ) {
        let mut tree = Tree::new(seed, size);
        let root = tree.root(size);
        for index in 0..size {
            let plan = ProofPlan::inclusion(index, size).unwrap();
            let proof = tree.stored_proof(&plan);
            prop_assert_eq!(&proof, &tree.hashes(&path(index, 0, size)));
            let leaf = tree.leaves[index as usize];
            prop_assert_eq!(verify_inclusion(&leaf, index, size, &proof, &root), Ok(()));

            let other_leaf = tree.leaves[((index + 1) % size) as usize];
            if size > 1 {
                prop_assert!(verify_inclusion(&other_leaf, index, size, &proof, &root).is_err());
                let other_index = (index + 1 + u64::from(bit) % (size - 1)) % size;
                prop_assert!(verify_inclusion(&leaf, other_index, size, &proof, &root).is_err());
            }
            if !proof.is_empty() {
                let at = usize::from(bit) % proof.len();
                prop_assert!(verify_inclusion(&leaf, index, size, &flip(&proof, at, bit), &root).is_err());
                prop_assert!(verify_inclusion(&leaf, index, size, &proof[1..], &root).is_err());
                prop_assert!(verify_inclusion(&leaf, index, size, &proof[..proof.len() - 1], &root).is_err());
            }
            let mut longer = proof.clone();
            longer.push(root);
            prop_assert!(verify_inclusion(&leaf, index, size, &longer, &root).is_err());
            let mut longer = vec![leaf];
            longer.extend_from_slice(&proof);
            prop_assert!(verify_inclusion(&leaf, index, size, &longer, &root).is_err());

            if other_size != size && index < other_size {
                let same_shape = inclusion_shape(index, other_size) == inclusion_shape(index, size);
                let verified = verify_inclusion(&leaf, index, other_size, &proof, &root).is_ok();
                prop_assert_eq!(verified, same_shape, "index {} size {} as {}", index, size, other_size);
            }
        }
    }

    #[test]
    fn every_consistency_proof_is_the_reference_and_only_it_verifies(
        seed in any::<u64>(),
        new in 1u64..200,
        bit in any::<u8>(),
        other in 1u64..400,
    ) {
        let mut tree = Tree::new(seed, new);
        let new_root = tree.root(new);
        for old in 1..=new {
            let old_root = tree.root(old);
            let plan = ProofPlan::consistency(old, new).unwrap();
            let proof = tree.stored_proof(&plan);
            prop_assert_eq!(&proof, &tree.hashes(&subproof(old, 0, new, true)));
            prop_assert_eq!(verify_consistency(old, &old_root, new, &new_root, &proof), Ok(()));
            if old == new {
                prop_assert!(proof.is_empty());
                continue;
            }
            let at = usize::from(bit) % proof.len();
            let flipped = flip(&proof, at, bit);
            prop_assert!(verify_consistency(old, &old_root, new, &new_root, &flipped).is_err());
            prop_assert!(verify_consistency(old, &old_root, new, &new_root, &proof[1..]).is_err());
            let mut longer = proof.clone();
            longer.push(new_root);
            prop_assert!(verify_consistency(old, &old_root, new, &new_root, &longer).is_err());
            // Another old tree (the same size, other leaves) is not extended by this one.
            let foreign = Tree::new(seed.wrapping_add(1), old).root(old);
            prop_assert!(verify_consistency(old, &foreign, new, &new_root, &proof).is_err());

            let shape = consistency_shape(old, new);
            if other != new && other >= old {
                let verified = verify_consistency(old, &old_root, other, &new_root, &proof).is_ok();
                prop_assert_eq!(verified, consistency_shape(old, other) == shape);
            }
            if other != old && other <= new {
                let verified = verify_consistency(other, &old_root, new, &new_root, &proof).is_ok();
                prop_assert_eq!(verified, consistency_shape(other, new) == shape);
            }
        }
    }

    #[test]
    fn the_edge_extends_to_every_larger_tree(seed in any::<u64>(), old in 0u64..150, more in 0u64..150) {
        let mut tree = Tree::new(seed, old + more);
        let mut edge = TreeEdge::from_parts(
            old,
            TreeEdge::node_ids(old).iter().map(|id| tree.stored[id]).collect(),
        ).unwrap();
        prop_assert_eq!(edge.root(), tree.root(old));
        for i in old..old + more {
            edge.push(tree.leaves[i as usize]).unwrap();
        }
        prop_assert_eq!(edge.root(), tree.root(old + more));
    }
}
