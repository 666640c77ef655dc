//! Seqs claimed ahead of a group's transaction, and the watermark readers stop at
//! (docs/exports.md, "A log that never skips").
//!
//! A writer claims a block of seqs in a short transaction of its own: the counter row
//! `decision_seq` moves, and the block's first seq is written in the writer's row of
//! `decision_claims` (migration 0009), both in one commit. That commit does not wait for
//! its WAL flush (`synchronous_commit` off for it alone): the counter row is then held for
//! microseconds, not for a flush, and groups of every writer and process commit side by
//! side. Nothing is lost by not waiting: the group's own commit waits for its flush, which
//! covers the claim written before it; a claim lost in a crash belonged to a group that
//! never committed.
//!
//! The group's transaction inserts its decisions with the claimed seqs and clears the claim
//! in the same statement, so a reader sees the claim open or the decisions committed,
//! never neither. A reader reads only up to the watermark: one below the lowest open claim,
//! or the counter when none is open. Every seq at or below it is settled: its decision is
//! committed and visible, or will never be (a group rolled back, a gap). A later claim
//! always lies above the counter, so the watermark never goes down and nothing settles
//! behind a reader.

use deadpool_postgres::GenericClient;

use super::Result;

/// Claims `$2` seqs for writer `$1`: moves the counter and opens the writer's claim at the
/// block's first seq, which it returns. Run in a transaction of its own.
pub const CLAIM: &str = "WITH taken AS (
        UPDATE counters SET value = value + $2 WHERE name = 'decision_seq' RETURNING value)
    INSERT INTO decision_claims (writer, first_seq, claimed_at)
    SELECT $1, taken.value - $2 + 1, now() FROM taken
    ON CONFLICT (writer) DO UPDATE
        SET first_seq = excluded.first_seq, claimed_at = excluded.claimed_at
    RETURNING first_seq";

/// The statement that opens a claim's transaction: its commit need not wait for the flush.
pub const BEGIN_CLAIM: &str = "BEGIN; SET LOCAL synchronous_commit TO OFF";

/// Clears writer `$1`'s claim that starts at `$2` (a group that stores no decision, or one
/// rolled back); nothing if the claim is no longer that one.
pub const SETTLE: &str =
    "UPDATE decision_claims SET first_seq = NULL WHERE writer = $1 AND first_seq = $2";

/// A claim open this long is taken to be left by a process that died (or by a group whose
/// connection broke before it could settle), and is swept, so that readers go on. A live
/// group's claim is open for the length of its transaction, milliseconds; one still running
/// after this long fails to store its decisions (its insert finds no claim) and they are
/// stored again alone: sweeping early costs time, never a decision. Short, because readers
/// see no new decision while a dead claim stands.
const STALE: &str = "5 seconds";

/// The log's watermark: the highest seq at or below which every decision that will ever be
/// committed is visible (0 for an empty log). Sweeps stale claims first.
pub async fn watermark(c: &impl GenericClient) -> Result<i64> {
    c.execute(
        &format!("DELETE FROM decision_claims WHERE claimed_at < now() - INTERVAL '{STALE}'"),
        &[],
    )
    .await?;
    // One statement, so one snapshot: the claims and the counter as of the same moment.
    let row = c
        .query_one(
            "SELECT COALESCE(
                (SELECT MIN(first_seq) - 1 FROM decision_claims WHERE first_seq IS NOT NULL),
                (SELECT value FROM counters WHERE name = 'decision_seq'),
                0)::BIGINT",
            &[],
        )
        .await?;
    Ok(row.get(0))
}
