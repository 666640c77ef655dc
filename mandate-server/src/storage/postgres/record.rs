//! A decision's statement on PostgreSQL: the agent's version moved only if it is still the
//! one its state was read at and its environment's mode still the one it was made in (and,
//! with an Idempotency-Key, the request's claim still its own), with the review it opens
//! (its event and deliveries) and its idempotency record, all in one statement of
//! data-modifying CTEs. The decision's own row is inserted after, with the other decisions
//! of its group, by one statement that gives them the seqs their writer claimed and clears
//! the claim (`decisions::INSERT_CLAIMED`), in the same transaction (`writer`).

use mandate_core::id::EventId;
use tokio_postgres::types::ToSql;

use super::decisions::Params;
use super::reviews;
use crate::clock::{from_ms, ms, ordered16};
use crate::storage::deciding::{AgentHint, NewDecision, Recorded};

/// The statement that moves the agent's version if it is still `$2` and its environment's
/// mode still `$5` (`$1` the agent's key, `$3` org, `$4` env), with the review the decision
/// opens and that review's event and deliveries (`$6..$14`), and its idempotency record
/// (the next six, its claim's token last), and the single-use credential it accepts (the
/// last three: the credential, the decision's id, its time): with one, the statement goes
/// on only if no decision accepted that credential before (its row in
/// `accepted_credentials` is new). Returns 1 when the version moved (the decision is to be
/// inserted), 0 when the agent changed meanwhile or the credential was accepted already,
/// or -1 when the request's claim on its Idempotency-Key is no longer its own.
fn record_sql(review: bool, idempotent: bool, accepts: bool) -> String {
    // With an idempotency record, the claim must still be the request's own (`own`, its
    // row locked): a claim that ran out and was taken over by a retry on another process,
    // or released meanwhile, stores nothing, so that the key keeps one outcome. The lock
    // makes a concurrent take-over or release wait for this statement's transaction (and
    // then see the claim completed) or go first (and this statement store nothing).
    let first = if review { 15 } else { 6 };
    let (own, owned) = if idempotent {
        (
            format!(
                "own AS (
                    SELECT 1 FROM idempotency
                    WHERE key_hash = ${}::BYTEA AND idem_key = ${}::TEXT AND claim = ${}::BYTEA
                      AND status IS NULL
                    FOR UPDATE),
                 ",
                first,
                first + 1,
                first + 5
            ),
            "\n              AND EXISTS (SELECT 1 FROM own)",
        )
    } else {
        (String::new(), "")
    };
    let version = if planted_unchecked_version() {
        "$2::BIGINT IS NOT NULL"
    } else {
        "version = $2"
    };
    let mut sql = format!(
        "WITH {own}bump AS (
            UPDATE agents SET version = version + 1
            WHERE seq = $1 AND {version}
              AND EXISTS (SELECT 1 FROM environments WHERE org_id = $3 AND env = $4 AND mode = $5){owned}
            RETURNING seq)"
    );
    // The credential's parameters come last, after the review's and the idempotency
    // record's; everything after `bump` goes on from `ok`: `bump`, or with a credential,
    // its acceptance (a credential accepted before stops the review, the record and the
    // decision; the version moved anyway, so the decision is made again: `deny_replay`).
    let ok = if accepts {
        let c = 6 + if review { 9 } else { 0 } + if idempotent { 6 } else { 0 };
        sql.push_str(&format!(
            ", c AS (
                INSERT INTO accepted_credentials (org_id, env, id, decision_id, created_ms)
                SELECT $3, $4, ${c}::TEXT, ${}::TEXT, ${}::BIGINT FROM bump
                ON CONFLICT DO NOTHING RETURNING 1)",
            c + 1,
            c + 2
        ));
        "c"
    } else {
        "bump"
    };
    let mut next = 5;
    if review {
        sql.push_str(&format!(
            ", r AS (
                INSERT INTO reviews ({})
                SELECT $6::TEXT, $3, $4, $7::TEXT, $8::TEXT, $9::TEXT, $10::BIGINT, $11::BIGINT
                FROM {ok} RETURNING 1),
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
            reviews::INSERT_COLUMNS,
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
                  AND EXISTS (SELECT 1 FROM {ok})
                RETURNING 1)",
            hash = p(1),
            key = p(2),
            status = p(3),
            body = p(4),
            rid = p(5),
        ));
        // -1: the claim is no longer the request's own.
        sql.push_str(
            &format!(" SELECT CASE WHEN EXISTS (SELECT 1 FROM own) THEN (SELECT COUNT(*) FROM {ok}) ELSE -1 END"),
        );
    } else {
        sql.push_str(&format!(" SELECT COUNT(*) FROM {ok}"));
    }
    sql
}

/// The planted bug of the history checker (tests/history), in debug builds only: with
/// `MANDATE_TEST_PLANT_UNCHECKED_VERSION` set, a decision is stored whatever the agent's
/// version, so processes deciding for one agent at once overspend, and the checker must
/// say so.
fn planted_unchecked_version() -> bool {
    cfg!(debug_assertions) && std::env::var_os("MANDATE_TEST_PLANT_UNCHECKED_VERSION").is_some()
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
    claim: Vec<u8>,
}

/// What a decision's statement came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored: the agent's next hint.
    Stored(AgentHint),
    /// Nothing stored: the agent changed meanwhile (or was not found).
    Changed,
    /// Nothing stored: the request's claim on its Idempotency-Key is no longer its own.
    ClaimLost,
}

impl Outcome {
    /// As the store answers it, with the decision given back when it is to be made again.
    pub(crate) fn recorded(self, new: NewDecision) -> Recorded {
        match self {
            Outcome::Stored(hint) => Recorded::Stored(hint),
            Outcome::Changed => Recorded::Changed(Box::new(new)),
            Outcome::ClaimLost => Recorded::ClaimLost,
        }
    }
}

/// The eight variants of [`record_sql`], made once: with or without a review, an
/// idempotency record, a credential accepted.
static RECORD_SQL: std::sync::LazyLock<[String; 8]> = std::sync::LazyLock::new(|| {
    std::array::from_fn(|i| record_sql(i & 1 != 0, i & 2 != 0, i & 4 != 0))
});

/// The owned values of a single-use credential a decision accepts, in the statement's
/// order: the credential, the decision, its time.
struct AcceptValues {
    credential: String,
    decision: String,
    created_ms: i64,
}

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
    accepts: Option<AcceptValues>,
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
                claim: r.claim.to_vec(),
            }),
            accepts: accepts.as_ref().map(|credential| AcceptValues {
                credential: credential.clone(),
                decision: decision.claims.jti.as_str().to_owned(),
                created_ms: decision.created_ms,
            }),
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
                &i.claim,
            ]);
        }
        if let Some(a) = &self.accepts {
            values.extend([
                &a.credential as &(dyn ToSql + Sync),
                &a.decision,
                &a.created_ms,
            ]);
        }
        values
    }

    /// The decision itself, to be inserted when the statement moved the version: the
    /// agent's key and the decision's values.
    pub(crate) fn into_decision(self) -> (i64, Params) {
        (self.seq, self.params)
    }

    /// What the statement's answer (how many decisions it stored, -1 for a claim lost)
    /// means.
    pub(crate) fn outcome(&self, stored: i64) -> Outcome {
        match stored {
            1 => Outcome::Stored(AgentHint {
                seq: Some(self.seq),
                month_marked: None,
                version: self.version + 1,
            }),
            -1 => Outcome::ClaimLost,
            _ => Outcome::Changed,
        }
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
            (false, true, 11),
            (true, true, 20),
        ] {
            for accepts in [false, true] {
                let count = count + if accepts { 3 } else { 0 };
                let sql = record_sql(review, idempotent, accepts);
                for n in 1..=count {
                    assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
                }
                assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
            }
        }
    }
}
