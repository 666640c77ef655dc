//! Mandates at the boundary.

use mandate_core::{AgentId, Amount, Mandate, MandateDraft, MandateId, MandateStatus};
use serde_json::Value;
use time::OffsetDateTime;

use super::agents;
use super::engine::{Access, Columns, Engine, Lock, Result, Scope, Tx, first};
use super::events::{self, NewEvent};
use super::statements::MandateSql;
use super::{StorageError, StoreFuture};
use crate::clock::{from_ms, ms};
use crate::model::Env;

/// The terms as every engine stores them: the API shape without the server-set fields
/// (`id`, `status`, `created_at`), as JSON text with exact numbers, read back through the
/// same `MandateDraft::from_json` that validated them ([`MandateColumns::decode`]).
pub fn terms_json(mandate: &Mandate) -> String {
    let mut value = mandate_protocol::wire::mandate_json(mandate, mandate.created_at);
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
    pub fn decode(self) -> Result<(i64, Mandate)> {
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
pub type DecideRevocation =
    fn(&Mandate, OffsetDateTime) -> std::result::Result<MandateRevoked, MandateStatus>;

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

/// The columns of a mandate's reads, in [`MandateColumns`]' order.
pub const COLUMNS: &str = "seq, id, terms, status, created_ms";

/// A row of [`COLUMNS`].
pub fn read(r: &dyn Columns) -> Result<(i64, Mandate)> {
    MandateColumns {
        seq: r.int(0)?,
        id: r.text(1)?,
        terms: r.text(2)?,
        status: r.text(3)?,
        created_ms: r.int(4)?,
    }
    .decode()
}

/// Stores `mandate`, superseding its agent's active one; its agent changed. The
/// organization's turn to store mandates first ([`MandateSql::Turn`]), then the rows.
pub(super) async fn insert<T: Tx>(tx: &mut T, s: Scope<'_>, mandate: &Mandate) -> Result<()> {
    let agent = mandate.terms.agent.as_str();
    tx.execute(MandateSql::Turn.into(), &[s.org.into()]).await?;
    tx.execute(
        MandateSql::Supersede.into(),
        &[s.org.into(), s.env.into(), agent.into()],
    )
    .await?;
    let params = [
        s.org.into(),
        s.env.into(),
        mandate.id.as_str().into(),
        agent.into(),
        terms_json(mandate).into(),
        mandate_protocol::mandate::format_date(mandate.terms.expires).into(),
        mandate.status.as_str().into(),
        ms(mandate.created_at).into(),
    ];
    tx.execute(MandateSql::Insert.into(), &params).await?;
    agents::changed(tx, s, agent).await
}

/// One mandate of `scope`, held as `lock` says.
pub(super) async fn get<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &str,
    lock: Lock,
) -> Result<Option<Mandate>> {
    let params = [s.org.into(), s.env.into(), id.into()];
    let rows = tx
        .query(MandateSql::Get { lock }.into(), &params, read)
        .await?;
    Ok(first(rows).map(|(_, m)| m))
}

/// Revokes the mandate as `decide` says, with its event; the agent changed.
async fn revoke<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &MandateId,
    now: OffsetDateTime,
    decide: DecideRevocation,
) -> Result<Revocation> {
    let Some(mandate) = get(tx, s, id.as_str(), Lock::Wait).await? else {
        return Ok(Revocation::Missing);
    };
    let change = match decide(&mandate, now) {
        Ok(change) => change,
        Err(status) => return Ok(Revocation::NotActive(status)),
    };
    let params = [
        s.org.into(),
        s.env.into(),
        id.as_str().into(),
        change.at_ms.into(),
    ];
    if tx.execute(MandateSql::Revoke.into(), &params).await? == 0 {
        return Ok(Revocation::NotActive(mandate.status));
    }
    agents::changed(tx, s, mandate.terms.agent.as_str()).await?;
    events::append(tx, s, &change.event, change.at_ms).await?;
    Ok(Revocation::Revoked(Box::new(change.mandate)))
}

impl<E: Engine> MandateStore for E {
    fn insert_mandate(&self, org_id: &str, env: Env, mandate: &Mandate) -> StoreFuture<'_, ()> {
        let args = (org_id.to_owned(), env, mandate.clone());
        Box::pin(self.run(Access::Write, args, |tx, (org, env, mandate)| {
            Box::pin(insert(tx, Scope::new(org, *env), mandate))
        }))
    }

    fn mandate(&self, org_id: &str, env: Env, id: &MandateId) -> StoreFuture<'_, Option<Mandate>> {
        let args = (org_id.to_owned(), env, id.clone());
        Box::pin(self.run(Access::Read, args, |tx, (org, env, id)| {
            Box::pin(get(tx, Scope::new(org, *env), id.as_str(), Lock::No))
        }))
    }

    fn mandates_page(
        &self,
        org_id: &str,
        env: Env,
        filters: &Filters,
        today: &str,
        before: i64,
        limit: i64,
    ) -> StoreFuture<'_, Vec<(i64, Mandate)>> {
        let args = (org_id.to_owned(), env, filters.clone(), today.to_owned());
        Box::pin(
            self.run(Access::Read, args, move |tx, (org, env, filters, today)| {
                Box::pin(async move {
                    let page = MandateSql::Page {
                        agent: filters.agent.is_some(),
                        status: filters.status,
                    };
                    let params = [
                        org.into(),
                        (*env).into(),
                        filters.agent.as_ref().into(),
                        today.into(),
                        before.into(),
                        limit.into(),
                    ];
                    tx.query(page.into(), &params, read).await
                })
            }),
        )
    }

    fn mandate_allows_since(
        &self,
        org_id: &str,
        env: Env,
        agent: &AgentId,
        mandate: &MandateId,
        since_ms: i64,
    ) -> StoreFuture<'_, Vec<(Amount, i64)>> {
        let args = (org_id.to_owned(), env, agent.clone(), mandate.clone());
        Box::pin(
            self.run(Access::Read, args, move |tx, (org, env, agent, mandate)| {
                Box::pin(tx.allowed_since(Scope::new(org, *env), agent, mandate, since_ms))
            }),
        )
    }

    fn revoke_mandate(
        &self,
        org_id: &str,
        env: Env,
        id: &MandateId,
        now: OffsetDateTime,
        decide: DecideRevocation,
    ) -> StoreFuture<'_, Revocation> {
        let args = (org_id.to_owned(), env, id.clone());
        Box::pin(self.run(Access::Write, args, move |tx, (org, env, id)| {
            Box::pin(revoke(tx, Scope::new(org, *env), id, now, decide))
        }))
    }
}
