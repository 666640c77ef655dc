//! What each command of `mandate-server` does, one function a command: [`run`] dispatches.
//! `serve` is in `serve.rs`; the operator commands on keys in `keys.rs`, on AP2 issuers in
//! `ap2_issuer.rs`, on SQLite backups in `backup.rs`; `migrate` and `set-policy-version`
//! here, with what every operator command opens the database with.

mod ap2_issuer;
mod backup;
mod keys;
mod serve;

use std::sync::Arc;

use mandate_server::clock::{Clock, SystemClock};
use mandate_server::operator;
use mandate_server::serve::open_store;
use mandate_server::signing::at_rest::{self, KekSources, KeyEncryption};
use mandate_server::storage::{AdminStore, Store};

use crate::cli::{Command, DbArg};

/// Runs `command` to its end.
pub(crate) async fn run(command: Command) -> Result<(), String> {
    let clock = SystemClock;
    match command {
        Command::Serve(args) => serve::serve(*args, clock).await,
        Command::Migrate { db } => migrate(&db).await,
        Command::Onboard { db, org } => keys::onboard(&db, &org, &clock).await,
        Command::IssueKey { db, org, env } => keys::issue(&db, &org, env.into(), &clock).await,
        Command::RevokeKey { db, key } => keys::revoke(&db, &key, &clock).await,
        Command::SetRate {
            db,
            key,
            per_second,
        } => keys::set_rate(&db, &key, per_second).await,
        Command::ListKeys { db, org } => keys::list(&db, &org).await,
        Command::Ap2Issuer { action } => ap2_issuer::run(action, clock.now()).await,
        Command::RotateLogKey { db, env } => keys::rotate_log_key(&db, env.into(), &clock).await,
        Command::RotateSigningKey { db, env } => {
            keys::rotate_signing_key(&db, env.into(), &clock).await
        }
        Command::RotateKeyEncryptionKey { db, new_key_file } => {
            keys::rotate_key_encryption_key(&db, &new_key_file).await
        }
        Command::BindApiKeys { db } => keys::bind_api_keys(&db).await,
        Command::SealSigningKeys { db } => keys::seal_signing_keys(&db).await,
        Command::Backup { db, to } => backup::backup(&db, &to),
        Command::VerifyBackup { file, kek } => backup::verify(&file, kek),
        Command::Restore { from, db, force } => backup::restore(&from, &db, force),
        Command::SetPolicyVersion { db, org, version } => {
            set_policy_version(&db, &org, &version).await
        }
    }
}

/// `migrate`: the database brought to this server's schema (by opening it), and said so.
async fn migrate(db: &DbArg) -> Result<(), String> {
    let store = open(db).await?;
    let schema = store.readiness().await.map_err(|e| e.to_string())?;
    println!(
        "database {} is at schema migration {} (this server's)",
        db.db, schema.applied
    );
    Ok(())
}

/// `set-policy-version`.
async fn set_policy_version(db: &DbArg, org: &str, version: &str) -> Result<(), String> {
    let store = open(db).await?;
    operator::set_policy_version(ops(&store), org, version).map_err(|e| e.to_string())?;
    println!("policy version of {org} is now {version}");
    Ok(())
}

/// Prints `text` and a newline on stdout, ignoring a stdout that fails (`println!` would
/// panic).
fn print_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// The key-encryption keys given by flag or variable.
fn key_encryption(db: &DbArg) -> Result<KeyEncryption, String> {
    let sources = KekSources {
        file: db.kek.key_encryption_key_file.as_deref(),
        previous_file: db.kek.previous_key_encryption_key_file.as_deref(),
        ..KekSources::default()
    };
    KeyEncryption::from_sources(&sources.with_environment()).map_err(|e| e.to_string())
}

/// The store of an operator command (the engine `--db` names, migrated) and the
/// key-encryption keys; a database that needs one is refused without it before it is
/// reached.
async fn open_with_keys(db: &DbArg) -> Result<(Arc<dyn Store>, KeyEncryption), String> {
    let keys = key_encryption(db)?;
    at_rest::check_required(&db.db.to_string(), &keys).map_err(|e| e.to_string())?;
    let (store, _) = open_store(&db.db, true)
        .await
        .map_err(|e| format!("database {}: {e}", db.db))?;
    Ok((store, keys))
}

/// The store of an operator command that does not touch signing keys.
async fn open(db: &DbArg) -> Result<Arc<dyn Store>, String> {
    open_with_keys(db).await.map(|(store, _)| store)
}

/// The store as operator commands see it.
fn ops(store: &Arc<dyn Store>) -> &dyn AdminStore {
    &**store
}
