-- 0012: a decision log anyone can audit (issue #53, docs/audit.md).
--
-- Each organization and environment has an append-only Merkle log (RFC 6962) whose leaves
-- are its verdict tokens in seq order. The checkpoint worker appends decisions already
-- durable and signs C2SP checkpoints of it with a log key of its own; decision reads carry
-- inclusion proofs from these tables. Every key starts with org_id and no column is an
-- identity, so on Citus the three log tables distribute by org_id with the organization's
-- other tables; log_keys is shared by all (a reference table there, like signing_keys).

-- The log keys: one current key per environment (kid log-<env>-<n>), sealed at rest like
-- the signing keys but never loaded as one (another table, another sealing context).
CREATE TABLE log_keys (
    kid        TEXT PRIMARY KEY,
    env        TEXT NOT NULL CHECK (env IN ('sandbox', 'live')),
    n          BIGINT NOT NULL,
    secret     BYTEA NOT NULL,
    created_ms BIGINT NOT NULL,
    retired_ms BIGINT,
    UNIQUE (env, n)
);

-- Tree level 0 in strips: the leaf hashes of consecutive leaves from `start` (32 bytes
-- each, at most 256, never across a multiple of 256: a level-0 tile is the strips from its
-- first index) and their decisions' seqs (`first_seq`, then the later ones as LEB128
-- deltas); a decision's leaf is found by one indexed read. Written once, never rewritten.
CREATE TABLE log_strips (
    org_id    TEXT   NOT NULL,
    env       TEXT   NOT NULL,
    start     BIGINT NOT NULL,
    first_seq BIGINT NOT NULL,
    seqs      BYTEA  NOT NULL,
    hashes    BYTEA  NOT NULL,
    PRIMARY KEY (org_id, env, start),
    UNIQUE (org_id, env, first_seq)
);

CREATE TABLE log_tiles (
    org_id TEXT     NOT NULL,
    env    TEXT     NOT NULL,
    level  SMALLINT NOT NULL CHECK (level BETWEEN 1 AND 7),
    idx    BIGINT   NOT NULL,
    hashes BYTEA    NOT NULL,
    PRIMARY KEY (org_id, env, level, idx)
);

-- Where each log stands: `size` leaves logged from the decisions up to `scanned_seq`, the
-- newest signed checkpoint (of size `size`), and the checkpoint readers are shown
-- (`shown_*`): one the worker saw committed, so no reader sees a checkpoint a crash could
-- take back.
CREATE TABLE log_heads (
    org_id           TEXT   NOT NULL,
    env              TEXT   NOT NULL,
    size             BIGINT NOT NULL,
    scanned_seq      BIGINT NOT NULL,
    checkpoint       TEXT,
    signed_ms        BIGINT,
    shown_size       BIGINT NOT NULL,
    shown_checkpoint TEXT,
    PRIMARY KEY (org_id, env)
);

-- A decision's leaf hash (SHA-256 of 0x00 || the token answered), written with the row by
-- the process that made it, so that the worker of any process logs it without reading the
-- rest of the row and rebuilding its token. NULL on decisions stored before this; the worker
-- then rebuilds the token, as it does for a row whose hash it does not have.
ALTER TABLE decisions ADD COLUMN leaf BYTEA;
