//! The decision path's side of the storage boundary: what the decision service reads to
//! judge an agent (its current mandate and recent history) and the transactions that
//! record a decision, each with everything it implies (the review it opens, its event, the
//! idempotency record of the request that made it).

use std::sync::Arc;

use mandate_core::{AgentId, DecisionId, MandateId};
use mandate_protocol::{history::SpendToDate, id::ReviewId, review::Review, review::ReviewStatus};

use super::engine::{Access, Columns, Engine, Lock, Result, Scope, Tx, first, id_of};
use super::idempotency;
pub use super::records::{AgentHint, AgentRecord, NewDecision, Recorded, allows_from};
use super::statements::ReviewSql;
use super::{StorageError, StoreFuture, events};
use crate::clock::{from_ms, ms};
use crate::model::Env;
use crate::model::decision::Decision;

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

/// The planted bug of the history checker's reviews (tests/history), only in a build with
/// the `test-faults` feature (the tests' build): with
/// `MANDATE_TEST_PLANT_UNCHECKED_RESOLUTION` set, a resolution is written whether or not
/// its review is still pending, so that approvers and deniers racing for one review all
/// resolve it, and the checker must say so.
#[cfg(feature = "test-faults")]
pub fn planted_unchecked_resolution() -> bool {
    std::env::var_os("MANDATE_TEST_PLANT_UNCHECKED_RESOLUTION").is_some()
}

/// Without the `test-faults` feature (every build but the tests'), a resolution is only
/// written on a pending review: the switch is not compiled in.
#[cfg(not(feature = "test-faults"))]
pub fn planted_unchecked_resolution() -> bool {
    false
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
    /// approval is refused like a decision ([`crate::StorageError::Conflict`])
    /// when the agent changed since `resolution.hint` was read.
    fn resolve_review(&self, resolution: Resolution) -> StoreFuture<'_, Option<AgentHint>>;

    /// What the AP2 open mandate `mandate` was imported from had spent under the mandates
    /// that carried it before (`storage::ap2`): where the mandate's spend starts. `None`
    /// for a mandate of plain terms or an open mandate's first import.
    fn spent_before(
        &self,
        org: Arc<str>,
        env: Env,
        mandate: MandateId,
    ) -> StoreFuture<'_, Option<SpendToDate>>;

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

fn status_of(text: &str) -> Result<ReviewStatus> {
    ReviewStatus::parse(text)
        .ok_or_else(|| StorageError::Corrupt(format!("review status {text:?}")))
}

/// What the `resolution` column of a review holds once its agent withdrew it: the column
/// names what resolved the review (an approval's fresh decision, `dec_…`), and a withdrawal
/// is resolved by the agent itself. No decision id can be this text.
pub const WITHDRAWN: &str = "withdrawn";

/// The `resolution` column read: the fresh decision of an approval, and whether the agent
/// withdrew the review; `Err` naming the column for anything else.
pub fn resolution_column(text: Option<&str>) -> Result<(Option<DecisionId>, bool)> {
    match text {
        None => Ok((None, false)),
        Some(WITHDRAWN) => Ok((None, true)),
        Some(id) => DecisionId::parse(id)
            .map(|id| (Some(id), false))
            .map_err(|_| StorageError::Corrupt("review resolution".into())),
    }
}

fn read_review(r: &dyn Columns) -> Result<(Review, String)> {
    let bad = |what: &str| StorageError::Corrupt(format!("review {what}"));
    let (resolution, withdrawn) = resolution_column(r.opt_text(6)?.as_deref())?;
    let review = Review {
        id: ReviewId::parse(&r.text(0)?).map_err(|_| bad("id"))?,
        decision: DecisionId::parse(&r.text(1)?).map_err(|_| bad("decision"))?,
        status: status_of(&r.text(2)?)?,
        created_at: from_ms(r.int(3)?),
        expires_at: from_ms(r.int(4)?),
        resolved_at: r.opt_int(5)?.map(from_ms),
        resolution,
        reason: r.opt_text(7)?,
        withdrawn,
    };
    Ok((review, r.text(8)?))
}

/// A review of `scope` with the agent it concerns, held as `lock` says.
pub(super) async fn review<T: Tx>(
    tx: &mut T,
    s: Scope<'_>,
    id: &ReviewId,
    lock: Lock,
) -> Result<Option<(Review, String)>> {
    let params = [s.org.into(), s.env.into(), id.as_str().into()];
    let rows = tx
        .query(ReviewSql::Get { lock }.into(), &params, read_review)
        .await?;
    Ok(first(rows))
}

/// Writes `review`'s resolution, only while it is pending; whether it was.
pub(super) async fn resolve<T: Tx>(tx: &mut T, s: Scope<'_>, review: &Review) -> Result<bool> {
    let params = [
        s.org.into(),
        s.env.into(),
        review.id.as_str().into(),
        review.status.as_str().into(),
        review.resolved_at.map(ms).into(),
        match (&review.resolution, review.withdrawn) {
            (_, true) => Some(WITHDRAWN),
            (resolution, false) => resolution.as_ref().map(DecisionId::as_str),
        }
        .into(),
        review.reason.as_ref().into(),
    ];
    let pending = !planted_unchecked_resolution();
    Ok(tx
        .execute(ReviewSql::Resolve { pending }.into(), &params)
        .await?
        == 1)
}

/// Stores a decision and everything it implies, in the caller's transaction: the engine-
/// neutral way of [`DecidingStore::record_decision`] (PostgreSQL has a statement of its
/// own). In order: the request's claim on its Idempotency-Key (locked; one taken over
/// stores nothing), the agent (another process that changed it first stores nothing),
/// the single-use credential it accepts (accepted before: nothing stored, decided again),
/// then the decision, the review it opens with its event, and its idempotency record.
pub async fn record<T: Tx>(tx: &mut T, new: &NewDecision) -> Result<Recorded> {
    let NewDecision {
        org,
        env,
        decision,
        review,
        idempotency,
        hint,
        accepts,
    } = new;
    let s = Scope::new(org, *env);
    if let Some(record) = idempotency
        && !idempotency::owns(tx, record).await?
    {
        return Ok(Recorded::ClaimLost);
    }
    let Some(hint) = tx.claim_agent(s, *hint, decision.mode).await? else {
        return Ok(Recorded::Changed(Box::new(new.clone())));
    };
    if let Some(id) = accepts {
        let params = [
            s.org.into(),
            s.env.into(),
            id.as_str().into(),
            decision.claims.jti.as_str().into(),
            decision.created_ms.into(),
        ];
        if tx
            .execute(ReviewSql::AcceptCredential.into(), &params)
            .await?
            == 0
        {
            return Ok(Recorded::Changed(Box::new(new.clone())));
        }
    }
    let hint = tx.insert_decision(s, hint, decision).await?;
    if let Some((review, data)) = review {
        let params = [
            s.org.into(),
            s.env.into(),
            review.id.as_str().into(),
            review.decision.as_str().into(),
            decision.claims.request.agent.as_str().into(),
            review.status.as_str().into(),
            ms(review.created_at).into(),
            ms(review.expires_at).into(),
        ];
        tx.execute(ReviewSql::Insert.into(), &params).await?;
        let at = decision.created_ms;
        events::append_json(tx, s, "decision.review_pending", data, at, None).await?;
    }
    if let Some(record) = idempotency {
        idempotency::complete(tx, record).await?;
    }
    Ok(Recorded::Stored(hint))
}

/// Stores a resolution: the review (only while pending), on an approval its fresh decision
/// (only if the agent did not change since), and its event.
async fn store_resolution<T: Tx>(tx: &mut T, r: &Resolution) -> Result<Option<AgentHint>> {
    let s = Scope::new(&r.org, r.env);
    // The review's row first: of two processes resolving it at once, the second waits on
    // it and finds it resolved.
    if !resolve(tx, s, &r.review).await? {
        return Ok(None);
    }
    let hint = match &r.decision {
        None => r.hint,
        Some(decision) => {
            let Some(hint) = tx.claim_agent(s, r.hint, decision.mode).await? else {
                return Err(StorageError::Conflict);
            };
            tx.insert_decision(s, hint, decision).await?
        }
    };
    let data = serde_json::to_value(&r.review)
        .map_err(|e| StorageError::Corrupt(format!("encoding review {}: {e}", r.review.id)))?;
    let event = events::NewEvent {
        event_type: "decision.resolved",
        data,
    };
    events::append(tx, s, &event, r.at_ms).await?;
    Ok(Some(hint))
}

impl<E: Engine> DecidingStore for E {
    fn agent_record(
        &self,
        org: Arc<str>,
        env: Env,
        agent: AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> StoreFuture<'_, AgentRecord> {
        Box::pin(self.run(
            Access::Read,
            (org, env, agent),
            move |tx, (org, env, agent)| {
                Box::pin(tx.agent_record(Scope::new(org, *env), agent, limit, allowed_since_ms))
            },
        ))
    }

    fn record_decision(&self, new: NewDecision) -> StoreFuture<'_, Recorded> {
        Box::pin(self.store_decision(new))
    }

    fn resolve_review(&self, resolution: Resolution) -> StoreFuture<'_, Option<AgentHint>> {
        Box::pin(self.run(Access::Write, resolution, |tx, resolution| {
            Box::pin(store_resolution(tx, resolution))
        }))
    }

    fn spent_before(
        &self,
        org: Arc<str>,
        env: Env,
        mandate: MandateId,
    ) -> StoreFuture<'_, Option<SpendToDate>> {
        Box::pin(self.run(
            Access::Read,
            (org, env, mandate),
            |tx, (org, env, mandate)| {
                Box::pin(super::ap2::spent_before(tx, Scope::new(org, *env), mandate))
            },
        ))
    }

    fn credential_accepted(&self, org: Arc<str>, env: Env, id: String) -> StoreFuture<'_, bool> {
        Box::pin(
            self.run(Access::Read, (org, env, id), |tx, (org, env, id)| {
                Box::pin(async move {
                    let params = [(&**org).into(), (*env).into(), id.into()];
                    let stmt = ReviewSql::CredentialAccepted.into();
                    let rows = tx.query(stmt, &params, |r| r.flag(0)).await?;
                    Ok(first(rows).unwrap_or(false))
                })
            }),
        )
    }

    fn review(
        &self,
        org: Arc<str>,
        env: Env,
        id: ReviewId,
    ) -> StoreFuture<'_, Option<(Review, AgentId)>> {
        Box::pin(
            self.run(Access::Read, (org, env, id), |tx, (org, env, id)| {
                Box::pin(async move {
                    let Some((review, agent)) =
                        review(tx, Scope::new(org, *env), id, Lock::No).await?
                    else {
                        return Ok(None);
                    };
                    Ok(Some((
                        review,
                        id_of(&agent, "review agent", AgentId::parse)?,
                    )))
                })
            }),
        )
    }
}
