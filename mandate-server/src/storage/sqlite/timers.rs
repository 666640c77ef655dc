//! The look-ups of time-driven state: reviews whose 24 hours are over, and active mandates
//! that entered their `mandate.expiring` window without having fired it.

use rusqlite::{Connection, params};

use crate::model::Env;
use crate::storage::timers::DueItem;

fn items(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Vec<DueItem>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |r| {
        let env: String = r.get(2)?;
        let env = Env::parse(&env).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                2,
                rusqlite::types::Type::Text,
                format!("environment {env:?}").into(),
            )
        })?;
        Ok(DueItem {
            id: r.get(0)?,
            org_id: r.get(1)?,
            env,
        })
    })?;
    rows.collect()
}

/// Pending reviews whose expiry time is at or before `now_ms`, oldest first.
pub fn due_reviews(conn: &Connection, now_ms: i64, limit: i64) -> rusqlite::Result<Vec<DueItem>> {
    items(
        conn,
        "SELECT id, org_id, env FROM reviews
         WHERE status = 'pending' AND expires_ms <= ?1 ORDER BY expires_ms LIMIT ?2",
        params![now_ms, limit],
    )
}

/// Active mandates whose `expires` date lies from `today` to `horizon` (both
/// `YYYY-MM-DD`, inclusive) and whose `mandate.expiring` has not fired.
pub fn due_expiring(
    conn: &Connection,
    today: &str,
    horizon: &str,
    limit: i64,
) -> rusqlite::Result<Vec<DueItem>> {
    items(
        conn,
        "SELECT m.id, m.org_id, m.env FROM mandates m
         WHERE m.status = 'active' AND m.expires >= ?1 AND m.expires <= ?2
           AND NOT EXISTS (SELECT 1 FROM mandate_expiring_fired f WHERE f.mandate_id = m.id)
         ORDER BY m.expires, m.seq LIMIT ?3",
        params![today, horizon, limit],
    )
}

/// Whether `mandate.expiring` has fired for this mandate.
pub fn expiring_fired(conn: &Connection, mandate_id: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM mandate_expiring_fired WHERE mandate_id = ?1)",
        [mandate_id],
        |r| r.get(0),
    )
}

/// Marks `mandate.expiring` fired for this mandate, with its event.
pub fn mark_expiring_fired(
    tx: &Connection,
    mandate_id: &str,
    event_id: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO mandate_expiring_fired (mandate_id, event_id, fired_ms) VALUES (?1, ?2, ?3)",
        params![mandate_id, event_id, now_ms],
    )?;
    Ok(())
}
