//! A decision's statements on PostgreSQL, each naming its organization, so that on Citus
//! each is routed to the one worker holding the organization and no decision is a
//! two-phase commit (docs/scale.md, "For developers: what keeps a decision on one worker"): no `INSERT` inside a CTE, an
//! `INSERT … SELECT` only from the organization's own rows.
//!
//! In the group's transaction (`writer`), first, for every decision: the agent's version
//! moved only if it is still the one its state was read at and its environment's mode still
//! the one it was made in (and, with an Idempotency-Key, the request's claim still its own,
//! its row locked), the move marked as this decision's (`agents.last_decision`); and, when
//! the decision accepts a single-use credential, the credential's row, inserted only if the
//! move was this decision's and no decision accepted it before. Then, for the decisions so
//! stored: the review each opens with its event and deliveries, its idempotency record, and
//! the decisions themselves, with the seqs their writer claimed (`decisions::insert_sql`).

use mandate_core::EventId;
use tokio_postgres::types::ToSql;

use super::constant;
use super::decisions::Params;
use crate::clock::{from_ms, ms, ordered16};
use crate::storage::deciding::{AgentHint, NewDecision, Recorded};

/// The version move: `$1` the agent's key, `$2` the version read, `$3` org, `$4` env, `$5`
/// the mode, `$6` the decision's id; with an Idempotency-Key, `$7` the key's hash, `$8` the
/// key, `$9` the request's claim token. Returns 1 when the version moved (the decision is
/// to be stored), 0 when the agent or the mode changed meanwhile, -1 when the request's
/// claim on its key is no longer its own (a claim that ran out and was taken over by a
/// retry on another process, or released: the key keeps one outcome). Only `UPDATE` and
/// locking `SELECT`s of the organization's rows: one statement on its worker.
fn bump_sql(idempotent: bool) -> String {
    let version = if planted_unchecked_version() {
        "$2::BIGINT IS NOT NULL"
    } else {
        "version = $2"
    };
    let bump = |owned: &str| {
        format!(
            "bump AS (
                UPDATE agents SET version = version + 1, last_decision = $6
                WHERE org_id = $3 AND seq = $1 AND {version}
                  AND EXISTS (SELECT 1 FROM environments
                              WHERE org_id = $3 AND env = $4 AND mode = $5){owned}
                RETURNING 1)"
        )
    };
    if idempotent {
        // The claim's row locked: a concurrent take-over or release waits for this
        // transaction (and then sees the claim completed) or goes first (and this stores
        // nothing).
        format!(
            "WITH own AS (
                SELECT 1 FROM idempotency
                WHERE org_id = $3 AND key_hash = $7 AND idem_key = $8 AND claim = $9
                  AND status IS NULL
                FOR UPDATE),
             {}
             SELECT CASE WHEN EXISTS (SELECT 1 FROM own) THEN (SELECT COUNT(*) FROM bump)
                         ELSE -1 END",
            bump("\n                  AND EXISTS (SELECT 1 FROM own)")
        )
    } else {
        format!("WITH {} SELECT COUNT(*) FROM bump", bump(""))
    }
}

/// The two variants of [`bump_sql`], made once: without and with an Idempotency-Key.
static BUMP_SQL: std::sync::LazyLock<[String; 2]> =
    std::sync::LazyLock::new(|| [bump_sql(false), bump_sql(true)]);

/// The version moves of a run of a group's decisions that carry neither an Idempotency-Key
/// nor a credential, in one statement: `$1` org, then arrays in the run's order (its
/// agents' keys ascending): `$2` the agents' keys, `$3` the versions read, `$4` the
/// decisions' ids, `$5` their environments, `$6` their modes. Each agent's version moves
/// under the conditions of [`bump_sql`]; the statement returns the keys of the agents whose
/// version it moved (a group holds at most one decision an agent: an agent's next decision
/// waits for its last to be stored). The agents' rows are found through their primary key
/// in the arrays' order (the group's transaction turns sequential and bitmap scans off:
/// `writer::BEGIN_GROUP`), so they are locked in the keys' order as one statement a
/// decision locked them. One organization's rows: one statement on its worker (Citus).
fn bump_many_sql() -> String {
    let version = if planted_unchecked_version() {
        "d.version IS NOT NULL"
    } else {
        "a.version = d.version"
    };
    format!(
        "UPDATE agents a SET version = a.version + 1, last_decision = d.decision
         FROM unnest($2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[], $6::TEXT[])
              AS d(seq, version, decision, env, mode)
         WHERE a.org_id = $1 AND a.seq = d.seq AND {version}
           AND EXISTS (SELECT 1 FROM environments e
                       WHERE e.org_id = $1 AND e.env = d.env AND e.mode = d.mode)
         RETURNING a.seq"
    )
}

/// [`bump_many_sql`], made once.
pub(crate) static BUMP_MANY_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(bump_many_sql);

/// The values of [`BUMP_MANY_SQL`] for a run of decisions, owned.
pub(crate) struct ManyValues<'a> {
    org: &'a str,
    seqs: Vec<i64>,
    versions: Vec<i64>,
    decisions: Vec<&'a str>,
    envs: Vec<&'a str>,
    modes: Vec<&'a str>,
}

impl<'a> ManyValues<'a> {
    /// The values of the run `run` (each one [`RecordStatement::is_plain`]).
    pub(crate) fn of(org: &'a str, run: &[&'a RecordStatement]) -> Self {
        Self {
            org,
            seqs: run.iter().map(|s| s.seq).collect(),
            versions: run.iter().map(|s| s.version).collect(),
            decisions: run.iter().map(|s| s.decision.as_str()).collect(),
            envs: run.iter().map(|s| s.env).collect(),
            modes: run.iter().map(|s| s.mode).collect(),
        }
    }

    /// The run as an `EXECUTE` of [`BUMP_MANY_SQL`] prepared by name on a writer's
    /// connection (`script::prepares`), its values written as constants.
    pub(crate) fn execute(&self) -> Result<String, constant::NulInValue> {
        Ok(format!(
            "EXECUTE mandate_bump_many ({}, {}, {}, {}, {}, {})",
            constant::text(self.org)?,
            constant::bigint_array(&self.seqs),
            constant::bigint_array(&self.versions),
            constant::text_array(&self.decisions)?,
            constant::text_array(&self.envs)?,
            constant::text_array(&self.modes)?,
        ))
    }

    /// For each decision of the run, in order, whether its agent's version moved (1) or
    /// not (0), given the agents' keys the run's statement returned.
    pub(crate) fn moved(&self, returned: impl IntoIterator<Item = i64>) -> Vec<i64> {
        let returned: std::collections::HashSet<i64> = returned.into_iter().collect();
        self.seqs
            .iter()
            .map(|seq| i64::from(returned.contains(seq)))
            .collect()
    }

    /// The values, in [`BUMP_MANY_SQL`]'s order.
    pub(crate) fn values(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.org,
            &self.seqs,
            &self.versions,
            &self.decisions,
            &self.envs,
            &self.modes,
        ]
    }
}

/// A single-use credential accepted by the decision whose version move it was: `$1` org,
/// `$2` env, `$3` the credential, `$4` the decision, `$5` its time, `$6` the agent's key.
/// Inserts nothing when the move was not this decision's or a decision accepted the
/// credential before (then the decision is not stored: made again, it is `deny_replay`).
pub(crate) const ACCEPT: &str = "INSERT INTO accepted_credentials
        (org_id, env, id, decision_id, created_ms)
    SELECT a.org_id, $2::TEXT, $3::TEXT, $4::TEXT, $5::BIGINT FROM agents a
    WHERE a.org_id = $1 AND a.seq = $6 AND a.last_decision = $4
    ON CONFLICT DO NOTHING";

/// The review a decision opens: `$1` org, `$2` env, `$3` id, `$4` decision, `$5` agent, `$6`
/// status, `$7` created_ms, `$8` expires_ms.
pub(crate) const REVIEW: &str = "INSERT INTO reviews
        (org_id, env, id, decision_id, agent_id, status, created_ms, expires_ms)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// The organization's next event seq (`$1` org), for an event appended outside the decision
/// writers' groups (a review resolved, a mandate revoked), its row held until the
/// transaction commits so that such events commit in seq order (a group's reviews take
/// theirs by claim: [`EVENT_AT`]).
pub(crate) const EVENT_SEQ: &str =
    "UPDATE org_counters SET value = value + 1 WHERE org_id = $1 AND name = 'events'";

/// An event, with the seq [`EVENT_SEQ`] took: `$1` org, `$2` env, `$3` its id, `$4` its
/// type, `$5` its data, `$6` its time (the values of `EventSql::Append`).
pub(crate) const EVENT: &str = "INSERT INTO events
        (org_id, seq, env, id, type, data, created_ms)
    SELECT c.org_id, c.value, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT, $6::BIGINT
    FROM org_counters c WHERE c.org_id = $1 AND c.name = 'events'";

/// An event of a review a group's decision opens, with the seq the group claimed
/// ([`super::claims::CLAIM`]): the values of [`EVENT`], then `$7` the seq.
pub(crate) const EVENT_AT: &str = "INSERT INTO events
        (org_id, seq, env, id, type, data, created_ms)
    VALUES ($1, $7, $2, $3, $4, $5, $6)";

/// The deliveries of the event [`EVENT`] inserted, due at once, one to each active endpoint
/// of its organization and environment subscribed to its type: the values of [`EVENT`]
/// (`$5`, the event's data, only named so that the statement takes the same values, as
/// `EventSql::Append` gives them). It reads no event: a plan cached while `events` was
/// empty once found the event through `events_by_env`, walking every event of the
/// environment (a cost that grew with the table).
pub(crate) const DELIVERIES: &str = "INSERT INTO deliveries
        (org_id, event_id, webhook_id, attempts, next_attempt_ms, state, created_ms)
    SELECT wh.org_id, $3::TEXT, wh.id, 0, $6::BIGINT, 'pending', $6::BIGINT
    FROM webhooks wh
    WHERE wh.org_id = $1 AND wh.env = $2 AND wh.status = 'active' AND wh.events ? $4::TEXT
      AND $5::TEXT IS NOT NULL";

/// The type of the event of a review a decision opens.
static REVIEW_PENDING: &str = "decision.review_pending";

/// The request's idempotency record completed (its claim was checked, and its row locked,
/// by the version move): `$1` org, `$2` key hash, `$3` key, `$4` status, `$5` sealed body,
/// `$6` request id.
pub(crate) const COMPLETE: &str = "UPDATE idempotency
    SET status = $4, body = $5, request_id = $6, claimed_until = NULL
    WHERE org_id = $1 AND key_hash = $2 AND idem_key = $3 AND status IS NULL";

/// The planted bug of the history checker (tests/history), in debug builds only: with
/// `MANDATE_TEST_PLANT_UNCHECKED_VERSION` set, a decision is stored whatever the agent's
/// version, so processes deciding for one agent at once overspend, and the checker must
/// say so.
fn planted_unchecked_version() -> bool {
    cfg!(debug_assertions) && std::env::var_os("MANDATE_TEST_PLANT_UNCHECKED_VERSION").is_some()
}

/// The owned values of the review a decision opens, with its event.
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

/// The owned values of a decision's idempotency record.
struct IdempotencyValues {
    key_hash: Vec<u8>,
    idem_key: String,
    status: i32,
    body: Vec<u8>,
    request_id: String,
    claim: Vec<u8>,
}

/// The owned values of a single-use credential a decision accepts.
struct AcceptValues {
    credential: String,
    created_ms: i64,
}

/// What a decision's statements came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored: the agent's next hint.
    Stored(AgentHint),
    /// Nothing stored: the agent changed meanwhile (or was not found), or the credential
    /// was accepted before.
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

/// A decision's statements with their values, owned (the group writer sends many at once).
pub(crate) struct RecordStatement {
    seq: i64,
    version: i64,
    org: String,
    env: &'static str,
    mode: &'static str,
    decision: String,
    params: Params,
    review: Option<ReviewValues>,
    idempotency: Option<IdempotencyValues>,
    accepts: Option<AcceptValues>,
}

/// A statement of a group's second pipeline, with its values.
pub(crate) type After<'a> = (&'static str, Vec<&'a (dyn ToSql + Sync)>);

impl RecordStatement {
    /// When the decision was made (unix ms).
    pub(crate) fn created_ms(&self) -> i64 {
        self.params.created_ms()
    }

    /// The statements that store `new`; `None` when its hint names no agent.
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
            decision: decision.claims.jti.as_str().to_owned(),
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
                created_ms: decision.created_ms,
            }),
        })
    }

    /// Whether its version moves with others' in one statement ([`BUMP_MANY_SQL`]): it
    /// carries neither an Idempotency-Key nor a credential.
    pub(crate) fn is_plain(&self) -> bool {
        self.idempotency.is_none() && self.accepts.is_none()
    }

    /// The version move's SQL.
    pub(crate) fn bump_sql(&self) -> &'static str {
        &BUMP_SQL[usize::from(self.idempotency.is_some())]
    }

    /// The version move's values, in its SQL's order.
    pub(crate) fn bump_values(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![
            &self.seq,
            &self.version,
            &self.org,
            &self.env,
            &self.mode,
            &self.decision,
        ];
        if let Some(i) = &self.idempotency {
            values.extend([&i.key_hash as &(dyn ToSql + Sync), &i.idem_key, &i.claim]);
        }
        values
    }

    /// The values of [`ACCEPT`], when the decision accepts a single-use credential.
    pub(crate) fn accept_values(&self) -> Option<Vec<&(dyn ToSql + Sync)>> {
        let a = self.accepts.as_ref()?;
        Some(vec![
            &self.org,
            &self.env,
            &a.credential,
            &self.decision,
            &a.created_ms,
            &self.seq,
        ])
    }

    /// Whether it opens a review (whose event takes a seq of its group's claim).
    pub(crate) fn opens_review(&self) -> bool {
        self.review.is_some()
    }

    /// What the decision writes once stored, before its row: the review it opens with its
    /// event (at `event_seq`, claimed for it) and deliveries, and its idempotency record.
    pub(crate) fn after<'a>(&'a self, event_seq: Option<&'a i64>) -> Vec<After<'a>> {
        let mut out: Vec<After<'_>> = Vec::new();
        if let Some(r) = &self.review {
            out.push((
                REVIEW,
                vec![
                    &self.org,
                    &self.env,
                    &r.id,
                    &r.decision,
                    &r.agent,
                    &r.status,
                    &r.created_ms,
                    &r.expires_ms,
                ],
            ));
            // The event's values, the same for its row and its deliveries (which take them
            // rather than reading the event back).
            let event: Vec<&(dyn ToSql + Sync)> = vec![
                &self.org,
                &self.env,
                &r.event,
                &REVIEW_PENDING,
                &r.data,
                &r.at_ms,
            ];
            let mut row = event.clone();
            row.extend(event_seq.map(|seq| seq as &(dyn ToSql + Sync)));
            out.push((EVENT_AT, row));
            out.push((DELIVERIES, event));
        }
        if let Some(i) = &self.idempotency {
            out.push((
                COMPLETE,
                vec![
                    &self.org,
                    &i.key_hash,
                    &i.idem_key,
                    &i.status,
                    &i.body,
                    &i.request_id,
                ],
            ));
        }
        out
    }

    /// The agent's key and the decision's values, for its row.
    pub(crate) fn row(&self) -> (&i64, &Params) {
        (&self.seq, &self.params)
    }

    /// What the version move answered (`bumped`: 1 moved, 0 changed, -1 claim lost) and,
    /// with a credential, how many rows its acceptance inserted, mean.
    pub(crate) fn outcome(&self, bumped: i64, accepted: Option<u64>) -> Outcome {
        match (bumped, accepted) {
            (-1, _) => Outcome::ClaimLost,
            (1, None | Some(1)) => Outcome::Stored(AgentHint {
                seq: Some(self.seq),
                month_marked: None,
                version: self.version + 1,
            }),
            _ => Outcome::Changed,
        }
    }
}

/// A group's version moves, in its decisions' order: a run of decisions moved by one
/// statement, or one decision moved alone with its credential's acceptance.
pub(super) enum Move<'a> {
    Run(ManyValues<'a>),
    Alone(
        Vec<&'a (dyn ToSql + Sync)>,
        Option<Vec<&'a (dyn ToSql + Sync)>>,
    ),
}

/// The moves of `present` (a group's decisions in the order of their agents' keys): each
/// run of plain decisions ([`RecordStatement::is_plain`]) one statement, the others alone,
/// each in its place, so that rows are locked in the keys' order throughout.
pub(super) fn moves_of<'a>(org: &'a str, present: &[&'a RecordStatement]) -> Vec<Move<'a>> {
    let mut moves = Vec::new();
    let mut run: Vec<&RecordStatement> = Vec::new();
    for statement in present {
        if statement.is_plain() {
            run.push(statement);
            continue;
        }
        if !run.is_empty() {
            moves.push(Move::Run(ManyValues::of(org, &run)));
            run.clear();
        }
        moves.push(Move::Alone(
            statement.bump_values(),
            statement.accept_values(),
        ));
    }
    if !run.is_empty() {
        moves.push(Move::Run(ManyValues::of(org, &run)));
    }
    moves
}

#[cfg(test)]
mod sql_tests {
    use super::bump_sql;

    /// Each variant numbers its parameters without a gap (PostgreSQL must infer each).
    #[test]
    fn every_variant_numbers_its_parameters_from_one_without_gaps() {
        for (idempotent, count) in [(false, 6), (true, 9)] {
            let sql = bump_sql(idempotent);
            for n in 1..=count {
                assert!(sql.contains(&format!("${n}")), "${n} missing: {sql}");
            }
            assert!(!sql.contains(&format!("${}", count + 1)), "{sql}");
        }
    }
}
