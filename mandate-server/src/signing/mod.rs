//! The signers of each environment and the published JWK Set.
//!
//! Signing keys live in the database; every server process loads them at start and again
//! every few seconds, so a rotation made by the operator command is picked up without a
//! restart. A retired key stays in the JWK Set for ten minutes: five for the tokens it
//! signed to expire, five for caches of the set.
//!
//! [`fast`] signs through aws-lc-rs behind the core's `Signer` trait, finishing
//! presignatures prepared ahead in idle time ([`presign`]).

pub mod fast;
pub mod presign;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use mandate_core::jwk::JwkSet;
use mandate_core::jws::{P256Signer, Signer};

use crate::clock::fill_random;
use crate::model::Env;
use crate::signing::fast::AwsLcSigner;
use crate::storage::keys::StoredKey;
use crate::storage::{AdminStore, StorageError, Store};

/// How long a retired key stays published, in ms.
pub const RETIRED_KEY_PUBLISHED_MS: i64 = 10 * 60 * 1000;

/// The current signer of each environment and the JWK Set to publish.
#[derive(Clone, Default)]
pub struct KeyRing {
    current: HashMap<&'static str, Arc<dyn Signer>>,
    /// Every published public key.
    pub jwks: Arc<JwkSet>,
}

impl KeyRing {
    /// The signer for `env`.
    pub fn signer(&self, env: Env) -> Option<Arc<dyn Signer>> {
        self.current.get(env.as_str()).cloned()
    }
}

/// A fresh 32-byte P-256 secret scalar from the OS RNG.
pub fn fresh_secret() -> Result<[u8; 32], StorageError> {
    for _ in 0..16 {
        let mut secret = [0u8; 32];
        fill_random(&mut secret);
        if P256Signer::from_secret_bytes("probe", &secret).is_ok() {
            return Ok(secret);
        }
    }
    Err(StorageError::Corrupt(
        "could not draw a valid P-256 key".into(),
    ))
}

/// Makes sure both environments have a current key (generated on first use).
pub fn ensure_keys(store: &dyn AdminStore, now_ms: i64) -> Result<(), StorageError> {
    for env in [Env::Sandbox, Env::Live] {
        let secret = fresh_secret()?;
        store.ensure_signing_key(env, &secret, now_ms)?;
    }
    Ok(())
}

/// Loads the key ring from the database as of `now_ms`.
pub fn load(store: &dyn AdminStore, now_ms: i64) -> Result<KeyRing, StorageError> {
    build(store.signing_keys_now(now_ms - RETIRED_KEY_PUBLISHED_MS)?)
}

fn build(keys: Vec<StoredKey>) -> Result<KeyRing, StorageError> {
    let mut ring = KeyRing::default();
    let mut jwks = JwkSet::default();
    for key in keys {
        let signer = AwsLcSigner::from_secret_bytes(key.kid.clone(), &key.secret)
            .map_err(|e| StorageError::Corrupt(format!("signing key {}: {e}", key.kid)))?;
        jwks.keys.push(signer.public_jwk());
        if key.retired_ms.is_none() {
            ring.current.insert(key.env.as_str(), Arc::new(signer));
        }
    }
    ring.jwks = Arc::new(jwks);
    Ok(ring)
}

/// Reloads the ring through the read pool (used by the periodic refresh).
pub async fn reload(
    store: &dyn Store,
    now_ms: i64,
    ring: &RwLock<KeyRing>,
) -> Result<(), StorageError> {
    let keys = store
        .signing_keys(now_ms - RETIRED_KEY_PUBLISHED_MS)
        .await?;
    let fresh = build(keys)?;
    *ring.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    Ok(())
}
