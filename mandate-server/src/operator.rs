//! Operator commands: onboarding, keys, rates, signing-key rotation, policy versions,
//! the AP2 issuer keys an organization trusts.
//! They act on the database file directly; a running server picks the changes up. Those
//! that create or read signing keys take the operator's key-encryption keys.

use base64::Engine as _;
use mandate_core::Jwk;
use mandate_protocol::id::base32;
use time::OffsetDateTime;

use crate::clock::{fill_random, ms};
use crate::model::{Env, KeyClass};
use crate::signing;
use crate::signing::api_keys::{KeyAuthority, KeyBinder};
use crate::signing::at_rest::{self, AtRestError, KeyEncryption, Prepared};
use crate::storage::admin::{AdminStore, NewOrg};
use crate::storage::ap2::Ap2Issuer;
use crate::storage::{StorageError, keys};

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
    /// A signing key could not be opened or sealed with the key-encryption keys given.
    #[error(transparent)]
    Keys(#[from] AtRestError),
    /// An AP2 issuer key file that is not one EC P-256 public key (JWK or PEM).
    #[error("{0}")]
    BadIssuerKey(String),
    /// The organization trusts an AP2 issuer key with this kid already.
    #[error(
        "organization {org} already trusts an AP2 issuer key with kid {kid}; remove it first to replace it"
    )]
    IssuerExists {
        /// The organization's name.
        org: String,
        /// The kid.
        kid: String,
    },
    /// The organization trusts no AP2 issuer key with this kid.
    #[error("organization {org} trusts no AP2 issuer key with kid {kid}")]
    NoIssuer {
        /// The organization's name.
        org: String,
        /// The kid.
        kid: String,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
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

/// The row of a new organization key, with its binding under `binder`'s KEK (none without
/// one).
fn org_key(binder: &KeyBinder, key: &str, org_id: &str, env: Env) -> ([u8; 32], Option<Vec<u8>>) {
    let hash = keys::hash(key);
    let binding = binder.bind(&KeyAuthority {
        hash: &hash,
        org_id,
        env,
        class: KeyClass::Org,
        agent: None,
    });
    (hash, binding)
}

/// Creates an organization with both environments and one key for each, bound to the
/// key-encryption key of `binder` if it has one.
pub fn onboard(
    store: &dyn AdminStore,
    binder: &KeyBinder,
    name: &str,
    now: OffsetDateTime,
) -> Result<Onboarded, OperatorError> {
    if !valid_org_name(name) {
        return Err(OperatorError::BadOrgName);
    }
    let mut id_bytes = [0u8; 10];
    fill_random(&mut id_bytes);
    let org_id = format!("org_{}", base32(&id_bytes));
    let sandbox_key = new_key(KeyClass::Org, Env::Sandbox);
    let live_key = new_key(KeyClass::Org, Env::Live);
    let date = mandate_protocol::mandate::format_date(now.date());
    let org = NewOrg {
        id: org_id.clone(),
        name: name.to_owned(),
        policy_prefix: format!("pol_{date}."),
        keys: [(&sandbox_key, Env::Sandbox), (&live_key, Env::Live)]
            .into_iter()
            .map(|(key, env)| {
                let (hash, binding) = org_key(binder, key, &org_id, env);
                (hash, env, binding)
            })
            .collect(),
        now_ms: ms(now),
    };
    let policy_version = store
        .create_org(&org)?
        .ok_or_else(|| OperatorError::OrgExists(name.to_owned()))?;
    Ok(Onboarded {
        org_id,
        policy_version,
        sandbox_key,
        live_key,
    })
}

fn org_id(store: &dyn AdminStore, name: &str) -> Result<String, OperatorError> {
    store
        .org_id_by_name(name)?
        .ok_or_else(|| OperatorError::NoOrg(name.to_owned()))
}

/// Issues another organization key for `env`, bound to the key-encryption key of `binder`
/// if it has one.
pub fn issue_key(
    store: &dyn AdminStore,
    binder: &KeyBinder,
    org: &str,
    env: Env,
    now: OffsetDateTime,
) -> Result<(String, String), OperatorError> {
    let org_id = org_id(store, org)?;
    let key = new_key(KeyClass::Org, env);
    let (hash, binding) = org_key(binder, &key, &org_id, env);
    let fp = store.insert_org_key(&org_id, env, &hash, binding, ms(now))?;
    Ok((key, fp))
}

/// Finds a key's hash from the key itself or its fingerprint.
fn key_hash(store: &dyn AdminStore, key_or_fingerprint: &str) -> Result<Vec<u8>, OperatorError> {
    if key_or_fingerprint.starts_with("key_") {
        store
            .key_hash_by_fingerprint(key_or_fingerprint)?
            .ok_or_else(|| OperatorError::NoKey(key_or_fingerprint.to_owned()))
    } else {
        Ok(keys::hash(key_or_fingerprint).to_vec())
    }
}

/// Revokes a key (by the key or its fingerprint). A revoked key gets 401.
pub fn revoke_key(
    store: &dyn AdminStore,
    key_or_fingerprint: &str,
    now: OffsetDateTime,
) -> Result<(), OperatorError> {
    let hash = key_hash(store, key_or_fingerprint)?;
    let shown = keys::fingerprint(&hash.clone().try_into().unwrap_or([0; 32]));
    if store.revoke_key(&hash, ms(now))? {
        Ok(())
    } else {
        Err(OperatorError::NoKey(format!(
            "{shown} (unknown or already revoked)"
        )))
    }
}

/// Sets a key's request rate, requests per second.
pub fn set_rate(
    store: &dyn AdminStore,
    key_or_fingerprint: &str,
    per_sec: u32,
) -> Result<(), OperatorError> {
    let hash = key_hash(store, key_or_fingerprint)?;
    if store.set_key_rate(&hash, per_sec)? {
        Ok(())
    } else {
        Err(OperatorError::NoKey(keys::fingerprint(
            &hash.clone().try_into().unwrap_or([0; 32]),
        )))
    }
}

/// Before a command that creates or reads signing keys, as at a server's start: every
/// stored key must open with `keys` (keys in plaintext are sealed if a key-encryption key
/// is given), and both environments get a current key if they have none.
pub fn prepare_signing_keys(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
    now: OffsetDateTime,
) -> Result<Prepared, OperatorError> {
    let prepared = at_rest::prepare(store, keys)?;
    signing::ensure_keys(store, keys, ms(now))?;
    Ok(prepared)
}

/// Rotates an environment's signing key, sealed under the current key-encryption key of
/// `keys` (after checking that the stored keys open with it); returns the new kid.
pub fn rotate_signing_key(
    store: &dyn AdminStore,
    keys: &KeyEncryption,
    env: Env,
    now: OffsetDateTime,
) -> Result<String, OperatorError> {
    at_rest::prepare(store, keys)?;
    Ok(signing::rotate(store, keys, env, ms(now))?)
}

/// Sets an organization's policy version.
pub fn set_policy_version(
    store: &dyn AdminStore,
    org: &str,
    version: &str,
) -> Result<(), OperatorError> {
    let valid = version
        .strip_prefix("pol_")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(date, n)| {
            mandate_protocol::mandate::parse_date(date).is_some()
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        });
    if !valid {
        return Err(OperatorError::BadPolicyVersion);
    }
    let org_id = org_id(store, org)?;
    Ok(store.set_policy_version(&org_id, version)?)
}

/// The keys of an organization, as operators see them.
pub fn list_keys(store: &dyn AdminStore, org: &str) -> Result<Vec<keys::KeyInfo>, OperatorError> {
    let org_id = org_id(store, org)?;
    Ok(store.list_keys(&org_id)?)
}

/// The DER prefix of a P-256 public key's SubjectPublicKeyInfo (id-ecPublicKey,
/// prime256v1, a 66-byte bit string); the 65 bytes of the uncompressed point follow.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Reads an AP2 issuer's public key from a file's text: a JWK (EC, P-256, ES256 if `alg`
/// is given, no private `d`; its `kid`, or `kid` if given, which must then be the same),
/// or a PEM `PUBLIC KEY` of P-256 (then `kid` is required). Returns the key as a JWK.
pub fn read_issuer_key(text: &str, kid: Option<&str>) -> Result<Jwk, OperatorError> {
    let bad = |what: String| OperatorError::BadIssuerKey(what);
    let trimmed = text.trim();
    if let Some(body) = trimmed.strip_prefix("-----BEGIN PUBLIC KEY-----") {
        let body = body
            .strip_suffix("-----END PUBLIC KEY-----")
            .ok_or_else(|| bad("the PEM has no -----END PUBLIC KEY----- line".into()))?;
        let b64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| bad(format!("the PEM's base64 is invalid: {e}")))?;
        let point = der
            .strip_prefix(&P256_SPKI_PREFIX[..])
            .filter(|p| p.len() == 65)
            .ok_or_else(|| {
                bad("the PEM is not an EC P-256 public key (ES256 is the only algorithm AP2 issuers are trusted with)".into())
            })?;
        let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(point)
            .map_err(|_| bad("the PEM's point is not on P-256".into()))?;
        let kid = kid.ok_or_else(|| bad("a PEM key carries no kid: give --kid".into()))?;
        if kid.is_empty() {
            return Err(bad("--kid must not be empty".into()));
        }
        return Ok(Jwk::from_verifying_key(kid, &key));
    }
    let mut value: serde_json::Value = serde_json::from_str(trimmed).map_err(|e| {
        bad(format!(
            "the file is neither a PEM PUBLIC KEY nor a JSON JWK: {e}"
        ))
    })?;
    if let (Some(given), Some(object)) = (kid, value.as_object_mut()) {
        match object.get("kid").and_then(|k| k.as_str()) {
            Some(own) if own != given => {
                return Err(bad(format!(
                    "the JWK's kid is {own:?} and --kid says {given:?}: leave out --kid or make them equal"
                )));
            }
            _ => {
                object.insert("kid".into(), given.into());
            }
        }
    }
    Jwk::from_value(&value).map_err(|e| bad(format!("the JWK is refused: {e}")))
}

/// Trusts `key` to sign the AP2 open payment mandates the organization imports.
pub fn add_ap2_issuer(
    store: &dyn AdminStore,
    org: &str,
    key: &Jwk,
    now: OffsetDateTime,
) -> Result<(), OperatorError> {
    let org_id = org_id(store, org)?;
    let jwk = serde_json::to_string(key)
        .map_err(|e| OperatorError::BadIssuerKey(format!("the JWK cannot be written: {e}")))?;
    if store.add_ap2_issuer(&org_id, key.kid(), &jwk, ms(now))? {
        Ok(())
    } else {
        Err(OperatorError::IssuerExists {
            org: org.to_owned(),
            kid: key.kid().to_owned(),
        })
    }
}

/// The AP2 issuer keys the organization trusts, oldest first.
pub fn list_ap2_issuers(
    store: &dyn AdminStore,
    org: &str,
) -> Result<Vec<Ap2Issuer>, OperatorError> {
    let org_id = org_id(store, org)?;
    Ok(store.list_ap2_issuers(&org_id)?)
}

/// Stops trusting an AP2 issuer key. Mandates imported under it stay as they are.
pub fn remove_ap2_issuer(
    store: &dyn AdminStore,
    org: &str,
    kid: &str,
) -> Result<(), OperatorError> {
    let org_id = org_id(store, org)?;
    if store.remove_ap2_issuer(&org_id, kid)? {
        Ok(())
    } else {
        Err(OperatorError::NoIssuer {
            org: org.to_owned(),
            kid: kid.to_owned(),
        })
    }
}
