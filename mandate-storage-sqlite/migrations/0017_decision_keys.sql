-- 0017: a decision names its organization, environment and agent by integer keys.
--
-- Migration 0009 added the kid and the 64-byte signature to every decision (~85 bytes of
-- file a decision); this takes back more than that from what each row repeated as text:
--
-- * org_id and env (27 bytes in the row, and again in every entry of decisions_by_env,
--   ~45 bytes an entry) become `scope`, the integer key of decision_scopes: one row per
--   organization and environment, written when its first agent is (the trigger below).
--   decisions_by_env is keyed by (scope, seq), ~13 bytes an entry.
-- * agent_id (17 bytes and more) is read from agents through agent_seq, which every
--   decision has carried since migration 0005 (agents are never deleted).
-- * iss and policy_version (the verdicts URL and the organization's policy version, 40
--   bytes and more, the same for every decision of an environment until the operator
--   changes one) become `issuer`, the integer key of decision_issuers: a row per pair,
--   written by the first decision that names it (the engine inserts it when a decision's
--   pair has no row yet).
--
-- The table is rebuilt (SQLite cannot drop a column that an index uses); the migration
-- runner turns foreign keys off around it and checks them before committing. The other
-- columns, and the signature, are kept as they were.

CREATE TABLE decision_scopes (
    key    INTEGER PRIMARY KEY,
    org_id TEXT NOT NULL,
    env    TEXT NOT NULL,
    UNIQUE (org_id, env)
);

INSERT OR IGNORE INTO decision_scopes (org_id, env)
SELECT org_id, env FROM agents ORDER BY seq;
INSERT OR IGNORE INTO decision_scopes (org_id, env)
SELECT org_id, env FROM decisions ORDER BY seq;

-- Every decision has an agent (agent_seq is NOT NULL below), so every decision's scope
-- exists once its agent does.
CREATE TRIGGER decision_scope_of_agent AFTER INSERT ON agents
BEGIN
    INSERT OR IGNORE INTO decision_scopes (org_id, env) VALUES (NEW.org_id, NEW.env);
END;

CREATE TABLE decision_issuers (
    key            INTEGER PRIMARY KEY,
    iss            TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    UNIQUE (iss, policy_version)
);

INSERT OR IGNORE INTO decision_issuers (iss, policy_version)
SELECT iss, policy_version FROM decisions ORDER BY seq;

CREATE TABLE decisions_keyed (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    -- decision_scopes.key: the organization and environment.
    scope          INTEGER NOT NULL,
    -- agents.seq: the agent, whose id is read from there.
    agent_seq      INTEGER NOT NULL,
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
    -- decision_issuers.key: the token's iss and policy_version.
    issuer         INTEGER NOT NULL,
    iat            INTEGER NOT NULL,
    exp            INTEGER NOT NULL,
    created_ms     INTEGER NOT NULL,
    supersedes     TEXT,
    review_id      TEXT,
    -- 1 for an agent's authorization request (counts for velocity), 0 for an approval.
    is_request     INTEGER NOT NULL,
    signing_kid    TEXT,
    signature      BLOB,
    bindings       TEXT
);
INSERT INTO decisions_keyed (seq, id, scope, agent_seq, mandate_id, verdict, policy_verdict,
    reason, mode, amount, currency, recipient, category, nonce, issuer, iat, exp,
    created_ms, supersedes, review_id, is_request, signing_kid, signature, bindings)
SELECT d.seq, d.id,
       (SELECT s.key FROM decision_scopes s WHERE s.org_id = d.org_id AND s.env = d.env),
       COALESCE(d.agent_seq, (SELECT a.seq FROM agents a
                              WHERE a.org_id = d.org_id AND a.env = d.env AND a.id = d.agent_id)),
       d.mandate_id, d.verdict, d.policy_verdict, d.reason, d.mode, d.amount, d.currency,
       d.recipient, d.category, d.nonce,
       (SELECT i.key FROM decision_issuers i
        WHERE i.iss = d.iss AND i.policy_version = d.policy_version),
       d.iat, d.exp, d.created_ms,
       d.supersedes, d.review_id, d.is_request, d.signing_kid, d.signature, d.bindings
FROM decisions d
ORDER BY d.seq;
DROP TABLE decisions;
ALTER TABLE decisions_keyed RENAME TO decisions;
CREATE INDEX decisions_by_env ON decisions (scope, seq);
-- As migration 0006 made it: the expression must stay `seq >> 18`.
CREATE INDEX decisions_by_agent ON decisions (seq >> 18, agent_seq, seq);
