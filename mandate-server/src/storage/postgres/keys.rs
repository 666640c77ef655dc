//! API keys, stored only as SHA-256 hashes.

use deadpool_postgres::GenericClient;

use mandate_core::id::AgentId;

use super::{Result, env_from};
use crate::model::{Env, KeyClass};
use crate::storage::StorageError;
use crate::storage::keys::{
    ApiKeyRow, BindingChange, KeyInfo, StoredApiKey, class_from, fingerprint,
};

/// Stores a new key's hash with its binding (opaque bytes, `None` without a key-encryption
/// key); returns its fingerprint.
pub async fn insert(
    c: &impl GenericClient,
    (hash, binding): (&[u8; 32], Option<&[u8]>),
    org_id: &str,
    env: Env,
    class: KeyClass,
    agent_id: Option<&str>,
    now_ms: i64,
) -> Result<String> {
    let fp = fingerprint(hash);
    let stmt = c
        .prepare_cached(
            "INSERT INTO api_keys (hash, fingerprint, org_id, env, class, agent_id, created_ms, binding)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .await?;
    c.execute(
        &stmt,
        &[
            &&hash[..],
            &fp,
            &org_id,
            &env.as_str(),
            &class.as_str(),
            &agent_id,
            &now_ms,
            &binding,
        ],
    )
    .await?;
    Ok(fp)
}

/// The row of a key hash, revoked or not.
pub async fn api_key(c: &impl GenericClient, hash: &[u8; 32]) -> Result<Option<ApiKeyRow>> {
    let stmt = c
        .prepare_cached(
            "SELECT k.org_id, k.env, k.agent_id, k.rate_per_sec, o.policy_version, k.class,
                    k.binding, k.revoked_ms IS NOT NULL
             FROM api_keys k JOIN orgs o ON o.id = k.org_id WHERE k.hash = $1",
        )
        .await?;
    let Some(row) = c.query_opt(&stmt, &[&&hash[..]]).await? else {
        return Ok(None);
    };
    let agent = row
        .get::<_, Option<String>>(2)
        .map(|a| AgentId::parse(&a))
        .transpose()
        .map_err(|e| StorageError::Corrupt(e.to_string()))?;
    Ok(Some(ApiKeyRow {
        org_id: row.get(0),
        env: env_from(row.get(1))?,
        agent,
        rate_per_sec: row.get(3),
        policy_version: row.get(4),
        class: class_from(row.get(5))?,
        binding: row.get(6),
        revoked: row.get(7),
    }))
}

/// Every unrevoked key, with its binding.
pub async fn all_unrevoked(c: &impl GenericClient) -> Result<Vec<StoredApiKey>> {
    let rows = c
        .query(
            "SELECT hash, org_id, env, class, agent_id, binding FROM api_keys
             WHERE revoked_ms IS NULL ORDER BY created_ms, hash",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let hash: Vec<u8> = r.get(0);
            let class: String = r.get(3);
            Ok(StoredApiKey {
                hash: hash.try_into().map_err(|_| {
                    StorageError::Corrupt("an API key hash of another length".into())
                })?,
                org_id: r.get(1),
                env: env_from(r.get(2))?,
                class: class_from(&class)?,
                agent: r.get(4),
                binding: r.get(5),
            })
        })
        .collect()
}

/// Stores each change's binding if every key still holds its `from` and is unrevoked;
/// returns whether it did (the caller rolls back otherwise). Rows are locked as read.
pub async fn replace_bindings(c: &impl GenericClient, changes: &[BindingChange]) -> Result<bool> {
    for change in changes {
        let stored = c
            .query_opt(
                "SELECT binding FROM api_keys WHERE hash = $1 AND revoked_ms IS NULL FOR UPDATE",
                &[&&change.hash[..]],
            )
            .await?
            .map(|r| r.get::<_, Option<Vec<u8>>>(0));
        if stored.as_ref() != Some(&change.from) {
            return Ok(false);
        }
    }
    for change in changes {
        c.execute(
            "UPDATE api_keys SET binding = $2 WHERE hash = $1",
            &[&&change.hash[..], &change.to],
        )
        .await?;
    }
    bump_generation(c).await?;
    Ok(true)
}

/// The hash of the key with this fingerprint.
pub async fn hash_by_fingerprint(c: &impl GenericClient, fp: &str) -> Result<Option<Vec<u8>>> {
    Ok(
        c.query_opt("SELECT hash FROM api_keys WHERE fingerprint = $1", &[&fp])
            .await?
            .map(|r| r.get(0)),
    )
}

/// Revokes a key; returns whether a live key was revoked. Its binding goes with it, so a
/// row set back to unrevoked in the database is refused as unbound.
pub async fn revoke(c: &impl GenericClient, hash: &[u8], now_ms: i64) -> Result<bool> {
    Ok(c.execute(
        "UPDATE api_keys SET revoked_ms = $2, binding = NULL WHERE hash = $1 AND revoked_ms IS NULL",
        &[&hash, &now_ms],
    )
    .await?
        == 1)
}

/// Sets a key's request rate; returns whether the key exists.
pub async fn set_rate(c: &impl GenericClient, hash: &[u8], per_sec: u32) -> Result<bool> {
    Ok(c.execute(
        "UPDATE api_keys SET rate_per_sec = $2 WHERE hash = $1",
        &[&hash, &i64::from(per_sec)],
    )
    .await?
        == 1)
}

/// The keys of an organization, oldest first.
pub async fn list(c: &impl GenericClient, org_id: &str) -> Result<Vec<KeyInfo>> {
    let rows = c
        .query(
            "SELECT fingerprint, env, class, agent_id, rate_per_sec, revoked_ms IS NOT NULL
             FROM api_keys WHERE org_id = $1 ORDER BY created_ms, fingerprint",
            &[&org_id],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(KeyInfo {
                fingerprint: r.get(0),
                env: env_from(r.get(1))?,
                class: class_from(r.get(2))?,
                agent: r.get(3),
                rate_per_sec: r.get(4),
                revoked: r.get(5),
            })
        })
        .collect()
}

/// Marks a change to keys made outside the running servers (operator commands): servers
/// empty their caller caches when they see the generation move.
pub async fn bump_generation(c: &impl GenericClient) -> Result<()> {
    c.execute(
        "INSERT INTO counters (name, value) VALUES ('keys_generation', 1)
         ON CONFLICT (name) DO UPDATE SET value = counters.value + 1",
        &[],
    )
    .await?;
    Ok(())
}

/// The current keys generation (0 before any change).
pub async fn generation(c: &impl GenericClient) -> Result<i64> {
    let stmt = c
        .prepare_cached(
            "SELECT COALESCE((SELECT value FROM counters WHERE name = 'keys_generation'), 0)::BIGINT",
        )
        .await?;
    Ok(c.query_one(&stmt, &[]).await?.get(0))
}
