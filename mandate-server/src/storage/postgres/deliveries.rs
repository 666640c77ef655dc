//! Deliveries of events to webhook endpoints, and every attempt made.
//!
//! Every process runs the delivery worker. A due delivery is claimed before it is
//! attempted (`claimed_until`, taken with `FOR UPDATE SKIP LOCKED`), so no two processes
//! attempt it at once; the claim ends when the attempt is recorded, or runs out when the
//! process that held it died, and another process takes the delivery over.

use deadpool_postgres::GenericClient;
use mandate_core::id::{EventId, WebhookId};

use super::{Result, env_from, non_negative};
use crate::storage::StorageError;
use crate::storage::deliveries::{Attempt, DeliveryChange, DeliveryRow, DeliveryState, Due};

/// How long a claim on a delivery lasts, in ms: longer than an attempt may take (its
/// timeout is 5 s), short enough that a dead process's deliveries are soon taken over.
pub const CLAIM_MS: i64 = 15_000;

/// Claims up to `limit` pending deliveries due at `now_ms` and not claimed by anyone
/// (or whose claim ran out), the longest-waiting first, at most `per_webhook` of any one
/// endpoint; returns them with what an attempt needs.
pub async fn claim_due(
    c: &impl GenericClient,
    now_ms: i64,
    per_webhook: i64,
    limit: i64,
) -> Result<Vec<Due>> {
    // The conditions are repeated on the locked rows: a row claimed by another process
    // after this statement's snapshot is re-read when locked and left out.
    let stmt = c
        .prepare_cached(
            "WITH candidates AS (
                 SELECT id FROM (
                     SELECT id, next_attempt_ms,
                            ROW_NUMBER() OVER (PARTITION BY webhook_id ORDER BY next_attempt_ms, id) AS rn
                     FROM deliveries
                     WHERE state = 'pending' AND next_attempt_ms <= $1
                       AND (claimed_until IS NULL OR claimed_until <= $1)) ranked
                 WHERE rn <= $2 ORDER BY next_attempt_ms, id LIMIT $3),
             picked AS (
                 SELECT d.id FROM deliveries d JOIN candidates USING (id)
                 WHERE d.state = 'pending' AND d.next_attempt_ms <= $1
                   AND (d.claimed_until IS NULL OR d.claimed_until <= $1)
                 FOR UPDATE OF d SKIP LOCKED),
             claimed AS (
                 UPDATE deliveries d SET claimed_until = $4 FROM picked WHERE d.id = picked.id
                 RETURNING d.id, d.attempts, d.webhook_id, d.event_id, d.next_attempt_ms)
             SELECT c.id, c.attempts, c.webhook_id, w.url, w.env, c.event_id, e.type, e.data,
                    e.created_ms
             FROM claimed c JOIN webhooks w ON w.id = c.webhook_id JOIN events e ON e.id = c.event_id
             ORDER BY c.next_attempt_ms, c.id",
        )
        .await?;
    let until = now_ms.saturating_add(CLAIM_MS);
    let rows = c
        .query(&stmt, &[&now_ms, &per_webhook, &limit, &until])
        .await?;
    rows.iter()
        .map(|r| {
            let event_id: String = r.get(5);
            let data: String = r.get(7);
            let data = serde_json::from_str(&data)
                .map_err(|e| StorageError::Corrupt(format!("event {event_id} data: {e}")))?;
            Ok(Due {
                id: r.get(0),
                attempts: non_negative(i64::from(r.get::<_, i32>(1)), "delivery attempts")?,
                webhook_id: WebhookId::parse(r.get(2))
                    .map_err(|e| StorageError::Corrupt(format!("webhook id: {e}")))?,
                url: r.get(3),
                env: env_from(r.get(4))?,
                event_id: EventId::parse(&event_id)
                    .map_err(|e| StorageError::Corrupt(format!("event id: {e}")))?,
                event_type: r.get(6),
                data,
                event_created_ms: r.get(8),
            })
        })
        .collect()
}

/// Lets go of claims on deliveries picked but not attempted.
pub async fn release(c: &impl GenericClient, ids: &[i64]) -> Result<()> {
    let stmt = c
        .prepare_cached(
            "UPDATE deliveries SET claimed_until = NULL WHERE id = ANY($1) AND state = 'pending'",
        )
        .await?;
    c.execute(&stmt, &[&ids]).await?;
    Ok(())
}

/// Writes what the worker decided of a delivery (its attempt, if one was made, and its
/// new state, only while it is pending) and ends the claim, in the caller's transaction.
pub async fn record(
    c: &impl GenericClient,
    delivery_id: i64,
    change: &DeliveryChange,
) -> Result<()> {
    if let Some(attempt) = &change.attempt {
        c.execute(
            "INSERT INTO delivery_attempts (delivery_id, attempt, at_ms, status, latency_ms, error)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &delivery_id,
                &i32::try_from(attempt.attempt).unwrap_or(i32::MAX),
                &attempt.at_ms,
                &attempt.status.map(i32::from),
                &attempt.latency_ms,
                &attempt.error,
            ],
        )
        .await?;
    }
    c.execute(
        "UPDATE deliveries SET attempts = $2, state = $3, next_attempt_ms = $4,
            last_error = $5, finished_ms = $6, claimed_until = NULL
         WHERE id = $1 AND state = 'pending'",
        &[
            &delivery_id,
            &i32::try_from(change.attempts).unwrap_or(i32::MAX),
            &change.state.as_str(),
            &change.next_attempt_ms,
            &change.last_error,
            &change.finished_ms,
        ],
    )
    .await?;
    Ok(())
}

/// How many deliveries and reviews are pending, in every organization.
pub async fn backlog(c: &impl GenericClient) -> Result<(i64, i64)> {
    let row = c
        .query_one(
            "SELECT (SELECT COUNT(*) FROM deliveries WHERE state = 'pending'),
                    (SELECT COUNT(*) FROM reviews WHERE status = 'pending')",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// The deliveries of an event, with their attempts.
pub async fn for_event(c: &impl GenericClient, event_id: &str) -> Result<Vec<DeliveryRow>> {
    let rows = c
        .query(
            "SELECT id, webhook_id, attempts, state, next_attempt_ms, last_error
             FROM deliveries WHERE event_id = $1 ORDER BY id",
            &[&event_id],
        )
        .await?;
    let mut out = Vec::new();
    for r in &rows {
        let id: i64 = r.get(0);
        let attempts = c
            .query(
                "SELECT attempt, at_ms, status, latency_ms, error FROM delivery_attempts
                 WHERE delivery_id = $1 ORDER BY attempt, id",
                &[&id],
            )
            .await?;
        let tried = attempts
            .iter()
            .map(|a| {
                Ok(Attempt {
                    attempt: non_negative(i64::from(a.get::<_, i32>(0)), "attempt")?,
                    at_ms: a.get(1),
                    status: a
                        .get::<_, Option<i32>>(2)
                        .map(|s| non_negative(i64::from(s), "status"))
                        .transpose()?,
                    latency_ms: a.get(3),
                    error: a.get(4),
                })
            })
            .collect::<Result<_>>()?;
        out.push(DeliveryRow {
            id,
            webhook_id: r.get(1),
            attempts: non_negative(i64::from(r.get::<_, i32>(2)), "delivery attempts")?,
            state: DeliveryState::stored(r.get(3))?,
            next_attempt_ms: r.get(4),
            last_error: r.get(5),
            tried,
        });
    }
    Ok(out)
}
