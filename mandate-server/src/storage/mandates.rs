//! Mandates at the boundary.

use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::{Mandate, MandateStatus};
use time::OffsetDateTime;

use super::StoreFuture;
use crate::model::Env;

/// Filters of `GET /v1/mandates`.
#[derive(Debug, Default, Clone)]
pub struct Filters {
    /// Only this agent's mandates.
    pub agent: Option<String>,
    /// Only this status (as read at `today`).
    pub status: Option<MandateStatus>,
}

/// What revoking a mandate came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Revocation {
    /// It was active and is revoked now (its `mandate.revoked` event is written).
    Revoked(Box<Mandate>),
    /// No such mandate in this organization and environment.
    Missing,
    /// It is not active (its status now); nothing is written.
    NotActive(MandateStatus),
}

/// Mandates.
pub trait MandateStore {
    /// Stores a mandate; the agent's previous active one is superseded.
    fn insert_mandate(&self, org_id: &str, env: Env, mandate: &Mandate) -> StoreFuture<'_, ()>;

    /// One mandate of this organization and environment.
    fn mandate(&self, org_id: &str, env: Env, id: &MandateId) -> StoreFuture<'_, Option<Mandate>>;

    /// A page of mandates, newest first, strictly before seq `before`; statuses as read on
    /// `today` (`YYYY-MM-DD`).
    fn mandates_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        today: &str,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Mandate)>>;

    /// The amounts and times (unix ms) of the `allow` decisions taken under `mandate` for
    /// `agent` since `since_ms`, in order: what its spend to date is summed from, as the
    /// engine sums it.
    fn mandate_allows_since(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> StoreFuture<'_, Vec<(Amount, i64)>>;

    /// Revokes an active mandate at `now` and appends its `mandate.revoked` event, in one
    /// transaction.
    fn revoke_mandate(
        &self,
        org_id: &str,
        env: Env,
        id: &MandateId,
        now: OffsetDateTime,
    ) -> StoreFuture<'_, Revocation>;
}
