//! The decision log's entries and its C2SP tlog-tiles as served (docs/audit.md).
//!
//! Each leaf's data, the verdict token it is the hash of, is stored with the log in
//! `log_entries`: a row a strip of `log_strips` (same start, written in the same
//! transaction by [`super::log::LogStore::append_log`], never rewritten), holding the strip's
//! tokens in order, each prefixed by its length as a big-endian 16-bit integer. That is the
//! encoding of a C2SP entry bundle, and strips never cross a multiple of 256 leaves, so entry
//! bundle `N` is the rows from start `N * 256` concatenated, as level-0 tile `N` is the
//! strips' hashes. Nothing here reads a decision's row: what the log holds does not change
//! when a row is changed or deleted.

use mandate_protocol::tlog::{LogHash, TILE_WIDTH, TileId, leaf_hash};

use super::StorageError;
use super::engine::{Columns, Result, Tx};
use super::statements::LogSql;
use crate::model::Env;

/// A resource of a log's tiles (c2sp.org/tlog-tiles): a tile of hashes, or an entry bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileRead {
    /// `tile/<L>/<N>`: hashes of tree level `8 * L`.
    Hashes(TileId),
    /// `tile/entries/<N>`: the data of leaves `N * 256` on.
    Entries(u64),
}

/// Why an entry cannot be stored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    /// Longer than a 16-bit length prefix says.
    #[error("an entry of {0} bytes, more than an entry bundle holds (65,535)")]
    TooLong(usize),
    /// Its hash is not the leaf's.
    #[error("the entry is not the data of its leaf hash")]
    NotTheLeaf,
    /// A bundle whose length prefixes do not add up.
    #[error("an entry bundle cut in the middle of an entry")]
    Cut,
}

/// Appends `data` to `bundle` as an entry (big-endian u16 length, then the bytes), if it
/// is the data of `leaf`.
pub fn push_entry(
    bundle: &mut Vec<u8>,
    data: &[u8],
    leaf: &LogHash,
) -> std::result::Result<(), EntryError> {
    let len = u16::try_from(data.len()).map_err(|_| EntryError::TooLong(data.len()))?;
    if leaf_hash(data) != *leaf {
        return Err(EntryError::NotTheLeaf);
    }
    bundle.extend_from_slice(&len.to_be_bytes());
    bundle.extend_from_slice(data);
    Ok(())
}

/// The first `at_most` entries of `bundle`, each its data without its prefix.
pub fn split_entries(bundle: &[u8], at_most: usize) -> std::result::Result<Vec<&[u8]>, EntryError> {
    let mut out = Vec::new();
    let mut rest = bundle;
    while !rest.is_empty() && out.len() < at_most {
        let [high, low, tail @ ..] = rest else {
            return Err(EntryError::Cut);
        };
        let len = usize::from(u16::from_be_bytes([*high, *low]));
        if tail.len() < len {
            return Err(EntryError::Cut);
        }
        let (data, after) = tail.split_at(len);
        out.push(data);
        rest = after;
    }
    Ok(out)
}

/// The bytes of the first `width` entries of `bundle`, if it holds that many.
fn first_entries(bundle: &[u8], width: usize) -> std::result::Result<Option<&[u8]>, EntryError> {
    let entries = split_entries(bundle, width)?;
    if entries.len() < width {
        return Ok(None);
    }
    let len: usize = entries.iter().map(|e| 2 + e.len()).sum();
    Ok(Some(&bundle[..len]))
}

/// Entry bundle `index`'s first `width` entries, for [`super::log::LogStore::log_tile`]:
/// `None` when the log holds fewer (or `width` is 0 or above 256).
pub(crate) async fn read_bundle<T: Tx>(
    tx: &mut T,
    org: &str,
    env: Env,
    index: u64,
    width: usize,
) -> Result<Option<Vec<u8>>> {
    if width == 0 || width > TILE_WIDTH {
        return Ok(None);
    }
    let start = i64::try_from(index)
        .map_err(|_| StorageError::Corrupt(format!("entry bundle {index}")))?
        .saturating_mul(TILE_WIDTH as i64);
    let params = [org.into(), env.into(), start.into(), (start + 256).into()];
    let read = |r: &dyn Columns| Ok((r.int(0)?, r.bytes(1)?));
    let rows = tx.query(LogSql::EntryRange.into(), &params, read).await?;
    let corrupt = |e: EntryError| {
        StorageError::Corrupt(format!(
            "the entries of the log of {org} ({}) from {start}: {e}",
            env.as_str()
        ))
    };
    // The rows from the bundle's first index, as far as they follow each other (a strip
    // logged before entries were kept has none: the bundle stops there).
    let (mut bundle, mut next) = (Vec::new(), start);
    for (row_start, entries) in rows {
        if row_start != next {
            break;
        }
        next += split_entries(&entries, TILE_WIDTH).map_err(corrupt)?.len() as i64;
        bundle.extend_from_slice(&entries);
    }
    Ok(first_entries(&bundle, width)
        .map_err(corrupt)?
        .map(<[u8]>::to_vec))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_its_length_then_its_bytes_and_only_its_leafs() {
        let mut bundle = Vec::new();
        push_entry(&mut bundle, b"a.b.c", &leaf_hash(b"a.b.c")).unwrap();
        push_entry(&mut bundle, b"", &leaf_hash(b"")).unwrap();
        assert_eq!(bundle, b"\x00\x05a.b.c\x00\x00");
        assert_eq!(
            push_entry(&mut bundle, b"x", &leaf_hash(b"y")),
            Err(EntryError::NotTheLeaf)
        );
        let long = vec![b'x'; 70_000];
        assert_eq!(
            push_entry(&mut bundle, &long, &leaf_hash(&long)),
            Err(EntryError::TooLong(70_000))
        );
        assert_eq!(
            split_entries(&bundle, 9).unwrap(),
            vec![&b"a.b.c"[..], &b""[..]]
        );
        assert_eq!(
            first_entries(&bundle, 1).unwrap(),
            Some(&b"\x00\x05a.b.c"[..])
        );
        assert_eq!(first_entries(&bundle, 3).unwrap(), None);
        assert_eq!(split_entries(&bundle[..4], 9), Err(EntryError::Cut));
    }
}
