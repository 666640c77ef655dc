//! The log keys: what signs the decision log's checkpoints (docs/audit.md), one current key
//! per environment (kid `log-live-<n>`, `log-sandbox-<n>`), in a table of their own
//! (`log_keys`) so that the key ring never loads one as a verdict key.
//!
//! They are kept as the signing keys are: made at start when an environment has none,
//! sealed at rest under the key-encryption key (with a context of their own,
//! [`KeyEncryption::seal_log_key`], so a sealed log key copied among the signing keys does
//! not open), rotated by an operator command (`mandate-server rotate-log-key`), and
//! published in the JWK Set with `use: "tlog-checkpoint"` and no `alg`. After a rotation
//! the previous key keeps signing beside the new one (two signature lines in one note) for
//! as long as it stays published, [`super::RETIRED_KEY_PUBLISHED_MS`], so a verifier
//! holding either key set accepts every checkpoint.

use std::sync::Arc;

use mandate_core::Signer;
use mandate_protocol::tlog::LogKey;

use super::RETIRED_KEY_PUBLISHED_MS;
use super::at_rest::{AtRestError, KeyEncryption};
use super::fast::AwsLcSigner;
use crate::model::Env;
use crate::storage::log::NewLogKey;
use crate::storage::{StorageError, Store};

/// The loaded log keys of both environments.
#[derive(Clone, Default)]
pub struct LogKeyRing {
    /// Per environment: the current key first, then those retired within the published
    /// time; each signs every checkpoint.
    signers: Vec<(Env, Arc<dyn Signer>)>,
    /// The public keys to publish.
    pub published: Vec<LogKey>,
}

impl LogKeyRing {
    /// The keys that sign a checkpoint of `env`'s logs, the current one first.
    pub fn signers(&self, env: Env) -> Vec<Arc<dyn Signer>> {
        self.signers
            .iter()
            .filter(|(e, _)| *e == env)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

/// The kid of log key `n` of `env`.
fn kid(env: Env, n: i64) -> String {
    format!("log-{}-{n}", env.as_str())
}

/// A fresh log key of `env`, number `n`, sealed.
fn sealed(keys: &KeyEncryption, env: Env, n: i64) -> Result<(String, Vec<u8>), AtRestError> {
    let secret = super::fresh_secret()?;
    let kid = kid(env, n);
    let sealed = keys.seal_log_key(&kid, env, &secret)?;
    Ok((kid, sealed))
}

/// Makes sure both environments have a current log key.
pub async fn ensure(
    store: &dyn Store,
    keys: &KeyEncryption,
    now_ms: i64,
) -> Result<(), AtRestError> {
    let current = store.log_keys(i64::MAX).await?;
    for env in [Env::Sandbox, Env::Live] {
        if current.iter().any(|k| k.env == env) {
            continue;
        }
        let (kid, secret) = sealed(keys, env, 1)?;
        let key = NewLogKey {
            env,
            kid,
            n: 1,
            secret,
            now_ms,
            first: true,
        };
        store.add_log_key(key).await?;
    }
    Ok(())
}

/// Makes a fresh log key the current one of `env`; the previous one signs beside it until
/// it leaves the JWK Set. Returns its kid.
pub async fn rotate(
    store: &dyn Store,
    keys: &KeyEncryption,
    env: Env,
    now_ms: i64,
) -> Result<String, AtRestError> {
    let n = store.next_log_key_number(env).await?;
    let (kid, secret) = sealed(keys, env, n)?;
    let key = NewLogKey {
        env,
        kid: kid.clone(),
        n,
        secret,
        now_ms,
        first: false,
    };
    if !store.add_log_key(key).await? {
        return Err(AtRestError::Storage(StorageError::Conflict));
    }
    Ok(kid)
}

/// Seals every log key under `new` (opened with it or the KEKs of `old`, or as stored in
/// plaintext), as `rotate-key-encryption-key` and `seal-signing-keys` do to the signing
/// keys; each replaced only if unchanged since read. How many were sealed now.
pub async fn reseal(
    store: &dyn Store,
    old: &KeyEncryption,
    new: &super::at_rest::Kek,
) -> Result<usize, AtRestError> {
    let mut sealed = 0;
    for key in store.log_keys(i64::MIN).await? {
        if let Some(to) = super::at_rest::reseal_log_key(old, new, &key)? {
            if !store
                .replace_log_key_secret(&key.kid, &key.secret, &to)
                .await?
            {
                return Err(AtRestError::KeysKeptChanging);
            }
            sealed += 1;
        }
    }
    Ok(sealed)
}

/// The log keys published at `now_ms`, opened with `keys`.
pub async fn load(
    store: &dyn Store,
    keys: &KeyEncryption,
    now_ms: i64,
) -> Result<LogKeyRing, AtRestError> {
    let mut stored = store
        .log_keys(now_ms.saturating_sub(RETIRED_KEY_PUBLISHED_MS))
        .await?;
    // The current key first (no retirement), then the newest retired.
    stored.sort_by_key(|k| std::cmp::Reverse(k.retired_ms.unwrap_or(i64::MAX)));
    let mut ring = LogKeyRing::default();
    for key in stored {
        let secret = keys.open_log_key(&key)?;
        // Signed through aws-lc, as verdicts are: with many organizations a process signs
        // hundreds of checkpoints a second, which RustCrypto's p256 signs far more slowly.
        let signer =
            AwsLcSigner::from_secret_bytes(key.kid.clone(), secret.expose()).map_err(|_| {
                AtRestError::InvalidKey {
                    kid: key.kid.clone(),
                }
            })?;
        ring.published.push(LogKey::of_signer(&signer));
        ring.signers.push((key.env, Arc::new(signer)));
    }
    Ok(ring)
}
