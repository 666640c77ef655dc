//! The pages of `log_heads` keep room for a head's next versions (migration 0020): a
//! log's round updates its head twice, and a head carries two signed checkpoints.

use super::*;

/// Every head of a full table updated as a round does (the append, then the checkpoint
/// shown) stays on its page: no row moves to another page, so no update adds an index
/// entry or leaves a dead row behind for autovacuum. On pages packed full, each would move.
#[tokio::test]
async fn a_rounds_updates_of_every_head_stay_on_their_pages() {
    let db = database!("log_heads_room");
    drop(open(&db).await);
    // Forty heads, each with two checkpoints the size of a signed one with cosignatures.
    db.execute(
        "INSERT INTO log_heads (org_id, env, size, scanned_seq, checkpoint, signed_ms,
                                shown_size, shown_checkpoint)
         SELECT 'org_' || i, 'live', 10, 10, repeat('c', 600), 1, 10, repeat('s', 600)
         FROM generate_series(1, 40) AS i;
         CREATE TABLE heads_before AS
             SELECT org_id, (ctid::text::point)[0] AS page FROM log_heads;",
    );
    let pages = db.number("SELECT count(DISTINCT page)::BIGINT FROM heads_before");
    for round in 1..=2 {
        db.execute(&format!(
            "UPDATE log_heads SET size = size + 5, scanned_seq = scanned_seq + 5,
                 checkpoint = repeat('{round}', 600), signed_ms = {round};
             UPDATE log_heads SET shown_size = size, shown_checkpoint = checkpoint;"
        ));
    }
    let moved = db.number(
        "SELECT count(*) FROM log_heads h JOIN heads_before b USING (org_id)
         WHERE (h.ctid::text::point)[0] <> b.page",
    );
    assert_eq!(
        moved, 0,
        "{moved} of 40 heads moved off their page (of {pages}) in two rounds"
    );
}
