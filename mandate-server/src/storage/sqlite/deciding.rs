//! [`DecidingStore`] on SQLite: the agent's record in one read snapshot; each decision, and
//! each resolution, in one transaction of the writer's group commit.

use std::sync::Arc;

use mandate_core::id::{AgentId, ReviewId};
use mandate_core::review::Review;

use super::store::SqliteStore;
use super::{decisions, events, idempotency, mandates, reviews};
use crate::model::Env;
use crate::storage::deciding::{
    AgentHint, AgentRecord, DecidingStore, NewDecision, Recorded, Resolution,
};
use crate::storage::{StorageError, StoreFuture};

/// Reads what an agent's next decision depends on, in the caller's snapshot.
fn read_agent_record(
    conn: &rusqlite::Connection,
    org: &str,
    env: Env,
    agent: &AgentId,
    limit: usize,
    allowed_since_ms: i64,
) -> Result<AgentRecord, StorageError> {
    let agent = agent.as_str();
    let mandate = mandates::current(conn, org, env, agent)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let recent_requests = decisions::recent_request_times(conn, org, env, agent, limit)?;
    let allowed_since = match &mandate {
        Some(m) => {
            decisions::allowed_since(conn, org, env, agent, m.id.as_str(), allowed_since_ms)?
        }
        None => Vec::new(),
    };
    let hint = decisions::AgentHint {
        seq: decisions::agent_seq(conn, org, env, agent)?,
        month_marked: None,
        version: 0,
    };
    Ok(AgentRecord {
        mandate,
        recent_requests,
        allowed_since,
        hint,
        mode: None,
    })
}

/// Stores a resolution's rows in `tx`; the agent's hint (unchanged: one process, no
/// versions) if the review was still pending.
fn store_resolution(
    tx: &rusqlite::Connection,
    r: &Resolution,
) -> Result<Option<AgentHint>, StorageError> {
    if !reviews::resolve(tx, &r.review)? {
        return Ok(None);
    }
    if let Some(decision) = &r.decision {
        decisions::insert(tx, &r.org, r.env, decision)?;
    }
    let data = serde_json::to_value(&r.review)
        .map_err(|e| StorageError::Corrupt(format!("encoding review {}: {e}", r.review.id)))?;
    events::append(tx, &r.org, r.env, "decision.resolved", &data, r.at_ms)?;
    Ok(Some(r.hint))
}

impl DecidingStore for SqliteStore {
    fn agent_record(
        &self,
        org: Arc<str>,
        env: Env,
        agent: AgentId,
        limit: usize,
        allowed_since_ms: i64,
    ) -> StoreFuture<'_, AgentRecord> {
        Box::pin(self.db().read(move |conn| {
            // One read transaction: one snapshot, and the WAL's read lock taken once
            // rather than by each statement.
            let snapshot = conn.unchecked_transaction()?;
            let record = read_agent_record(&snapshot, &org, env, &agent, limit, allowed_since_ms)?;
            snapshot.finish()?;
            Ok(record)
        }))
    }

    fn record_decision(&self, new: NewDecision) -> StoreFuture<'_, Recorded> {
        Box::pin(
            self.db()
                .write(move |tx| -> Result<Recorded, StorageError> {
                    let NewDecision {
                        org,
                        env,
                        decision,
                        review,
                        idempotency,
                        hint,
                    } = &new;
                    // A request whose claim on its Idempotency-Key was taken over (it ran
                    // out while the request stalled) stores nothing: the key has one
                    // outcome, the other request's.
                    if let Some(record) = idempotency
                        && !idempotency::owns(
                            tx,
                            &record.key_hash,
                            &record.idem_key,
                            &record.claim,
                        )?
                    {
                        return Ok(Recorded::ClaimLost);
                    }
                    decisions::insert_with(tx, org, *env, decision, *hint)?;
                    if let Some((review, data)) = review {
                        let agent = decision.claims.request.agent.as_str();
                        reviews::insert(tx, org, *env, agent, review)?;
                        events::append_json(
                            tx,
                            org,
                            *env,
                            "decision.review_pending",
                            data,
                            decision.created_ms,
                        )?;
                    }
                    if let Some(record) = idempotency {
                        idempotency::complete(tx, record)?;
                    }
                    // Committed with it: the agent's row for this month.
                    Ok(Recorded::Stored(AgentHint {
                        month_marked: Some(decisions::month_index(decision.created_ms)),
                        ..*hint
                    }))
                }),
        )
    }

    fn resolve_review(&self, resolution: Resolution) -> StoreFuture<'_, Option<AgentHint>> {
        Box::pin(self.db().write(move |tx| store_resolution(tx, &resolution)))
    }

    fn review(
        &self,
        org: Arc<str>,
        env: Env,
        id: ReviewId,
    ) -> StoreFuture<'_, Option<(Review, AgentId)>> {
        Box::pin(
            self.db()
                .read(move |conn| match reviews::get(conn, &org, env, &id)? {
                    None => Ok(None),
                    Some((review, agent)) => {
                        let agent = AgentId::parse(&agent)
                            .map_err(|_| StorageError::Corrupt(format!("review {id} agent")))?;
                        Ok(Some((review, agent)))
                    }
                }),
        )
    }
}
