//! Mandates at the boundary.

use mandate_core::amount::Amount;
use mandate_core::id::{AgentId, MandateId};
use mandate_core::mandate::{Mandate, MandateDraft, MandateStatus};
use serde_json::Value;
use time::OffsetDateTime;

use super::events::NewEvent;
use super::{StorageError, StoreFuture};
use crate::clock::from_ms;
use crate::model::Env;

/// The terms as every engine stores them: the API shape without the server-set fields
/// (`id`, `status`, `created_at`), as JSON text with exact numbers, read back through the
/// same `MandateDraft::from_json` that validated them ([`MandateColumns::decode`]).
pub fn terms_json(mandate: &Mandate) -> String {
    let mut value = mandate.to_json(mandate.created_at);
    if let Value::Object(map) = &mut value {
        for key in ["id", "status", "created_at"] {
            map.remove(key);
        }
    }
    value.to_string()
}

/// A mandate's stored columns, as an engine reads them.
#[derive(Debug, Clone)]
pub struct MandateColumns {
    /// List position.
    pub seq: i64,
    /// `mnd_…`.
    pub id: String,
    /// [`terms_json`].
    pub terms: String,
    /// The stored status.
    pub status: String,
    /// Creation time, unix ms.
    pub created_ms: i64,
}

impl MandateColumns {
    /// The mandate, with its seq; a column that does not read back is a corrupt row.
    pub fn decode(self) -> Result<(i64, Mandate), StorageError> {
        let Self {
            seq,
            id,
            terms,
            status,
            created_ms,
        } = self;
        let corrupt = |what: String| StorageError::Corrupt(format!("mandate {id}: {what}"));
        let value: Value = serde_json::from_str(&terms).map_err(|e| corrupt(e.to_string()))?;
        let terms = MandateDraft::from_json(&value).map_err(|e| corrupt(e.to_string()))?;
        let status = MandateStatus::parse(&status).ok_or_else(|| corrupt(status.clone()))?;
        let parsed = MandateId::parse(&id).map_err(|e| corrupt(e.to_string()))?;
        Ok((
            seq,
            Mandate {
                id: parsed,
                terms,
                status,
                created_at: from_ms(created_ms),
            },
        ))
    }
}

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

/// What revoking a mandate writes: the mandate revoked (stored only while its row is still
/// active), and its event.
#[derive(Debug, Clone, PartialEq)]
pub struct MandateRevoked {
    /// The mandate as revoked.
    pub mandate: Mandate,
    /// Its `mandate.revoked` event.
    pub event: NewEvent,
    /// When, unix ms.
    pub at_ms: i64,
}

/// Decides, on a mandate as read in the engine's transaction, what revoking it at `now`
/// writes, or the status that refuses it.
pub type DecideRevocation = fn(&Mandate, OffsetDateTime) -> Result<MandateRevoked, MandateStatus>;

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

    /// Reads the mandate in a transaction, asks `decide` what revoking it at `now` writes,
    /// and writes that: the mandate revoked, only while its row is still active, and its
    /// event, all or nothing.
    fn revoke_mandate(
        &self,
        org_id: &str,
        env: Env,
        id: &MandateId,
        now: OffsetDateTime,
        decide: DecideRevocation,
    ) -> StoreFuture<'_, Revocation>;
}
