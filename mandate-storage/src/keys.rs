//! API keys and signing keys at the boundary. API keys are stored only as SHA-256 hashes.

use std::sync::Arc;

use mandate_core::AgentId;
use sha2::{Digest, Sha256};

use super::engine::{Access, Columns, Engine, Result, Scope, Tx, env_of, first, id_of};
use super::statements::{KeySql, SigningSql};
use super::{StorageError, StoreFuture};
use crate::model::{Env, KeyClass};

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

/// An API key's row as authentication reads it: who calls with it (the server makes its
/// caller of it), and what binds the row to the operator's key-encryption key
/// (`signing::api_keys` checks it; the engines store opaque bytes).
#[derive(Debug, Clone)]
pub struct CallerRow {
    /// SHA-256 of the key.
    pub key_hash: [u8; 32],
    /// Its organization.
    pub org_id: Arc<str>,
    /// The environment it acts on.
    pub env: Env,
    /// Its agent, for an agent key.
    pub agent: Option<AgentId>,
    /// Requests per second allowed for it, at least 1.
    pub rate_per_sec: u32,
    /// Its organization's policy version, stamped on decisions.
    pub policy_version: Arc<str>,
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
            key_hash: hash,
            org_id: row.org_id.into(),
            env: row.env,
            agent: row.agent,
            rate_per_sec: u32::try_from(row.rate_per_sec.max(1)).unwrap_or(u32::MAX),
            policy_version: row.policy_version.into(),
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
pub fn class_from(text: &str) -> Result<KeyClass> {
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
pub type SealNew<'a> = dyn Fn(&str) -> Result<Vec<u8>> + Send + Sync + 'a;

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

/// A new API key as stored: its hash and its binding (opaque bytes, `None` without a
/// key-encryption key).
#[derive(Debug, Clone, Copy)]
pub struct NewKey<'a> {
    /// SHA-256 of the key.
    pub hash: &'a [u8; 32],
    /// Its binding.
    pub binding: Option<&'a [u8]>,
}

/// Stores a new key of `class` (with its agent, for an agent key); returns its
/// fingerprint.
pub(super) async fn insert<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    key: NewKey<'_>,
    class: KeyClass,
    agent: Option<&str>,
    now_ms: i64,
) -> Result<String> {
    let fp = fingerprint(key.hash);
    let params = [
        s.org.into(),
        s.env.into(),
        key.hash[..].into(),
        fp.as_str().into(),
        class.as_str().into(),
        agent.into(),
        now_ms.into(),
        key.binding.into(),
    ];
    tx.execute(KeySql::Insert.into(), &params).await?;
    Ok(fp)
}

/// The row of the API key of hash `hash`, revoked or not.
async fn api_key<T: Tx>(tx: &mut T, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>> {
    let read = |r: &dyn Columns| {
        let agent = r.opt_text(2)?;
        Ok(ApiKeyRow {
            org_id: r.text(0)?,
            env: env_of(&r.text(1)?)?,
            agent: agent
                .map(|a| id_of(&a, "agent", AgentId::parse))
                .transpose()?,
            rate_per_sec: r.int(3)?,
            policy_version: r.text(4)?,
            class: class_from(&r.text(5)?)?,
            binding: r.opt_bytes(6)?,
            revoked: r.flag(7)?,
        })
    };
    let rows = tx
        .query(KeySql::Caller.into(), &[hash[..].into()], read)
        .await?;
    Ok(first(rows))
}

/// Every unrevoked API key.
pub(super) async fn all_unrevoked<T: Tx>(tx: &mut T) -> Result<Vec<StoredApiKey>> {
    let read = |r: &dyn Columns| {
        Ok(StoredApiKey {
            hash: r
                .bytes(0)?
                .try_into()
                .map_err(|_| StorageError::Corrupt("an API key hash of another length".into()))?,
            org_id: r.text(1)?,
            env: env_of(&r.text(2)?)?,
            class: class_from(&r.text(3)?)?,
            agent: r.opt_text(4)?,
            binding: r.opt_bytes(5)?,
        })
    };
    tx.query(KeySql::AllUnrevoked.into(), &[], read).await
}

/// The keys of an organization, oldest first.
pub(super) async fn list<T: Tx>(tx: &mut T, org: &str) -> Result<Vec<KeyInfo>> {
    let read = |r: &dyn Columns| {
        Ok(KeyInfo {
            fingerprint: r.text(0)?,
            env: env_of(&r.text(1)?)?,
            class: class_from(&r.text(2)?)?,
            agent: r.opt_text(3)?,
            rate_per_sec: r.int(4)?,
            revoked: r.flag(5)?,
        })
    };
    tx.query(KeySql::List.into(), &[org.into()], read).await
}

/// Stores each change's binding if every key still holds its `from` and is unrevoked
/// (their rows locked as read), and moves the keys generation; `false` (nothing written)
/// otherwise.
pub(super) async fn replace_bindings<T: Tx>(tx: &mut T, changes: &[BindingChange]) -> Result<bool> {
    for change in changes {
        let read = |r: &dyn Columns| r.opt_bytes(0);
        let rows = tx
            .query(
                KeySql::BindingLocked.into(),
                &[change.hash[..].into()],
                read,
            )
            .await?;
        if first(rows).as_ref() != Some(&change.from) {
            return Ok(false);
        }
    }
    for change in changes {
        let params = [change.hash[..].into(), change.to.as_slice().into()];
        tx.execute(KeySql::SetBinding.into(), &params).await?;
    }
    bump_generation(tx).await?;
    Ok(true)
}

/// Marks a change to keys made outside the running servers (operator commands): they
/// empty their caller caches when they see the generation move.
pub(super) async fn bump_generation<T: Tx>(tx: &mut T) -> Result<()> {
    tx.execute(KeySql::BumpGeneration.into(), &[]).await?;
    Ok(())
}

/// The keys generation.
pub(super) async fn generation<T: Tx>(tx: &mut T) -> Result<i64> {
    let rows = tx
        .query(KeySql::Generation.into(), &[], |r| r.int(0))
        .await?;
    Ok(first(rows).unwrap_or(0))
}

/// Every signing key current or retired after `published_after_ms`.
pub(super) async fn published<T: Tx>(
    tx: &mut T,
    published_after_ms: i64,
) -> Result<Vec<StoredKey>> {
    let read = |r: &dyn Columns| {
        Ok(StoredKey {
            kid: r.text(0)?,
            env: env_of(&r.text(1)?)?,
            secret: r.bytes(2)?,
            retired_ms: r.opt_int(3)?,
        })
    };
    let params = [published_after_ms.into()];
    tx.query(SigningSql::Published.into(), &params, read).await
}

/// Whether `env` has a current signing key.
async fn has_current<T: Tx>(tx: &mut T, env: Env) -> Result<bool> {
    let rows = tx
        .query(SigningSql::HasCurrent.into(), &[env.into()], |r| r.flag(0))
        .await?;
    Ok(first(rows).unwrap_or(false))
}

/// Adds a new current key for `env`, retiring the previous one at `now_ms`, its secret
/// made by `seal` for its kid; returns its kid.
pub(super) async fn rotate<T: Tx>(
    tx: &mut T,
    env: Env,
    seal: &SealNew<'_>,
    now_ms: i64,
) -> Result<String> {
    tx.query(SigningSql::LockCurrent.into(), &[env.into()], |r| r.text(0))
        .await?;
    let rows = tx
        .query(SigningSql::NextNumber.into(), &[env.into()], |r| r.int(0))
        .await?;
    let n = first(rows).unwrap_or(1);
    tx.execute(SigningSql::Retire.into(), &[env.into(), now_ms.into()])
        .await?;
    let kid = format!("{}-{n}", env.as_str());
    let secret = seal(&kid)?;
    let params = [
        env.into(),
        kid.as_str().into(),
        n.into(),
        secret.as_slice().into(),
        now_ms.into(),
    ];
    tx.execute(SigningSql::Insert.into(), &params).await?;
    Ok(kid)
}

/// Makes a key sealed by `seal` the current key of `env` unless it has one. Several
/// processes starting at once on an empty database: the first key's kid is the same for
/// all, so one inserts it and the others find it.
pub(super) async fn ensure<T: Tx>(
    tx: &mut T,
    env: Env,
    seal: &SealNew<'_>,
    now_ms: i64,
) -> Result<()> {
    if has_current(tx, env).await? {
        return Ok(());
    }
    let kid = format!("{}-1", env.as_str());
    let secret = seal(&kid)?;
    let params = [
        env.into(),
        kid.as_str().into(),
        secret.as_slice().into(),
        now_ms.into(),
    ];
    let inserted = tx.execute(SigningSql::InsertFirst.into(), &params).await?;
    if inserted == 0 && !has_current(tx, env).await? {
        // Keys exist but none is current: a new one, numbered after them.
        rotate(tx, env, seal, now_ms).await?;
    }
    Ok(())
}

/// The setting `name`, storing `value` first if there is none.
pub(super) async fn setting_or_insert<T: Tx>(
    tx: &mut T,
    name: &str,
    value: &[u8],
) -> Result<Vec<u8>> {
    let read = |r: &dyn super::engine::Columns| r.bytes(0);
    // Read first: a setting once written is only read, so that a start writes nothing
    // (on Citus a write to this shared table needs every worker up).
    let rows = tx
        .query(SigningSql::Setting.into(), &[name.into()], read)
        .await?;
    if let Some(value) = first(rows) {
        return Ok(value);
    }
    tx.execute(
        SigningSql::InsertSetting.into(),
        &[name.into(), value.into()],
    )
    .await?;
    let rows = tx
        .query(SigningSql::Setting.into(), &[name.into()], read)
        .await?;
    first(rows).ok_or_else(|| StorageError::Corrupt(format!("setting {name} vanished")))
}

impl<E: Engine> KeyStore for E {
    fn key_generation(&self) -> StoreFuture<'_, i64> {
        Box::pin(self.run(Access::Read, (), |tx, ()| Box::pin(generation(tx))))
    }

    fn signing_keys(&self, published_after_ms: i64) -> StoreFuture<'_, Vec<StoredKey>> {
        Box::pin(self.run(Access::Read, published_after_ms, |tx, after| {
            Box::pin(published(tx, *after))
        }))
    }

    fn api_key(&self, hash: [u8; 32]) -> StoreFuture<'_, Option<ApiKeyRow>> {
        Box::pin(self.run(Access::Read, hash, |tx, hash| Box::pin(api_key(tx, hash))))
    }
}
