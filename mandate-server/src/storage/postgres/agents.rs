//! Agents.

use deadpool_postgres::GenericClient;
use mandate_core::id::AgentId;
use tokio_postgres::Row;

use super::Result;
use crate::model::Env;
use crate::storage::agents::AgentRow;

/// Inserts an agent; `false` if the name is taken in this organization and environment.
pub async fn insert(
    c: &impl GenericClient,
    id: &AgentId,
    org_id: &str,
    env: Env,
    now_ms: i64,
) -> Result<bool> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO agents (id, org_id, env, created_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (org_id, env, id) DO NOTHING",
        )
        .await?;
    let inserted = c
        .execute(&stmt, &[&id.as_str(), &org_id, &env.as_str(), &now_ms])
        .await?;
    Ok(inserted == 1)
}

fn row(r: &Row) -> AgentRow {
    AgentRow {
        seq: r.get(0),
        id: r.get(1),
        created_ms: r.get(2),
    }
}

/// One agent of this organization and environment.
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &AgentId,
) -> Result<Option<AgentRow>> {
    let stmt = c
        .prepare_cached(
            "SELECT seq, id, created_ms FROM agents WHERE org_id = $1 AND env = $2 AND id = $3",
        )
        .await?;
    let found = c
        .query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str()])
        .await?;
    Ok(found.as_ref().map(row))
}

/// A page of agents, newest first, strictly before `before` (a seq), at most `limit`.
pub async fn page(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    only: Option<&AgentId>,
    before: i64,
    limit: i64,
) -> Result<Vec<AgentRow>> {
    // The id is a plain condition when given, so that the plan uses the unique key.
    let id_clause = if only.is_some() {
        "id = $3"
    } else {
        "$3::TEXT IS NULL"
    };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT seq, id, created_ms FROM agents
             WHERE org_id = $1 AND env = $2 AND {id_clause} AND seq < $4
             ORDER BY seq DESC LIMIT $5"
        ))
        .await?;
    let only = only.map(AgentId::as_str);
    let rows = c
        .query(&stmt, &[&org_id, &env.as_str(), &only, &before, &limit])
        .await?;
    Ok(rows.iter().map(row).collect())
}

/// Moves the agent's version: every change its next decision depends on does, so a
/// decision made on the state before it is refused (see `deciding`).
pub async fn bump_version(c: &impl GenericClient, org_id: &str, env: Env, id: &str) -> Result<()> {
    let stmt = c
        .prepare_cached(
            "UPDATE agents SET version = version + 1 WHERE org_id = $1 AND env = $2 AND id = $3",
        )
        .await?;
    c.execute(&stmt, &[&org_id, &env.as_str(), &id]).await?;
    Ok(())
}
