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

-- Tree level 0 in strips: each row holds the leaf hashes of consecutive leaves from
-- `start` (32 bytes each, at most 256, never across a multiple of 256, so a level-0 tile is
-- the strips from its first index), and their decisions' seqs (`first_seq`, then the
-- later seqs as LEB128 deltas), so a decision's leaf is found by one indexed read. A strip
-- is written once, by the round that logged its leaves: a busy log stores a strip per 256
-- leaves (about 33 bytes a leaf), never rewritten.
CREATE TABLE log_strips (
    org_id    TEXT    NOT NULL,
    env       TEXT    NOT NULL,
    start     INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    seqs      BLOB    NOT NULL,
    hashes    BLOB    NOT NULL,
    PRIMARY KEY (org_id, env, start)
);
CREATE UNIQUE INDEX log_strips_by_seq ON log_strips (org_id, env, first_seq);

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
