//! Signing keys per environment. Generated on first use, persisted, kept across restarts;
//! a rotated key stays published until every token it signed has expired.

use rusqlite::{Connection, params};

use crate::model::Env;
use crate::storage::StorageError;
use crate::storage::admin::SecretChange;
use crate::storage::keys::{SealNew, StoredKey};

/// Every key that is current or retired after `published_after_ms`.
pub fn published(conn: &Connection, published_after_ms: i64) -> rusqlite::Result<Vec<StoredKey>> {
    let mut stmt = conn.prepare(
        "SELECT kid, env, secret, retired_ms FROM signing_keys
         WHERE retired_ms IS NULL OR retired_ms > ?1 ORDER BY env, n",
    )?;
    let rows = stmt.query_map([published_after_ms], |r| {
        let env: String = r.get(1)?;
        Ok(StoredKey {
            kid: r.get(0)?,
            env: Env::parse(&env).unwrap_or(Env::Sandbox),
            secret: r.get(2)?,
            retired_ms: r.get(3)?,
        })
    })?;
    rows.collect()
}

/// Every key, retired ones included.
pub fn all(conn: &Connection) -> rusqlite::Result<Vec<StoredKey>> {
    published(conn, i64::MIN)
}

/// Replaces the keys' secrets if the table holds exactly the kids of `changes`, each with
/// its `from`; returns whether it did. The replaced bytes are overwritten in the file
/// (`secure_delete`), not left in free space of the pages.
pub fn replace(tx: &Connection, changes: &[SecretChange]) -> rusqlite::Result<bool> {
    use rusqlite::OptionalExtension;
    let count: i64 = tx.query_row("SELECT COUNT(*) FROM signing_keys", [], |r| r.get(0))?;
    if usize::try_from(count).ok() != Some(changes.len()) {
        return Ok(false);
    }
    for change in changes {
        let stored: Option<Vec<u8>> = tx
            .query_row(
                "SELECT secret FROM signing_keys WHERE kid = ?1",
                [&change.kid],
                |r| r.get(0),
            )
            .optional()?;
        if stored.as_deref() != Some(change.from.as_slice()) {
            return Ok(false);
        }
    }
    tx.pragma_update(None, "secure_delete", "ON")?;
    let updated = changes.iter().try_for_each(|change| {
        tx.execute(
            "UPDATE signing_keys SET secret = ?2 WHERE kid = ?1",
            params![change.kid, change.to],
        )
        .map(|_| ())
    });
    tx.pragma_update(None, "secure_delete", "OFF")?;
    updated?;
    Ok(true)
}

/// Adds a new current key for `env`, retiring the previous one at `now_ms`, its secret
/// made by `seal` for its kid. Returns its kid.
pub fn rotate(
    tx: &Connection,
    env: Env,
    seal: &SealNew<'_>,
    now_ms: i64,
) -> Result<String, StorageError> {
    let n: i64 = tx.query_row(
        "SELECT COALESCE(MAX(n), 0) + 1 FROM signing_keys WHERE env = ?1",
        [env.as_str()],
        |r| r.get(0),
    )?;
    tx.execute(
        "UPDATE signing_keys SET retired_ms = ?2 WHERE env = ?1 AND retired_ms IS NULL",
        params![env.as_str(), now_ms],
    )?;
    let kid = format!("{}-{n}", env.as_str());
    let secret = seal(&kid)?;
    tx.execute(
        "INSERT INTO signing_keys (kid, env, n, secret, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![kid, env.as_str(), n, secret, now_ms],
    )?;
    Ok(kid)
}

/// Whether `env` has a current key.
pub fn has_current(conn: &Connection, env: Env) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM signing_keys WHERE env = ?1 AND retired_ms IS NULL)",
        [env.as_str()],
        |r| r.get(0),
    )
}

/// Reads a setting.
pub fn setting(conn: &Connection, name: &str) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::OptionalExtension;
    conn.query_row("SELECT value FROM settings WHERE name = ?1", [name], |r| {
        r.get(0)
    })
    .optional()
}

/// Writes a setting unless it exists; returns the stored value.
pub fn setting_or_insert(tx: &Connection, name: &str, value: &[u8]) -> rusqlite::Result<Vec<u8>> {
    tx.execute(
        "INSERT OR IGNORE INTO settings (name, value) VALUES (?1, ?2)",
        params![name, value],
    )?;
    tx.query_row("SELECT value FROM settings WHERE name = ?1", [name], |r| {
        r.get(0)
    })
}
