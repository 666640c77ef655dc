//! The paths of a log's tiles and entry bundles under its prefix (c2sp.org/tlog-tiles):
//! `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]`, `<N>` in 3-digit path elements,
//! all but the last prefixed with `x` (1234067 is `x001/x234/067`), `<W>` a partial tile's
//! width (1 to 255). Parsing accepts only the one canonical spelling of each resource, so a
//! resource has one URL (and one cache entry).

use super::tile::{TILE_WIDTH, TileId};

/// A resource of the tiles API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePath {
    /// The level: `None` for the entry bundles.
    pub level: Option<u8>,
    /// The tile's index in its level.
    pub index: u64,
    /// Its width: 256 for a full tile, 1 to 255 for a partial one.
    pub width: usize,
}

impl TilePath {
    /// The tile of hashes, for a level.
    pub fn tile(&self) -> Option<TileId> {
        self.level.map(|level| TileId::new(level, self.index))
    }

    /// Whether it is full (immutable: it never changes once the log holds it).
    pub fn is_full(&self) -> bool {
        self.width == TILE_WIDTH
    }

    /// How many leaves a tree needs to hold it whole: `(N * 256 + W) * 256^L`; `None`
    /// past `u64`.
    pub fn leaves_needed(&self) -> Option<u64> {
        let below = 1u64.checked_shl(8 * u32::from(self.level.unwrap_or(0)))?;
        self.index
            .checked_mul(TILE_WIDTH as u64)?
            .checked_add(self.width as u64)?
            .checked_mul(below)
    }

    /// Parses the path after `tile/`: `None` unless it is a resource's canonical path.
    /// Levels are 0 to 63 as the spec allows (a log of `u64` leaves uses 0 to 7).
    pub fn parse(path: &str) -> Option<Self> {
        let (level, rest) = path.split_once('/')?;
        let level = match level {
            "entries" => None,
            digits => Some(decimal(digits).filter(|l| *l <= 63)? as u8),
        };
        let (index, width) = match rest.split_once(".p/") {
            Some((index, width)) => {
                let width = decimal(width).filter(|w| (1..TILE_WIDTH as u64).contains(w))?;
                (index, width as usize)
            }
            None => (rest, TILE_WIDTH),
        };
        let parsed = Self {
            level,
            index: index_of(index)?,
            width,
        };
        (parsed.to_string() == path).then_some(parsed)
    }
}

impl std::fmt::Display for TilePath {
    /// The path after `tile/`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.level {
            Some(level) => write!(f, "{level}/")?,
            None => f.write_str("entries/")?,
        }
        let mut groups = Vec::new();
        let mut n = self.index;
        loop {
            groups.push(n % 1000);
            n /= 1000;
            if n == 0 {
                break;
            }
        }
        for (i, group) in groups.iter().rev().enumerate() {
            let prefix = if i + 1 < groups.len() { "x" } else { "" };
            let slash = if i + 1 < groups.len() { "/" } else { "" };
            write!(f, "{prefix}{group:03}{slash}")?;
        }
        if self.width != TILE_WIDTH {
            write!(f, ".p/{}", self.width)?;
        }
        Ok(())
    }
}

/// A decimal of ASCII digits (the canonical check rejects leading zeros afterwards).
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The index of `x001/x234/067`.
fn index_of(text: &str) -> Option<u64> {
    let groups: Vec<&str> = text.split('/').collect();
    let mut index = 0u64;
    for (i, group) in groups.iter().enumerate() {
        let digits = if i + 1 < groups.len() {
            group.strip_prefix('x')?
        } else {
            group
        };
        if digits.len() != 3 {
            return None;
        }
        index = index.checked_mul(1000)?.checked_add(decimal(digits)?)?;
    }
    Some(index)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn path(level: Option<u8>, index: u64, width: usize) -> TilePath {
        TilePath {
            level,
            index,
            width,
        }
    }

    #[test]
    fn paths_are_spelled_as_the_spec_spells_them() {
        assert_eq!(path(Some(0), 1_234_067, 256).to_string(), "0/x001/x234/067");
        assert_eq!(path(Some(2), 5, 17).to_string(), "2/005.p/17");
        assert_eq!(path(None, 1000, 256).to_string(), "entries/x001/000");
        assert_eq!(path(None, 0, 1).to_string(), "entries/000.p/1");
        for p in [
            path(Some(0), 1_234_067, 256),
            path(Some(1), 0, 255),
            path(None, 999, 256),
            path(None, u64::MAX, 3),
        ] {
            assert_eq!(TilePath::parse(&p.to_string()), Some(p));
        }
    }

    #[test]
    fn only_the_canonical_spelling_parses() {
        for bad in [
            "0/x000/005",
            "0/5",
            "0/0005",
            "00/005",
            "64/000",
            "0/005.p/0",
            "0/005.p/256",
            "0/005.p/07",
            "0/005/",
            "0/y001/005",
            "0/x001",
            "entry/000",
            "0/005.p/",
            "0/-01",
        ] {
            assert_eq!(TilePath::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tile_needs_the_leaves_below_its_last_hash() {
        assert_eq!(path(Some(0), 0, 256).leaves_needed(), Some(256));
        assert_eq!(path(Some(0), 1, 3).leaves_needed(), Some(259));
        assert_eq!(path(Some(1), 0, 2).leaves_needed(), Some(512));
        assert_eq!(path(None, 2, 256).leaves_needed(), Some(768));
        assert_eq!(path(Some(7), u64::MAX / 2, 256).leaves_needed(), None);
    }
}
