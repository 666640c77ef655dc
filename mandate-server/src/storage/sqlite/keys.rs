//! API keys, stored only as SHA-256 hashes.

use rusqlite::{Connection, OptionalExtension, params};

use mandate_core::id::AgentId;

use super::StorageError;
use crate::model::{Env, KeyClass};
use crate::storage::keys::{
    ApiKeyRow, BindingChange, KeyInfo, StoredApiKey, class_from, fingerprint,
};

/// A new key as stored: its hash and its binding (opaque bytes, `None` without a
/// key-encryption key).
pub struct NewKey<'a> {
    /// SHA-256 of the key.
    pub hash: &'a [u8; 32],
    /// Its binding.
    pub binding: Option<&'a [u8]>,
}

/// Stores a new key's hash.
pub fn insert(
    tx: &Connection,
    key: NewKey<'_>,
    org_id: &str,
    env: Env,
    class: KeyClass,
    agent_id: Option<&str>,
    now_ms: i64,
) -> rusqlite::Result<String> {
    let fp = fingerprint(key.hash);
    tx.execute(
        "INSERT INTO api_keys (hash, fingerprint, org_id, env, class, agent_id, created_ms, binding) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![&key.hash[..], fp, org_id, env.as_str(), class.as_str(), agent_id, now_ms, key.binding],
    )?;
    Ok(fp)
}

/// The statement behind [`api_key`], kept prepared on each connection.
pub(crate) const CALLER_SQL: &str =
    "SELECT k.org_id, k.env, k.agent_id, k.rate_per_sec, o.policy_version,
            k.class, k.binding, k.revoked_ms IS NOT NULL
     FROM api_keys k JOIN orgs o ON o.id = k.org_id WHERE k.hash = ?1";

/// The row of a key hash, revoked or not.
pub fn api_key(conn: &Connection, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>, StorageError> {
    // Cached: every key's first request runs this (a prepare costs more than the query).
    let row = conn
        .prepare_cached(CALLER_SQL)?
        .query_row([&hash[..]], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Env>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, Option<Vec<u8>>>(6)?,
                r.get::<_, bool>(7)?,
            ))
        })
        .optional()?;
    let Some((org_id, env, agent, rate_per_sec, policy_version, class, binding, revoked)) = row
    else {
        return Ok(None);
    };
    let agent = agent
        .map(|a| AgentId::parse(&a))
        .transpose()
        .map_err(|e| StorageError::Corrupt(e.to_string()))?;
    Ok(Some(ApiKeyRow {
        org_id,
        env,
        agent,
        rate_per_sec,
        policy_version,
        class: class_from(&class)?,
        binding,
        revoked,
    }))
}

/// Every unrevoked key, with its binding.
pub fn all_unrevoked(conn: &Connection) -> Result<Vec<StoredApiKey>, StorageError> {
    let mut stmt = conn.prepare(
        "SELECT hash, org_id, env, class, agent_id, binding FROM api_keys
         WHERE revoked_ms IS NULL ORDER BY created_ms, hash",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, Vec<u8>>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<Vec<u8>>>(5)?,
        ))
    })?;
    let mut keys = Vec::new();
    for row in rows {
        let (hash, org_id, env, class, agent, binding) = row?;
        keys.push(StoredApiKey {
            hash: hash
                .try_into()
                .map_err(|_| StorageError::Corrupt("an API key hash of another length".into()))?,
            org_id,
            env: Env::parse(&env).ok_or_else(|| StorageError::Corrupt(format!("env {env:?}")))?,
            class: class_from(&class)?,
            agent,
            binding,
        });
    }
    Ok(keys)
}

/// Stores each change's binding if every key still holds its `from` and is unrevoked;
/// returns whether it did (nothing is changed otherwise).
pub fn replace_bindings(tx: &Connection, changes: &[BindingChange]) -> rusqlite::Result<bool> {
    for change in changes {
        let stored: Option<Option<Vec<u8>>> = tx
            .query_row(
                "SELECT binding FROM api_keys WHERE hash = ?1 AND revoked_ms IS NULL",
                [&change.hash[..]],
                |r| r.get(0),
            )
            .optional()?;
        if stored.as_ref() != Some(&change.from) {
            return Ok(false);
        }
    }
    for change in changes {
        tx.execute(
            "UPDATE api_keys SET binding = ?2 WHERE hash = ?1",
            params![&change.hash[..], change.to],
        )?;
    }
    bump_generation(tx)?;
    Ok(true)
}

/// The hash of the key with this fingerprint.
pub fn hash_by_fingerprint(conn: &Connection, fp: &str) -> rusqlite::Result<Option<Vec<u8>>> {
    conn.query_row(
        "SELECT hash FROM api_keys WHERE fingerprint = ?1",
        [fp],
        |r| r.get(0),
    )
    .optional()
}

/// Revokes a key; returns whether a live key was revoked. Its binding goes with it, so a
/// row set back to unrevoked in the database is refused as unbound.
pub fn revoke(tx: &Connection, hash: &[u8], now_ms: i64) -> rusqlite::Result<bool> {
    Ok(tx.execute(
        "UPDATE api_keys SET revoked_ms = ?2, binding = NULL WHERE hash = ?1 AND revoked_ms IS NULL",
        params![hash, now_ms],
    )? == 1)
}

/// Sets a key's request rate; returns whether the key exists.
pub fn set_rate(tx: &Connection, hash: &[u8], per_sec: u32) -> rusqlite::Result<bool> {
    Ok(tx.execute(
        "UPDATE api_keys SET rate_per_sec = ?2 WHERE hash = ?1",
        params![hash, per_sec],
    )? == 1)
}

/// The keys of an organization, oldest first.
pub fn list(conn: &Connection, org_id: &str) -> rusqlite::Result<Vec<KeyInfo>> {
    let mut stmt = conn.prepare(
        "SELECT fingerprint, env, class, agent_id, rate_per_sec, revoked_ms IS NOT NULL
         FROM api_keys WHERE org_id = ?1 ORDER BY created_ms, fingerprint",
    )?;
    let rows = stmt.query_map([org_id], |r| {
        Ok(KeyInfo {
            fingerprint: r.get(0)?,
            env: r.get(1)?,
            class: r.get(2)?,
            agent: r.get(3)?,
            rate_per_sec: r.get(4)?,
            revoked: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// Marks a change to keys made outside the running server (operator commands): servers
/// empty their caller caches when they see the generation move.
pub fn bump_generation(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO settings (name, value) VALUES ('keys_generation', 1)
         ON CONFLICT (name) DO UPDATE SET value = value + 1",
        [],
    )?;
    Ok(())
}

/// The current keys generation (0 before any change).
pub fn generation(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COALESCE((SELECT value FROM settings WHERE name = 'keys_generation'), 0)",
        [],
        |r| r.get(0),
    )
}
