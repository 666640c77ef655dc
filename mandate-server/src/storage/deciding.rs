//! The decision path's side of the storage boundary: what the decision service reads to
//! judge an agent (its current mandate and recent history) and the transactions that
//! record a decision, each with everything it implies (the review it opens, its event, the
//! idempotency record of the request that made it).

use std::sync::Arc;

use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, ReviewId};
use mandate_core::mandate::Mandate;
use mandate_core::policy::Mode;
use mandate_core::review::Review;

use super::StoreFuture;
use super::idempotency::IdempotencyRecord;
use crate::model::Env;
use crate::model::decision::Decision;

/// What an engine told the decision service about an agent, kept in the agent's state so
/// that storing its next decision skips two lookups (random pages of large indexes with many agents): the agent's
/// integer key, and that its row of the months it decided in for a month is already stored.
/// An engine shared by several processes also puts the agent's version here: the decision
/// is stored only if it is still the agent's (see [`crate::storage::StorageError::Conflict`]).
/// Opaque above storage: the rest of the server keeps it and hands it back, and only the
/// engine that made it reads its fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentHint {
    /// The engine's key of the agent (SQLite and PostgreSQL: `agents.seq`).
    pub(in crate::storage) seq: Option<i64>,
    /// A month (a UTC month counted from year 0) for which the agent's `decision_months` row is known
    /// to be committed.
    pub(in crate::storage) month_marked: Option<i64>,
    /// The version of the agent the state was read at (PostgreSQL; always 0 on SQLite,
    /// whose one process serializes an agent's changes itself).
    pub(in crate::storage) version: i64,
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
    if mandate.terms.limits.counts_lifetime() {
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

/// A review resolved (approved with its fresh decision, denied, or expired).
#[derive(Debug, Clone)]
pub struct Resolution {
    /// The organization.
    pub org: Arc<str>,
    /// The environment.
    pub env: Env,
    /// The review in its resolved state.
    pub review: Review,
    /// On an approval, the fresh decision.
    pub decision: Option<Decision>,
    /// When, unix ms (the event's time).
    pub at_ms: i64,
    /// On an approval, the hint of the agent's state the fresh decision was made on.
    pub hint: AgentHint,
}

/// The planted bug of the history checker's reviews (tests/history), in debug builds only:
/// with `MANDATE_TEST_PLANT_UNCHECKED_RESOLUTION` set, a resolution is written whether or
/// not its review is still pending, so that approvers and deniers racing for one review
/// all resolve it, and the checker must say so.
pub fn planted_unchecked_resolution() -> bool {
    cfg!(debug_assertions) && std::env::var_os("MANDATE_TEST_PLANT_UNCHECKED_RESOLUTION").is_some()
}

/// The condition a resolution's write puts on the review's row: still pending (none under
/// the planted bug of [`planted_unchecked_resolution`]).
pub fn resolution_guard() -> &'static str {
    if planted_unchecked_resolution() {
        ""
    } else {
        " AND status = 'pending'"
    }
}

/// What the decision service needs from storage.
pub trait DecidingStore: Send + Sync {
    /// What `agent`'s next decision depends on: its current mandate, its `limit` latest
    /// request times, and its current mandate's allows since `allowed_since_ms`; read in
    /// one snapshot.
    fn agent_record(
        &self,
        org: Arc<str>,
        env: Env,
        agent: AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> StoreFuture<'_, AgentRecord>;

    /// Stores a decision, the review it opens with its event, and its idempotency record,
    /// in one transaction; returns the agent's hint for its next decision, or the decision
    /// back ([`Recorded::Changed`], nothing stored) when the agent or its environment's
    /// mode changed since the hint was read, or [`Recorded::ClaimLost`] (nothing stored)
    /// when the idempotency record's claim is no longer its own: checked in the same
    /// transaction, so a decision is never stored beside another outcome of its key.
    fn record_decision(&self, new: NewDecision) -> StoreFuture<'_, Recorded>;

    /// Marks a pending review resolved, with its `decision.resolved` event and, on an
    /// approval, its fresh decision, in one transaction. `None` (nothing stored) if the
    /// review was no longer pending; otherwise the agent's hint for its next decision. An
    /// approval is refused like a decision ([`crate::storage::StorageError::Conflict`])
    /// when the agent changed since `resolution.hint` was read.
    fn resolve_review(&self, resolution: Resolution) -> StoreFuture<'_, Option<AgentHint>>;

    /// Whether a decision of this organization and environment accepted the single-use
    /// credential `id`.
    fn credential_accepted(&self, org: Arc<str>, env: Env, id: String) -> StoreFuture<'_, bool>;

    /// A review of this organization and environment, with its agent.
    fn review(
        &self,
        org: Arc<str>,
        env: Env,
        id: ReviewId,
    ) -> StoreFuture<'_, Option<(Review, AgentId)>>;
}
