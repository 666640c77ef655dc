//! The event log (outbox): written in the same transaction as the change it reports.

use crate::model::Env;
use mandate_core::id::EventId;
use mandate_core::id::WebhookId;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::{StorageError, deliveries};
use crate::clock::{from_ms, ordered16};
use crate::storage::events::EventRow;

/// Appends an event of `event_type` about `data`, with a pending delivery to every active
/// endpoint of the organization and environment subscribed to that type; returns its id.
pub fn append(
    tx: &Connection,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &Value,
    now_ms: i64,
) -> rusqlite::Result<EventId> {
    append_json(tx, org_id, env, event_type, &data.to_string(), now_ms)
}

/// [`append`] with `data` already encoded as JSON text.
pub fn append_json(
    tx: &Connection,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &str,
    now_ms: i64,
) -> rusqlite::Result<EventId> {
    let id = insert(tx, org_id, env, event_type, data, now_ms)?;
    deliveries::fan_out(tx, id.as_str(), org_id, env, event_type, now_ms)?;
    Ok(id)
}

/// Appends an event delivered to one endpoint only, whatever its subscriptions (a ping).
pub fn append_for_webhook(
    tx: &Connection,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &Value,
    now_ms: i64,
    webhook_id: &WebhookId,
) -> rusqlite::Result<EventId> {
    let id = insert(tx, org_id, env, event_type, &data.to_string(), now_ms)?;
    deliveries::create_one(tx, id.as_str(), webhook_id.as_str(), now_ms)?;
    Ok(id)
}

fn insert(
    tx: &Connection,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &str,
    now_ms: i64,
) -> rusqlite::Result<EventId> {
    let id = EventId::from_random(ordered16(from_ms(now_ms)));
    tx.prepare_cached(
        "INSERT INTO events (id, org_id, env, type, data, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![id.as_str(), org_id, env, event_type, data, now_ms])?;
    Ok(id)
}

const COLUMNS: &str = "seq, id, type, data, created_ms";

/// One row as read by `COLUMNS`, each column under its own name.
struct Raw {
    seq: i64,
    id: String,
    event_type: String,
    data: String,
    created_ms: i64,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    Ok(Raw {
        seq: r.get(0)?,
        id: r.get(1)?,
        event_type: r.get(2)?,
        data: r.get(3)?,
        created_ms: r.get(4)?,
    })
}

fn decode(raw: Raw) -> Result<EventRow, StorageError> {
    let Raw {
        seq,
        id,
        event_type,
        data,
        created_ms,
    } = raw;
    let data = serde_json::from_str(&data)
        .map_err(|e| StorageError::Corrupt(format!("event {id} data: {e}")))?;
    Ok(EventRow {
        seq,
        id,
        event_type,
        data,
        created_ms,
    })
}

/// One event of this organization and environment.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    id: &str,
) -> Result<Option<EventRow>, StorageError> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM events WHERE org_id = ?1 AND env = ?2 AND id = ?3"),
        params![org_id, env, id],
        row,
    )
    .optional()?
    .map(decode)
    .transpose()
}

/// The query behind [`page`]: the type is a plain condition when given, so that SQLite
/// walks `events_by_type` (an `OR ?3 IS NULL` form walked every event of the environment).
pub(crate) fn page_sql(by_type: bool) -> String {
    let event_type = if by_type { "type = ?3" } else { "?3 IS NULL" };
    format!(
        "SELECT {COLUMNS} FROM events
         WHERE org_id = ?1 AND env = ?2 AND {event_type} AND seq < ?4
         ORDER BY seq DESC LIMIT ?5"
    )
}

/// A page of events, newest first, strictly before seq `before`, optionally of one type.
pub fn page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    event_type: Option<&str>,
    before: i64,
    limit: i64,
) -> Result<Vec<EventRow>, StorageError> {
    let mut stmt = conn.prepare_cached(&page_sql(event_type.is_some()))?;
    let rows = stmt.query_map(params![org_id, env, event_type, before, limit], row)?;
    let mut out = Vec::new();
    for raw in rows {
        out.push(decode(raw?)?);
    }
    Ok(out)
}

/// The types of an environment's events, oldest first (tests and diagnostics).
pub fn types(conn: &Connection, org_id: &str, env: Env) -> rusqlite::Result<Vec<(String, Value)>> {
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
