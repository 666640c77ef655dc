-- 0010: an idempotency claim carries its request's token (`claim`, random) and runs out
-- (`claimed_until`, unix ms): a request stores its outcome, or its decision, only while the
-- claim is still its own, and a claim its request never finished (aborted midway) is taken
-- over after it runs out instead of refusing the key until the next start. Rows of older
-- builds have neither: an unfinished one counts as run out.
ALTER TABLE idempotency ADD COLUMN claim BLOB;
ALTER TABLE idempotency ADD COLUMN claimed_until INTEGER;
