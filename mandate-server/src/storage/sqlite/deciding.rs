//! [`DecidingStore`] on SQLite: the agent's record in one read snapshot; each decision, and
//! each resolution, in one transaction of the writer's group commit.

use std::sync::Arc;

use mandate_core::id::{AgentId, ReviewId};
use mandate_core::review::Review;

use super::store::SqliteStore;
use super::{decisions, events, idempotency, mandates, reviews};
use crate::model::Env;
use crate::storage::deciding::{
    AgentHint, AgentRecord, DecidingStore, NewDecision, Recorded, Resolution, allows_from,
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
            let from = allows_from(m, allowed_since_ms);
            decisions::allowed_since(conn, org, env, agent, m.id.as_str(), from)?
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

/// Records that `new`'s decision accepts credential `id`; `false` (nothing written) if a
/// decision accepted it before.
fn accept_credential(
    tx: &rusqlite::Connection,
    new: &NewDecision,
    id: &str,
) -> Result<bool, StorageError> {
    let written = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO accepted_credentials (org_id, env, id, decision_id, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(rusqlite::params![
            &*new.org,
            new.env,
            id,
            new.decision.claims.jti.as_str(),
            new.decision.created_ms
        ])?;
    Ok(written == 1)
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
                    // A credential accepted before (by another agent's decision: this
                    // agent's are serialized by its lock) leaves nothing stored.
                    if let Some(id) = &new.accepts
                        && !accept_credential(tx, &new, id)?
                    {
                        return Ok(Recorded::Changed(Box::new(new.clone())));
                    }
                    let NewDecision {
                        org,
                        env,
                        decision,
                        review,
                        idempotency,
                        hint,
                        accepts: _,
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

    fn credential_accepted(&self, org: Arc<str>, env: Env, id: String) -> StoreFuture<'_, bool> {
        Box::pin(self.db().read(move |conn| {
            let found: bool = conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM accepted_credentials
                                    WHERE org_id = ?1 AND env = ?2 AND id = ?3)",
                )?
                .query_row(rusqlite::params![&*org, env, id], |r| r.get(0))?;
            Ok(found)
        }))
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
