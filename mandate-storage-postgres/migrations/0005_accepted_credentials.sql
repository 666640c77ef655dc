-- 0005: single-use credentials (an AP2 closed payment mandate) accepted by a decision.
-- A row is inserted by the statement that stores the decision accepting the credential
-- (its verdict `allow` or `review`), and that decision is stored only if the row was new
-- (ON CONFLICT DO NOTHING): a credential is accepted at most once, whatever the processes,
-- and a request presenting it again is judged `deny_replay`.
CREATE TABLE accepted_credentials (
    org_id      TEXT NOT NULL,
    env         TEXT NOT NULL,
    -- The credential's id (for an AP2 closed payment mandate, its digest).
    id          TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    PRIMARY KEY (org_id, env, id)
);
