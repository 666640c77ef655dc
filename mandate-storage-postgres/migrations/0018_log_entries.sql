-- 0018: the decision log keeps its entries (docs/audit.md).
--
-- The data of each leaf of a log (its verdict token, as answered) is stored with the log,
-- so that the log still holds and proves a token whatever later happens to its decision's
-- row. One row a strip of `log_strips` (same key, written in the same transaction, never
-- rewritten): the strip's tokens in order, each prefixed by its length as a big-endian
-- 16-bit integer, as a C2SP tlog-tiles entry bundle holds them; so entry bundle N is the
-- rows from start N * 256 concatenated. Strips logged before this migration have none.
-- Keyed by org_id first: on Citus it distributes with the organization's other tables.
-- Compressed with lz4 rather than the default pglz: a full strip is about 180 kB of tokens,
-- which pglz took about 2 ms of the database's CPU to compress, lz4 a fraction of it.
CREATE TABLE log_entries (
    org_id  TEXT   NOT NULL,
    env     TEXT   NOT NULL,
    start   BIGINT NOT NULL,
    entries BYTEA  COMPRESSION lz4 NOT NULL,
    PRIMARY KEY (org_id, env, start)
);
