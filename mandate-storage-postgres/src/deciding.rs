//! The decision path on PostgreSQL: an agent's record read in one round trip, and each
//! decision stored by one statement that is refused if the agent changed meanwhile.
//!
//! Several processes may decide for one agent. Each caches the agent's state with the
//! version of the `agents` row it was read at (`AgentHint::version`). Storing a decision
//! first moves that version on, only if it is still the one read and the environment's
//! enforcement mode is still the one the decision was made in; the decision, the review it
//! opens with its event and deliveries, and its idempotency record are inserted only if
//! the version moved. Otherwise nothing is written and the store answers
//! [`StorageError::Conflict`]: the decision service reloads the agent and decides again.
//! Every change an agent's next decision depends on moves its version: decisions,
//! approvals, mandates stored and revoked.

use mandate_core::{AgentId, Amount};
use tokio_postgres::types::ToSql;

use super::tx::PgTx;
use super::{Result, decisions};
use mandate_storage::StorageError;
use mandate_storage::deciding::{AgentHint, AgentRecord, allows_from};
use mandate_storage::mandates;
use mandate_storage::model::Env;

/// The agent's current mandate (its newest, whatever its status): `$1..$3` org, env,
/// agent.
const CURRENT_SQL: &str = "SELECT seq, id, terms, status, created_ms FROM mandates
     WHERE org_id = $1 AND env = $2 AND agent_id = $3 ORDER BY seq DESC LIMIT 1";

/// The agent's key, version, and its environment's mode (`$1` org, `$2` env, `$3` agent).
const AGENT_SQL: &str = "SELECT a.seq, a.version, e.mode FROM agents a
    JOIN environments e ON e.org_id = a.org_id AND e.env = a.env
    WHERE a.org_id = $1 AND a.env = $2 AND a.id = $3";

/// The times of the agent's latest requests, newest first (`$4` how many).
const RECENT_SQL: &str = "SELECT created_ms FROM decisions
    WHERE org_id = $1 AND agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
      AND is_request
    ORDER BY seq DESC LIMIT $4";

/// The current mandate's allows since `$4`, oldest first, `$5` the month of `$4`
/// (`clock::month_index`). They are walked through `decisions_by_agent` from the lowest seq
/// marked for that month or a later one (`decision_months`, migration 0014: every decision
/// created since lies at or above it), so the walk costs the agent's decisions of those
/// months, not of all time; with no month marked there is no decision to read.
pub(super) const ALLOWED_SQL: &str = "SELECT amount, created_ms FROM decisions
    WHERE org_id = $1 AND agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
      AND seq >= (SELECT MIN(first_seq) FROM decision_months WHERE org_id = $1 AND month >= $5)
      AND created_ms >= $4 AND verdict = 'allow'
      AND mandate_id = (SELECT id FROM mandates WHERE org_id = $1 AND env = $2 AND agent_id = $3
                        ORDER BY seq DESC LIMIT 1)
    ORDER BY seq";

/// What `agent`'s next decision depends on, in one round trip: the statements are sent
/// together and run one after the other. The version is read first, so anything a later
/// statement sees that the version does not account for was committed after it, and the
/// decision made on it is refused when stored (a retry, never a wrong answer).
pub(super) async fn read_agent_record(
    tx: &PgTx<'_>,
    org: &str,
    env: Env,
    agent: &AgentId,
    limit: usize,
    allowed_since_ms: i64,
) -> Result<AgentRecord> {
    let (agent_stmt, current_stmt, recent_stmt, allowed_stmt) = tokio::try_join!(
        tx.prepare(AGENT_SQL),
        tx.prepare(CURRENT_SQL),
        tx.prepare(RECENT_SQL),
        tx.prepare(ALLOWED_SQL),
    )?;
    let c = tx.client();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (env_text, agent_text) = (env.as_str(), agent.as_str());
    let keys: [&(dyn ToSql + Sync); 3] = [&org, &env_text, &agent_text];
    let recent_params: [&(dyn ToSql + Sync); 4] = [&org, &env_text, &agent_text, &limit];
    let month = mandate_storage::clock::month_index(allowed_since_ms);
    let allowed_params: [&(dyn ToSql + Sync); 5] =
        [&org, &env_text, &agent_text, &allowed_since_ms, &month];
    let (agent_row, current, recent, allowed) = tokio::try_join!(
        c.query_opt(&agent_stmt, &keys),
        c.query_opt(&current_stmt, &keys),
        c.query(&recent_stmt, &recent_params),
        c.query(&allowed_stmt, &allowed_params),
    )
    .map_err(crate::pg_error)?;
    let (hint, mode) = match agent_row {
        Some(row) => (
            AgentHint {
                seq: Some(row.get(0)),
                month_marked: None,
                version: row.get(1),
            },
            Some(mandate_storage::orgs::parse_mode(row.get(2))?),
        ),
        None => (AgentHint::default(), None),
    };
    let mandate = current
        .as_ref()
        .map(|row| mandates::read(&crate::tx::PgRow(row)))
        .transpose()?
        .map(|(_, m)| m);
    let mut recent_requests: Vec<i64> = recent.iter().map(|r| r.get(0)).collect();
    recent_requests.reverse();
    // The allows count under the current mandate only.
    let allowed_since = if mandate.is_some() {
        allowed
            .iter()
            .map(|r| {
                let amount: &str = r.get(0);
                Amount::parse(amount)
                    .map(|a| (a, r.get::<_, i64>(1)))
                    .map_err(|_| StorageError::Corrupt(format!("amount {amount:?}")))
            })
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    // A limit over the mandate's life needs its allows since its creation: read them in a
    // second round trip, after the version (a later commit is caught when storing).
    let allowed_since = match &mandate {
        Some(m) if allows_from(m, allowed_since_ms) < allowed_since_ms => {
            decisions::allowed_since(tx, org, env, agent, &m.id, allows_from(m, allowed_since_ms))
                .await?
        }
        _ => allowed_since,
    };
    Ok(AgentRecord {
        mandate,
        recent_requests,
        allowed_since,
        hint,
        mode,
    })
}

/// Moves the agent's version from `hint`'s if it is still that and the environment's mode
/// is still `mode` (an approval's re-check); the new version, or `None` when it changed.
pub(super) async fn bump_if(
    tx: &PgTx<'_>,
    org: &str,
    env: Env,
    hint: AgentHint,
    mode: &str,
) -> Result<Option<i64>> {
    let Some(seq) = hint.seq else {
        return Ok(None);
    };
    let stmt = tx
        .prepare(
            "UPDATE agents SET version = version + 1
             WHERE org_id = $3 AND seq = $1 AND version = $2
               AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5)
             RETURNING version",
        )
        .await?;
    Ok(tx
        .client()
        .query_opt(&stmt, &[&seq, &hint.version, &org, &env.as_str(), &mode])
        .await
        .map_err(crate::pg_error)?
        .map(|r| r.get(0)))
}
