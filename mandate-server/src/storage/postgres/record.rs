//! A decision's statement on PostgreSQL: stored only if the agent's version is still the one
//! its state was read at and its environment's mode still the one it was made in, with the
//! review it opens (its event and deliveries) and its idempotency record, all in one
//! statement of data-modifying CTEs. Run alone ([`record`]) or in a group commit
//! (`writer`).

use deadpool_postgres::GenericClient;
use mandate_core::id::EventId;
use tokio_postgres::types::ToSql;

use super::Result;
use super::decisions::{INSERT_COLUMNS, Params};
use super::reviews;
use crate::clock::{from_ms, ms, ordered16};
use crate::storage::StorageError;
use crate::storage::deciding::{AgentHint, NewDecision, Recorded};

/// The statement that stores a decision if the agent's version is still `$2` and its
/// environment's mode still `$5` (`$1` the agent's key, `$3` org, `$4` env, then the
/// decision's columns as `$6..$29`), with the review it opens and that review's event and
/// deliveries (`$30..$38`), its idempotency record (the next five), and the single-use
/// credential it accepts (the last one): the decision is then stored only if no decision
/// accepted that credential before (its row in `accepted_credentials` is new). Returns how
/// many decisions it stored: 1, or 0 when the agent changed meanwhile or the credential
/// was accepted already.
fn record_sql(review: bool, idempotent: bool, accepts: bool) -> String {
    // The decision's values, cast to their columns' types (INSERT_COLUMNS' order).
    let values: Vec<String> = (6..=29)
        .map(|n| {
            let cast = match n {
                22..=24 => "BIGINT",
                27 => "BOOLEAN",
                29 => "BYTEA",
                _ => "TEXT",
            };
            format!("${n}::{cast}")
        })
        .collect();
    // The last parameter: the credential accepted, if any.
    let credential = 29 + if review { 9 } else { 0 } + if idempotent { 5 } else { 0 } + 1;
    let (accept, gate) = if accepts {
        (
            format!(
                "
         c AS (
            INSERT INTO accepted_credentials (org_id, env, id, decision_id, created_ms)
            SELECT $3, $4, ${credential}::TEXT, $6::TEXT, $24::BIGINT FROM bump
            ON CONFLICT DO NOTHING RETURNING 1),"
            ),
            " WHERE EXISTS (SELECT 1 FROM c)",
        )
    } else {
        (String::new(), "")
    };
    let mut sql = format!(
        "WITH bump AS (
            UPDATE agents SET version = version + 1
            WHERE seq = $1 AND version = $2
              AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5)
            RETURNING seq),{accept}
         d AS (
            INSERT INTO decisions ({INSERT_COLUMNS}, agent_seq)
            SELECT {}, bump.seq FROM bump{gate} RETURNING 1)",
        values.join(", ")
    );
    let mut next = 29;
    if review {
        sql.push_str(&format!(
            ", r AS (
                INSERT INTO reviews ({})
                SELECT $30::TEXT, $3, $4, $31::TEXT, $32::TEXT, $33::TEXT, $34::BIGINT, $35::BIGINT
                FROM d RETURNING 1),
             e AS (
                INSERT INTO events (id, org_id, env, type, data, created_ms)
                SELECT $36::TEXT, $3, $4, 'decision.review_pending', $37::TEXT, $38::BIGINT
                FROM r RETURNING id),
             w AS (
                INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
                SELECT e.id, wh.id, 0, $38::BIGINT, 'pending', $38::BIGINT FROM e JOIN webhooks wh
                  ON wh.org_id = $3 AND wh.env = $4 AND wh.status = 'active'
                 AND wh.events ? 'decision.review_pending'
                RETURNING 1)",
            reviews::INSERT_COLUMNS
        ));
        next = 38;
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

/// The eight variants of [`record_sql`], made once: with or without a review, with or
/// without an idempotency record, accepting a credential or not.
static RECORD_SQL: std::sync::LazyLock<[String; 8]> = std::sync::LazyLock::new(|| {
    std::array::from_fn(|i| record_sql(i & 1 != 0, i & 2 != 0, i & 4 != 0))
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
    accepts: Option<String>,
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
            accepts,
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
            accepts: accepts.clone(),
        })
    }

    /// Its SQL.
    pub(crate) fn sql(&self) -> &'static str {
        let index = usize::from(self.review.is_some())
            + 2 * usize::from(self.idempotency.is_some())
            + 4 * usize::from(self.accepts.is_some());
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
        if let Some(id) = &self.accepts {
            values.push(id);
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

#[cfg(test)]
mod sql_tests {
    use super::record_sql;

    /// Each variant numbers its parameters without a gap (PostgreSQL must infer each).
    #[test]
    fn every_variant_numbers_its_parameters_from_one_without_gaps() {
        for (review, idempotent, count) in [
            (false, false, 29),
            (true, false, 38),
            (false, true, 34),
            (true, true, 43),
        ] {
            for accepts in [false, true] {
                let count = count + usize::from(accepts);
                let sql = record_sql(review, idempotent, accepts);
                for n in 1..=count {
                    assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
                }
                assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
            }
            let sql = record_sql(review, idempotent, false);
            for n in 1..=count {
                assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
            }
            assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
        }
    }
}
