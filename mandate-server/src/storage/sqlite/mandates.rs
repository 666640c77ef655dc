//! Mandates. The validated terms are stored as JSON with exact numbers and parsed back
//! through the same `MandateDraft::from_json` that validated them.

use crate::model::Env;
use mandate_core::id::MandateId;
use mandate_core::mandate::{Mandate, MandateStatus, format_date};
use rusqlite::{Connection, OptionalExtension, params};

use super::StorageError;
use crate::clock::ms;
use crate::storage::mandates::{Filters, MandateColumns, terms_json};

/// Inserts a mandate and supersedes the agent's previous active one.
pub fn insert(tx: &Connection, org_id: &str, env: Env, mandate: &Mandate) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE mandates SET status = 'superseded'
         WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3 AND status = 'active'",
        params![org_id, env, mandate.terms.agent.as_str()],
    )?;
    tx.execute(
        "INSERT INTO mandates (id, org_id, env, agent_id, terms, expires, status, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            mandate.id.as_str(),
            org_id,
            env,
            mandate.terms.agent.as_str(),
            terms_json(mandate),
            format_date(mandate.terms.expires),
            mandate.status.as_str(),
            ms(mandate.created_at),
        ],
    )?;
    Ok(())
}

const COLUMNS: &str = "seq, id, terms, status, created_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MandateColumns> {
    Ok(MandateColumns {
        seq: r.get(0)?,
        id: r.get(1)?,
        terms: r.get(2)?,
        status: r.get(3)?,
        created_ms: r.get(4)?,
    })
}

/// One mandate of this organization and environment.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    id: &MandateId,
) -> Result<Option<Mandate>, StorageError> {
    let (id, env) = (id.as_str(), env.as_str());
    let raw = conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM mandates WHERE org_id = ?1 AND env = ?2 AND id = ?3"),
            params![org_id, env, id],
            row,
        )
        .optional()?;
    raw.map(MandateColumns::decode)
        .transpose()
        .map(|m| m.map(|(_, m)| m))
}

/// The statement behind [`current`], kept prepared on each connection.
pub(crate) fn current_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM mandates WHERE org_id = ?1 AND env = ?2 AND agent_id = ?3
         ORDER BY seq DESC LIMIT 1"
    )
}

/// The agent's current mandate: its newest, whatever its status.
pub fn current(
    conn: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
) -> Result<Option<Mandate>, StorageError> {
    // Cached: every agent's first request runs this (a prepare costs more than the query).
    let raw = conn
        .prepare_cached(&current_sql())?
        .query_row(params![org_id, env, agent], row)
        .optional()?;
    raw.map(MandateColumns::decode)
        .transpose()
        .map(|m| m.map(|(_, m)| m))
}

/// A page of mandates, newest first, strictly before seq `before`. `today` is the UTC
/// date as `YYYY-MM-DD`, for the computed `expired` status.
pub fn page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    filters: &Filters,
    today: &str,
    before: i64,
    limit: i64,
) -> Result<Vec<(i64, Mandate)>, StorageError> {
    let status_clause = match filters.status {
        None => "1",
        Some(MandateStatus::Active) => "status = 'active' AND expires >= ?4",
        Some(MandateStatus::Expired) => "status = 'active' AND expires < ?4",
        Some(MandateStatus::Revoked) => "status = 'revoked'",
        Some(MandateStatus::Superseded) => "status = 'superseded'",
    };
    // The agent is a plain condition when given, so that SQLite walks mandates_by_agent.
    let agent_clause = if filters.agent.is_some() {
        "agent_id = ?3"
    } else {
        "?3 IS NULL"
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM mandates
         WHERE org_id = ?1 AND env = ?2 AND {agent_clause} AND ({status_clause})
           AND seq < ?5 AND ?4 = ?4
         ORDER BY seq DESC LIMIT ?6"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![org_id, env, filters.agent, today, before, limit],
        row,
    )?;
    let mut out = Vec::new();
    for raw in rows {
        out.push(raw?.decode()?);
    }
    Ok(out)
}

/// The seq of a mandate (its list position).
pub fn seq_of(conn: &Connection, id: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT seq FROM mandates WHERE id = ?1", [id], |r| r.get(0))
        .optional()
}

/// Marks an active mandate revoked; returns whether it was active.
pub fn revoke(tx: &Connection, id: &MandateId, now_ms: i64) -> rusqlite::Result<bool> {
    let id = id.as_str();
    Ok(tx.execute(
        "UPDATE mandates SET status = 'revoked', revoked_ms = ?2 WHERE id = ?1 AND status = 'active'",
        params![id, now_ms],
    )? == 1)
}
