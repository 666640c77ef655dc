//! Reviews: one per `review` verdict, resolved at most once, whichever process resolves it.

use deadpool_postgres::GenericClient;
use mandate_core::id::{DecisionId, ReviewId};
use mandate_core::review::{Review, ReviewStatus};
use tokio_postgres::Row;

use super::Result;
use crate::clock::{from_ms, ms};
use crate::model::Env;
use crate::storage::StorageError;

fn status_from(text: &str) -> Result<ReviewStatus> {
    match text {
        "pending" => Ok(ReviewStatus::Pending),
        "approved" => Ok(ReviewStatus::Approved),
        "denied" => Ok(ReviewStatus::Denied),
        "expired" => Ok(ReviewStatus::Expired),
        other => Err(StorageError::Corrupt(format!("review status {other:?}"))),
    }
}

const COLUMNS: &str =
    "id, decision_id, status, created_ms, expires_ms, resolved_ms, resolution, reason, agent_id";

fn decode(r: &Row) -> Result<(Review, String)> {
    let bad = |what: &str| StorageError::Corrupt(format!("review {what}"));
    let resolution: Option<&str> = r.get(6);
    Ok((
        Review {
            id: ReviewId::parse(r.get(0)).map_err(|_| bad("id"))?,
            decision: DecisionId::parse(r.get(1)).map_err(|_| bad("decision"))?,
            status: status_from(r.get(2))?,
            created_at: from_ms(r.get(3)),
            expires_at: from_ms(r.get(4)),
            resolved_at: r.get::<_, Option<i64>>(5).map(from_ms),
            resolution: resolution
                .map(DecisionId::parse)
                .transpose()
                .map_err(|_| bad("resolution"))?,
            reason: r.get(7),
        },
        r.get(8),
    ))
}

/// A review of this organization and environment, with the agent it concerns. With
/// `lock`, its row is locked for the caller's transaction, or `None` returned if another
/// transaction holds it (`SKIP LOCKED`).
pub async fn get(
    c: &impl GenericClient,
    org_id: &str,
    env: Env,
    id: &ReviewId,
    lock: bool,
) -> Result<Option<(Review, String)>> {
    let lock = if lock { " FOR UPDATE SKIP LOCKED" } else { "" };
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM reviews WHERE org_id = $1 AND env = $2 AND id = $3{lock}"
        ))
        .await?;
    c.query_opt(&stmt, &[&org_id, &env.as_str(), &id.as_str()])
        .await?
        .as_ref()
        .map(decode)
        .transpose()
}

/// Writes a resolution, only if the review is still pending. Returns whether it was: of
/// two processes resolving one review at once, the second waits on the row and finds it
/// resolved.
pub async fn resolve(c: &impl GenericClient, review: &Review) -> Result<bool> {
    let stmt = c
        .prepare_cached(&format!(
            "UPDATE reviews SET status = $2, resolved_ms = $3, resolution = $4, reason = $5
             WHERE id = $1{}",
            crate::storage::deciding::resolution_guard()
        ))
        .await?;
    Ok(c.execute(
        &stmt,
        &[
            &review.id.as_str(),
            &review.status.as_str(),
            &review.resolved_at.map(ms),
            &review.resolution.as_ref().map(DecisionId::as_str),
            &review.reason,
        ],
    )
    .await?
        == 1)
}

/// The columns of a review's insert, `$1..$8`: id, org, env, decision, agent, status,
/// created, expires.
pub(crate) const INSERT_COLUMNS: &str =
    "id, org_id, env, decision_id, agent_id, status, created_ms, expires_ms";
