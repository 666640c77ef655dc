-- 0001: the first schema. Migrations are numbered and never edited once landed.
-- Times are unix milliseconds (INTEGER) unless the column says otherwise; money is TEXT
-- holding the exact decimal, never REAL.

CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

CREATE TABLE orgs (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    policy_version TEXT NOT NULL,
    created_ms     INTEGER NOT NULL
);

CREATE TABLE environments (
    org_id   TEXT NOT NULL REFERENCES orgs(id),
    env      TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    mode     TEXT NOT NULL CHECK (mode IN ('observe', 'enforce')),
    since_ms INTEGER NOT NULL,
    PRIMARY KEY (org_id, env)
);

-- API keys are stored only as SHA-256 hashes; the fingerprint identifies a key to operators.
CREATE TABLE api_keys (
    hash         BLOB PRIMARY KEY,
    fingerprint  TEXT NOT NULL UNIQUE,
    org_id       TEXT NOT NULL REFERENCES orgs(id),
    env          TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    class        TEXT NOT NULL CHECK (class IN ('org', 'agent')),
    agent_id     TEXT,
    rate_per_sec INTEGER NOT NULL DEFAULT 100,
    created_ms   INTEGER NOT NULL,
    revoked_ms   INTEGER
);

-- Signing keys per environment; kids sandbox-<n> / live-<n>. The secret never leaves here.
CREATE TABLE signing_keys (
    kid        TEXT PRIMARY KEY,
    env        TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    n          INTEGER NOT NULL,
    secret     BLOB NOT NULL,
    created_ms INTEGER NOT NULL,
    retired_ms INTEGER,
    UNIQUE (env, n)
);

CREATE TABLE agents (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL,
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    env        TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (org_id, env, id)
);

CREATE TABLE mandates (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    env        TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    terms      TEXT NOT NULL,          -- the validated body, JSON with exact numbers
    expires    TEXT NOT NULL,          -- YYYY-MM-DD, for the status filter
    status     TEXT NOT NULL CHECK (status IN ('active', 'revoked', 'superseded')),
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER
);
CREATE INDEX mandates_by_agent ON mandates (org_id, env, agent_id, seq);
CREATE INDEX mandates_by_env ON mandates (org_id, env, seq);

CREATE TABLE decisions (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
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
    nonce          TEXT NOT NULL UNIQUE,
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
CREATE INDEX decisions_by_env ON decisions (org_id, env, seq);
CREATE INDEX decisions_by_agent ON decisions (org_id, env, agent_id, seq);
CREATE INDEX decisions_by_mandate ON decisions (mandate_id, created_ms);

CREATE TABLE reviews (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    org_id      TEXT NOT NULL,
    env         TEXT NOT NULL,
    decision_id TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    resolved_ms INTEGER,
    resolution  TEXT,
    reason      TEXT
);
CREATE INDEX reviews_pending ON reviews (status, expires_ms);

-- The outbox: every event is written in the same transaction as the change it reports.
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL,
    env        TEXT NOT NULL,
    type       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX events_by_env ON events (org_id, env, seq);

-- Idempotency keys, scoped to the API key that sent them. status NULL: still in flight.
CREATE TABLE idempotency (
    key_hash       BLOB NOT NULL,
    idem_key       TEXT NOT NULL,
    request_digest BLOB NOT NULL,
    created_ms     INTEGER NOT NULL,
    status         INTEGER,
    body           BLOB,
    request_id     TEXT,
    PRIMARY KEY (key_hash, idem_key)
);
