//! Webhook endpoints. A deleted endpoint keeps its row (its deliveries point at it) but
//! reads as absent.

use deadpool_postgres::GenericClient;
use mandate_core::id::WebhookId;
use tokio_postgres::Row;

use super::Result;
use crate::model::Env;
use crate::storage::webhooks::{DELETED_ERROR, StoredWebhook, WebhookRow, stored_events};

/// Stores a new active endpoint.
pub async fn insert(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &WebhookId,
    url: &str,
    events: &[String],
    now_ms: i64,
) -> Result<()> {
    let events = stored_events(events);
    c.execute(
        "INSERT INTO webhooks (id, org_id, env, url, events, status, created_ms)
         VALUES ($1, $2, $3, $4, $5::TEXT::JSONB, 'active', $6)",
        &[&id.as_str(), &org_id, &env.as_str(), &url, &events, &now_ms],
    )
    .await?;
    Ok(())
}

const COLUMNS: &str = "seq, id, url, events::TEXT, status, created_ms";

fn decode(r: &Row) -> Result<WebhookRow> {
    StoredWebhook {
        seq: r.get(0),
        id: r.get(1),
        url: r.get(2),
        events: r.get(3),
        status: r.get(4),
        created_ms: r.get(5),
    }
    .decode()
}

/// An active endpoint of this organization and environment.
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &WebhookId,
) -> Result<Option<WebhookRow>> {
    c.query_opt(
        &format!(
            "SELECT {COLUMNS} FROM webhooks
             WHERE org_id = $1 AND env = $2 AND id = $3 AND status = 'active'"
        ),
        &[&org_id, &env.as_str(), &id.as_str()],
    )
    .await?
    .as_ref()
    .map(decode)
    .transpose()
}

/// A page of active endpoints, newest first, strictly before seq `before`.
pub async fn page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    before: i64,
    limit: i64,
) -> Result<Vec<WebhookRow>> {
    let rows = c
        .query(
            &format!(
                "SELECT {COLUMNS} FROM webhooks
                 WHERE org_id = $1 AND env = $2 AND status = 'active' AND seq < $3
                 ORDER BY seq DESC LIMIT $4"
            ),
            &[&org_id, &env.as_str(), &before, &limit],
        )
        .await?;
    rows.iter().map(decode).collect()
}

/// Marks an active endpoint deleted and ends its pending deliveries (failed, with
/// [`DELETED_ERROR`]), in the caller's transaction. Returns the endpoint as it is now, or
/// `None` if there was none.
pub async fn delete(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &WebhookId,
    now_ms: i64,
) -> Result<Option<WebhookRow>> {
    let row = c
        .query_opt(
            &format!(
                "UPDATE webhooks SET status = 'deleted', deleted_ms = $4
                 WHERE org_id = $1 AND env = $2 AND id = $3 AND status = 'active'
                 RETURNING {COLUMNS}"
            ),
            &[&org_id, &env.as_str(), &id.as_str(), &now_ms],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    c.execute(
        "UPDATE deliveries SET state = 'failed', next_attempt_ms = NULL,
            last_error = $3, finished_ms = $2, claimed_until = NULL
         WHERE webhook_id = $1 AND state = 'pending'",
        &[&id.as_str(), &now_ms, &DELETED_ERROR],
    )
    .await?;
    decode(&row).map(Some)
}
