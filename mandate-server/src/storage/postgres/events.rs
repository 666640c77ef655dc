//! The event log (outbox): written in the same transaction as the change it reports, with a
//! pending delivery to every endpoint subscribed to its type.

use deadpool_postgres::GenericClient;
use mandate_core::id::{EventId, WebhookId};
use serde_json::Value;
use tokio_postgres::Row;

use super::Result;
use crate::clock::{from_ms, ordered16};
use crate::model::Env;
use crate::storage::StorageError;
use crate::storage::events::EventRow;

/// The statement that appends an event (`$1` id, `$2` org, `$3` env, `$4` type, `$5` data,
/// `$6` time) and a pending delivery, due at once, to every active endpoint of the
/// organization and environment subscribed to its type.
pub(crate) const APPEND_SQL: &str = "WITH e AS (
        INSERT INTO events (id, org_id, env, type, data, created_ms)
        VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
    INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
    SELECT e.id, w.id, 0, $6, 'pending', $6 FROM e JOIN webhooks w
      ON w.org_id = $2 AND w.env = $3 AND w.status = 'active' AND w.events ? $4";

/// Appends an event of `event_type` about `data` with its deliveries; returns its id.
pub async fn append(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &Value,
    now_ms: i64,
) -> Result<EventId> {
    append_json(c, org_id, env, event_type, &data.to_string(), now_ms).await
}

/// [`append`] with `data` already encoded as JSON text.
pub async fn append_json(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &str,
    now_ms: i64,
) -> Result<EventId> {
    let id = EventId::from_random(ordered16(from_ms(now_ms)));
    let stmt = c.prepare_cached(APPEND_SQL).await?;
    c.execute(
        &stmt,
        &[
            &id.as_str(),
            &org_id,
            &env.as_str(),
            &event_type,
            &data,
            &now_ms,
        ],
    )
    .await?;
    Ok(id)
}

/// Appends an event delivered to one endpoint only, whatever its subscriptions (a ping).
pub async fn append_for_webhook(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    event_type: &str,
    data: &Value,
    now_ms: i64,
    webhook_id: &WebhookId,
) -> Result<EventId> {
    let id = EventId::from_random(ordered16(from_ms(now_ms)));
    let stmt = c
        .prepare_cached(
            "WITH e AS (
                INSERT INTO events (id, org_id, env, type, data, created_ms)
                VALUES ($1, $2, $3, $4, $5, $6) RETURNING id)
             INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
             SELECT e.id, $7, 0, $6, 'pending', $6 FROM e",
        )
        .await?;
    c.execute(
        &stmt,
        &[
            &id.as_str(),
            &org_id,
            &env.as_str(),
            &event_type,
            &data.to_string(),
            &now_ms,
            &webhook_id.as_str(),
        ],
    )
    .await?;
    Ok(id)
}

const COLUMNS: &str = "seq, id, type, data, created_ms";

fn decode(r: &Row) -> Result<EventRow> {
    let id: String = r.get(1);
    let data: String = r.get(3);
    let data = serde_json::from_str(&data)
        .map_err(|e| StorageError::Corrupt(format!("event {id} data: {e}")))?;
    Ok(EventRow {
        seq: r.get(0),
        id,
        event_type: r.get(2),
        data,
        created_ms: r.get(4),
    })
}

/// One event of this organization and environment.
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &str,
) -> Result<Option<EventRow>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM events WHERE org_id = $1 AND env = $2 AND id = $3"
        ))
        .await?;
    c.query_opt(&stmt, &[&org_id, &env.as_str(), &id])
        .await?
        .as_ref()
        .map(decode)
        .transpose()
}

/// A page of events, newest first, strictly before seq `before`, optionally of one type.
pub async fn page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    event_type: Option<&str>,
    before: i64,
    limit: i64,
) -> Result<Vec<EventRow>> {
    let type_clause = if event_type.is_some() {
        "type = $3"
    } else {
        "$3::TEXT IS NULL"
    };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM events
             WHERE org_id = $1 AND env = $2 AND {type_clause} AND seq < $4
             ORDER BY seq DESC LIMIT $5"
        ))
        .await?;
    let rows = c
        .query(
            &stmt,
            &[&org_id, &env.as_str(), &event_type, &before, &limit],
        )
        .await?;
    rows.iter().map(decode).collect()
}
