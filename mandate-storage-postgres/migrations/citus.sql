-- The Citus step (docs/scale.md): run by every `migrate` (and `serve`, `onboard`, which
-- migrate) after the numbered migrations, on the coordinator. It does nothing without the
-- `citus` extension (plain PostgreSQL runs the schema undistributed), and nothing once done,
-- so a database migrated before Citus was installed is distributed at its next `migrate`. It
-- is not numbered: its effect depends on the extension, not on the schema's version.
--
-- What it distributes is read from the schema, not listed: every table with an `org_id`
-- column is an organization's, distributed by org_id and co-located with `environments`, so
-- an organization's rows of every table sit on one worker and each of its statements is
-- routed there; a later migration's table of an organization's is distributed at the next
-- step with no edit here. The exceptions are listed: tables shared by all (no organization,
-- or looked up before the organization is known, or with a unique constraint across
-- organizations) become reference tables, a copy on every node; `processes` and
-- `readiness_probe` stay on the coordinator (in Citus's metadata, so every node reaches
-- them): a write to a reference table fails while any worker is down, and every process's
-- heartbeat and readiness probe would fail with it. A table of neither kind stops the step.
DO $$
DECLARE
    t TEXT;
    fk RECORD;
    fks TEXT[] := '{}';
    f REGPROCEDURE;
    shared CONSTANT TEXT[] := ARRAY['orgs', 'api_keys', 'signing_keys', 'log_keys', 'settings',
                                    'counters', 'ap2_consents', 'schema_migrations'];
    coordinator CONSTANT TEXT[] := ARRAY['processes', 'readiness_probe'];
    first_time BOOLEAN;
    ready TEXT[];
    moved TEXT[] := '{}';
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    -- Processes migrating at once take turns; the first distributes, the others find it
    -- done. Done, nothing here reaches a worker (a process starts while one is down).
    PERFORM pg_advisory_xact_lock(48);
    -- Every table of the schema is an organization's (org_id), shared or the coordinator's.
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO t
        FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
          AND NOT c.relispartition
          AND c.relname <> ALL (shared || coordinator)
          AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attname = 'org_id'
                            AND NOT a.attisdropped);
    IF t IS NOT NULL THEN
        RAISE EXCEPTION 'table(s) % have no org_id column and are not listed as shared or the coordinator''s in citus.sql: give each an org_id (an organization''s) or list it', t;
    END IF;
    first_time := NOT EXISTS (SELECT 1 FROM pg_dist_partition
                              WHERE logicalrelid = 'environments'::regclass);
    -- Tables and foreign keys are distributed in this transaction: Citus then needs every
    -- command over one connection per node.
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    IF first_time THEN
        -- A statement waits at most this long for a worker that stopped answering (its
        -- organizations' requests then fail fast, 503, instead of holding the request
        -- deadline); a claim's SET LOCAL reaches the worker that commits it. Sessions
        -- opened after this.
        EXECUTE format('ALTER DATABASE %I SET citus.node_connection_timeout = %L',
                       current_database(), '5s');
        EXECUTE format('ALTER DATABASE %I SET citus.propagate_set_commands = %L',
                       current_database(), 'local');
        -- The foreign keys to orgs are set aside while orgs becomes a reference table and
        -- the tables that name it are distributed, then added back.
        FOR fk IN SELECT conrelid::regclass::text AS tab, conname,
                         pg_get_constraintdef(oid) AS def
                  FROM pg_constraint WHERE contype = 'f' AND confrelid = 'orgs'::regclass LOOP
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', fk.tab, fk.conname);
            fks := fks || format('ALTER TABLE %I ADD CONSTRAINT %I %s', fk.tab, fk.conname,
                                 fk.def);
        END LOOP;
    END IF;
    -- A shared table not yet a reference table (first, or added by a later migration).
    FOREACH t IN ARRAY shared LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM create_reference_table(t);
            moved := moved || t;
        END IF;
    END LOOP;
    IF first_time THEN
        FOREACH t IN ARRAY coordinator LOOP
            PERFORM citus_add_local_table_to_metadata(t);
        END LOOP;
        -- The table every other organization's table is co-located with.
        PERFORM create_distributed_table('environments', 'org_id', colocate_with => 'none');
        moved := moved || 'environments'::text;
    END IF;
    -- Every organization's table not yet distributed, a table after those its foreign keys
    -- name.
    LOOP
        SELECT array_agg(c.relname::text ORDER BY c.relname) INTO ready
            FROM pg_class c
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
              AND NOT c.relispartition
              AND c.relname <> ALL (shared || coordinator)
              AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)
              AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                              WHERE k.contype = 'f' AND k.conrelid = c.oid
                                AND k.confrelid <> c.oid
                                AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
                                                WHERE p.logicalrelid = k.confrelid));
        EXIT WHEN ready IS NULL;
        FOREACH t IN ARRAY ready LOOP
            PERFORM create_distributed_table(t, 'org_id', colocate_with => 'environments');
            moved := moved || t;
        END LOOP;
    END LOOP;
    SELECT string_agg(c.relname, ', ' ORDER BY c.relname) INTO t
        FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
          AND NOT c.relispartition AND c.relname <> ALL (coordinator)
          AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid);
    IF t IS NOT NULL THEN
        RAISE EXCEPTION 'table(s) % could not be distributed: their foreign keys name each other in a cycle', t;
    END IF;
    FOREACH t IN ARRAY fks LOOP
        EXECUTE t;
    END LOOP;
    -- The decision writers' calls (migration 0015) not yet distributed, each run whole on
    -- the worker that holds the organization of its first argument, its statements planned
    -- afresh each time (a generic plan of Citus 13.2 grows by a copy of its local shard
    -- plan on every execution: storage/postgres/connect.rs, ON_CONNECT).
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.proname IN ('mandate_claim', 'mandate_store')
               AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                               WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid
                                 AND o.distribution_argument_index IS NOT NULL) LOOP
        EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_custom_plan', f);
        PERFORM create_distributed_function(f, '$1', colocate_with => 'environments');
    END LOOP;
    -- The coordinator's own copies of the rows moved, now on the workers, go.
    FOREACH t IN ARRAY moved LOOP
        PERFORM truncate_local_data_after_distributing_table(t);
    END LOOP;
END $$;
