//! Operator commands and start-up at the boundary. They run before the server serves, or
//! in a process of their own, on the calling thread: each method is one transaction that
//! blocks until it is durable.

use super::StorageError;
use super::ap2::Ap2Issuer;
use super::keys::{BindingChange, KeyInfo, SealNew, StoredApiKey, StoredKey};
use crate::model::Env;

/// One signing key's stored secret, replaced by [`AdminStore::replace_signing_key_secrets`].
#[derive(Clone)]
pub struct SecretChange {
    /// The key.
    pub kid: String,
    /// What it must hold now.
    pub from: Vec<u8>,
    /// What it is to hold (equal to `from` for a key left as it is).
    pub to: Vec<u8>,
}

impl std::fmt::Debug for SecretChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretChange")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// A new organization: its id and name, and a key (by hash) for each environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrg {
    /// `org_…`.
    pub id: String,
    /// Its unique name.
    pub name: String,
    /// Policy versions of its creation date start with this (`pol_YYYY-MM-DD.`); the store
    /// numbers them.
    pub policy_prefix: String,
    /// SHA-256 of each organization key, with its environment and its binding to the
    /// key-encryption key (`signing::api_keys`; `None` without one).
    pub keys: Vec<([u8; 32], Env, Option<Vec<u8>>)>,
    /// Creation time, unix ms.
    pub now_ms: i64,
}

/// What operator commands and start-up change.
pub trait AdminStore {
    /// Creates an organization with both environments and its keys; returns its policy
    /// version, or `None` when the name is taken (nothing is written then).
    fn create_org(&self, org: &NewOrg) -> Result<Option<String>, StorageError>;

    /// The id of the organization named `name`.
    fn org_id_by_name(&self, name: &str) -> Result<Option<String>, StorageError>;

    /// Stores another organization key (by hash, with its binding); returns its
    /// fingerprint.
    fn insert_org_key(
        &self,
        org_id: &str,
        env: Env,
        hash: &[u8; 32],
        binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> Result<String, StorageError>;

    /// Every unrevoked API key, with its binding.
    fn all_api_keys(&self) -> Result<Vec<StoredApiKey>, StorageError>;

    /// In one transaction: if every key of `changes` is unrevoked and holds its `from`,
    /// stores each one's `to`, moves the keys generation and returns `true`; otherwise
    /// changes nothing and returns `false` (read them again).
    fn replace_api_key_bindings(&self, changes: &[BindingChange]) -> Result<bool, StorageError>;

    /// The hash of the key with this fingerprint.
    fn key_hash_by_fingerprint(&self, fingerprint: &str) -> Result<Option<Vec<u8>>, StorageError>;

    /// Revokes a key and moves the keys generation; `false` when it is unknown or revoked
    /// already.
    fn revoke_key(&self, hash: &[u8], now_ms: i64) -> Result<bool, StorageError>;

    /// Sets a key's request rate and moves the keys generation; `false` when the key is
    /// unknown.
    fn set_key_rate(&self, hash: &[u8], per_sec: u32) -> Result<bool, StorageError>;

    /// Sets an organization's policy version and moves the keys generation.
    fn set_policy_version(&self, org_id: &str, version: &str) -> Result<(), StorageError>;

    /// The keys of an organization, oldest first.
    fn list_keys(&self, org_id: &str) -> Result<Vec<KeyInfo>, StorageError>;

    /// Adds a new current signing key to `env`, retiring the previous one at `now_ms`, and
    /// moves the keys generation (running servers reload their signing keys); returns its
    /// kid. The key's stored secret is what `seal` makes for the kid the store
    /// gives it (called in the transaction; its error aborts it).
    fn rotate_signing_key(
        &self,
        env: Env,
        seal: &SealNew<'_>,
        now_ms: i64,
    ) -> Result<String, StorageError>;

    /// Adds a current signing key to `env` (as [`AdminStore::rotate_signing_key`]) unless
    /// it has one.
    fn ensure_signing_key(
        &self,
        env: Env,
        seal: &SealNew<'_>,
        now_ms: i64,
    ) -> Result<(), StorageError>;

    /// Every signing key that is current or retired after `published_after_ms`.
    fn signing_keys_now(&self, published_after_ms: i64) -> Result<Vec<StoredKey>, StorageError>;

    /// Every stored signing key, retired ones included, to seal them again.
    fn all_signing_keys(&self) -> Result<Vec<StoredKey>, StorageError>;

    /// In one transaction: if the stored signing keys are exactly the kids of `changes`,
    /// each holding its `from`, stores each one's `to` and returns `true`; otherwise
    /// changes nothing and returns `false` (a key was added or changed since they were
    /// read: read them again). The bytes replaced are not left readable in the database
    /// file where the engine can help it.
    fn replace_signing_key_secrets(&self, changes: &[SecretChange]) -> Result<bool, StorageError>;

    /// The keys generation (see `KeyStore::key_generation`).
    fn key_generation_now(&self) -> Result<i64, StorageError>;

    /// At start, in one transaction: releases unfinished idempotency claims and drops
    /// records created before `older_than_ms`, and returns the cursor secret, storing
    /// `fresh_cursor_secret` if there is none yet.
    fn prepare_start(
        &self,
        older_than_ms: i64,
        fresh_cursor_secret: &[u8],
    ) -> Result<Vec<u8>, StorageError>;

    /// Adds an AP2 issuer key the organization trusts (`jwk`: its public JWK, JSON);
    /// `false` when the organization has a key with this kid already (nothing is written).
    fn add_ap2_issuer(
        &self,
        org_id: &str,
        kid: &str,
        jwk: &str,
        now_ms: i64,
    ) -> Result<bool, StorageError>;

    /// The AP2 issuer keys the organization trusts, oldest first.
    fn list_ap2_issuers(&self, org_id: &str) -> Result<Vec<Ap2Issuer>, StorageError>;

    /// Removes one; `false` when the organization has no key with this kid.
    fn remove_ap2_issuer(&self, org_id: &str, kid: &str) -> Result<bool, StorageError>;
}
