-- 0003: an idempotency claim carries its request's token (`claim`, random): a request
-- stores its outcome, or its decision, only while the claim is still its own (a claim that
-- ran out may have been taken over by a retry on another process), and releases only its
-- own. Rows of older builds have none: an unfinished one is taken over once it runs out.
ALTER TABLE idempotency ADD COLUMN claim BYTEA;
