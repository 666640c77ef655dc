-- 0012: single-use credentials (an AP2 closed payment mandate) accepted by a decision.
-- A row is written in the transaction of the decision that accepts the credential (its
-- verdict `allow` or `review`), and only if no row for it exists: a credential is accepted
-- at most once, and a request presenting it again is judged `deny_replay`.
CREATE TABLE accepted_credentials (
    org_id      TEXT NOT NULL,
    env         TEXT NOT NULL,
    -- The credential's id (for an AP2 closed payment mandate, its digest).
    id          TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (org_id, env, id)
);
