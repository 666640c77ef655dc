//! The operator commands on keys: organizations onboarded with their keys, API keys issued,
//! revoked, rated, listed and bound to the key-encryption key; signing keys rotated and
//! sealed; the key-encryption key rotated.

use std::path::Path;

use mandate_server::clock::Clock;
use mandate_server::model::Env;
use mandate_server::operator;
use mandate_server::signing::api_keys::{self, KeyBinder};
use mandate_server::signing::at_rest;

use super::{open, open_with_keys, ops};
use crate::cli::DbArg;

/// What a binding pass says of the keys it left refused (edited rows, or bound under a KEK
/// not given), by fingerprint.
fn refused_note(refused: &[String]) -> String {
    if refused.is_empty() {
        String::new()
    } else {
        format!(
            "; {} API keys left refused, their binding not made for them by the key-encryption keys given (edited in the database, or bound under another key-encryption key): {}",
            refused.len(),
            refused.join(", ")
        )
    }
}

/// `onboard`: the organization `org` made, with its signing keys, and its two keys printed
/// once.
pub(super) async fn onboard(db: &DbArg, org: &str, clock: &dyn Clock) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    operator::prepare_signing_keys(ops(&store), &keys, clock.now()).map_err(|e| e.to_string())?;
    let binder = KeyBinder::new(&keys);
    let onboarded =
        operator::onboard(ops(&store), &binder, org, clock.now()).map_err(|e| e.to_string())?;
    println!(
        "organization {org} ({}) onboarded, policy version {}",
        onboarded.org_id, onboarded.policy_version
    );
    println!("sandbox key: {}", onboarded.sandbox_key);
    println!("live key:    {}", onboarded.live_key);
    println!("These keys are shown once; only their hashes are stored.");
    Ok(())
}

/// `issue-key`: another organization key of `org` for `env`, printed once.
pub(super) async fn issue(
    db: &DbArg,
    org: &str,
    env: Env,
    clock: &dyn Clock,
) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    let binder = KeyBinder::new(&keys);
    let (key, fp) = operator::issue_key(ops(&store), &binder, org, env, clock.now())
        .map_err(|e| e.to_string())?;
    println!("{key}\nfingerprint {fp}; the key is shown once");
    Ok(())
}

/// `revoke-key`: the key (or the key of that fingerprint) revoked.
pub(super) async fn revoke(db: &DbArg, key: &str, clock: &dyn Clock) -> Result<(), String> {
    let store = open(db).await?;
    operator::revoke_key(ops(&store), key, clock.now()).map_err(|e| e.to_string())?;
    println!("revoked");
    Ok(())
}

/// `set-rate`: a key's requests a second.
pub(super) async fn set_rate(db: &DbArg, key: &str, per_second: u32) -> Result<(), String> {
    let store = open(db).await?;
    operator::set_rate(ops(&store), key, per_second).map_err(|e| e.to_string())?;
    println!(
        "rate set to {per_second} {} per second",
        if per_second == 1 {
            "request"
        } else {
            "requests"
        }
    );
    Ok(())
}

/// `list-keys`: an organization's keys by fingerprint, never the keys.
pub(super) async fn list(db: &DbArg, org: &str) -> Result<(), String> {
    let store = open(db).await?;
    for k in operator::list_keys(ops(&store), org).map_err(|e| e.to_string())? {
        println!(
            "{}  {:7}  {:5}  {:20}  {:>5}/s  {}",
            k.fingerprint,
            k.env.as_str(),
            k.class.as_str(),
            k.agent.unwrap_or_default(),
            k.rate_per_sec,
            if k.revoked { "revoked" } else { "active" }
        );
    }
    Ok(())
}

/// `rotate-signing-key`: a new signing key for `env`.
pub(super) async fn rotate_signing_key(
    db: &DbArg,
    env: Env,
    clock: &dyn Clock,
) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    let kid = operator::rotate_signing_key(ops(&store), &keys, env, clock.now())
        .map_err(|e| e.to_string())?;
    println!("new signing key {kid}; the previous key stays published until its tokens expire");
    Ok(())
}

/// `rotate-log-key`: a new log key for `env`; the previous one signs beside it until it
/// leaves the JWK Set.
pub(super) async fn rotate_log_key(db: &DbArg, env: Env, clock: &dyn Clock) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    let now = mandate_server::clock::ms(clock.now());
    let kid = mandate_server::signing::log_keys::rotate(&*store, &keys, env, now)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "new log key {kid}; the previous one signs checkpoints beside it until it leaves the JWK Set (ten minutes)"
    );
    Ok(())
}

/// `rotate-key-encryption-key`: every signing key sealed, and every API key bound, again
/// under the key in `new_key_file`.
pub(super) async fn rotate_key_encryption_key(
    db: &DbArg,
    new_key_file: &Path,
) -> Result<(), String> {
    let new = at_rest::Kek::from_file(new_key_file, "--new-key-file").map_err(|e| e.to_string())?;
    let (store, keys) = open_with_keys(db).await?;
    let rotated = at_rest::rotate(ops(&store), &keys, &new).map_err(|e| e.to_string())?;
    mandate_server::signing::log_keys::reseal(&*store, &keys, &new)
        .await
        .map_err(|e| e.to_string())?;
    let rebound = api_keys::rebind(ops(&store), &keys, &new).map_err(|e| e.to_string())?;
    println!(
        "{} of {} signing keys sealed again under key-encryption key {} (the others were already); \
         {} of {} API keys bound again under it{}; \
         give every process the new key ({} or {}) before the old one is withdrawn",
        rotated.resealed,
        rotated.keys,
        rotated.new_id,
        rebound.bound,
        rebound.keys,
        refused_note(&rebound.refused),
        at_rest::KEK_VAR,
        at_rest::KEK_FILE_FLAG
    );
    Ok(())
}

/// `bind-api-keys`: every unrevoked API key without a binding bound to the key-encryption
/// key, each printed.
pub(super) async fn bind_api_keys(db: &DbArg) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    let bound = api_keys::bind_unbound(ops(&store), &keys).map_err(|e| e.to_string())?;
    for line in &bound.described {
        println!("{line}");
    }
    println!(
        "{} of {} API keys bound now to key-encryption key {} (the others were already){}",
        bound.bound,
        bound.keys,
        keys.current_id()
            .map(|id| id.to_string())
            .unwrap_or_default(),
        refused_note(&bound.refused)
    );
    Ok(())
}

/// `seal-signing-keys`: every signing key stored in plaintext sealed under the
/// key-encryption key.
pub(super) async fn seal_signing_keys(db: &DbArg) -> Result<(), String> {
    let (store, keys) = open_with_keys(db).await?;
    let (count, sealed) = at_rest::seal_plaintext(ops(&store), &keys).map_err(|e| e.to_string())?;
    if let Some(kek) = at_rest::current_kek(&keys) {
        mandate_server::signing::log_keys::reseal(&*store, &keys, kek)
            .await
            .map_err(|e| e.to_string())?;
    }
    println!(
        "{sealed} of {count} signing keys sealed now under key-encryption key {} (the others were already sealed)",
        keys.current_id()
            .map(|id| id.to_string())
            .unwrap_or_default()
    );
    Ok(())
}
