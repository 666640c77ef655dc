-- 0021: the decisions' unique key on ids leads with the id: (id, org_id), not (org_id, id).
--
-- A decision's id begins with the time it was made (its first bytes are the millisecond),
-- so ids ascend across organizations, and an index that leads with them takes each new
-- entry at its right edge, where PostgreSQL inserts without descending from the root (its
-- fast path for ascending keys) and splits a full page by leaving it full. Led by org_id,
-- each organization's entries sit apart: with many organizations every new entry descended
-- the tree to its organization's place, and the pages there split in halves. Every lookup
-- names both columns, which the new key serves as the old one did; the escrows' foreign key
-- names the same two columns, which a unique key of them in either order satisfies. On
-- Citus the key still holds the distribution column, as a unique key there must.
--
-- Each statement goes through EXECUTE, as in 0014: on Citus, where the tables are already
-- distributed, each DDL command reaches the workers as the text of the query that holds it,
-- which must be that command alone, and over one connection a node (sequential).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    EXECUTE 'ALTER TABLE escrows DROP CONSTRAINT escrows_org_id_decision_id_fkey';
    EXECUTE 'ALTER TABLE decisions DROP CONSTRAINT decisions_org_id_id_key';
    EXECUTE 'ALTER TABLE decisions ADD CONSTRAINT decisions_id_org_id_key UNIQUE (id, org_id)';
    EXECUTE 'ALTER TABLE escrows ADD CONSTRAINT escrows_org_id_decision_id_fkey
             FOREIGN KEY (org_id, decision_id) REFERENCES decisions (org_id, id)';
END $$;
