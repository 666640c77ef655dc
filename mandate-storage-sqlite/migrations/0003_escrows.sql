-- 0003: escrows, their public history, and the settlement ledger. Times are unix
-- milliseconds; money is TEXT holding the exact decimal.

-- An escrow is funded by one allow decision and spends it: decision_id and nonce are
-- unique, so of two requests racing on one decision exactly one inserts.
CREATE TABLE escrows (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    env         TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    amount      TEXT NOT NULL,
    currency    TEXT NOT NULL,
    buyer       TEXT NOT NULL,
    seller      TEXT NOT NULL,
    decision_id TEXT NOT NULL UNIQUE REFERENCES decisions(id),
    nonce       TEXT NOT NULL UNIQUE,
    arbiter     TEXT,
    state       TEXT NOT NULL CHECK (state IN ('funded', 'delivered', 'released', 'refunded')),
    disputed    INTEGER NOT NULL CHECK (disputed IN (0, 1)),
    created_ms  INTEGER NOT NULL
);

-- The public history: one row per state change, in order, never updated.
CREATE TABLE escrow_history (
    escrow_id TEXT NOT NULL REFERENCES escrows(id),
    step      INTEGER NOT NULL,
    state     TEXT NOT NULL,
    disputed  INTEGER NOT NULL CHECK (disputed IN (0, 1)),
    at_ms     INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    PRIMARY KEY (escrow_id, step)
);

-- The ledger settlement adapter: every money movement, at most one of each kind per
-- escrow, written in the transaction of the state change that caused it.
CREATE TABLE settlement_movements (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    escrow_id  TEXT NOT NULL REFERENCES escrows(id),
    kind       TEXT NOT NULL CHECK (kind IN ('lock', 'release', 'refund')),
    amount     TEXT NOT NULL,
    currency   TEXT NOT NULL,
    from_party TEXT NOT NULL,
    to_party   TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (escrow_id, kind)
);
