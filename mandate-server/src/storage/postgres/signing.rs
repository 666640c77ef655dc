//! Signing keys per environment and the settings (the cursor secret). The secret is
//! stored as the server hands it over, and handed back the same.

use deadpool_postgres::GenericClient;

use super::{Result, env_from};
use crate::model::Env;
use crate::storage::admin::SecretChange;
use crate::storage::keys::{SealNew, StoredKey};

/// Every key that is current or retired after `published_after_ms`.
pub async fn published(c: &impl GenericClient, published_after_ms: i64) -> Result<Vec<StoredKey>> {
    let stmt = c
        .prepare_cached(
            "SELECT kid, env, secret, retired_ms FROM signing_keys
             WHERE retired_ms IS NULL OR retired_ms > $1 ORDER BY env, n",
        )
        .await?;
    let rows = c.query(&stmt, &[&published_after_ms]).await?;
    rows.iter()
        .map(|r| {
            Ok(StoredKey {
                kid: r.get(0),
                env: env_from(r.get(1))?,
                secret: r.get(2),
                retired_ms: r.get(3),
            })
        })
        .collect()
}

/// Adds a new current key for `env`, retiring the previous one at `now_ms` (in the
/// caller's transaction), its secret made by `seal` for its kid. Returns its kid.
pub async fn rotate(
    c: &impl GenericClient,
    env: Env,
    seal: &SealNew<'_>,
    now_ms: i64,
) -> Result<String> {
    // The current key's row, locked: two rotations at once take turns.
    c.query(
        "SELECT kid FROM signing_keys WHERE env = $1 AND retired_ms IS NULL FOR UPDATE",
        &[&env.as_str()],
    )
    .await?;
    let n: i64 = c
        .query_one(
            "SELECT (COALESCE(MAX(n), 0) + 1)::BIGINT FROM signing_keys WHERE env = $1",
            &[&env.as_str()],
        )
        .await?
        .get(0);
    c.execute(
        "UPDATE signing_keys SET retired_ms = $2 WHERE env = $1 AND retired_ms IS NULL",
        &[&env.as_str(), &now_ms],
    )
    .await?;
    let kid = format!("{}-{n}", env.as_str());
    let secret = seal(&kid)?;
    c.execute(
        "INSERT INTO signing_keys (kid, env, n, secret, created_ms) VALUES ($1, $2, $3, $4, $5)",
        &[&kid, &env.as_str(), &n, &secret, &now_ms],
    )
    .await?;
    Ok(kid)
}

/// Whether `env` has a current key.
pub async fn has_current(c: &impl GenericClient, env: Env) -> Result<bool> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM signing_keys WHERE env = $1 AND retired_ms IS NULL)",
        &[&env.as_str()],
    )
    .await?
    .get(0))
}

/// Writes a setting unless it exists; returns the stored value.
pub async fn setting_or_insert(
    c: &impl GenericClient,
    name: &str,
    value: &[u8],
) -> Result<Vec<u8>> {
    c.execute(
        "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        &[&name, &value],
    )
    .await?;
    Ok(
        c.query_one("SELECT value FROM settings WHERE name = $1", &[&name])
            .await?
            .get(0),
    )
}

/// Makes a key sealed by `seal` the current key of `env` unless it has one. Several
/// processes starting at once on an empty database: the first key's kid is the same for
/// all, so one inserts and the others find it.
pub async fn ensure(
    c: &impl GenericClient,
    env: Env,
    seal: &SealNew<'_>,
    now_ms: i64,
) -> Result<()> {
    if has_current(c, env).await? {
        return Ok(());
    }
    let first = format!("{}-1", env.as_str());
    let secret = seal(&first)?;
    let inserted = c
        .execute(
            "INSERT INTO signing_keys (kid, env, n, secret, created_ms)
             SELECT $1, $2, 1, $3, $4
             WHERE NOT EXISTS (SELECT 1 FROM signing_keys WHERE env = $2)
             ON CONFLICT DO NOTHING",
            &[&first, &env.as_str(), &secret, &now_ms],
        )
        .await?;
    if inserted == 0 && !has_current(c, env).await? {
        // Keys exist but none is current: a new one, numbered after them.
        rotate(c, env, seal, now_ms).await?;
    }
    Ok(())
}

/// Replaces the keys' secrets if the table holds exactly the kids of `changes`, each with
/// its `from` (their rows locked meanwhile); returns whether it did.
pub async fn replace(c: &impl GenericClient, changes: &[SecretChange]) -> Result<bool> {
    let stored = c
        .query("SELECT kid, secret FROM signing_keys FOR UPDATE", &[])
        .await?;
    if stored.len() != changes.len() {
        return Ok(false);
    }
    for row in &stored {
        let (kid, secret): (&str, &[u8]) = (row.get(0), row.get(1));
        if !changes
            .iter()
            .any(|change| change.kid == kid && change.from == secret)
        {
            return Ok(false);
        }
    }
    for change in changes {
        c.execute(
            "UPDATE signing_keys SET secret = $2 WHERE kid = $1",
            &[&change.kid, &change.to],
        )
        .await?;
    }
    Ok(true)
}

/// Rewrites the signing keys' table so that the row versions holding replaced secrets are
/// no longer in the database's files (best effort: PostgreSQL keeps old row versions until
/// a vacuum, and its WAL keeps them until recycled; an engine without VACUUM skips it).
pub async fn compact(c: &impl GenericClient) {
    if let Err(e) = c.batch_execute("VACUUM (FULL) signing_keys").await {
        tracing::warn!("rewriting signing_keys after sealing its keys again: {e}");
    }
}
