//! Operator commands and start-up at the boundary. They run before the server serves, or
//! in a process of their own, on the calling thread: each method is one transaction that
//! blocks until it is durable. The use cases are written once, for every engine, below
//! the trait.

use mandate_core::Mode;

use super::ap2::{self, Ap2Issuer};
use super::engine::{Access, Columns, Engine, Result, Scope, Tx, first};
use super::idempotency;
use super::keys::{self, BindingChange, KeyInfo, NewKey, SealNew, StoredApiKey, StoredKey};
use super::statements::{Ap2Sql, KeySql, OrgSql, SigningSql};
use crate::model::{Env, KeyClass};

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
    fn create_org(&self, org: &NewOrg) -> Result<Option<String>>;

    /// The id of the organization named `name`.
    fn org_id_by_name(&self, name: &str) -> Result<Option<String>>;

    /// Stores another organization key (by hash, with its binding); returns its
    /// fingerprint.
    fn insert_org_key(
        &self,
        org_id: &str,
        env: Env,
        hash: &[u8; 32],
        binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> Result<String>;

    /// Every unrevoked API key, with its binding.
    fn all_api_keys(&self) -> Result<Vec<StoredApiKey>>;

    /// In one transaction: if every key of `changes` is unrevoked and holds its `from`,
    /// stores each one's `to`, moves the keys generation and returns `true`; otherwise
    /// changes nothing and returns `false` (read them again).
    fn replace_api_key_bindings(&self, changes: &[BindingChange]) -> Result<bool>;

    /// The hash of the key with this fingerprint.
    fn key_hash_by_fingerprint(&self, fingerprint: &str) -> Result<Option<Vec<u8>>>;

    /// Revokes a key and moves the keys generation; `false` when it is unknown or revoked
    /// already.
    fn revoke_key(&self, hash: &[u8], now_ms: i64) -> Result<bool>;

    /// Sets a key's request rate and moves the keys generation; `false` when the key is
    /// unknown.
    fn set_key_rate(&self, hash: &[u8], per_sec: u32) -> Result<bool>;

    /// Sets an organization's policy version and moves the keys generation.
    fn set_policy_version(&self, org_id: &str, version: &str) -> Result<()>;

    /// The keys of an organization, oldest first.
    fn list_keys(&self, org_id: &str) -> Result<Vec<KeyInfo>>;

    /// Adds a new current signing key to `env`, retiring the previous one at `now_ms`, and
    /// moves the keys generation (running servers reload their signing keys); returns its
    /// kid. The key's stored secret is what `seal` makes for the kid the store
    /// gives it (called in the transaction; its error aborts it).
    fn rotate_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<String>;

    /// Adds a current signing key to `env` (as [`AdminStore::rotate_signing_key`]) unless
    /// it has one.
    fn ensure_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<()>;

    /// Every signing key that is current or retired after `published_after_ms`.
    fn signing_keys_now(&self, published_after_ms: i64) -> Result<Vec<StoredKey>>;

    /// Every stored signing key, retired ones included, to seal them again.
    fn all_signing_keys(&self) -> Result<Vec<StoredKey>>;

    /// In one transaction: if the stored signing keys are exactly the kids of `changes`,
    /// each holding its `from`, stores each one's `to` and returns `true`; otherwise
    /// changes nothing and returns `false` (a key was added or changed since they were
    /// read: read them again). The bytes replaced are not left readable in the database
    /// file where the engine can help it.
    fn replace_signing_key_secrets(&self, changes: &[SecretChange]) -> Result<bool>;

    /// The keys generation (see `KeyStore::key_generation`).
    fn key_generation_now(&self) -> Result<i64>;

    /// At start, in one transaction: releases unfinished idempotency claims and drops
    /// records created before `older_than_ms`, and returns the cursor secret, storing
    /// `fresh_cursor_secret` if there is none yet.
    fn prepare_start(&self, older_than_ms: i64, fresh_cursor_secret: &[u8]) -> Result<Vec<u8>>;

    /// Adds an AP2 issuer key the organization trusts (`jwk`: its public JWK, JSON);
    /// `false` when the organization has a key with this kid already (nothing is written).
    fn add_ap2_issuer(&self, org_id: &str, kid: &str, jwk: &str, now_ms: i64) -> Result<bool>;

    /// The AP2 issuer keys the organization trusts, oldest first.
    fn list_ap2_issuers(&self, org_id: &str) -> Result<Vec<Ap2Issuer>>;

    /// Removes one; `false` when the organization has no key with this kid.
    fn remove_ap2_issuer(&self, org_id: &str, kid: &str) -> Result<bool>;
}

/// Creates an organization with both environments (live in observe, sandbox in enforce)
/// and its keys; its policy version, or `None` when the name is taken.
async fn create_org<T: Tx>(tx: &mut T, org: &NewOrg) -> Result<Option<String>> {
    let rows = tx
        .query(OrgSql::IdByName.into(), &[org.name.as_str().into()], |r| {
            r.text(0)
        })
        .await?;
    if !rows.is_empty() {
        return Ok(None);
    }
    let prefix = [org.policy_prefix.as_str().into()];
    let count = tx
        .query(OrgSql::CountPolicyVersions.into(), &prefix, |r| r.int(0))
        .await?;
    let version = format!("{}{}", org.policy_prefix, first(count).unwrap_or(0) + 1);
    let params = [
        org.id.as_str().into(),
        org.name.as_str().into(),
        version.as_str().into(),
        org.now_ms.into(),
    ];
    tx.execute(OrgSql::Insert.into(), &params).await?;
    for (env, mode) in [(Env::Sandbox, Mode::Enforce), (Env::Live, Mode::Observe)] {
        let params = [
            org.id.as_str().into(),
            env.into(),
            mode.as_str().into(),
            org.now_ms.into(),
        ];
        tx.execute(OrgSql::InsertEnvironment.into(), &params)
            .await?;
    }
    for (hash, env, binding) in &org.keys {
        let key = NewKey {
            hash,
            binding: binding.as_deref(),
        };
        let scope = Scope::new(&org.id, *env);
        keys::insert(tx, scope, key, KeyClass::Org, None, org.now_ms).await?;
    }
    Ok(Some(version))
}

/// Runs `stmt` on the key of hash `hash` (with `value`) and, if it changed it, moves the
/// keys generation; whether it did.
async fn change_key<T: Tx>(tx: &mut T, stmt: KeySql, hash: &[u8], value: i64) -> Result<bool> {
    let changed = tx
        .execute(stmt.into(), &[hash.into(), value.into()])
        .await?
        == 1;
    if changed {
        keys::bump_generation(tx).await?;
    }
    Ok(changed)
}

/// Replaces the signing keys' secrets if the table holds exactly the kids of `changes`,
/// each with its `from` (their rows locked as read); returns whether it did.
async fn replace_secrets<T: Tx>(tx: &mut T, changes: &[SecretChange]) -> Result<bool> {
    let read = |r: &dyn Columns| Ok((r.text(0)?, r.bytes(1)?));
    let stored = tx.query(SigningSql::Secrets.into(), &[], read).await?;
    let same = |(kid, secret): &(String, Vec<u8>)| {
        changes
            .iter()
            .any(|change| change.kid == *kid && change.from == *secret)
    };
    if stored.len() != changes.len() || !stored.iter().all(same) {
        return Ok(false);
    }
    tx.execute(SigningSql::SecureDelete { on: true }.into(), &[])
        .await?;
    let mut updated = Ok(0);
    for change in changes {
        let params = [change.kid.as_str().into(), change.to.as_slice().into()];
        updated = tx.execute(SigningSql::SetSecret.into(), &params).await;
        if updated.is_err() {
            break;
        }
    }
    tx.execute(SigningSql::SecureDelete { on: false }.into(), &[])
        .await?;
    updated?;
    Ok(true)
}

/// How long idempotency records are kept: the start-up sweep is given `now` minus this.
const WINDOW_MS: i64 = mandate_protocol::idempotency::IDEMPOTENCY_WINDOW_SECS * 1000;

impl<E: Engine> AdminStore for E {
    fn create_org(&self, org: &NewOrg) -> Result<Option<String>> {
        self.run_blocking(Access::Write, org, |tx, org| Box::pin(create_org(tx, org)))
    }

    fn org_id_by_name(&self, name: &str) -> Result<Option<String>> {
        self.run_blocking(Access::Read, name, |tx, name| {
            Box::pin(async move {
                let params = [(*name).into()];
                let rows = tx
                    .query(OrgSql::IdByName.into(), &params, |r| r.text(0))
                    .await?;
                Ok(first(rows))
            })
        })
    }

    fn insert_org_key(
        &self,
        org_id: &str,
        env: Env,
        hash: &[u8; 32],
        binding: Option<Vec<u8>>,
        now_ms: i64,
    ) -> Result<String> {
        let args = (org_id, env, hash, binding);
        self.run_blocking(Access::Write, args, move |tx, (org, env, hash, binding)| {
            let key = NewKey {
                hash,
                binding: binding.as_deref(),
            };
            let scope = Scope::new(org, *env);
            Box::pin(keys::insert(tx, scope, key, KeyClass::Org, None, now_ms))
        })
    }

    fn all_api_keys(&self) -> Result<Vec<StoredApiKey>> {
        self.run_blocking(Access::Read, (), |tx, ()| Box::pin(keys::all_unrevoked(tx)))
    }

    fn replace_api_key_bindings(&self, changes: &[BindingChange]) -> Result<bool> {
        self.run_blocking(Access::Write, changes, |tx, changes| {
            Box::pin(keys::replace_bindings(tx, changes))
        })
    }

    fn key_hash_by_fingerprint(&self, fingerprint: &str) -> Result<Option<Vec<u8>>> {
        self.run_blocking(Access::Read, fingerprint, |tx, fp| {
            Box::pin(async move {
                let params = [(*fp).into()];
                let rows = tx
                    .query(KeySql::HashByFingerprint.into(), &params, |r| r.bytes(0))
                    .await?;
                Ok(first(rows))
            })
        })
    }

    fn revoke_key(&self, hash: &[u8], now_ms: i64) -> Result<bool> {
        self.run_blocking(Access::Write, hash, move |tx, hash| {
            Box::pin(change_key(tx, KeySql::Revoke, hash, now_ms))
        })
    }

    fn set_key_rate(&self, hash: &[u8], per_sec: u32) -> Result<bool> {
        self.run_blocking(Access::Write, hash, move |tx, hash| {
            Box::pin(change_key(tx, KeySql::SetRate, hash, i64::from(per_sec)))
        })
    }

    fn set_policy_version(&self, org_id: &str, version: &str) -> Result<()> {
        self.run_blocking(Access::Write, (org_id, version), |tx, (org, version)| {
            Box::pin(async move {
                let params = [(*org).into(), (*version).into()];
                tx.execute(OrgSql::SetPolicyVersion.into(), &params).await?;
                keys::bump_generation(tx).await
            })
        })
    }

    fn list_keys(&self, org_id: &str) -> Result<Vec<KeyInfo>> {
        self.run_blocking(Access::Read, org_id, |tx, org| {
            Box::pin(keys::list(tx, org))
        })
    }

    fn rotate_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<String> {
        self.run_blocking(Access::Write, seal, move |tx, seal| {
            Box::pin(async move {
                let kid = keys::rotate(tx, env, seal, now_ms).await?;
                // Running servers reload their signing keys when they see it move.
                keys::bump_generation(tx).await?;
                Ok(kid)
            })
        })
    }

    fn ensure_signing_key(&self, env: Env, seal: &SealNew<'_>, now_ms: i64) -> Result<()> {
        self.run_blocking(Access::Write, seal, move |tx, seal| {
            Box::pin(keys::ensure(tx, env, seal, now_ms))
        })
    }

    fn signing_keys_now(&self, published_after_ms: i64) -> Result<Vec<StoredKey>> {
        self.run_blocking(Access::Read, published_after_ms, |tx, after| {
            Box::pin(keys::published(tx, *after))
        })
    }

    fn all_signing_keys(&self) -> Result<Vec<StoredKey>> {
        self.signing_keys_now(i64::MIN)
    }

    fn replace_signing_key_secrets(&self, changes: &[SecretChange]) -> Result<bool> {
        let replaced = self.run_blocking(Access::Write, changes, |tx, changes| {
            Box::pin(replace_secrets(tx, changes))
        })?;
        if replaced {
            // The replaced bytes may still be in the files (old WAL frames, old row
            // versions): rewritten where the engine can, best effort.
            let compacted = self.run_blocking(Access::Each, (), |tx, ()| {
                Box::pin(async move { tx.execute(SigningSql::Compact.into(), &[]).await })
            });
            if let Err(e) = compacted {
                tracing::warn!("rewriting what held the replaced signing keys: {e}");
            }
        }
        Ok(replaced)
    }

    fn key_generation_now(&self) -> Result<i64> {
        self.run_blocking(Access::Read, (), |tx, ()| Box::pin(keys::generation(tx)))
    }

    fn prepare_start(&self, older_than_ms: i64, fresh_cursor_secret: &[u8]) -> Result<Vec<u8>> {
        // The sweep is housekeeping, in transactions of its own: where it cannot run (on
        // Citus, a worker down) the process starts all the same and serves the
        // organizations it can reach; a record it leaves is swept at a later start, and a
        // claim that ran out is taken over by the key's next request anyway.
        // Only claims that ran out: other processes may be serving with theirs.
        let now_ms = older_than_ms.saturating_add(WINDOW_MS);
        let swept = self
            .run_blocking(Access::Each, (), move |tx, ()| {
                Box::pin(idempotency::sweep(tx, older_than_ms, now_ms))
            })
            .and_then(|_| {
                self.run_blocking(Access::Read, (), move |tx, ()| {
                    Box::pin(idempotency::expired_orgs(tx, older_than_ms, now_ms))
                })
            })
            .and_then(|orgs| {
                // One transaction an organization: on Citus each is one worker's, with no
                // two-phase commit, and one worker down stops only its organizations'.
                let mut first_error = None;
                for org in orgs {
                    let swept = self.run_blocking(Access::Each, org, move |tx, org| {
                        Box::pin(idempotency::sweep_org(tx, older_than_ms, now_ms, org))
                    });
                    if let Err(e) = swept {
                        first_error.get_or_insert(e);
                    }
                }
                first_error.map_or(Ok(()), Err)
            });
        if let Err(e) = swept {
            tracing::warn!(
                "sweeping old idempotency records at start (left for a later start): {e}"
            );
        }
        self.run_blocking(Access::Write, fresh_cursor_secret, move |tx, fresh| {
            Box::pin(async move { keys::setting_or_insert(tx, "cursor_secret", fresh).await })
        })
    }

    fn add_ap2_issuer(&self, org_id: &str, kid: &str, jwk: &str, now_ms: i64) -> Result<bool> {
        let args = (org_id, kid, jwk);
        self.run_blocking(Access::Write, args, move |tx, (org, kid, jwk)| {
            Box::pin(async move {
                let params = [(*org).into(), (*kid).into(), (*jwk).into(), now_ms.into()];
                Ok(tx.execute(Ap2Sql::AddIssuer.into(), &params).await? == 1)
            })
        })
    }

    fn list_ap2_issuers(&self, org_id: &str) -> Result<Vec<Ap2Issuer>> {
        self.run_blocking(Access::Read, org_id, |tx, org| {
            Box::pin(ap2::issuers(tx, org))
        })
    }

    fn remove_ap2_issuer(&self, org_id: &str, kid: &str) -> Result<bool> {
        self.run_blocking(Access::Write, (org_id, kid), |tx, (org, kid)| {
            Box::pin(async move {
                let params = [(*org).into(), (*kid).into()];
                Ok(tx.execute(Ap2Sql::RemoveIssuer.into(), &params).await? == 1)
            })
        })
    }
}
