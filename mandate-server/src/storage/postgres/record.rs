//! A group's statements on PostgreSQL. Each decision's agent version is moved only if it is
//! still the one its state was read at and its environment's mode still the one it was made
//! in (and, with an Idempotency-Key, the request's claim still its own); the review it opens
//! (its event and deliveries), its idempotency record and the decision's row are written
//! only if it moved.
//!
//! A decision with neither an Idempotency-Key nor a single-use credential (the common case)
//! is stored by the group's one statement ([`group_sql`]): the versions of all such
//! decisions of the group moved at once (arrays unnested), their reviews, events and
//! deliveries, and the rows of every decision of the group stored, with their seqs in commit
//! order. A decision with an Idempotency-Key or a credential has a statement of its own
//! first ([`RecordStatement::sql`]), whose answer says whether its row goes into the
//! group's statement. All in one transaction (`writer`), the agents' rows locked first, in
//! the order of their keys ([`LOCK_SQL`]).

use mandate_core::id::EventId;
use tokio_postgres::types::ToSql;

use super::decisions::{self, Batch, Params};
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

    /// Whether it needs a statement of its own before the group's: with an Idempotency-Key
    /// or a single-use credential. Otherwise the group's statement stores it all.
    pub(crate) fn own_statement(&self) -> bool {
        self.idempotency.is_some() || self.accepts.is_some()
    }

    /// The agent's key.
    pub(crate) fn agent_seq(&self) -> i64 {
        self.seq
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

/// Locks the agents' rows of a group (`$1` their keys, sorted) in the order of their keys, in
/// every group of every process: two groups waiting on each other's agents (a deadlock,
/// broken by the database only after a second) cannot happen, whatever order the statements
/// after it reach the rows in.
pub(crate) const LOCK_SQL: &str =
    "SELECT seq FROM agents WHERE seq = ANY($1::BIGINT[]) ORDER BY seq FOR UPDATE";

/// The group's statement: `$1..$26` the decisions' columns ([`Batch::columns`]), `$27`
/// whether each is stored already (its own statement moved its agent's version and wrote
/// its review and idempotency record), `$28` the version each was made on, then the review
/// each opens and its event (`$29..$35`, NULL for none). Moves the version of each decision
/// not stored already if it is still the one it was made on and its environment's mode
/// still its mode, writes the reviews, events and deliveries of those whose version moved,
/// and inserts the rows of those and of the decisions stored already, with the next seqs of
/// the log in the group's order (from the counter `decision_seq`, locked until the commit:
/// `decisions::INSERT_BATCH`). Answers the ordinals (from 1) of the decisions whose version
/// it moved.
pub(crate) fn group_sql() -> &'static str {
    static CHECKED: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| make_group_sql(false));
    static PLANTED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| make_group_sql(true));
    if planted_unchecked_version() {
        &PLANTED
    } else {
        &CHECKED
    }
}

/// [`group_sql`], with the version checked or (the planted bug) not.
fn make_group_sql(planted: bool) -> String {
    let version = if planted {
        "u.version IS NOT NULL"
    } else {
        "a.version = u.version"
    };
    let mut arrays: Vec<String> = decisions::COLUMN_TYPES
        .iter()
        .enumerate()
        .map(|(i, cast)| format!("${}::{cast}[]", i + 1))
        .collect();
    for (i, cast) in [
        "BOOLEAN", "BIGINT", "TEXT", "TEXT", "TEXT", "BIGINT", "BIGINT", "TEXT", "TEXT",
    ]
    .iter()
    .enumerate()
    {
        arrays.push(format!("${}::{cast}[]", i + 27));
    }
    let columns = decisions::INSERT_COLUMNS;
    let u_columns = format!(
        "{}, agent_seq",
        columns
            .split(',')
            .map(|c| format!("u.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    format!(
        "WITH u AS MATERIALIZED (
            SELECT * FROM unnest({arrays}) WITH ORDINALITY
            AS u({plain}, agent_seq, stored, version, r_id, r_decision, r_status, r_created_ms,
                 r_expires_ms, e_id, e_data, n)),
         bump AS (
            UPDATE agents a SET version = a.version + 1 FROM u
            WHERE a.seq = u.agent_seq AND NOT u.stored AND {version}
              AND EXISTS (SELECT 1 FROM environments e
                          WHERE e.org_id = u.org_id AND e.env = u.env AND e.mode = u.mode)
            RETURNING u.n),
         kept AS MATERIALIZED (SELECT n FROM bump UNION ALL SELECT n FROM u WHERE u.stored),
         taken AS (
            UPDATE counters SET value = value + (SELECT COUNT(*) FROM kept)
            WHERE name = 'decision_seq' AND EXISTS (SELECT 1 FROM kept)
            RETURNING value),
         d AS (
            INSERT INTO decisions (seq, {columns}, agent_seq)
            SELECT taken.value - (SELECT COUNT(*) FROM kept) + row_number() OVER (ORDER BY u.n),
                {u_columns}
            FROM taken, u WHERE u.n IN (SELECT n FROM kept)),
         r AS (
            INSERT INTO reviews ({review_columns})
            SELECT u.r_id, u.org_id, u.env, u.r_decision, u.agent_id, u.r_status, u.r_created_ms,
                u.r_expires_ms
            FROM u WHERE u.r_id IS NOT NULL AND u.n IN (SELECT n FROM bump)),
         e AS (
            INSERT INTO events (id, org_id, env, type, data, created_ms)
            SELECT u.e_id, u.org_id, u.env, 'decision.review_pending', u.e_data, u.created_ms
            FROM u WHERE u.r_id IS NOT NULL AND u.n IN (SELECT n FROM bump)
            RETURNING id, org_id, env, created_ms),
         w AS (
            INSERT INTO deliveries (event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
            SELECT e.id, wh.id, 0, e.created_ms, 'pending', e.created_ms FROM e JOIN webhooks wh
              ON wh.org_id = e.org_id AND wh.env = e.env AND wh.status = 'active'
             AND wh.events ? 'decision.review_pending')
         SELECT n FROM bump",
        arrays = arrays.join(", "),
        plain = columns.split_whitespace().collect::<Vec<_>>().join(" "),
        review_columns = reviews::INSERT_COLUMNS,
    )
}

/// A group's decisions for [`group_sql`], column by column.
#[derive(Default)]
pub(crate) struct Group {
    batch: Batch,
    stored: Vec<bool>,
    version: Vec<i64>,
    r_id: Vec<Option<String>>,
    r_decision: Vec<Option<String>>,
    r_status: Vec<Option<&'static str>>,
    r_created_ms: Vec<Option<i64>>,
    r_expires_ms: Vec<Option<i64>>,
    e_id: Vec<Option<String>>,
    e_data: Vec<Option<String>>,
}

impl Group {
    /// Adds a decision: `stored` when its own statement stored it already (it then needs
    /// only its row), otherwise the group's statement moves its agent's version and writes
    /// its review.
    pub(crate) fn push(&mut self, statement: RecordStatement, stored: bool) {
        let review = if stored { None } else { statement.review };
        self.batch.push(statement.seq, statement.params);
        self.stored.push(stored);
        self.version.push(statement.version);
        match review {
            Some(r) => {
                self.r_id.push(Some(r.id));
                self.r_decision.push(Some(r.decision));
                self.r_status.push(Some(r.status));
                self.r_created_ms.push(Some(r.created_ms));
                self.r_expires_ms.push(Some(r.expires_ms));
                self.e_id.push(Some(r.event));
                self.e_data.push(Some(r.data));
            }
            None => {
                self.r_id.push(None);
                self.r_decision.push(None);
                self.r_status.push(None);
                self.r_created_ms.push(None);
                self.r_expires_ms.push(None);
                self.e_id.push(None);
                self.e_data.push(None);
            }
        }
    }

    /// How many decisions it holds.
    pub(crate) fn len(&self) -> usize {
        self.stored.len()
    }

    /// The statement's values, in [`group_sql`]'s order.
    pub(crate) fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut values: Vec<&(dyn ToSql + Sync)> = self.batch.columns().to_vec();
        values.extend([
            &self.stored as &(dyn ToSql + Sync),
            &self.version,
            &self.r_id,
            &self.r_decision,
            &self.r_status,
            &self.r_created_ms,
            &self.r_expires_ms,
            &self.e_id,
            &self.e_data,
        ]);
        values
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

    /// The group's statement numbers its 35 parameters without a gap, in both variants.
    #[test]
    fn the_group_statement_numbers_its_parameters_from_one_without_gaps() {
        for planted in [false, true] {
            let sql = super::make_group_sql(planted);
            for n in 1..=35 {
                assert!(sql.contains(&format!("${n}::")), "${n} missing: {sql}");
            }
            assert!(!sql.contains("$36"), "{sql}");
            assert_eq!(sql.contains("a.version = u.version"), !planted);
        }
    }
}
