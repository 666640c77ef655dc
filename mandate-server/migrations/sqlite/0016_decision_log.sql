-- 0016: a decision log anyone can audit (issue #53, docs/audit.md).
--
-- Each organization and environment has an append-only Merkle log (RFC 6962) whose leaves
-- are its verdict tokens in seq order. The checkpoint worker appends decisions already
-- durable and signs C2SP checkpoints of it with a log key of its own; decision reads carry
-- inclusion proofs from these tables. Keyed by organization first, as every table that
-- holds an organization's data.

-- The log keys: one current key per environment (kid log-<env>-<n>), sealed at rest like
-- the signing keys but never loaded as one (another table, another sealing context).
CREATE TABLE log_keys (
    kid        TEXT PRIMARY KEY,
    env        TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    n          INTEGER NOT NULL,
    secret     BLOB NOT NULL,
    created_ms INTEGER NOT NULL,
    retired_ms INTEGER,
    UNIQUE (env, n)
);

-- One row per logged decision: its leaf index and leaf hash (tree level 0, read 256 at a
-- time as a level-0 tile).
CREATE TABLE log_leaves (
    org_id     TEXT    NOT NULL,
    env        TEXT    NOT NULL,
    leaf_index INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    hash       BLOB    NOT NULL,
    PRIMARY KEY (org_id, env, leaf_index),
    UNIQUE (org_id, seq)
) WITHOUT ROWID;

-- C2SP tiles of tree levels 8, 16, ...: up to 256 hashes of 32 bytes, concatenated; the
-- rightmost tile of a level grows in place.
CREATE TABLE log_tiles (
    org_id TEXT    NOT NULL,
    env    TEXT    NOT NULL,
    level  INTEGER NOT NULL CHECK (level BETWEEN 1 AND 7),
    idx    INTEGER NOT NULL,
    hashes BLOB    NOT NULL,
    PRIMARY KEY (org_id, env, level, idx)
) WITHOUT ROWID;

-- Where each log stands: `size` leaves logged from the decisions up to `scanned_seq`, the
-- newest signed checkpoint (of size `size`), and the checkpoint readers are shown
-- (`shown_*`): one the worker saw committed durably, so no reader sees a checkpoint a crash
-- could take back.
CREATE TABLE log_heads (
    org_id           TEXT    NOT NULL,
    env              TEXT    NOT NULL,
    size             INTEGER NOT NULL,
    scanned_seq      INTEGER NOT NULL,
    checkpoint       TEXT,
    signed_ms        INTEGER,
    shown_size       INTEGER NOT NULL,
    shown_checkpoint TEXT,
    PRIMARY KEY (org_id, env)
);
