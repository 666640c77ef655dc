//! The signers of each environment and the published JWK Set.
//!
//! Signing keys live in the database; every server process loads them at start and again
//! every few seconds, so a rotation made by the operator command is picked up without a
//! restart. A retired key stays in the JWK Set for ten minutes: five for the tokens it
//! signed to expire, five for caches of the set.
//!
//! At rest the keys are sealed under the operator's key-encryption key ([`at_rest`]); every
//! load opens them with it.
//!
//! [`fast`] signs through aws-lc-rs behind the core's `Signer` trait, finishing
//! presignatures prepared ahead in idle time ([`presign`]).

pub mod api_keys;
pub mod at_rest;
pub mod fast;
pub mod leaf_tags;
pub mod log_keys;
pub mod presign;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use mandate_core::{JwkSet, P256Signer, Signer};

use crate::clock::fill_random;
use crate::model::Env;
use crate::signing::at_rest::{AtRestError, KeyEncryption, SigningSecret};
use crate::signing::fast::AwsLcSigner;
use crate::signing::leaf_tags::{LeafTagKey, LeafTagKeys};
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
    /// Every verdict key ever stored, retired long ago or not: what the decision log's
    /// worker verifies a token against before it appends it (a decision may be logged
    /// after its key left the published set).
    pub verdict_keys: Arc<JwkSet>,
    /// The leaf tag key of each of those (by kid): the decision service tags its tokens'
    /// leaves with its signer's, and the log's worker checks another process's tags
    /// ([`leaf_tags`]).
    pub leaf_tags: Arc<LeafTagKeys>,
    /// The log keys, which sign the decision log's checkpoints (published beside).
    pub log: log_keys::LogKeyRing,
}

impl KeyRing {
    /// The signer for `env`.
    pub fn signer(&self, env: Env) -> Option<Arc<dyn Signer>> {
        self.current.get(env.as_str()).cloned()
    }

    /// The leaf tag key of `env`'s current signer.
    pub fn leaf_tag_key(&self, env: Env) -> Option<LeafTagKey> {
        let signer = self.current.get(env.as_str())?;
        self.leaf_tags.get(signer.kid()).cloned()
    }

    /// The JWK Set as published: the verdict keys, then the log keys (`use:
    /// "tlog-checkpoint"`, no `alg`), which verifiers of verdicts skip.
    pub fn published_json(&self) -> String {
        let mut set = serde_json::to_value(self.jwks.as_ref()).unwrap_or_default();
        if let Some(serde_json::Value::Array(keys)) = set.get_mut("keys") {
            for key in &self.log.published {
                keys.push(serde_json::to_value(key).unwrap_or_default());
            }
        }
        serde_json::to_string(&set).unwrap_or_else(|_| "{\"keys\":[]}".into())
    }
}

/// A fresh 32-byte P-256 secret scalar from the OS RNG.
pub fn fresh_secret() -> Result<SigningSecret, StorageError> {
    for _ in 0..16 {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes);
        let secret = SigningSecret::new(bytes);
        bytes.fill(0);
        if P256Signer::from_secret_bytes("probe", secret.expose()).is_ok() {
            return Ok(secret);
        }
    }
    Err(StorageError::Corrupt(
        "could not draw a valid P-256 key".into(),
    ))
}

/// The stored form of `secret` for the kid the store gives it, as [`AdminStore`] takes it.
fn sealer<'a>(
    keys: &'a KeyEncryption,
    env: Env,
    secret: &'a SigningSecret,
) -> impl Fn(&str) -> Result<Vec<u8>, StorageError> + Send + Sync + 'a {
    move |kid| {
        keys.seal(kid, env, secret)
            .map_err(|e| StorageError::Corrupt(e.to_string()))
    }
}

/// Makes sure both environments have a current key (generated on first use, stored sealed
/// under the current key-encryption key if one is given).
pub fn ensure_keys(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
    now_ms: i64,
) -> Result<(), StorageError> {
    for env in [Env::Sandbox, Env::Live] {
        let secret = fresh_secret()?;
        store.ensure_signing_key(env, &sealer(keys, env, &secret), now_ms)?;
    }
    Ok(())
}

/// Makes a fresh key the current one of `env` (the previous one retires at `now_ms`);
/// returns its kid.
pub fn rotate(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
    env: Env,
    now_ms: i64,
) -> Result<String, StorageError> {
    let secret = fresh_secret()?;
    store.rotate_signing_key(env, &sealer(keys, env, &secret), now_ms)
}

/// Loads the key ring from the database as of `now_ms`, opening each key with `keys`.
pub fn load(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
    now_ms: i64,
) -> Result<KeyRing, AtRestError> {
    build(
        store.signing_keys_now(i64::MIN)?,
        keys,
        now_ms - RETIRED_KEY_PUBLISHED_MS,
    )
}

/// The ring of every stored key: the published set holds those current or retired after
/// `published_after_ms`, the verdict keys all of them.
fn build(
    stored: Vec<StoredKey>,
    keys: &KeyEncryption,
    published_after_ms: i64,
) -> Result<KeyRing, AtRestError> {
    let mut ring = KeyRing::default();
    let mut jwks = JwkSet::default();
    let mut all = JwkSet::default();
    let mut tags = LeafTagKeys::new();
    for key in stored {
        let published = key
            .retired_ms
            .is_none_or(|retired| retired > published_after_ms);
        let opened =
            keys.open(&key).and_then(|secret| {
                let signer = AwsLcSigner::from_secret_bytes(key.kid.clone(), secret.expose())
                    .map_err(|_| AtRestError::InvalidKey {
                        kid: key.kid.clone(),
                    })?;
                Ok((signer, LeafTagKey::derive(secret.expose())))
            });
        // A published key must open; one retired long ago that does not is left out of
        // the verdict keys, with a warning (the log refuses the tokens it signed).
        let signer = match opened {
            Ok((signer, tag_key)) => {
                tags.insert(key.kid.clone(), tag_key);
                signer
            }
            Err(e) if !published => {
                tracing::warn!(
                    "retired signing key {} left out of the verdict keys: {e}",
                    key.kid
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        all.keys.push(signer.public_jwk());
        if published {
            jwks.keys.push(signer.public_jwk());
        }
        if key.retired_ms.is_none() {
            ring.current.insert(key.env.as_str(), Arc::new(signer));
        }
    }
    ring.jwks = Arc::new(jwks);
    ring.verdict_keys = Arc::new(all);
    ring.leaf_tags = Arc::new(tags);
    Ok(ring)
}

/// Reloads the ring through the read pool (used by the periodic refresh), opening each key
/// with `keys`, as at start. On an error the ring stays as it was.
pub async fn reload(
    store: &dyn Store,
    keys: &KeyEncryption,
    now_ms: i64,
    ring: &RwLock<KeyRing>,
) -> Result<(), AtRestError> {
    let stored = store.signing_keys(i64::MIN).await?;
    let mut fresh = build(stored, keys, now_ms - RETIRED_KEY_PUBLISHED_MS)?;
    fresh.log = log_keys::load(store, keys, now_ms).await?;
    *ring.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    Ok(())
}
