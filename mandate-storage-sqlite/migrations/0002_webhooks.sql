-- 0002: webhook endpoints, deliveries and their attempts, and the once-only marks of
-- time-driven events. Times are unix milliseconds.

CREATE TABLE webhooks (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    env        TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,          -- JSON array of event types
    status     TEXT NOT NULL CHECK (status IN ('active', 'deleted')),
    created_ms INTEGER NOT NULL,
    deleted_ms INTEGER
);
CREATE INDEX webhooks_by_env ON webhooks (org_id, env, status, seq);

-- One row per (event, webhook): created in the transaction that appends the event.
-- next_attempt_ms is set while pending and NULL once delivered or failed.
CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL REFERENCES events(id),
    webhook_id      TEXT NOT NULL REFERENCES webhooks(id),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    last_error      TEXT,
    created_ms      INTEGER NOT NULL,
    finished_ms     INTEGER,
    UNIQUE (event_id, webhook_id)
);
CREATE INDEX deliveries_due ON deliveries (state, next_attempt_ms);
CREATE INDEX deliveries_by_webhook ON deliveries (webhook_id, state);

-- Every attempt, kept: when, what came back (status NULL: no HTTP answer), how long it took.
CREATE TABLE delivery_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id INTEGER NOT NULL REFERENCES deliveries(id),
    attempt     INTEGER NOT NULL,
    at_ms       INTEGER NOT NULL,
    status      INTEGER,
    latency_ms  INTEGER NOT NULL,
    error       TEXT
);
CREATE INDEX delivery_attempts_by_delivery ON delivery_attempts (delivery_id, attempt);

-- mandate.expiring fires once per mandate: its mark is written with its event.
CREATE TABLE mandate_expiring_fired (
    mandate_id TEXT PRIMARY KEY REFERENCES mandates(id),
    event_id   TEXT NOT NULL REFERENCES events(id),
    fired_ms   INTEGER NOT NULL
);

-- The sweepers' look-ups: active mandates by expiry date, events by type.
CREATE INDEX mandates_by_expiry ON mandates (status, expires);
CREATE INDEX events_by_type ON events (org_id, env, type, seq);
