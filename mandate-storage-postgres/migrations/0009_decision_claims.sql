-- 0009: seqs claimed by a group before its transaction, so that groups of decisions commit
-- side by side instead of one after the other (docs/exports.md, "A log that never skips").
-- A writer claims a block of seqs from the counter row decision_seq in a short transaction
-- of its own, which also records the block here; the group's transaction inserts its
-- decisions with those seqs and clears the claim, in the same commit. A reader reads the
-- log only up to the watermark: one below the lowest open claim, or the counter when none
-- is open. Every seq at or below it is settled: committed and visible, or never to be.
CREATE TABLE decision_claims (
    -- The writer: a random name of its process, then the writer's number.
    writer     TEXT PRIMARY KEY,
    -- The first seq of the open claim; NULL once settled.
    first_seq  BIGINT,
    -- When the claim was made (the database's clock): a claim left open this long by a
    -- process that died is swept by readers.
    claimed_at TIMESTAMPTZ NOT NULL
);
