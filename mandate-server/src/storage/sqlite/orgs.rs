//! Organizations, their environments and enforcement modes.

use mandate_core::policy::Mode;
use rusqlite::{Connection, OptionalExtension, params};

use super::StorageError;
use crate::model::Env;

/// Creates an organization with both environments: live starts in observe, sandbox in
/// enforce.
pub fn create(
    tx: &Connection,
    id: &str,
    name: &str,
    policy_version: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO orgs (id, name, policy_version, created_ms) VALUES (?1, ?2, ?3, ?4)",
        params![id, name, policy_version, now_ms],
    )?;
    for (env, mode) in [(Env::Sandbox, Mode::Enforce), (Env::Live, Mode::Observe)] {
        tx.execute(
            "INSERT INTO environments (org_id, env, mode, since_ms) VALUES (?1, ?2, ?3, ?4)",
            params![id, env.as_str(), mode.as_str(), now_ms],
        )?;
    }
    Ok(())
}

/// The id of the organization named `name`.
pub fn id_by_name(conn: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT id FROM orgs WHERE name = ?1", [name], |r| r.get(0))
        .optional()
}

/// How many organizations use a policy version of this date (to number the next).
pub fn count_policy_versions_on(conn: &Connection, prefix: &str) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COUNT(*) FROM orgs WHERE policy_version LIKE ?1 || '%'",
        [prefix],
        |r| r.get(0),
    )
}

/// Sets an organization's policy version (operator command).
pub fn set_policy_version(
    conn: &Connection,
    org_id: &str,
    version: &str,
) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE orgs SET policy_version = ?2 WHERE id = ?1",
        params![org_id, version],
    )
}

/// The organization's name.
pub fn name(conn: &Connection, org_id: &str) -> Result<String, StorageError> {
    Ok(conn
        .prepare_cached("SELECT name FROM orgs WHERE id = ?1")?
        .query_row(params![org_id], |r| r.get(0))?)
}

/// The mode of an environment and since when (unix ms).
pub fn mode(conn: &Connection, org_id: &str, env: Env) -> Result<(Mode, i64), StorageError> {
    let (mode, since): (String, i64) = conn.query_row(
        "SELECT mode, since_ms FROM environments WHERE org_id = ?1 AND env = ?2",
        params![org_id, env.as_str()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mode = Mode::parse(&mode).ok_or_else(|| StorageError::Corrupt(format!("mode {mode:?}")))?;
    Ok((mode, since))
}

/// Switches the mode; switching to the mode in force changes nothing, `since` included.
pub fn set_mode(
    tx: &Connection,
    org_id: &str,
    env: Env,
    mode: Mode,
    now_ms: i64,
) -> Result<(Mode, i64), StorageError> {
    tx.execute(
        "UPDATE environments SET mode = ?3, since_ms = ?4 WHERE org_id = ?1 AND env = ?2 AND mode <> ?3",
        params![org_id, env.as_str(), mode.as_str(), now_ms],
    )?;
    self::mode(tx, org_id, env)
}
