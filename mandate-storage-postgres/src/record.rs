//! A group of decisions as the one call that stores it (`writer.rs`; the function of
//! migration 0017): [`RecordCall`], the group's organizations ([`GroupOrgs`]) and every
//! decision's values as one array a column, in the group's order.
//!
//! `mandate_record` stores each decision only if its agent's version is still the one its
//! state was read at and its environment's mode still the one it was made in (and, with an
//! Idempotency-Key, the request's claim still its own, its row locked), marking the move as
//! this decision's (`agents.last_decision`); a decision that accepts a single-use credential
//! only if no decision accepted it before. For the decisions so stored it writes the review
//! each opens with its event and deliveries, its idempotency record, and its row, with the
//! organization's next seqs, taken in the same transaction (its counter row held to the
//! commit). On Citus every statement in it names one organization, so each is planned on
//! the fast path and run on the local shard.
//!
//! Beside them, the statements of an event appended outside the groups ([`EVENT_SEQ`],
//! [`EVENT`], [`DELIVERIES`]).

use mandate_core::EventId;
use tokio_postgres::types::ToSql;

use super::decisions::{Params, RowArrays};
use mandate_storage::clock::{from_ms, ms, ordered16};
use mandate_storage::deciding::{AgentHint, NewDecision, Recorded};

/// The organization's next event seq (`$1` org), for an event appended outside the decision
/// writers' groups (a review resolved, a mandate revoked), its row held until the
/// transaction commits so that such events commit in seq order (a group's reviews take
/// theirs the same way, in the group's transaction: [`RECORD_CALL`]).
pub(crate) const EVENT_SEQ: &str =
    "UPDATE org_counters SET value = value + 1 WHERE org_id = $1 AND name = 'events'";

/// An event, with the seq [`EVENT_SEQ`] took: `$1` org, `$2` env, `$3` its id, `$4` its
/// type, `$5` its data, `$6` its time (the values of `EventSql::Append`).
pub(crate) const EVENT: &str = "INSERT INTO events
        (org_id, seq, env, id, type, data, created_ms)
    SELECT c.org_id, c.value, $2::TEXT, $3::TEXT, $4::TEXT, $5::TEXT, $6::BIGINT
    FROM org_counters c WHERE c.org_id = $1 AND c.name = 'events'";

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

/// The planted bug of the history checker (tests/history), only in a build with the
/// `test-faults` feature (the tests' build): with `MANDATE_TEST_PLANT_UNCHECKED_VERSION`
/// set, a decision is stored whatever the agent's version, so processes deciding for one
/// agent at once overspend, and the checker must say so.
#[cfg(feature = "test-faults")]
fn planted_unchecked_version() -> bool {
    std::env::var_os("MANDATE_TEST_PLANT_UNCHECKED_VERSION").is_some()
}

/// Without the `test-faults` feature (every build but the tests'), the version is always
/// checked: the switch is not compiled in.
#[cfg(not(feature = "test-faults"))]
fn planted_unchecked_version() -> bool {
    false
}

/// Stores a group in one call and one transaction (`mandate_record`, migration 0017, its
/// parameters in [`RecordCall::values`]' order) → for each decision in order: 1 stored, 0 its
/// agent or mode changed (or its credential was accepted before), -1 its Idempotency-Key's
/// claim is no longer its own.
pub(super) const RECORD_CALL: &str = "SELECT mandate_record($1, $2, $3, $4, $5, $6, $7, $8,
    $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26,
    $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44,
    $45, $46)";

/// [`RECORD_CALL`] on Citus: `mandate_record_citus` (the Citus step, `citus.sql`), which
/// runs the statements of each shard's decisions on that shard's tables where the shard is
/// on the worker running the call, and `mandate_record`'s, routed by Citus, elsewhere.
pub(super) const RECORD_CALL_CITUS: &str = "SELECT mandate_record_citus($1, $2, $3, $4, $5,
    $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24,
    $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42,
    $43, $44, $45, $46)";

/// The owned values of the review a decision opens, with its event.
struct ReviewValues {
    id: String,
    status: &'static str,
    created_ms: i64,
    expires_ms: i64,
    event: String,
    data: String,
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

/// A decision's values, owned (the group writer sends many at once).
pub(crate) struct RecordStatement {
    seq: i64,
    version: i64,
    org: String,
    mode: &'static str,
    params: Params,
    review: Option<ReviewValues>,
    idempotency: Option<IdempotencyValues>,
    accepts: Option<String>,
}

impl RecordStatement {
    /// When the decision was made (unix ms).
    pub(crate) fn created_ms(&self) -> i64 {
        self.params.created_ms()
    }

    /// Its organization.
    pub(crate) fn org(&self) -> &str {
        &self.org
    }

    /// The values that store `new`; `None` when its hint names no agent.
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
            mode: decision.mode.as_str(),
            params: Params::of(org, *env, decision),
            review: review.as_ref().map(|(review, data)| ReviewValues {
                id: review.id.as_str().to_owned(),
                status: review.status.as_str(),
                created_ms: ms(review.created_at),
                expires_ms: ms(review.expires_at),
                event: EventId::from_random(ordered16(from_ms(decision.created_ms)))
                    .as_str()
                    .to_owned(),
                data: data.clone(),
            }),
            idempotency: idempotency.as_ref().map(|r| IdempotencyValues {
                key_hash: r.key_hash.to_vec(),
                idem_key: r.idem_key.clone(),
                status: i32::from(r.status),
                body: r.body.0.clone(),
                request_id: r.request_id.clone(),
                claim: r.claim.to_vec(),
            }),
            accepts: accepts.clone(),
        })
    }

    /// What `mandate_record` answered for it (1 stored, 0 changed, -1 claim lost) means.
    pub(crate) fn outcome(&self, code: i32) -> Outcome {
        match code {
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

/// The organizations of a group, each once in the group's order, and for each the month of
/// its latest decision (`clock::month_index`) to mark with the first seq the group gives
/// it, unless it is known to be marked (`None`).
pub(super) struct GroupOrgs {
    pub(super) orgs: Vec<String>,
    months: Vec<Option<i64>>,
}

impl GroupOrgs {
    /// The organizations of `present`, a group's decisions, each organization's together;
    /// the months `marked` says are marked already are not marked again.
    pub(super) fn of(present: &[&RecordStatement], marked: &MarkedMonths) -> Self {
        let mut group = Self {
            orgs: Vec::new(),
            months: Vec::new(),
        };
        for statement in present {
            let month = mandate_storage::clock::month_index(statement.created_ms());
            if group.orgs.last().map(String::as_str) != Some(statement.org()) {
                group.orgs.push(statement.org.clone());
                group.months.push(Some(month));
            }
            let last = group.orgs.len() - 1;
            group.months[last] = group.months[last].max(Some(month));
        }
        for (org, month) in group.orgs.iter().zip(group.months.iter_mut()) {
            if month.is_some_and(|m| marked.has(org, m)) {
                *month = None;
            }
        }
        group
    }

    /// Notes, once the group is committed, the months it marked (or found marked) for the
    /// organizations that stored a decision (`stored`): one that stored none marked nothing.
    pub(super) fn marked(&self, marked: &MarkedMonths, stored: impl Fn(&str) -> bool) {
        for (org, month) in self.orgs.iter().zip(&self.months) {
            if let Some(month) = month
                && stored(org)
            {
                marked.note(org, *month);
            }
        }
    }
}

/// The months a writer knows to be marked in `decision_months`, by organization: a mark is
/// never removed, and the first group to name a month holds the lowest seqs of any that
/// names it, so a later group need not try to mark it again (one statement less an
/// organization a group). At most [`MarkedMonths::MOST`] are kept; past it they are
/// forgotten (and marked again, which does nothing).
#[derive(Debug, Default)]
pub(super) struct MarkedMonths(std::sync::Mutex<std::collections::HashSet<(String, i64)>>);

impl MarkedMonths {
    /// The most (organization, month) pairs kept.
    const MOST: usize = 100_000;

    fn has(&self, org: &str, month: i64) -> bool {
        self.0
            .lock()
            .map(|known| known.contains(&(org.to_owned(), month)))
            .unwrap_or(false)
    }

    fn note(&self, org: &str, month: i64) {
        if let Ok(mut known) = self.0.lock() {
            if known.len() >= Self::MOST {
                known.clear();
            }
            known.insert((org.to_owned(), month));
        }
    }
}

/// The values of [`RECORD_CALL`]: the group's organizations, then each decision's values,
/// one array a column, in the group's order.
pub(super) struct RecordCall<'a> {
    first: &'a str,
    unchecked: bool,
    at_once: bool,
    orgs: &'a [String],
    months: &'a [Option<i64>],
    agent_seq: Vec<i64>,
    version: Vec<i64>,
    mode: Vec<&'a str>,
    rows: RowArrays<'a>,
    key_hash: Vec<Option<&'a [u8]>>,
    key: Vec<Option<&'a str>>,
    claim: Vec<Option<&'a [u8]>>,
    status: Vec<Option<i32>>,
    body: Vec<Option<&'a [u8]>>,
    request_id: Vec<Option<&'a str>>,
    credential: Vec<Option<&'a str>>,
    review_id: Vec<Option<&'a str>>,
    review_status: Vec<Option<&'a str>>,
    review_created: Vec<Option<i64>>,
    review_expires: Vec<Option<i64>>,
    event: Vec<Option<&'a str>>,
    data: Vec<Option<&'a str>>,
}

impl<'a> RecordCall<'a> {
    /// The call that stores `present` (in the group's order), whose organizations are
    /// `orgs`; `at_once`: with a statement for each kind of write of the whole group
    /// (plain PostgreSQL), not one a decision or organization (Citus).
    pub(super) fn of(present: &[&'a RecordStatement], orgs: &'a GroupOrgs, at_once: bool) -> Self {
        let n = present.len();
        let mut call = Self {
            first: orgs.orgs.first().map_or("", String::as_str),
            unchecked: planted_unchecked_version(),
            at_once,
            orgs: &orgs.orgs,
            months: &orgs.months,
            agent_seq: Vec::with_capacity(n),
            version: Vec::with_capacity(n),
            mode: Vec::with_capacity(n),
            rows: RowArrays::with_capacity(n),
            key_hash: Vec::with_capacity(n),
            key: Vec::with_capacity(n),
            claim: Vec::with_capacity(n),
            status: Vec::with_capacity(n),
            body: Vec::with_capacity(n),
            request_id: Vec::with_capacity(n),
            credential: Vec::with_capacity(n),
            review_id: Vec::with_capacity(n),
            review_status: Vec::with_capacity(n),
            review_created: Vec::with_capacity(n),
            review_expires: Vec::with_capacity(n),
            event: Vec::with_capacity(n),
            data: Vec::with_capacity(n),
        };
        for statement in present {
            call.push(statement);
        }
        call
    }

    fn push(&mut self, s: &'a RecordStatement) {
        self.agent_seq.push(s.seq);
        self.version.push(s.version);
        self.mode.push(s.mode);
        self.rows.push(&s.params);
        let i = s.idempotency.as_ref();
        self.key_hash.push(i.map(|i| i.key_hash.as_slice()));
        self.key.push(i.map(|i| i.idem_key.as_str()));
        self.claim.push(i.map(|i| i.claim.as_slice()));
        self.status.push(i.map(|i| i.status));
        self.body.push(i.map(|i| i.body.as_slice()));
        self.request_id.push(i.map(|i| i.request_id.as_str()));
        self.credential.push(s.accepts.as_deref());
        let r = s.review.as_ref();
        self.review_id.push(r.map(|r| r.id.as_str()));
        self.review_status.push(r.map(|r| r.status));
        self.review_created.push(r.map(|r| r.created_ms));
        self.review_expires.push(r.map(|r| r.expires_ms));
        self.event.push(r.map(|r| r.event.as_str()));
        self.data.push(r.map(|r| r.data.as_str()));
    }

    /// The values, in `mandate_record`'s order.
    pub(super) fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![
            &self.first,
            &self.unchecked,
            &self.at_once,
            &self.orgs,
            &self.months,
        ];
        // d_org, d_env, then the agent's key, the version read and the mode, then the
        // rest of the row.
        let [org, env, rest @ ..] = self.rows.values();
        values.extend([org, env, &self.agent_seq, &self.version, &self.mode]);
        values.extend(rest);
        values.extend([
            &self.key_hash as &(dyn ToSql + Sync),
            &self.key,
            &self.claim,
            &self.status,
            &self.body,
            &self.request_id,
            &self.credential,
            &self.review_id,
            &self.review_status,
            &self.review_created,
            &self.review_expires,
            &self.event,
            &self.data,
        ]);
        values
    }
}

#[cfg(test)]
mod sql_tests {
    use super::{RECORD_CALL, RECORD_CALL_CITUS};

    /// The record calls number their 46 parameters without a gap, as `mandate_record` and
    /// `mandate_record_citus` take them.
    #[test]
    fn the_record_calls_number_their_parameters_from_one_without_gaps() {
        for call in [RECORD_CALL, RECORD_CALL_CITUS] {
            for n in 1..=46 {
                let (comma, end) = (format!("${n},"), format!("${n})"));
                assert!(call.contains(&comma) || call.contains(&end), "${n}");
            }
            assert!(!call.contains("$47"));
        }
    }
}
