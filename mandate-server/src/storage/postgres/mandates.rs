//! Mandates. The validated terms are stored as JSON with exact numbers and parsed back
//! through the same `MandateDraft::from_json` that validated them (as on SQLite).

use deadpool_postgres::GenericClient;
use mandate_core::id::MandateId;
use mandate_core::mandate::{Mandate, MandateStatus, format_date};
use tokio_postgres::Row;

use super::{Result, agents};
use crate::clock::ms;
use crate::model::Env;
use crate::storage::mandates::{Filters, MandateColumns, terms_json};

/// Inserts a mandate, supersedes the agent's previous active one and moves the agent's
/// version (in the caller's transaction).
pub async fn insert(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    mandate: &Mandate,
) -> Result<()> {
    let agent = mandate.terms.agent.as_str();
    let supersede = c
        .prepare_cached(
            "UPDATE mandates SET status = 'superseded'
             WHERE org_id = $1 AND env = $2 AND agent_id = $3 AND status = 'active'",
        )
        .await?;
    c.execute(&supersede, &[&org_id, &env.as_str(), &agent])
        .await?;
    let insert = c
        .prepare_cached(
            "INSERT INTO mandates (id, org_id, env, agent_id, terms, expires, status, created_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .await?;
    c.execute(
        &insert,
        &[
            &mandate.id.as_str(),
            &org_id,
            &env.as_str(),
            &agent,
            &terms_json(mandate),
            &format_date(mandate.terms.expires),
            &mandate.status.as_str(),
            &ms(mandate.created_at),
        ],
    )
    .await?;
    agents::bump_version(c, org_id, env, agent).await
}

/// The columns every read takes, in [`decode`]'s order.
pub(crate) const COLUMNS: &str = "seq, id, terms, status, created_ms";

/// A row read by [`COLUMNS`] as a mandate with its seq.
pub(crate) fn decode(r: &Row) -> Result<(i64, Mandate)> {
    MandateColumns {
        seq: r.get(0),
        id: r.get(1),
        terms: r.get(2),
        status: r.get(3),
        created_ms: r.get(4),
    }
    .decode()
}

/// One mandate of this organization and environment.
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &MandateId,
) -> Result<Option<Mandate>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM mandates WHERE org_id = $1 AND env = $2 AND id = $3"
        ))
        .await?;
    let row = c
        .query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str()])
        .await?;
    row.as_ref()
        .map(decode)
        .transpose()
        .map(|m| m.map(|(_, m)| m))
}

/// The agent's current mandate (its newest, whatever its status): the statement, with the
/// organization, environment and agent as `$1..$3`.
pub(crate) const CURRENT_SQL: &str = "SELECT seq, id, terms, status, created_ms FROM mandates
     WHERE org_id = $1 AND env = $2 AND agent_id = $3 ORDER BY seq DESC LIMIT 1";

/// A page of mandates, newest first, strictly before seq `before`. `today` is the UTC
/// date as `YYYY-MM-DD`, for the computed `expired` status.
pub async fn page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    filters: &Filters,
    today: &str,
    before: i64,
    limit: i64,
) -> Result<Vec<(i64, Mandate)>> {
    let status_clause = match filters.status {
        None => "$4::TEXT = $4",
        Some(MandateStatus::Active) => "status = 'active' AND expires >= $4",
        Some(MandateStatus::Expired) => "status = 'active' AND expires < $4",
        Some(MandateStatus::Revoked) => "status = 'revoked' AND $4::TEXT = $4",
        Some(MandateStatus::Superseded) => "status = 'superseded' AND $4::TEXT = $4",
    };
    let agent_clause = if filters.agent.is_some() {
        "agent_id = $3"
    } else {
        "$3::TEXT IS NULL"
    };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM mandates
             WHERE org_id = $1 AND env = $2 AND {agent_clause} AND ({status_clause})
               AND seq < $5
             ORDER BY seq DESC LIMIT $6"
        ))
        .await?;
    let rows = c
        .query(
            &stmt,
            &[
                &org_id,
                &env.as_str(),
                &filters.agent,
                &today,
                &before,
                &limit,
            ],
        )
        .await?;
    rows.iter().map(decode).collect()
}

/// Marks an active mandate revoked; returns whether it was active.
pub async fn revoke(c: &impl GenericClient, id: &MandateId, now_ms: i64) -> Result<bool> {
    let stmt = c
        .prepare_cached(
            "UPDATE mandates SET status = 'revoked', revoked_ms = $2 WHERE id = $1 AND status = 'active'",
        )
        .await?;
    Ok(c.execute(&stmt, &[&id.as_str(), &now_ms]).await? == 1)
}

/// One mandate, its row locked for the caller's transaction; `None` if missing or locked by
/// another transaction right now (`SKIP LOCKED`: a timer leaves it for a later tick).
pub async fn get_locked(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &MandateId,
    skip_locked: bool,
) -> Result<Option<Mandate>> {
    let wait = if skip_locked { " SKIP LOCKED" } else { "" };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM mandates WHERE org_id = $1 AND env = $2 AND id = $3 FOR UPDATE{wait}"
        ))
        .await?;
    let row = c
        .query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str()])
        .await?;
    row.as_ref()
        .map(decode)
        .transpose()
        .map(|m| m.map(|(_, m)| m))
}
