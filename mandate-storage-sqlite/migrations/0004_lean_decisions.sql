-- 0004: a decision costs the writer fewer B-tree pages.
--
-- Measured with mandate-bench (docs/performance.md), each index of `decisions` is a page
-- the writer dirties, logs in the WAL and later copies into the file. Three are dropped:
--
-- * decisions_by_mandate: random by nature (one leaf per mandate). It served one query,
--   an agent's month-to-date spend, read when its state is loaded. That query now walks
--   decisions_by_agent from the agent's first decision of the month, which
--   decision_months records: one row per agent and UTC month, written by the first
--   decision of that month (INSERT OR IGNORE: later ones only read it).
-- * the unique index on nonce: nonces are 16 bytes the server draws itself and nothing
--   looks a decision up by its nonce (escrows keep their own unique nonce).
-- * AUTOINCREMENT: it rewrote sqlite_sequence on every insert. Rows of `decisions` are
--   never deleted, so the plain rowid (largest + 1) still only grows.
--
-- The table is rebuilt (SQLite cannot drop a column constraint); the migration runner
-- turns foreign keys off around it and checks them before committing.

CREATE TABLE decisions_lean (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    org_id         TEXT NOT NULL,
    env            TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    mandate_id     TEXT,
    verdict        TEXT NOT NULL,
    policy_verdict TEXT NOT NULL,
    reason         TEXT,
    mode           TEXT NOT NULL,
    amount         TEXT NOT NULL,
    currency       TEXT NOT NULL,
    recipient      TEXT NOT NULL,
    category       TEXT NOT NULL,
    nonce          TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    iss            TEXT NOT NULL,
    iat            INTEGER NOT NULL,
    exp            INTEGER NOT NULL,
    created_ms     INTEGER NOT NULL,
    supersedes     TEXT,
    review_id      TEXT,
    -- 1 for an agent's authorization request (counts for velocity), 0 for an approval.
    is_request     INTEGER NOT NULL
);
INSERT INTO decisions_lean SELECT * FROM decisions;
DROP TABLE decisions;
ALTER TABLE decisions_lean RENAME TO decisions;
DELETE FROM sqlite_sequence WHERE name = 'decisions';
CREATE INDEX decisions_by_env ON decisions (org_id, env, seq);
CREATE INDEX decisions_by_agent ON decisions (org_id, env, agent_id, seq);

CREATE TABLE decision_months (
    org_id    TEXT NOT NULL,
    env       TEXT NOT NULL,
    agent_id  TEXT NOT NULL,
    -- year * 12 + month - 1, of created_ms in UTC.
    month     INTEGER NOT NULL,
    -- The lowest seq of the agent's decisions created in that month.
    first_seq INTEGER NOT NULL,
    PRIMARY KEY (org_id, env, agent_id, month)
) WITHOUT ROWID;

INSERT INTO decision_months (org_id, env, agent_id, month, first_seq)
SELECT org_id, env, agent_id,
       CAST(strftime('%Y', created_ms / 1000, 'unixepoch') AS INTEGER) * 12
           + CAST(strftime('%m', created_ms / 1000, 'unixepoch') AS INTEGER) - 1,
       MIN(seq)
FROM decisions
GROUP BY 1, 2, 3, 4;
