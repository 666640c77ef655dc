//! Operator commands: onboarding, keys, rates, signing-key rotation, policy versions.
//! They act on the database file directly; a running server picks the changes up.

use mandate_core::id::base32;
use time::OffsetDateTime;

use crate::clock::{fill_random, ms};
use crate::model::{Env, KeyClass};
use crate::signing::fresh_secret;
use crate::storage::sqlite::{orgs, signing};
use crate::storage::{Db, StorageError, keys};

/// An operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The organization name is invalid.
    #[error("organization name must be 1 to 64 characters of [A-Za-z0-9 ._-]")]
    BadOrgName,
    /// The organization exists already.
    #[error("an organization named {0} exists already")]
    OrgExists(String),
    /// No such organization.
    #[error("no organization named {0}")]
    NoOrg(String),
    /// No such key.
    #[error("no key matches {0}")]
    NoKey(String),
    /// A bad policy version.
    #[error("policy version must look like pol_YYYY-MM-DD.N")]
    BadPolicyVersion,
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<rusqlite::Error> for OperatorError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Storage(e.into())
    }
}

/// A fresh API key of `class` for `env`: the prefix and 160 random bits in base32.
pub fn new_key(class: KeyClass, env: Env) -> String {
    let mut bytes = [0u8; 20];
    fill_random(&mut bytes);
    format!("{}{}", class.key_prefix(env), base32(&bytes))
}

/// The keys printed once at onboarding.
#[derive(Debug)]
pub struct Onboarded {
    /// The organization's id.
    pub org_id: String,
    /// Its policy version.
    pub policy_version: String,
    /// The sandbox organization key.
    pub sandbox_key: String,
    /// The live organization key.
    pub live_key: String,
}

fn valid_org_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" ._-".contains(&b))
}

/// Creates an organization with both environments and one key for each.
pub fn onboard(db: &Db, name: &str, now: OffsetDateTime) -> Result<Onboarded, OperatorError> {
    if !valid_org_name(name) {
        return Err(OperatorError::BadOrgName);
    }
    let mut id_bytes = [0u8; 10];
    fill_random(&mut id_bytes);
    let org_id = format!("org_{}", base32(&id_bytes));
    let sandbox_key = new_key(KeyClass::Org, Env::Sandbox);
    let live_key = new_key(KeyClass::Org, Env::Live);
    let date = mandate_core::mandate::format_date(now.date());
    let policy_version = db.write_blocking(|tx| -> Result<String, OperatorError> {
        if orgs::id_by_name(tx, name)?.is_some() {
            return Err(OperatorError::OrgExists(name.to_owned()));
        }
        let prefix = format!("pol_{date}.");
        let n = orgs::count_policy_versions_on(tx, &prefix)? + 1;
        let version = format!("{prefix}{n}");
        orgs::create(tx, &org_id, name, &version, ms(now))?;
        keys::insert(
            tx,
            &keys::hash(&sandbox_key),
            &org_id,
            Env::Sandbox,
            KeyClass::Org,
            None,
            ms(now),
        )?;
        keys::insert(
            tx,
            &keys::hash(&live_key),
            &org_id,
            Env::Live,
            KeyClass::Org,
            None,
            ms(now),
        )?;
        Ok(version)
    })?;
    Ok(Onboarded {
        org_id,
        policy_version,
        sandbox_key,
        live_key,
    })
}

fn org_id(db: &Db, name: &str) -> Result<String, OperatorError> {
    db.write_blocking(|tx| -> Result<_, OperatorError> {
        orgs::id_by_name(tx, name)?.ok_or_else(|| OperatorError::NoOrg(name.to_owned()))
    })
}

/// Issues another organization key for `env`.
pub fn issue_key(
    db: &Db,
    org: &str,
    env: Env,
    now: OffsetDateTime,
) -> Result<(String, String), OperatorError> {
    let org_id = org_id(db, org)?;
    let key = new_key(KeyClass::Org, env);
    let fp = db.write_blocking(|tx| -> Result<_, OperatorError> {
        Ok(keys::insert(
            tx,
            &keys::hash(&key),
            &org_id,
            env,
            KeyClass::Org,
            None,
            ms(now),
        )?)
    })?;
    Ok((key, fp))
}

/// Finds a key's hash from the key itself or its fingerprint.
fn key_hash(db: &Db, key_or_fingerprint: &str) -> Result<Vec<u8>, OperatorError> {
    if key_or_fingerprint.starts_with("key_") {
        db.write_blocking(|tx| -> Result<_, OperatorError> {
            keys::hash_by_fingerprint(tx, key_or_fingerprint)?
                .ok_or_else(|| OperatorError::NoKey(key_or_fingerprint.to_owned()))
        })
    } else {
        Ok(keys::hash(key_or_fingerprint).to_vec())
    }
}

/// Revokes a key (by the key or its fingerprint). A revoked key gets 401.
pub fn revoke_key(
    db: &Db,
    key_or_fingerprint: &str,
    now: OffsetDateTime,
) -> Result<(), OperatorError> {
    let hash = key_hash(db, key_or_fingerprint)?;
    let shown = keys::fingerprint(&hash.clone().try_into().unwrap_or([0; 32]));
    db.write_blocking(|tx| -> Result<_, OperatorError> {
        if keys::revoke(tx, &hash, ms(now))? {
            keys::bump_generation(tx)?;
            Ok(())
        } else {
            Err(OperatorError::NoKey(format!(
                "{shown} (unknown or already revoked)"
            )))
        }
    })
}

/// Sets a key's request rate, requests per second.
pub fn set_rate(db: &Db, key_or_fingerprint: &str, per_sec: u32) -> Result<(), OperatorError> {
    let hash = key_hash(db, key_or_fingerprint)?;
    db.write_blocking(|tx| -> Result<_, OperatorError> {
        if keys::set_rate(tx, &hash, per_sec)? {
            keys::bump_generation(tx)?;
            Ok(())
        } else {
            Err(OperatorError::NoKey(keys::fingerprint(
                &hash.clone().try_into().unwrap_or([0; 32]),
            )))
        }
    })
}

/// Rotates an environment's signing key; returns the new kid.
pub fn rotate_signing_key(db: &Db, env: Env, now: OffsetDateTime) -> Result<String, OperatorError> {
    let secret = fresh_secret()?;
    db.write_blocking(|tx| -> Result<_, OperatorError> {
        Ok(signing::rotate(tx, env, &secret, ms(now))?)
    })
}

/// Sets an organization's policy version.
pub fn set_policy_version(db: &Db, org: &str, version: &str) -> Result<(), OperatorError> {
    let valid = version
        .strip_prefix("pol_")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(date, n)| {
            mandate_core::mandate::parse_date(date).is_some()
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        });
    if !valid {
        return Err(OperatorError::BadPolicyVersion);
    }
    let org_id = org_id(db, org)?;
    db.write_blocking(|tx| -> Result<_, OperatorError> {
        orgs::set_policy_version(tx, &org_id, version)?;
        keys::bump_generation(tx)?;
        Ok(())
    })
}

/// The keys of an organization, as operators see them.
pub fn list_keys(db: &Db, org: &str) -> Result<Vec<keys::KeyInfo>, OperatorError> {
    let org_id = org_id(db, org)?;
    db.write_blocking(|tx| -> Result<_, OperatorError> { Ok(keys::list(tx, &org_id)?) })
}
