//! RFC 6962 hashing (RFC 9162 §2.1.1): leaves, interior nodes, the empty tree.
//!
//! A leaf's hash is SHA-256(0x00 || its bytes), an interior node's SHA-256(0x01 || left ||
//! right); the two prefixes keep a leaf from ever passing for a node. The root of the empty
//! tree is SHA-256 of nothing.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// A SHA-256 hash of the log's tree: a leaf's, an interior node's or a root.
///
/// Written as standard base64 with padding (44 characters), as in a checkpoint's root line;
/// read strictly: exactly 32 bytes, canonical padding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogHash([u8; 32]);

impl LogHash {
    /// The hash made of these 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The hash of a leaf holding `data` (for a verdict, the token's ASCII bytes):
    /// SHA-256(0x00 || data).
    pub(crate) fn leaf(data: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update([0x00]);
        hasher.update(data);
        Self(hasher.finalize().into())
    }

    /// The hash of an interior node: SHA-256(0x01 || left || right).
    pub(crate) fn node(left: &LogHash, right: &LogHash) -> Self {
        let mut hasher = Sha256::new();
        hasher.update([0x01]);
        hasher.update(left.0);
        hasher.update(right.0);
        Self(hasher.finalize().into())
    }

    /// The root of the empty tree: SHA-256 of no bytes.
    pub(crate) fn empty() -> Self {
        Self(Sha256::digest([]).into())
    }

    /// Reads standard base64 with padding of exactly 32 bytes; `None` for anything else.
    pub fn from_base64(text: &str) -> Option<Self> {
        // 32 bytes are 44 characters; checking first keeps a long input from being decoded.
        if text.len() != 44 {
            return None;
        }
        let mut bytes = [0u8; 32];
        match STANDARD.decode_slice(text, &mut bytes) {
            Ok(32) => Some(Self(bytes)),
            _ => None,
        }
    }

    /// Standard base64 with padding.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

impl fmt::Display for LogHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl fmt::Debug for LogHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogHash({})", self.to_base64())
    }
}

impl Serialize for LogHash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for LogHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::from_base64(&text).ok_or_else(|| {
            serde::de::Error::custom("a log hash must be 32 bytes of standard base64 with padding")
        })
    }
}

/// The hash of a run of complete subtrees, largest first, that together make one RFC 6962
/// subtree: folded from the right. `None` for no subtree.
pub(crate) fn fold_right(nodes: &[LogHash]) -> Option<LogHash> {
    let (last, rest) = nodes.split_last()?;
    Some(
        rest.iter()
            .rev()
            .fold(*last, |right, left| LogHash::node(left, &right)),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn hashes_read_base64_strictly() {
        let hash = LogHash::leaf(b"x");
        assert_eq!(LogHash::from_base64(&hash.to_base64()), Some(hash));
        let text = hash.to_base64();
        for bad in [
            &text[..43],
            &text.replace('=', ""),
            &format!("{text}="),
            &text.replace('=', "A"),
            "V3JvbmdMZWFm",
            "",
        ] {
            assert_eq!(LogHash::from_base64(bad), None, "{bad}");
        }
        // The last character before the padding carries two unused bits: set, they are
        // not the canonical encoding of any 32 bytes.
        let zeros = LogHash::from_bytes([0; 32]).to_base64();
        assert_eq!(&zeros[40..], "AAA=");
        assert_eq!(LogHash::from_base64(&format!("{}AAB=", &zeros[..40])), None);
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(serde_json::from_str::<LogHash>(&json).unwrap(), hash);
    }
}
