//! Decisions at the boundary: the reads of the decision log.

use mandate_core::id::{AgentId, DecisionId};
use mandate_core::policy::Verdict;
use mandate_core::review::ReviewStatus;

use super::StoreFuture;
use crate::model::Env;
use crate::model::decision::Decision;

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

/// Reads the decision log.
pub trait DecisionStore {
    /// One decision, optionally only if it belongs to agent `only`.
    fn decision(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<Decision>>;

    /// The seq (place in the log) of one decision, optionally only if it belongs to agent
    /// `only`: where an incremental export resumes.
    fn decision_seq(
        &self,
        org_id: &str,
        env: Env,
        only: Option<&AgentId>,
        id: &DecisionId,
    ) -> StoreFuture<'_, Option<i64>>;

    /// A page of decisions, newest first, strictly before seq `before`.
    fn decisions_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>>;

    /// The log's watermark (0 for an empty log): every decision that will ever be committed
    /// with a seq at or below it is visible now, and the watermark never goes down. Readers
    /// of the log (the list's first page, exports) read only up to it, so a decision
    /// committed later never lands behind what they have read (docs/exports.md, "A log that
    /// never skips"). Where commits are in seq order (SQLite) it is the highest seq; it may
    /// lie below decisions already visible, or above the highest (seqs of groups that
    /// stored nothing), never below a decision that is still to come.
    fn settled_decision_seq(&self) -> StoreFuture<'_, i64>;

    /// Up to `limit` decisions matching `filters`, oldest first, with seq in
    /// (`after`, `upto`]: one page of an export.
    #[allow(clippy::too_many_arguments)]
    fn decisions_export_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Decision)>>;
}
