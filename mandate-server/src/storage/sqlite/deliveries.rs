//! Deliveries of events to webhook endpoints, and every attempt made.
//!
//! A delivery row is created in the transaction that appends its event (see
//! [`super::events::append`]); the worker reads the due ones, makes the HTTP attempt with no
//! transaction open, then records the attempt and the next step in one transaction. All
//! state is here, so a restarted server resumes where the last one stopped.

use mandate_core::id::{EventId, WebhookId};
use rusqlite::{Connection, params};

use super::StorageError;
use crate::model::Env;
use crate::storage::deliveries::{Attempt, DeliveryChange, DeliveryRow, DeliveryState, Due};

/// Creates a pending delivery, due at once, for every active endpoint of the organization
/// and environment subscribed to `event_type`. Returns how many.
pub fn fan_out(
    tx: &Connection,
    event_id: &str,
    org_id: &str,
    env: Env,
    event_type: &str,
    now_ms: i64,
) -> rusqlite::Result<usize> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
         SELECT ?1, w.id, 0, ?5, 'pending', ?5 FROM webhooks w
         WHERE w.org_id = ?2 AND w.env = ?3 AND w.status = 'active'
           AND EXISTS (SELECT 1 FROM json_each(w.events) j WHERE j.value = ?4)",
    )?;
    stmt.execute(params![event_id, org_id, env, event_type, now_ms])
}

/// Creates one pending delivery, due at once, of `event_id` to `webhook_id` (a ping).
pub fn create_one(
    tx: &Connection,
    event_id: &str,
    webhook_id: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
         VALUES (?1, ?2, 0, ?3, 'pending', ?3)",
        params![event_id, webhook_id, now_ms],
    )?;
    Ok(())
}

/// Pending deliveries due at `now_ms`, the longest-waiting first, at most `per_webhook` of
/// any one endpoint and `limit` in all, so that one endpoint's backlog never hides another's.
pub fn due(
    conn: &Connection,
    now_ms: i64,
    per_webhook: i64,
    limit: i64,
) -> Result<Vec<Due>, StorageError> {
    let mut stmt = conn.prepare_cached(
        "SELECT d.id, d.attempts, d.webhook_id, w.url, w.env, d.event_id, e.type, e.data,
                e.created_ms
         FROM (SELECT id, attempts, webhook_id, event_id, next_attempt_ms,
                      ROW_NUMBER() OVER (PARTITION BY webhook_id ORDER BY next_attempt_ms, id) AS rn
               FROM deliveries WHERE state = 'pending' AND next_attempt_ms <= ?1) d
         JOIN webhooks w ON w.id = d.webhook_id
         JOIN events e ON e.id = d.event_id
         WHERE d.rn <= ?2
         ORDER BY d.next_attempt_ms, d.id LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![now_ms, per_webhook, limit], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, u32>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Env>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
            r.get::<_, i64>(8)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, attempts, webhook_id, url, env, event_id, event_type, data, created) = row?;
        let data = serde_json::from_str(&data)
            .map_err(|e| StorageError::Corrupt(format!("event {event_id} data: {e}")))?;
        out.push(Due {
            id,
            attempts,
            webhook_id: WebhookId::parse(&webhook_id)
                .map_err(|e| StorageError::Corrupt(format!("webhook id: {e}")))?,
            url,
            env,
            event_id: EventId::parse(&event_id)
                .map_err(|e| StorageError::Corrupt(format!("event id: {e}")))?,
            event_type,
            data,
            event_created_ms: created,
        });
    }
    Ok(out)
}

/// Writes what the worker decided of a delivery: its attempt, if one was made, and its
/// new state, only while it is pending.
pub fn record(tx: &Connection, delivery_id: i64, change: &DeliveryChange) -> rusqlite::Result<()> {
    if let Some(attempt) = &change.attempt {
        tx.execute(
            "INSERT INTO delivery_attempts (delivery_id, attempt, at_ms, status, latency_ms, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                delivery_id,
                attempt.attempt,
                attempt.at_ms,
                attempt.status,
                attempt.latency_ms,
                attempt.error
            ],
        )?;
    }
    tx.execute(
        "UPDATE deliveries SET attempts = ?2, state = ?3, next_attempt_ms = ?4,
            last_error = ?5, finished_ms = ?6
         WHERE id = ?1 AND state = 'pending'",
        params![
            delivery_id,
            change.attempts,
            change.state,
            change.next_attempt_ms,
            change.last_error,
            change.finished_ms
        ],
    )?;
    Ok(())
}

/// The deliveries of an event, with their attempts.
pub fn for_event(conn: &Connection, event_id: &str) -> rusqlite::Result<Vec<DeliveryRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, webhook_id, attempts, state, next_attempt_ms, last_error
         FROM deliveries WHERE event_id = ?1 ORDER BY id",
    )?;
    let mut rows: Vec<DeliveryRow> = stmt
        .query_map([event_id], |r| {
            Ok(DeliveryRow {
                id: r.get(0)?,
                webhook_id: r.get(1)?,
                attempts: r.get(2)?,
                state: r.get::<_, DeliveryState>(3)?,
                next_attempt_ms: r.get(4)?,
                last_error: r.get(5)?,
                tried: Vec::new(),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
         WHERE delivery_id = ?1 ORDER BY attempt, id",
    )?;
    for row in &mut rows {
        row.tried = stmt
            .query_map([row.id], |r| {
                Ok(Attempt {
                    attempt: r.get(0)?,
                    at_ms: r.get(1)?,
                    status: r.get(2)?,
                    latency_ms: r.get(3)?,
                    error: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
    }
    Ok(rows)
}
