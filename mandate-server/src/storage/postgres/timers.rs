//! The look-ups of time-driven state: reviews whose 24 hours are over, and active mandates
//! that entered their `mandate.expiring` window without having fired it. Every process
//! runs them; each item is then handled in a transaction that locks its row with
//! `SKIP LOCKED`, so two processes never handle one item at once, and a handled item is
//! left alone by the next.

use deadpool_postgres::GenericClient;

use super::{Result, env_from};
use crate::storage::timers::DueItem;

fn items(rows: &[tokio_postgres::Row]) -> Result<Vec<DueItem>> {
    rows.iter()
        .map(|r| {
            Ok(DueItem {
                id: r.get(0),
                org_id: r.get(1),
                env: env_from(r.get(2))?,
            })
        })
        .collect()
}

/// Pending reviews whose expiry time is at or before `now_ms`, oldest first.
pub async fn due_reviews(c: &impl GenericClient, now_ms: i64, limit: i64) -> Result<Vec<DueItem>> {
    let stmt = c
        .prepare_cached(
            "SELECT id, org_id, env FROM reviews
             WHERE status = 'pending' AND expires_ms <= $1 ORDER BY expires_ms LIMIT $2",
        )
        .await?;
    items(&c.query(&stmt, &[&now_ms, &limit]).await?)
}

/// Active mandates whose `expires` date lies from `today` to `horizon` (inclusive) and
/// whose `mandate.expiring` has not fired.
pub async fn due_expiring(
    c: &impl GenericClient,
    today: &str,
    horizon: &str,
    limit: i64,
) -> Result<Vec<DueItem>> {
    let stmt = c
        .prepare_cached(
            "SELECT m.id, m.org_id, m.env FROM mandates m
             WHERE m.status = 'active' AND m.expires >= $1 AND m.expires <= $2
               AND NOT EXISTS (SELECT 1 FROM mandate_expiring_fired f WHERE f.mandate_id = m.id)
             ORDER BY m.expires, m.seq LIMIT $3",
        )
        .await?;
    items(&c.query(&stmt, &[&today, &horizon, &limit]).await?)
}

/// Whether `mandate.expiring` has fired for this mandate.
pub async fn expiring_fired(c: &impl GenericClient, mandate_id: &str) -> Result<bool> {
    Ok(c.query_one(
        "SELECT EXISTS (SELECT 1 FROM mandate_expiring_fired WHERE mandate_id = $1)",
        &[&mandate_id],
    )
    .await?
    .get(0))
}

/// Marks `mandate.expiring` fired for this mandate, with its event.
pub async fn mark_expiring_fired(
    c: &impl GenericClient,
    mandate_id: &str,
    event_id: &str,
    now_ms: i64,
) -> Result<()> {
    c.execute(
        "INSERT INTO mandate_expiring_fired (mandate_id, event_id, fired_ms) VALUES ($1, $2, $3)",
        &[&mandate_id, &event_id, &now_ms],
    )
    .await?;
    Ok(())
}
