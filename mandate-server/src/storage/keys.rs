//! API keys at the boundary: stored only as SHA-256 hashes.

use sha2::{Digest, Sha256};

// The SQLite functions under this name, until the decision path goes through the boundary.
pub use super::sqlite::keys::*;

/// SHA-256 of an API key. Keys carry 160 random bits, so a plain hash cannot be reversed.
pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A short public handle for a key, for operators: `key_` and 12 hex digits of its hash.
pub fn fingerprint(hash: &[u8; 32]) -> String {
    let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("key_{hex}")
}
