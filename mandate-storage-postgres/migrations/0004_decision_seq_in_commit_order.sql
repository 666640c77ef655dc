-- 0004: a decision's seq is given in commit order (docs/exports.md, "A log that never
-- skips"). Seqs come from the counter row decision_seq, moved by the statement that inserts
-- decisions and held locked until its transaction ends, so the transactions that insert
-- decisions commit in the order of their seqs and a reader never sees a decision before one
-- of a lower seq. The identity default is dropped: an insert that does not take its seq from
-- the counter fails instead of breaking the order. Processes of a build older than this
-- migration insert through the identity: stop them before starting this one.
INSERT INTO counters (name, value)
    SELECT 'decision_seq', COALESCE(MAX(seq), 0) FROM decisions;
ALTER TABLE decisions ALTER COLUMN seq DROP IDENTITY;
