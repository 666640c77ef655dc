//! Leaf tags: what lets the decision log's worker of one process append a token another
//! process answered without verifying its signature again (docs/audit.md).
//!
//! A process that answers a decision stores with its row, on PostgreSQL, the tag of its
//! token's leaf hash: HMAC-SHA256 under a key derived from the secret of the verdict key
//! that signed it. The worker of any process rebuilds the token from the row, hashes it,
//! and checks the tag with the same derived key: a tag that checks was made by a process
//! holding that signing key for that exact token, so the token is the one answered and
//! its signature is the one made. Forging a tag takes the signing key, which would forge
//! the signature as well: the tag proves no less than the signature, at a hundredth of
//! its cost (one HMAC against an ECDSA verification; docs/audit.md). A row whose tag
//! does not check (changed, made before tags, or by a key this process cannot open) is
//! verified by its signature as before.

use std::collections::HashMap;

use aws_lc_rs::hmac;
use mandate_protocol::tlog::LogHash;

/// What the tag key is derived for, so a signing key derives no other key like it.
const CONTEXT: &[u8] = b"mandate decision log leaf tag v1\0";

/// The key that tags the leaves of the tokens one verdict key signed.
#[derive(Clone)]
pub struct LeafTagKey(hmac::Key);

impl std::fmt::Debug for LeafTagKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeafTagKey(..)")
    }
}

impl LeafTagKey {
    /// The tag key of the verdict key whose secret scalar is `secret`.
    pub fn derive(secret: &[u8]) -> Self {
        let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), CONTEXT);
        Self(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
    }

    /// The tag of `leaf`.
    pub fn tag(&self, leaf: &LogHash) -> LogHash {
        let mut tag = [0u8; 32];
        tag.copy_from_slice(hmac::sign(&self.0, leaf.as_bytes()).as_ref());
        LogHash::from_bytes(tag)
    }

    /// Whether `tag` is `leaf`'s (compared in constant time).
    pub fn checks(&self, leaf: &LogHash, tag: &LogHash) -> bool {
        hmac::verify(&self.0, leaf.as_bytes(), tag.as_bytes()).is_ok()
    }
}

/// The tag key of every verdict key the process opened, by kid.
pub type LeafTagKeys = HashMap<String, LeafTagKey>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mandate_protocol::tlog::leaf_hash;

    #[test]
    fn a_tag_checks_only_for_its_leaf_under_its_key() {
        let key = LeafTagKey::derive(&[7; 32]);
        let other = LeafTagKey::derive(&[8; 32]);
        let leaf = leaf_hash(b"a.b.c");
        let tag = key.tag(&leaf);
        assert!(key.checks(&leaf, &tag));
        assert!(!key.checks(&leaf_hash(b"a.b.d"), &tag));
        assert!(!other.checks(&leaf, &tag));
        assert_ne!(tag, leaf, "a tag is not the leaf hash it tags");
        // The same secret derives the same key in every process.
        assert_eq!(LeafTagKey::derive(&[7; 32]).tag(&leaf), tag);
    }
}
