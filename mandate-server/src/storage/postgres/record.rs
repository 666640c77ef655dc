//! A decision's statement on PostgreSQL: the agent's version moved only if it is still the
//! one its state was read at and its environment's mode still the one it was made in, with
//! the review it opens (its event and deliveries) and its idempotency record, all in one
//! statement of data-modifying CTEs. The decision's own row is inserted after, with the
//! other decisions of its group, by one statement that gives them their seqs in commit
//! order (`decisions::insert_batch`), in the same transaction (`writer`).

use mandate_core::id::EventId;
use tokio_postgres::types::ToSql;

use super::decisions::Params;
use super::reviews;
use crate::clock::{from_ms, ms, ordered16};
use crate::storage::deciding::{AgentHint, NewDecision};

/// The statement that moves the agent's version if it is still `$2` and its environment's
/// mode still `$5` (`$1` the agent's key, `$3` org, `$4` env), with the review the decision
/// opens and that review's event and deliveries (`$6..$14`), and its idempotency record
/// (the next five). Returns 1 when the version moved (the decision is to be inserted), 0
/// when the agent changed meanwhile.
fn record_sql(review: bool, idempotent: bool) -> String {
    let mut sql = "WITH bump AS (
            UPDATE agents SET version = version + 1
            WHERE seq = $1 AND version = $2
              AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5)
            RETURNING seq)"
        .to_owned();
    let mut next = 5;
    if review {
        sql.push_str(&format!(
            ", r AS (
                INSERT INTO reviews ({})
                SELECT $6::TEXT, $3, $4, $7::TEXT, $8::TEXT, $9::TEXT, $10::BIGINT, $11::BIGINT
                FROM bump RETURNING 1),
             e AS (
                INSERT INTO events (id, org_id, env, type, data, created_ms)
                SELECT $12::TEXT, $3, $4, 'decision.review_pending', $13::TEXT, $14::BIGINT
                FROM r RETURNING id),
             w AS (
                INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
                SELECT e.id, wh.id, 0, $14::BIGINT, 'pending', $14::BIGINT FROM e JOIN webhooks wh
                  ON wh.org_id = $3 AND wh.env = $4 AND wh.status = 'active'
                 AND wh.events ? 'decision.review_pending'
                RETURNING 1)",
            reviews::INSERT_COLUMNS
        ));
        next = 14;
    }
    if idempotent {
        let p = |k: usize| format!("${}", next + k);
        sql.push_str(&format!(
            ", i AS (
                UPDATE idempotency
                SET status = {status}::INTEGER, body = {body}::BYTEA, request_id = {rid}::TEXT,
                    claimed_until = NULL
                WHERE key_hash = {hash}::BYTEA AND idem_key = {key}::TEXT AND status IS NULL
                  AND EXISTS (SELECT 1 FROM bump)
                RETURNING 1)",
            hash = p(1),
            key = p(2),
            status = p(3),
            body = p(4),
            rid = p(5),
        ));
    }
    sql.push_str(" SELECT COUNT(*) FROM bump");
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

    /// The decision itself, to be inserted when the statement moved the version: the
    /// agent's key and the decision's values.
    pub(crate) fn into_decision(self) -> (i64, Params) {
        (self.seq, self.params)
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
            (false, false, 5),
            (true, false, 14),
            (false, true, 10),
            (true, true, 19),
        ] {
            let sql = record_sql(review, idempotent);
            for n in 1..=count {
                assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
            }
            assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
        }
    }
}
