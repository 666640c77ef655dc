//! Reviews: one per `review` verdict, resolved at most once.

use mandate_core::id::{DecisionId, ReviewId};
use mandate_core::review::{Review, ReviewStatus};
use rusqlite::{Connection, OptionalExtension, params};

use super::StorageError;
use crate::clock::{from_ms, ms};
use crate::model::Env;

/// Stores a newly opened review.
pub fn insert(
    tx: &Connection,
    org_id: &str,
    env: Env,
    agent: &str,
    review: &Review,
) -> rusqlite::Result<()> {
    // Prepared once per connection: every decision that opens a review runs it (a fresh
    // preparation costs more than the insert itself).
    tx.prepare_cached(
        "INSERT INTO reviews (id, org_id, env, decision_id, agent_id, status, created_ms, expires_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
            review.id.as_str(),
            org_id,
            env,
            review.decision.as_str(),
            agent,
            review.status.as_str(),
            ms(review.created_at),
            ms(review.expires_at),
        ],
    )?;
    Ok(())
}

fn status_from(text: &str) -> Result<ReviewStatus, StorageError> {
    match text {
        "pending" => Ok(ReviewStatus::Pending),
        "approved" => Ok(ReviewStatus::Approved),
        "denied" => Ok(ReviewStatus::Denied),
        "expired" => Ok(ReviewStatus::Expired),
        other => Err(StorageError::Corrupt(format!("review status {other:?}"))),
    }
}

/// A review of this organization and environment, with the agent it concerns.
pub fn get(
    conn: &Connection,
    org_id: &str,
    env: Env,
    id: &ReviewId,
) -> Result<Option<(Review, String)>, StorageError> {
    let id = id.as_str();
    let raw = conn
        .query_row(
            "SELECT id, decision_id, status, created_ms, expires_ms, resolved_ms, resolution, reason, agent_id
             FROM reviews WHERE org_id = ?1 AND env = ?2 AND id = ?3",
            params![org_id, env, id],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, Option<String>>(7)?,
                    r.get::<_, String>(8)?,
                ))
            },
        )
        .optional()?;
    let Some((id, decision, status, created, expires, resolved, resolution, reason, agent)) = raw
    else {
        return Ok(None);
    };
    let bad = |what: &str| StorageError::Corrupt(format!("review {what}"));
    Ok(Some((
        Review {
            id: ReviewId::parse(&id).map_err(|_| bad("id"))?,
            decision: DecisionId::parse(&decision).map_err(|_| bad("decision"))?,
            status: status_from(&status)?,
            created_at: from_ms(created),
            expires_at: from_ms(expires),
            resolved_at: resolved.map(from_ms),
            resolution: resolution
                .as_deref()
                .map(DecisionId::parse)
                .transpose()
                .map_err(|_| bad("resolution"))?,
            reason,
        },
        agent,
    )))
}

/// Writes a resolution, only if the review is still pending. Returns whether it was.
pub fn resolve(tx: &Connection, review: &Review) -> rusqlite::Result<bool> {
    Ok(tx
        .prepare_cached(&format!(
            "UPDATE reviews SET status = ?2, resolved_ms = ?3, resolution = ?4, reason = ?5
             WHERE id = ?1{}",
            crate::storage::deciding::resolution_guard()
        ))?
        .execute(params![
            review.id.as_str(),
            review.status.as_str(),
            review.resolved_at.map(ms),
            review.resolution.as_ref().map(DecisionId::as_str),
            review.reason,
        ])?
        == 1)
}
