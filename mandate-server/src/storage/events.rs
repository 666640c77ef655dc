//! The event log (outbox): written in the same transaction as the change it reports.

use mandate_core::id::EventId;
use rusqlite::{Connection, params};
use serde_json::Value;

use crate::clock::random16;

/// Appends an event of `event_type` about `data`; returns its id.
pub fn append(
    tx: &Connection,
    org_id: &str,
    env: &str,
    event_type: &str,
    data: &Value,
    now_ms: i64,
) -> rusqlite::Result<EventId> {
    let id = EventId::from_random(random16());
    tx.execute(
        "INSERT INTO events (id, org_id, env, type, data, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id.as_str(), org_id, env, event_type, data.to_string(), now_ms],
    )?;
    Ok(id)
}

/// The types of an environment's events, oldest first (tests and diagnostics).
pub fn types(conn: &Connection, org_id: &str, env: &str) -> rusqlite::Result<Vec<(String, Value)>> {
    let mut stmt =
        conn.prepare("SELECT type, data FROM events WHERE org_id = ?1 AND env = ?2 ORDER BY seq")?;
    let rows = stmt.query_map(params![org_id, env], |r| {
        let data: String = r.get(1)?;
        Ok((
            r.get(0)?,
            serde_json::from_str(&data).unwrap_or(Value::Null),
        ))
    })?;
    rows.collect()
}
