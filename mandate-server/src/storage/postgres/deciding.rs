//! The decision path on PostgreSQL: an agent's record read in one round trip, and each
//! decision stored by one statement that is refused if the agent changed meanwhile.
//!
//! Several processes may decide for one agent. Each caches the agent's state with the
//! version of the `agents` row it was read at ([`AgentHint::version`]). Storing a decision
//! first moves that version on, only if it is still the one read and the environment's
//! enforcement mode is still the one the decision was made in; the decision, the review it
//! opens with its event and deliveries, and its idempotency record are inserted only if
//! the version moved. Otherwise nothing is written and the store answers
//! [`StorageError::Conflict`]: the decision service reloads the agent and decides again.
//! Every change an agent's next decision depends on moves its version: decisions,
//! approvals, mandates stored and revoked.

use std::sync::Arc;

use deadpool_postgres::GenericClient;
use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, EventId, ReviewId};
use mandate_core::review::Review;
use tokio_postgres::types::ToSql;

use super::decisions::{INSERT_COLUMNS, Params};
use super::store::PostgresStore;
use super::{Result, decisions, events, mandates, orgs, reviews};
use crate::clock::{from_ms, ms, ordered16};
use crate::model::Env;
use crate::storage::StorageError;
use crate::storage::StoreFuture;
use crate::storage::deciding::{
    AgentHint, AgentRecord, DecidingStore, NewDecision, Recorded, Resolution,
};

/// The agent's key, version, and its environment's mode (`$1` org, `$2` env, `$3` agent).
const AGENT_SQL: &str = "SELECT a.seq, a.version, e.mode FROM agents a
    JOIN environments e ON e.org_id = a.org_id AND e.env = a.env
    WHERE a.org_id = $1 AND a.env = $2 AND a.id = $3";

/// The times of the agent's latest requests, newest first (`$4` how many).
const RECENT_SQL: &str = "SELECT created_ms FROM decisions
    WHERE agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
      AND is_request
    ORDER BY seq DESC LIMIT $4";

/// The current mandate's allows since `$4`, oldest first.
const ALLOWED_SQL: &str = "SELECT amount, created_ms FROM decisions
    WHERE agent_seq = (SELECT seq FROM agents WHERE org_id = $1 AND env = $2 AND id = $3)
      AND created_ms >= $4 AND verdict = 'allow'
      AND mandate_id = (SELECT id FROM mandates WHERE org_id = $1 AND env = $2 AND agent_id = $3
                        ORDER BY seq DESC LIMIT 1)
    ORDER BY seq";

/// What `agent`'s next decision depends on, in one round trip: the statements are sent
/// together and run one after the other. The version is read first, so anything a later
/// statement sees that the version does not account for was committed after it, and the
/// decision made on it is refused when stored (a retry, never a wrong answer).
async fn read_agent_record(
    c: &impl GenericClient,
    org: &str,
    env: Env,
    agent: &AgentId,
    limit: usize,
    allowed_since_ms: i64,
) -> Result<AgentRecord> {
    let (agent_stmt, current_stmt, recent_stmt, allowed_stmt) = tokio::try_join!(
        c.prepare_cached(AGENT_SQL),
        c.prepare_cached(mandates::CURRENT_SQL),
        c.prepare_cached(RECENT_SQL),
        c.prepare_cached(ALLOWED_SQL),
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (env_text, agent_text) = (env.as_str(), agent.as_str());
    let keys: [&(dyn ToSql + Sync); 3] = [&org, &env_text, &agent_text];
    let recent_params: [&(dyn ToSql + Sync); 4] = [&org, &env_text, &agent_text, &limit];
    let allowed_params: [&(dyn ToSql + Sync); 4] =
        [&org, &env_text, &agent_text, &allowed_since_ms];
    let (agent_row, current, recent, allowed) = tokio::try_join!(
        c.query_opt(&agent_stmt, &keys),
        c.query_opt(&current_stmt, &keys),
        c.query(&recent_stmt, &recent_params),
        c.query(&allowed_stmt, &allowed_params),
    )?;
    let (hint, mode) = match agent_row {
        Some(row) => (
            AgentHint {
                seq: Some(row.get(0)),
                month_marked: None,
                version: row.get(1),
            },
            Some(orgs::parse_mode(row.get(2))?),
        ),
        None => (AgentHint::default(), None),
    };
    let mandate = current
        .as_ref()
        .map(mandates::decode)
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
    Ok(AgentRecord {
        mandate,
        recent_requests,
        allowed_since,
        hint,
        mode,
    })
}

/// The statement that stores a decision if the agent's version is still `$2` and its
/// environment's mode still `$5` (`$1` the agent's key, `$3` org, `$4` env, then the
/// decision's columns as `$6..$27`), with the review it opens and that review's event and
/// deliveries (`$28..$36`), and its idempotency record (the last five). Returns how many
/// decisions it stored: 1, or 0 when the agent changed meanwhile.
fn record_sql(review: bool, idempotent: bool) -> String {
    // The decision's values, cast to their columns' types (INSERT_COLUMNS' order).
    let values: Vec<String> = (6..=27)
        .map(|n| {
            let cast = match n {
                22..=24 => "BIGINT",
                27 => "BOOLEAN",
                _ => "TEXT",
            };
            format!("${n}::{cast}")
        })
        .collect();
    let mut sql = format!(
        "WITH bump AS (
            UPDATE agents SET version = version + 1
            WHERE seq = $1 AND version = $2
              AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5)
            RETURNING seq),
         d AS (
            INSERT INTO decisions ({INSERT_COLUMNS}, agent_seq)
            SELECT {}, bump.seq FROM bump RETURNING 1)",
        values.join(", ")
    );
    let mut next = 27;
    if review {
        sql.push_str(&format!(
            ", r AS (
                INSERT INTO reviews ({})
                SELECT $28::TEXT, $3, $4, $29::TEXT, $30::TEXT, $31::TEXT, $32::BIGINT, $33::BIGINT
                FROM d RETURNING 1),
             e AS (
                INSERT INTO events (id, org_id, env, type, data, created_ms)
                SELECT $34::TEXT, $3, $4, 'decision.review_pending', $35::TEXT, $36::BIGINT
                FROM r RETURNING id),
             w AS (
                INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
                SELECT e.id, wh.id, 0, $36::BIGINT, 'pending', $36::BIGINT FROM e JOIN webhooks wh
                  ON wh.org_id = $3 AND wh.env = $4 AND wh.status = 'active'
                 AND wh.events ? 'decision.review_pending'
                RETURNING 1)",
            reviews::INSERT_COLUMNS
        ));
        next = 36;
    }
    if idempotent {
        let p = |k: usize| format!("${}", next + k);
        sql.push_str(&format!(
            ", i AS (
                UPDATE idempotency
                SET status = {status}::INTEGER, body = {body}::BYTEA, request_id = {rid}::TEXT,
                    claimed_until = NULL
                WHERE key_hash = {hash}::BYTEA AND idem_key = {key}::TEXT AND status IS NULL
                  AND EXISTS (SELECT 1 FROM d)
                RETURNING 1)",
            hash = p(1),
            key = p(2),
            status = p(3),
            body = p(4),
            rid = p(5),
        ));
    }
    sql.push_str(" SELECT COUNT(*) FROM d");
    sql
}

/// The owned values of the review a decision opens, with its event, in the statement's
/// order.
struct ReviewValues {
    id: String,
    decision: String,
    agent: String,
    status: &'static str,
    created_ms: i64,
    expires_ms: i64,
    event: String,
    data: String,
    at_ms: i64,
}

/// The owned values of a decision's idempotency record, in the statement's order.
struct IdempotencyValues {
    key_hash: Vec<u8>,
    idem_key: String,
    status: i32,
    body: Vec<u8>,
    request_id: String,
}

/// Stores `new` alone, if its agent's version is still the one its hint read.
pub(crate) async fn record(c: &impl GenericClient, new: NewDecision) -> Result<Recorded> {
    match try_record(c, &new).await {
        Ok(Some(hint)) => Ok(Recorded::Stored(hint)),
        // The version moved, the mode changed, or (a distributed engine) the transaction
        // lost a race: nothing was stored.
        Ok(None) | Err(StorageError::Conflict) => Ok(Recorded::Changed(Box::new(new))),
        Err(e) => Err(e),
    }
}

/// The statement of [`record`]: the agent's next hint, or `None` if nothing was stored.
async fn try_record(c: &impl GenericClient, new: &NewDecision) -> Result<Option<AgentHint>> {
    let Some(statement) = RecordStatement::of(new) else {
        // The agent was not found when its state was read: read it again.
        return Ok(None);
    };
    let stmt = c.prepare_cached(statement.sql()).await?;
    let stored: i64 = c.query_one(&stmt, &statement.values()).await?.get(0);
    Ok(statement.outcome(stored))
}

/// The four variants of [`record_sql`], made once: with or without a review, with or
/// without an idempotency record.
static RECORD_SQL: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
    [
        record_sql(false, false),
        record_sql(true, false),
        record_sql(false, true),
        record_sql(true, true),
    ]
});

/// A decision's statement with its values, owned (the group writer sends many at once).
pub(crate) struct RecordStatement {
    seq: i64,
    version: i64,
    org: String,
    env: &'static str,
    mode: &'static str,
    params: Params,
    review: Option<ReviewValues>,
    idempotency: Option<IdempotencyValues>,
}

impl RecordStatement {
    /// The statement that stores `new`; `None` when its hint names no agent.
    pub(crate) fn of(new: &NewDecision) -> Option<Self> {
        let NewDecision {
            org,
            env,
            decision,
            review,
            idempotency,
            hint,
        } = new;
        let seq = hint.seq?;
        Some(Self {
            seq,
            version: hint.version,
            org: org.to_string(),
            env: env.as_str(),
            mode: decision.mode.as_str(),
            params: Params::of(org, *env, decision),
            review: review.as_ref().map(|(review, data)| ReviewValues {
                id: review.id.as_str().to_owned(),
                decision: review.decision.as_str().to_owned(),
                agent: decision.claims.request.agent.as_str().to_owned(),
                status: review.status.as_str(),
                created_ms: ms(review.created_at),
                expires_ms: ms(review.expires_at),
                event: EventId::from_random(ordered16(from_ms(decision.created_ms)))
                    .as_str()
                    .to_owned(),
                data: data.clone(),
                at_ms: decision.created_ms,
            }),
            idempotency: idempotency.as_ref().map(|r| IdempotencyValues {
                key_hash: r.key_hash.to_vec(),
                idem_key: r.idem_key.clone(),
                status: i32::from(r.status),
                body: r.body.0.clone(),
                request_id: r.request_id.clone(),
            }),
        })
    }

    /// Its SQL.
    pub(crate) fn sql(&self) -> &'static str {
        let index =
            usize::from(self.review.is_some()) + 2 * usize::from(self.idempotency.is_some());
        &RECORD_SQL[index]
    }

    /// Its values, in the SQL's order.
    pub(crate) fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut values: Vec<&(dyn ToSql + Sync)> =
            vec![&self.seq, &self.version, &self.org, &self.env, &self.mode];
        values.extend(self.params.refs());
        if let Some(r) = &self.review {
            values.extend([
                &r.id as &(dyn ToSql + Sync),
                &r.decision,
                &r.agent,
                &r.status,
                &r.created_ms,
                &r.expires_ms,
                &r.event,
                &r.data,
                &r.at_ms,
            ]);
        }
        if let Some(i) = &self.idempotency {
            values.extend([
                &i.key_hash as &(dyn ToSql + Sync),
                &i.idem_key,
                &i.status,
                &i.body,
                &i.request_id,
            ]);
        }
        values
    }

    /// What the statement's answer (how many decisions it stored) means: the agent's next
    /// hint, or `None` when the agent changed and nothing was stored.
    pub(crate) fn outcome(&self, stored: i64) -> Option<AgentHint> {
        (stored == 1).then_some(AgentHint {
            seq: Some(self.seq),
            month_marked: None,
            version: self.version + 1,
        })
    }
}

/// Moves the agent's version from `hint`'s if it is still that and the environment's mode
/// is still `mode` (an approval's re-check); the new version, or `None` when it changed.
async fn bump_if(
    c: &impl GenericClient,
    org: &str,
    env: Env,
    hint: AgentHint,
    mode: &str,
) -> Result<Option<i64>> {
    let Some(seq) = hint.seq else {
        return Ok(None);
    };
    let stmt = c
        .prepare_cached(
            "UPDATE agents SET version = version + 1
             WHERE seq = $1 AND version = $2
               AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5)
             RETURNING version",
        )
        .await?;
    Ok(
        c.query_opt(&stmt, &[&seq, &hint.version, &org, &env.as_str(), &mode])
            .await?
            .map(|r| r.get(0)),
    )
}

impl DecidingStore for PostgresStore {
    fn agent_record(
        &self,
        org: Arc<str>,
        env: Env,
        agent: AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> StoreFuture<'_, AgentRecord> {
        Box::pin(async move {
            let c = self.client().await?;
            read_agent_record(&c, &org, env, &agent, limit, allowed_since_ms).await
        })
    }

    fn record_decision(&self, new: NewDecision) -> StoreFuture<'_, Recorded> {
        Box::pin(self.record_in_group(new))
    }

    fn resolve_review(&self, resolution: Resolution) -> StoreFuture<'_, Option<AgentHint>> {
        Box::pin(async move {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            let Resolution {
                org,
                env,
                review,
                decision,
                at_ms,
                hint,
            } = &resolution;
            // The review's row first: of two processes resolving it at once, the second
            // waits here and finds it resolved.
            if !reviews::resolve(&tx, review).await? {
                tx.rollback().await?;
                return Ok(None);
            }
            let hint = match decision {
                None => *hint,
                Some(decision) => {
                    let Some(version) =
                        bump_if(&tx, org, *env, *hint, decision.mode.as_str()).await?
                    else {
                        tx.rollback().await?;
                        return Err(StorageError::Conflict);
                    };
                    let seq = hint.seq.unwrap_or_default();
                    decisions::insert(&tx, org, *env, seq, decision).await?;
                    AgentHint {
                        seq: hint.seq,
                        month_marked: None,
                        version,
                    }
                }
            };
            let data = serde_json::to_value(review).map_err(|e| {
                StorageError::Corrupt(format!("encoding review {}: {e}", review.id))
            })?;
            events::append(&tx, org, *env, "decision.resolved", &data, *at_ms).await?;
            tx.commit().await?;
            Ok(Some(hint))
        })
    }

    fn review(
        &self,
        org: Arc<str>,
        env: Env,
        id: ReviewId,
    ) -> StoreFuture<'_, Option<(Review, AgentId)>> {
        Box::pin(async move {
            let c = self.client().await?;
            match reviews::get(&c, &org, env, &id, false).await? {
                None => Ok(None),
                Some((review, agent)) => {
                    let agent = AgentId::parse(&agent)
                        .map_err(|_| StorageError::Corrupt(format!("review {id} agent")))?;
                    Ok(Some((review, agent)))
                }
            }
        })
    }
}

#[cfg(test)]
mod sql_tests {
    use super::record_sql;

    /// Each variant numbers its parameters without a gap (PostgreSQL must infer each).
    #[test]
    fn every_variant_numbers_its_parameters_from_one_without_gaps() {
        for (review, idempotent, count) in [
            (false, false, 27),
            (true, false, 36),
            (false, true, 32),
            (true, true, 41),
        ] {
            let sql = record_sql(review, idempotent);
            for n in 1..=count {
                assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
            }
            assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
        }
    }
}
