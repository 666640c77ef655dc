-- 0019: a strip's entries are written by a function, mandate_log_put_entries, rather than
-- an INSERT the log worker sends (storage/postgres/statements.rs).
--
-- On plain PostgreSQL the function is that INSERT. On Citus the step (citus.sql) writes
-- it again to store the entries in the organization's shard of log_entries by its name
-- when that shard is on the node the call runs on. Citus sends a statement on a
-- distributed table to its shard as text, with each argument written out as a literal:
-- a strip's entries (up to 256 verdict tokens) were written out as hex and parsed again
-- for every strip (docs/scale.md, "Background work"). A statement on the shard itself is
-- PostgreSQL's own, its arguments passed as they came.
CREATE FUNCTION mandate_log_put_entries(p_org TEXT, p_env TEXT, p_start BIGINT, p_entries BYTEA)
RETURNS VOID
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO log_entries (org_id, env, start, entries)
        VALUES (p_org, p_env, p_start, p_entries);
END
$fn$;
