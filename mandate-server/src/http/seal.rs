//! Stored idempotent responses, sealed with a key the database does not hold.
//!
//! A replay must return exactly what was first answered, and the answer to
//! `POST /v1/agents` holds the new agent's key: stored as it is, the key would sit in
//! plaintext at rest for 24 hours. So every stored response body is sealed with AES-256-GCM
//! under a key derived from the caller's raw API key and the Idempotency-Key
//! (HMAC-SHA256(raw key, context ‖ Idempotency-Key)). The database holds only the API key's
//! SHA-256, from which the sealing key can't be derived; the retry carries the raw key, so
//! it can open its own record. The response status is bound as associated data.
//!
//! A sealed body is `0x01 ‖ nonce (12 bytes, random) ‖ ciphertext ‖ tag (16 bytes)`. A
//! stored JSON body never starts with `0x01`, so a record written before bodies were sealed
//! is recognized and replayed as it is.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;

use crate::clock::fill_random;

/// The first byte of a sealed body.
const VERSION: u8 = 1;

/// What the derivation is for, so that the same API key derives no other key like it.
const CONTEXT: &[u8] = b"mandate idempotency response seal v1\0";

/// The sealing key of one (API key, Idempotency-Key) pair. Never printed.
#[derive(Clone)]
pub struct SealKey([u8; 32]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

impl Drop for SealKey {
    fn drop(&mut self) {
        // Best effort: the key does not outlive its request in this process's memory.
        self.0.fill(0);
    }
}

/// A body sealed by [`SealKey::seal`]: the only form the idempotency store keeps.
pub use crate::storage::idempotency::Sealed;

/// Sealing or opening failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The cipher refused the key or the input (which no response body makes it do).
    #[error("the response could not be sealed")]
    Seal,
    /// A stored body could not be opened: tampered with, or sealed under another key.
    #[error("the stored response could not be opened")]
    Open,
}

impl SealKey {
    /// The key for `idem_key` under the raw API key `api_key`.
    pub fn derive(api_key: &str, idem_key: &str) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, api_key.as_bytes());
        let mut context = hmac::Context::with_key(&key);
        context.update(CONTEXT);
        context.update(idem_key.as_bytes());
        let tag = context.sign();
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        Self(out)
    }

    fn aead(&self, error: SealError) -> Result<LessSafeKey, SealError> {
        let unbound = UnboundKey::new(&AES_256_GCM, &self.0).map_err(|_| error)?;
        Ok(LessSafeKey::new(unbound))
    }

    /// Seals the response `body` answered with `status`.
    pub fn seal(&self, status: u16, body: &[u8]) -> Result<Sealed, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        fill_random(&mut nonce);
        let mut out = Vec::with_capacity(1 + NONCE_LEN + body.len() + AES_256_GCM.tag_len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        let mut in_out = body.to_vec();
        self.aead(SealError::Seal)?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(status.to_be_bytes()),
                &mut in_out,
            )
            .map_err(|_| SealError::Seal)?;
        out.extend_from_slice(&in_out);
        Ok(Sealed(out))
    }

    /// The body stored for `status`: opened if sealed, as it is if stored before sealing.
    pub fn open(&self, status: u16, stored: &[u8]) -> Result<Vec<u8>, SealError> {
        let Some((&VERSION, rest)) = stored.split_first() else {
            return Ok(stored.to_vec());
        };
        if rest.len() < NONCE_LEN {
            return Err(SealError::Open);
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Open)?;
        let mut in_out = sealed.to_vec();
        let plain = self
            .aead(SealError::Open)?
            .open_in_place(nonce, Aad::from(status.to_be_bytes()), &mut in_out)
            .map_err(|_| SealError::Open)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"id":"agt_a","agent_key":"ak_sandbox_0123456789abcdef"}"#;

    #[test]
    fn a_sealed_body_opens_only_with_its_keys_and_status() {
        let key = SealKey::derive("sk_sandbox_one", "retry-1");
        let sealed = key.seal(201, BODY).unwrap();
        assert_eq!(sealed.0[0], VERSION);
        assert_eq!(sealed.0.len(), 1 + 12 + BODY.len() + 16);
        // Nothing of the body is readable in what is stored.
        let secret = b"0123456789abcdef";
        assert!(!sealed.0.windows(secret.len()).any(|w| w == secret));
        assert_eq!(key.open(201, &sealed.0).unwrap(), BODY);
        // Another API key, another Idempotency-Key, another status: nothing opens.
        let other_api = SealKey::derive("sk_sandbox_two", "retry-1");
        let other_idem = SealKey::derive("sk_sandbox_one", "retry-2");
        assert_eq!(other_api.open(201, &sealed.0), Err(SealError::Open));
        assert_eq!(other_idem.open(201, &sealed.0), Err(SealError::Open));
        assert_eq!(key.open(200, &sealed.0), Err(SealError::Open));
        // A changed byte anywhere, or a cut, is refused.
        for i in 1..sealed.0.len() {
            let mut bad = sealed.0.clone();
            bad[i] ^= 1;
            assert_eq!(key.open(201, &bad), Err(SealError::Open), "byte {i}");
        }
        assert_eq!(key.open(201, &sealed.0[..10]), Err(SealError::Open));
        // Two seals of one body differ (a fresh nonce each).
        assert_ne!(key.seal(201, BODY).unwrap(), sealed);
    }

    #[test]
    fn a_body_stored_before_sealing_replays_as_it_is() {
        let key = SealKey::derive("sk_sandbox_one", "retry-1");
        assert_eq!(key.open(201, BODY).unwrap(), BODY);
        assert_eq!(key.open(201, b"").unwrap(), b"");
    }

    #[test]
    fn the_key_is_never_printed() {
        let key = SealKey::derive("sk_sandbox_secret", "k");
        assert_eq!(format!("{key:?}"), "SealKey(..)");
    }
}
