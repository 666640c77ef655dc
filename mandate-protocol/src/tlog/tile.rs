//! Tiles (c2sp.org/tlog-tiles): how a store keeps a tree in few rows and reads a proof in
//! few reads.
//!
//! A tile at tile level `L`, index `N` holds up to 256 consecutive hashes of tree level
//! `8L`: the roots of the complete subtrees of `256^L` leaves from `(N * 256 + i) *
//! 256^L`. A level-0 tile holds leaf hashes. The seven tree levels between two tile levels
//! are not stored; a node among them is hashed again from the tile below it (at most 128
//! hashes). The rightmost tile of each level is partial (fewer than 256 hashes) until it
//! fills. A tree of a million leaves is about 4,000 tiles of 8 KiB; an inclusion proof in it
//! reads three.
//!
//! Writing: every complete subtree [`crate::tlog::TreeEdge::push`] reports whose level is a
//! multiple of 8 is the next hash of one tile ([`TileId::slot`]); the store appends it.
//! Reading: [`tiles_of`] names the tiles that hold a list of nodes (a [`ProofPlan`]'s, or
//! a tree edge's, [`crate::tlog::TreeEdge::node_ids`]), and [`hashes_from_tiles`] gives
//! the nodes' hashes from them.
//!
//! [`ProofPlan`]: crate::tlog::ProofPlan

use std::collections::{BTreeSet, HashMap};

use super::hash::LogHash;
use super::proof::{NodeId, ProofError};

/// How many tree levels a tile spans.
pub const TILE_HEIGHT: u8 = 8;

/// How many hashes a full tile holds.
pub const TILE_WIDTH: usize = 256;

/// A tile: the hashes of tree level `8 * level` from `index * 256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// The tile level (0 to 7): its hashes are of tree level `8 * level`.
    pub level: u8,
    /// Its place in its level, from the left.
    pub index: u64,
}

impl TileId {
    /// The tile `index` of tile level `level`.
    pub const fn new(level: u8, index: u64) -> Self {
        Self { level, index }
    }

    /// Where a complete subtree is stored when its level is a multiple of 8: its tile and
    /// its position in it. `None` for the levels between, which are not stored.
    pub fn slot(node: NodeId) -> Option<(TileId, usize)> {
        if !node.level.is_multiple_of(TILE_HEIGHT) {
            return None;
        }
        let tile = TileId::new(node.level / TILE_HEIGHT, node.index >> TILE_HEIGHT);
        Some((tile, (node.index % TILE_WIDTH as u64) as usize))
    }

    /// The tile that holds the hashes a node is made of, and their positions in it.
    fn under(node: NodeId) -> (TileId, usize, usize) {
        let below = node.level % TILE_HEIGHT;
        let first = node.index << below;
        let tile = TileId::new(node.level / TILE_HEIGHT, first >> TILE_HEIGHT);
        let start = (first % TILE_WIDTH as u64) as usize;
        (tile, start, start + (1usize << below))
    }
}

/// The tiles that hold `nodes`' hashes, each once, in order.
pub fn tiles_of(nodes: &[NodeId]) -> Vec<TileId> {
    let tiles: BTreeSet<TileId> = nodes.iter().map(|node| TileId::under(*node).0).collect();
    tiles.into_iter().collect()
}

/// The hashes of `nodes`, in their order, from the tiles read ([`tiles_of`]), each given
/// as its hashes from position 0 (a partial tile as far as it goes). Refused when a tile is
/// missing or too short for a node: the store does not hold the tree the nodes are of.
pub fn hashes_from_tiles(
    nodes: &[NodeId],
    tiles: &HashMap<TileId, Vec<LogHash>>,
) -> Result<Vec<LogHash>, ProofError> {
    nodes
        .iter()
        .map(|node| {
            let (tile, start, end) = TileId::under(*node);
            let hashes = tiles
                .get(&tile)
                .and_then(|hashes| hashes.get(start..end))
                .ok_or(ProofError::MissingTile {
                    level: tile.level,
                    index: tile.index,
                })?;
            Ok(complete_root(hashes))
        })
        .collect()
}

/// The root of a complete subtree from its 2^k bottom hashes: pairs hashed level by level.
fn complete_root(hashes: &[LogHash]) -> LogHash {
    let mut row = hashes.to_vec();
    while row.len() > 1 {
        row = row
            .chunks(2)
            .map(|pair| match pair {
                [left, right] => LogHash::node(left, right),
                [single] => *single,
                _ => LogHash::empty(),
            })
            .collect();
    }
    row.first().copied().unwrap_or_else(LogHash::empty)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::tlog::{ProofPlan, TreeEdge, verify_inclusion};

    /// A tree of `size` leaves kept as tiles, as a store would: each completed subtree of
    /// a level multiple of 8 appended to its tile.
    fn tiled(size: u64) -> (HashMap<TileId, Vec<LogHash>>, TreeEdge, Vec<LogHash>) {
        let mut tiles: HashMap<TileId, Vec<LogHash>> = HashMap::new();
        let mut edge = TreeEdge::new();
        let mut leaves = Vec::new();
        for i in 0..size {
            let leaf = LogHash::leaf(&i.to_be_bytes());
            leaves.push(leaf);
            for (node, hash) in edge.push(leaf).unwrap() {
                if let Some((tile, position)) = TileId::slot(node) {
                    let row = tiles.entry(tile).or_default();
                    assert_eq!(row.len(), position, "hashes arrive in order");
                    row.push(hash);
                }
            }
        }
        (tiles, edge, leaves)
    }

    #[test]
    fn a_tree_of_70000_has_the_tiles_of_the_specifications_example() {
        let (tiles, _, _) = tiled(70_000);
        let full = |level: u8| {
            tiles
                .iter()
                .filter(|(t, h)| t.level == level && h.len() == TILE_WIDTH)
                .count()
        };
        let partial = |level: u8| {
            let widths: Vec<usize> = tiles
                .iter()
                .filter(|(t, h)| t.level == level && h.len() < TILE_WIDTH)
                .map(|(_, h)| h.len())
                .collect();
            widths
        };
        assert_eq!((full(0), partial(0)), (273, vec![112]));
        assert_eq!((full(1), partial(1)), (1, vec![17]));
        assert_eq!((full(2), partial(2)), (0, vec![1]));
        assert_eq!(tiles.len(), 273 + 1 + 1 + 1 + 1);
    }

    #[test]
    fn proofs_and_edges_are_read_from_few_tiles() {
        let size = 70_000;
        let (tiles, edge, leaves) = tiled(size);
        for index in [0, 1, 255, 256, 65_535, 65_536, 69_999, 12_345] {
            let plan = ProofPlan::inclusion(index, size).unwrap();
            let needed = tiles_of(plan.nodes());
            assert!(needed.len() <= 4, "{index}: {needed:?}");
            let read: HashMap<TileId, Vec<LogHash>> =
                needed.iter().map(|t| (*t, tiles[t].clone())).collect();
            let proof = plan
                .assemble(&hashes_from_tiles(plan.nodes(), &read).unwrap())
                .unwrap();
            verify_inclusion(&leaves[index as usize], index, size, &proof, &edge.root()).unwrap();
        }
        // Every smaller tree's edge, from the tiles of the larger one.
        for old in [1, 255, 256, 257, 65_536, 69_000] {
            let ids = TreeEdge::node_ids(old);
            let hashes = hashes_from_tiles(&ids, &tiles).unwrap();
            let rebuilt = TreeEdge::from_parts(old, hashes).unwrap();
            assert_eq!(
                rebuilt,
                TreeEdge::from_leaves(&leaves[..old as usize]).unwrap()
            );
        }
    }

    #[test]
    fn a_missing_or_short_tile_is_named() {
        let (mut tiles, _, _) = tiled(300);
        let plan = ProofPlan::inclusion(299, 300).unwrap();
        tiles.get_mut(&TileId::new(0, 1)).unwrap().truncate(10);
        assert_eq!(
            hashes_from_tiles(plan.nodes(), &tiles),
            Err(ProofError::MissingTile { level: 0, index: 1 })
        );
        assert_eq!(TileId::slot(NodeId::new(3, 5)), None);
        assert_eq!(
            TileId::slot(NodeId::new(8, 300)),
            Some((TileId::new(1, 1), 44))
        );
    }
}
