//! The plain records the decision path hands between the decision service, the use cases
//! and the engines' transactions: what an agent's next decision depends on, a decision to
//! store with what it implies, the log's filters, and the idempotency record stored with a
//! decision. A leaf of the boundary (it imports none of its files): each resource's file
//! and `engine.rs` take them from here, and the resource's file says them again
//! (`deciding::AgentHint`, `decisions::Filters`, `idempotency::IdempotencyRecord`, ...).

use std::sync::Arc;

use mandate_core::{Amount, Mandate, Mode, Verdict};
use mandate_protocol::{review::Review, review::ReviewStatus};

use crate::model::Env;
use crate::model::decision::Decision;

/// What an engine told the decision service about an agent, kept in the agent's state so
/// that storing its next decision skips two lookups (random pages of large indexes with many agents): the agent's
/// integer key, and that its row of the months it decided in for a month is already stored.
/// An engine shared by several processes also puts the agent's version here: the decision
/// is stored only if it is still the agent's (see [`crate::StorageError::Conflict`]).
/// Opaque above storage: the rest of the server keeps it and hands it back, and only the
/// engine that made it reads its fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentHint {
    /// The engine's key of the agent (SQLite and PostgreSQL: `agents.seq`).
    pub seq: Option<i64>,
    /// A month (a UTC month counted from year 0) for which the agent's `decision_months` row is known
    /// to be committed.
    pub month_marked: Option<i64>,
    /// The version of the agent the state was read at (PostgreSQL; always 0 on SQLite,
    /// whose one process serializes an agent's changes itself).
    pub version: i64,
}

/// What is stored about one agent that its next decision depends on.
#[derive(Debug, Clone, Default)]
pub struct AgentRecord {
    /// The agent's current mandate (its newest, whatever its status).
    pub mandate: Option<Mandate>,
    /// When the agent's latest requests were made (unix ms), newest first, at most `limit`.
    pub recent_requests: Vec<i64>,
    /// The current mandate's effective allows since the asked instant, or since the
    /// mandate's creation when a limit of it counts over its life ([`allows_from`]):
    /// amount and unix ms, oldest first.
    pub allowed_since: Vec<(Amount, i64)>,
    /// What storing the agent's next decision need not look up again.
    pub hint: AgentHint,
    /// The enforcement mode of the agent's environment, read with the rest by an engine
    /// that checks it when storing (PostgreSQL); `None` from an engine that does not read
    /// it (SQLite: the mode cached in memory is the one in force).
    pub mode: Option<Mode>,
}

/// From when (unix ms) an engine reads `mandate`'s allows for a decision asked with
/// `allowed_since_ms` (the start of the current month or week): from the mandate's
/// creation when a limit counts over its whole life (`limits.total`, `limits.count.total`),
/// so that the lifetime sums are rebuilt exactly from stored decisions; otherwise as asked.
pub fn allows_from(mandate: &Mandate, allowed_since_ms: i64) -> i64 {
    if mandate_protocol::mandate::counts_lifetime(&mandate.terms.limits) {
        let created_ms =
            i64::try_from(mandate.created_at.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        allowed_since_ms.min(created_ms)
    } else {
        allowed_since_ms
    }
}

/// A decision made in answer to an agent's request, with what it implies.
#[derive(Debug, Clone)]
pub struct NewDecision {
    /// The organization.
    pub org: Arc<str>,
    /// The environment.
    pub env: Env,
    /// The decision.
    pub decision: Decision,
    /// The review it opens, with the `decision.review_pending` event's data (the decision
    /// object's JSON).
    pub review: Option<(Review, String)>,
    /// The answer to keep under the request's Idempotency-Key.
    pub idempotency: Option<IdempotencyRecord>,
    /// The agent's hint from its cached state.
    pub hint: AgentHint,
    /// The single-use credential this decision accepts (its id), if any: stored with it,
    /// and the decision is stored only if no decision accepted the credential before
    /// (otherwise [`Recorded::Changed`]: decided again, it is `deny_replay`).
    pub accepts: Option<String>,
}

/// What storing a decision came to.
#[derive(Debug)]
pub enum Recorded {
    /// Stored: the agent's hint for its next decision.
    Stored(AgentHint),
    /// Not stored: the agent (or its environment's mode) changed since its hint was read,
    /// because another server process decided first. The decision is given back, to be
    /// made again on fresh state. Never from an engine only one process uses.
    Changed(Box<NewDecision>),
    /// Not stored: the request's claim on its Idempotency-Key is no longer its own (it ran
    /// out while the request stalled, and a retry took it over). Deciding again would not
    /// help: the key's outcome is the other request's.
    ClaimLost,
}

/// Filters of `GET /v1/decisions` (and the export).
#[derive(Debug, Default, Clone)]
pub struct Filters {
    /// Only this agent's decisions.
    pub agent: Option<String>,
    /// Only this returned verdict.
    pub verdict: Option<Verdict>,
    /// Only this policy verdict.
    pub policy_verdict: Option<Verdict>,
    /// Only decisions that opened a review now in this status.
    pub review_status: Option<ReviewStatus>,
}

/// A response body sealed with a key derived from the caller's API key and the
/// Idempotency-Key (by the HTTP layer): the only form the store keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed(pub Vec<u8>);

/// The token of one request's claim on its Idempotency-Key: random, so that a claim is
/// known as this request's own and no other's (another request may take a claim over once
/// it runs out, [`CLAIM_MS`](crate::idempotency::CLAIM_MS)). Whatever a request stores under its key (its outcome, or its
/// decision with its outcome) is stored only while the claim still carries its token, in
/// the transaction that stores it; its release removes only a claim with its token.
pub type ClaimToken = [u8; 16];

/// A completed request's record: its sealed response, under (key hash, Idempotency-Key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The organization of the caller's API key.
    pub org_id: Arc<str>,
    /// SHA-256 of the caller's API key.
    pub key_hash: [u8; 32],
    /// The Idempotency-Key.
    pub idem_key: String,
    /// The response's HTTP status.
    pub status: u16,
    /// The response's body, sealed.
    pub body: Sealed,
    /// The id of the request that claimed the key, replayed with its response.
    pub request_id: String,
    /// The claim it completes: stored only while the claim is still this one.
    pub claim: ClaimToken,
}
