//! The watermark readers stop at (docs/exports.md, "A log that never skips"), per
//! organization: the decision log's seqs, and its watermark, are the organization's
//! (migration 0011), so no decision touches a row another organization's decisions touch.
//!
//! A group of decisions takes its seqs in its own transaction (`mandate_record`, migration
//! 0017): each organization's counter row `org_counters('decisions')` moves by the decisions
//! it stores and stays locked until the group commits, as it does for a decision stored
//! outside the groups (an approved review's). So an organization's decisions commit in the
//! order of their seqs, and every seq at or below the counter's committed value is
//! committed: that value is the watermark. A group rolled back moves no counter and leaves
//! no gap.
//!
//! Processes of the previous release claimed a block of seqs ahead of their group's
//! transaction instead (`mandate_claim`, migration 0015): the counter moved in a short
//! commit of its own, and the block's first seq was written in the writer's row of
//! `decision_claims` until the group settled it. During a rolling upgrade such a claim may
//! be open, so readers still stop below the lowest open claim, and a claim left by a
//! process that died is swept ([`SWEEP`]).
//!
//! The events of a group's reviews take their seqs the same way: the group moves the
//! organization's events counter in its transaction and holds it to the commit, as an event
//! appended outside the groups (a review resolved, a mandate revoked) does, so events too
//! commit in seq order; readers of the events stop below the lowest open claim of a process
//! of the previous release ([`EVENTS_BELOW_CLAIMS`]).

use super::Result;

/// Sweeps organization `$1`'s stale claims (of processes of the previous release), before a
/// read that stops below the open ones. A claim open 5 seconds is taken to be left by a
/// process that died (or by a group whose connection broke before it could settle), and is
/// swept, so that readers go on. A live group's claim is open for the length of its
/// transaction, milliseconds; one still running after this long fails to store its
/// decisions (`mandate_store` finds its claim gone) and they are stored again alone:
/// sweeping early costs time, never a decision. Short, because readers see no new decision
/// while a dead claim stands. A writer's row with no claim open holds readers up in nothing;
/// one idle a day (its process gone, most likely) is removed.
pub const SWEEP: &str = "DELETE FROM decision_claims
    WHERE org_id = $1 AND claimed_at < now() - INTERVAL '5 seconds'
      AND (first_seq IS NOT NULL OR first_event IS NOT NULL
           OR claimed_at < now() - INTERVAL '1 day')";

/// The condition that keeps a read of organization `$1`'s events below its lowest open
/// claim of event seqs: every event at or below it that will ever be committed is visible.
/// Without an open claim, every event visible is settled (every event commits in seq order,
/// its counter row held to the commit).
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

/// [`watermark`] of each of `orgs`, in order, in two statements whatever their number:
/// their stale claims swept, then each watermark, all of one snapshot.
pub async fn watermarks(c: &tokio_postgres::Client, orgs: &[String]) -> Result<Vec<i64>> {
    c.execute(SWEEP_OF, &[&orgs])
        .await
        .map_err(crate::pg_error)?;
    let rows = c
        .query(
            "SELECT COALESCE(
                (SELECT MIN(first_seq) - 1 FROM decision_claims
                 WHERE org_id = u.org AND first_seq IS NOT NULL),
                (SELECT value FROM org_counters WHERE org_id = u.org AND name = 'decisions'),
                0)::BIGINT
             FROM unnest($1::TEXT[]) WITH ORDINALITY AS u (org, k)
             ORDER BY u.k",
            &[&orgs],
        )
        .await
        .map_err(crate::pg_error)?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// [`SWEEP`] of each organization of the list `$1`.
const SWEEP_OF: &str = "DELETE FROM decision_claims
    WHERE org_id = ANY($1) AND claimed_at < now() - INTERVAL '5 seconds'
      AND (first_seq IS NOT NULL OR first_event IS NOT NULL
           OR claimed_at < now() - INTERVAL '1 day')";
