//! API keys and signing keys at the boundary. API keys are stored only as SHA-256 hashes.

use mandate_core::id::AgentId;
use sha2::{Digest, Sha256};

use super::{StorageError, StoreFuture};
use crate::model::{Caller, Env, KeyClass};

/// SHA-256 of an API key. Keys carry 160 random bits, so a plain hash cannot be reversed.
pub fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A short public handle for a key, for operators: `key_` and 12 hex digits of its hash.
pub fn fingerprint(hash: &[u8; 32]) -> String {
    let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("key_{hex}")
}

/// One key as operators see it: never the key itself.
#[derive(Debug)]
pub struct KeyInfo {
    /// Public handle.
    pub fingerprint: String,
    /// Environment.
    pub env: Env,
    /// Class.
    pub class: KeyClass,
    /// Agent for agent keys.
    pub agent: Option<String>,
    /// Rate per second.
    pub rate_per_sec: i64,
    /// Whether revoked.
    pub revoked: bool,
}

/// An API key's row as authentication reads it: the caller it makes, and what binds the row
/// to the operator's key-encryption key (`signing::api_keys` checks it; the engines store
/// opaque bytes).
#[derive(Debug, Clone)]
pub struct CallerRow {
    /// Who calls with it.
    pub caller: Caller,
    /// Its class as stored.
    pub class: KeyClass,
    /// Its binding, if any.
    pub binding: Option<Vec<u8>>,
}

/// An API key's row as an engine reads it for authentication, revoked or not, with its
/// organization's policy version; [`CallerRow::of_key`] decides what caller it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRow {
    /// Its organization.
    pub org_id: String,
    /// Its environment.
    pub env: Env,
    /// Its agent, for an agent key.
    pub agent: Option<AgentId>,
    /// Its request rate per second as stored.
    pub rate_per_sec: i64,
    /// Its organization's policy version.
    pub policy_version: String,
    /// Its class.
    pub class: KeyClass,
    /// Its binding, if any.
    pub binding: Option<Vec<u8>>,
    /// Whether it is revoked.
    pub revoked: bool,
}

impl CallerRow {
    /// The caller that the key of SHA-256 `hash` makes, from its row: none for a revoked
    /// key; a rate of at least 1 a second.
    pub fn of_key(hash: [u8; 32], row: ApiKeyRow) -> Option<CallerRow> {
        if row.revoked {
            return None;
        }
        Some(CallerRow {
            caller: Caller {
                key_hash: hash,
                org_id: row.org_id.into(),
                env: row.env,
                agent: row.agent,
                rate_per_sec: u32::try_from(row.rate_per_sec.max(1)).unwrap_or(u32::MAX),
                policy_version: row.policy_version.into(),
            },
            class: row.class,
            binding: row.binding,
        })
    }
}

/// An unrevoked API key's row as operator commands read it, to bind it to the
/// key-encryption key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredApiKey {
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    /// Its organization.
    pub org_id: String,
    /// Its environment.
    pub env: Env,
    /// Its class.
    pub class: KeyClass,
    /// Its agent, for an agent key.
    pub agent: Option<String>,
    /// Its binding, if any.
    pub binding: Option<Vec<u8>>,
}

/// One API key's binding, replaced by `AdminStore::replace_api_key_bindings`.
#[derive(Debug, Clone)]
pub struct BindingChange {
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    /// What it must hold now.
    pub from: Option<Vec<u8>>,
    /// What it is to hold.
    pub to: Vec<u8>,
}

/// A stored key class.
pub fn class_from(text: &str) -> Result<KeyClass, StorageError> {
    match text {
        "org" => Ok(KeyClass::Org),
        "agent" => Ok(KeyClass::Agent),
        other => Err(StorageError::Corrupt(format!("key class {other:?}"))),
    }
}

/// One stored signing key.
#[derive(Clone)]
pub struct StoredKey {
    /// `sandbox-<n>` or `live-<n>`.
    pub kid: String,
    /// Environment.
    pub env: Env,
    /// The secret as stored: opaque bytes (sealed under the operator's key-encryption key
    /// by `signing::at_rest`, or the 32-byte P-256 scalar itself without one).
    pub secret: Vec<u8>,
    /// When it stopped signing, unix ms; `None` for the current key.
    pub retired_ms: Option<i64>,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("kid", &self.kid)
            .field("retired_ms", &self.retired_ms)
            .finish_non_exhaustive()
    }
}

/// Makes the stored secret of a new signing key, given the kid the store assigns it (the
/// kid is bound into the sealed bytes, so it must be known before they are made).
pub type SealNew<'a> = dyn Fn(&str) -> Result<Vec<u8>, StorageError> + Send + Sync + 'a;

/// What a running server reads of the keys that operator commands change.
pub trait KeyStore: Send + Sync {
    /// The keys generation: it moves whenever an operator command changes a key or a
    /// policy version (0 before any change).
    fn key_generation(&self) -> StoreFuture<'_, i64>;

    /// Every signing key that is current or retired after `published_after_ms`.
    fn signing_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>>;

    /// The row of the API key of SHA-256 `hash`, revoked or not; `None` for an unknown key.
    fn api_key(&self, hash: [u8; 32]) -> StoreFuture<'_, Option<ApiKeyRow>>;

    /// Who calls with the API key of SHA-256 `hash`, with the row's class and binding:
    /// `None` for an unknown or revoked key ([`CallerRow::of_key`], whatever the engine).
    fn caller(&self, hash: [u8; 32]) -> StoreFuture<'_, Option<CallerRow>> {
        Box::pin(async move {
            let row = self.api_key(hash).await?;
            Ok(row.and_then(|row| CallerRow::of_key(hash, row)))
        })
    }
}
