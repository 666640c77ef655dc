//! Agents.

use crate::model::Env;
use mandate_core::id::AgentId;
use rusqlite::{Connection, OptionalExtension, params};

use crate::storage::agents::AgentRow;

/// Inserts an agent; `Ok(false)` if the name is taken in this organization and environment.
pub fn insert(
    tx: &Connection,
    id: &AgentId,
    org_id: &str,
    env: Env,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let (id, env) = (id.as_str(), env.as_str());
    let inserted = tx.execute(
        "INSERT OR IGNORE INTO agents (id, org_id, env, created_ms) VALUES (?1, ?2, ?3, ?4)",
        params![id, org_id, env, now_ms],
    )?;
    Ok(inserted == 1)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AgentRow> {
    Ok(AgentRow {
        seq: r.get(0)?,
        id: r.get(1)?,
        created_ms: r.get(2)?,
    })
}

/// One agent of this organization and environment.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    id: &AgentId,
) -> rusqlite::Result<Option<AgentRow>> {
    let (id, env) = (id.as_str(), env.as_str());
    conn.query_row(
        "SELECT seq, id, created_ms FROM agents WHERE org_id = ?1 AND env = ?2 AND id = ?3",
        params![org_id, env, id],
        row,
    )
    .optional()
}

/// A page of agents, newest first, strictly before `before` (a seq), at most `limit`.
pub fn page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    only: Option<&AgentId>,
    before: i64,
    limit: i64,
) -> rusqlite::Result<Vec<AgentRow>> {
    let (only, env) = (only.map(AgentId::as_str), env.as_str());
    // The id is a plain condition when given, so that SQLite uses the unique key.
    let id_clause = if only.is_some() {
        "id = ?3"
    } else {
        "?3 IS NULL"
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT seq, id, created_ms FROM agents
         WHERE org_id = ?1 AND env = ?2 AND {id_clause} AND seq < ?4
         ORDER BY seq DESC LIMIT ?5"
    ))?;
    let rows = stmt.query_map(params![org_id, env, only, before, limit], row)?;
    rows.collect()
}
