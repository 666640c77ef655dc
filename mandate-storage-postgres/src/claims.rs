//! Seqs claimed ahead of a group's transaction, and the watermark readers stop at
//! (docs/exports.md, "A log that never skips"), per organization: the decision log's seqs,
//! its claims and its watermark are the organization's (migration 0011), so no decision
//! touches a row another organization's decisions touch.
//!
//! A writer claims a block of each of its group's organizations' seqs in a short
//! transaction of its own (`mandate_claim`, migration 0015): the organization's counter row
//! `org_counters('decisions')` moves, and the block's first seq is written in the writer's
//! row of `decision_claims` for that organization, both in one commit. That commit does not
//! wait for its WAL flush (`synchronous_commit` off for it alone): the counter row is then
//! held for microseconds, not for a flush, and groups of every writer and process commit
//! side by side. Nothing is lost by not waiting: the group's own commit waits for its
//! flush, which covers the claim written before it; a claim lost in a crash belonged to a
//! group that never committed.
//!
//! The group's transaction inserts its decisions with the claimed seqs and clears the claim
//! in the same commit, so a reader sees the claim open or the decisions committed, never
//! neither. A reader reads only up to the watermark: one below the organization's lowest
//! open claim, or its counter when none is open. Every seq at or below it is settled: its
//! decision is committed and visible, or will never be (a group rolled back, a gap). A
//! later claim always lies above the counter, so the watermark never goes down and nothing
//! settles behind a reader.
//!
//! The events of a group's reviews take their seqs the same way, in the same call: the
//! claim's transaction moves the organization's events counter too, and the writer's row
//! holds the first of them (`first_event`) until the group settles. The group's own
//! transaction then touches no counter row, so the groups of every process commit side by
//! side even when each opens a review; readers of the events stop below the lowest open
//! claim ([`EVENTS_BELOW_CLAIMS`]). An event appended outside the groups (a review
//! resolved, a mandate revoked) still takes the counter row and holds it to its commit, so
//! a claim made meanwhile waits for that commit and lies above it.

use super::Result;

/// Clears writer `$2`'s claim of organization `$1`, whichever block it holds: after a
/// group failed (a writer has one group of an organization in flight at a time).
pub const CLEAR: &str = "UPDATE decision_claims SET first_seq = NULL, first_event = NULL
    WHERE org_id = $1 AND writer = $2 AND (first_seq IS NOT NULL OR first_event IS NOT NULL)";

/// After a group failed: clears the writer's claim of `org` ([`CLEAR`]), so that readers
/// need not wait for it to be swept.
pub(super) async fn clear(c: &tokio_postgres::Client, org: &str, writer: &str) {
    let _ = c.execute(CLEAR, &[&org, &writer]).await;
}

/// Sweeps organization `$1`'s stale claims, before a read that stops below the open ones.
/// A claim open 5 seconds is taken to be left by a process that died (or by a group whose
/// connection broke before it could settle), and is swept, so that readers go on. A live
/// group's claim is open for the length of its transaction, milliseconds; one still running
/// after this long fails to store its decisions (`mandate_store` finds its claim gone) and
/// they are stored again alone: sweeping early costs time, never a decision. Short, because readers
/// see no new decision while a dead claim stands. A writer's row with no claim open holds
/// readers up in nothing and stays, so that a live writer need not open it again before
/// each claim; one idle a day (its process gone, most likely) is removed.
pub const SWEEP: &str = "DELETE FROM decision_claims
    WHERE org_id = $1 AND claimed_at < now() - INTERVAL '5 seconds'
      AND (first_seq IS NOT NULL OR first_event IS NOT NULL
           OR claimed_at < now() - INTERVAL '1 day')";

/// The condition that keeps a read of organization `$1`'s events below its lowest open
/// claim of event seqs: every event at or below it that will ever be committed is visible.
/// Without an open claim, every event visible is settled (those appended outside the
/// groups commit in seq order, their counter row held to the commit).
pub const EVENTS_BELOW_CLAIMS: &str = "seq < COALESCE(
        (SELECT MIN(first_event) FROM decision_claims
         WHERE org_id = $1 AND first_event IS NOT NULL),
        9223372036854775807)";

/// The organization's watermark: the highest seq at or below which every decision of it
/// that will ever be committed is visible (0 for an empty log). Sweeps its stale claims
/// first.
pub async fn watermark(c: &tokio_postgres::Client, org: &str) -> Result<i64> {
    c.execute(SWEEP, &[&org]).await.map_err(crate::pg_error)?;
    // One statement, so one snapshot: the claims and the counter as of the same moment.
    let row = c
        .query_one(
            "SELECT COALESCE(
                (SELECT MIN(first_seq) - 1 FROM decision_claims
                 WHERE org_id = $1 AND first_seq IS NOT NULL),
                (SELECT value FROM org_counters WHERE org_id = $1 AND name = 'decisions'),
                0)::BIGINT",
            &[&org],
        )
        .await
        .map_err(crate::pg_error)?;
    Ok(row.get(0))
}
