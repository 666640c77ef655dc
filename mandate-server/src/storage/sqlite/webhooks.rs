//! Webhook endpoints. A deleted endpoint keeps its row (its deliveries point at it) but
//! reads as absent.

use crate::model::Env;
use mandate_core::id::WebhookId;
use rusqlite::{Connection, OptionalExtension, params};

use super::StorageError;
use crate::storage::webhooks::{
    DELETED_ERROR, StoredWebhook, WebhookRow, WebhookStatus, stored_events,
};

/// Stores a new active endpoint; returns its list position.
pub fn insert(
    tx: &Connection,
    org_id: &str,
    env: Env,
    id: &WebhookId,
    url: &str,
    events: &[String],
    now_ms: i64,
) -> Result<i64, StorageError> {
    let (id, env) = (id.as_str(), env.as_str());
    let events = stored_events(events);
    tx.execute(
        "INSERT INTO webhooks (id, org_id, env, url, events, status, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6)",
        params![id, org_id, env, url, events, now_ms],
    )?;
    Ok(tx.last_insert_rowid())
}

const COLUMNS: &str = "seq, id, url, events, status, created_ms";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredWebhook> {
    Ok(StoredWebhook {
        seq: r.get(0)?,
        id: r.get(1)?,
        url: r.get(2)?,
        events: r.get(3)?,
        status: r.get(4)?,
        created_ms: r.get(5)?,
    })
}

/// An active endpoint of this organization and environment.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    id: &WebhookId,
) -> Result<Option<WebhookRow>, StorageError> {
    let (id, env) = (id.as_str(), env.as_str());
    conn.query_row(
        &format!(
            "SELECT {COLUMNS} FROM webhooks
             WHERE org_id = ?1 AND env = ?2 AND id = ?3 AND status = 'active'"
        ),
        params![org_id, env, id],
        row,
    )
    .optional()?
    .map(StoredWebhook::decode)
    .transpose()
}

/// A page of active endpoints, newest first, strictly before seq `before`.
pub fn page(
    conn: &Connection,
    org_id: &str,
    env: Env,
    before: i64,
    limit: i64,
) -> Result<Vec<WebhookRow>, StorageError> {
    let env = env.as_str();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM webhooks
         WHERE org_id = ?1 AND env = ?2 AND status = 'active' AND seq < ?3
         ORDER BY seq DESC LIMIT ?4"
    ))?;
    let rows = stmt.query_map(params![org_id, env, before, limit], row)?;
    let mut out = Vec::new();
    for raw in rows {
        out.push(raw?.decode()?);
    }
    Ok(out)
}

/// Marks an active endpoint deleted and ends its pending deliveries (failed, with
/// [`DELETED_ERROR`]). Returns the endpoint as it is now, or `None` if there was none.
pub fn delete(
    tx: &Connection,
    org_id: &str,
    env: Env,
    id: &WebhookId,
    now_ms: i64,
) -> Result<Option<WebhookRow>, StorageError> {
    let Some(mut webhook) = get(tx, org_id, env, id)? else {
        return Ok(None);
    };
    let id = id.as_str();
    tx.execute(
        "UPDATE webhooks SET status = 'deleted', deleted_ms = ?2 WHERE id = ?1",
        params![id, now_ms],
    )?;
    tx.execute(
        "UPDATE deliveries SET state = 'failed', next_attempt_ms = NULL,
            last_error = ?3, finished_ms = ?2
         WHERE webhook_id = ?1 AND state = 'pending'",
        params![id, now_ms, DELETED_ERROR],
    )?;
    webhook.status = WebhookStatus::Deleted;
    Ok(Some(webhook))
}
