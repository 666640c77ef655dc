-- The Citus step (issue #48, docs/scale.md): run by every `migrate` (and `serve`,
-- `onboard`, which migrate) after the numbered migrations, on the coordinator. It does
-- nothing without the `citus` extension (plain PostgreSQL runs the schema undistributed),
-- and nothing once done (the tables are distributed already), so a database migrated before
-- Citus was installed is distributed at its next `migrate`. It is not numbered: its effect
-- depends on the extension, not on the schema's version, and it is edited as the schema
-- grows (a table a later migration adds goes in its list).
--
-- Tables shared by all (no organization, or looked up before the organization is known, or
-- with a unique constraint across organizations) become reference tables: a copy on every
-- node. Every organization's table is distributed by org_id, co-located with
-- `environments`, so an organization's rows of every table sit on one worker and each of
-- its statements is routed there. `processes` and `readiness_probe` stay on the coordinator
-- (in Citus's metadata, so every node reaches them): a write to a reference table fails
-- while any worker is down, and every process's heartbeat and readiness probe would fail
-- with it.
DO $$
DECLARE
    t TEXT;
    fk RECORD;
    fks TEXT[] := '{}';
    f REGPROCEDURE;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    -- Processes migrating at once take turns; the first distributes, the others find it
    -- done (the last table of the list below distributed). Done, nothing here reaches a
    -- worker (a process starts while one is down).
    PERFORM pg_advisory_xact_lock(48);
    IF EXISTS (SELECT 1 FROM pg_dist_partition
               WHERE logicalrelid = 'log_heads'::regclass) THEN
        -- What a later migration added is distributed in this transaction, a function
        -- after a table: every command over one connection a node, as Citus then needs.
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
        -- Distributed before a later migration added a table of the organization's: that
        -- table alone is distributed, its rows moved to the workers.
        FOREACH t IN ARRAY ARRAY['decision_months'] LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
                PERFORM create_distributed_table(t, 'org_id', colocate_with => 'environments');
                PERFORM truncate_local_data_after_distributing_table(t);
            END IF;
        END LOOP;
        -- Distributed before a later migration added a function of the writers'.
        FOR f IN SELECT p.oid FROM pg_proc p
                 WHERE p.proname IN ('mandate_claim', 'mandate_store')
                   AND NOT EXISTS (SELECT 1 FROM pg_dist_object o
                                   WHERE o.classid = 'pg_proc'::regclass AND o.objid = p.oid
                                     AND o.distribution_argument_index IS NOT NULL) LOOP
            EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_custom_plan', f);
            PERFORM create_distributed_function(f, '$1', colocate_with => 'environments');
        END LOOP;
        RETURN;
    END IF;
    -- A statement waits at most this long for a worker that stopped answering (its
    -- organizations' requests then fail fast, 503, instead of holding the request
    -- deadline); a claim's SET LOCAL reaches the worker that commits it. Sessions opened
    -- after this.
    EXECUTE format('ALTER DATABASE %I SET citus.node_connection_timeout = %L',
                   current_database(), '5s');
    EXECUTE format('ALTER DATABASE %I SET citus.propagate_set_commands = %L',
                   current_database(), 'local');
    -- Foreign keys to reference tables are added in this transaction: Citus then needs
    -- every command over one connection per node.
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    -- The foreign keys to orgs are set aside while orgs becomes a reference table and the
    -- tables that name it are distributed, then added back.
    FOR fk IN SELECT conrelid::regclass::text AS tab, conname, pg_get_constraintdef(oid) AS def
              FROM pg_constraint WHERE contype = 'f' AND confrelid = 'orgs'::regclass LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', fk.tab, fk.conname);
        fks := fks || format('ALTER TABLE %I ADD CONSTRAINT %I %s', fk.tab, fk.conname, fk.def);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['orgs', 'api_keys', 'signing_keys', 'log_keys', 'settings',
                             'counters', 'ap2_consents', 'schema_migrations'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM create_reference_table(t);
        END IF;
    END LOOP;
    FOREACH t IN ARRAY ARRAY['processes', 'readiness_probe'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM citus_add_local_table_to_metadata(t);
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition
                   WHERE logicalrelid = 'environments'::regclass) THEN
        PERFORM create_distributed_table('environments', 'org_id', colocate_with => 'none');
    END IF;
    FOREACH t IN ARRAY ARRAY['org_counters', 'agents', 'mandates', 'decisions',
                             'decision_claims', 'reviews', 'events', 'webhooks', 'deliveries',
                             'delivery_attempts', 'mandate_expiring_fired', 'idempotency',
                             'accepted_credentials', 'ap2_issuers', 'escrows',
                             'escrow_history', 'settlement_movements', 'decision_months',
                             'log_strips', 'log_tiles', 'log_heads'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM create_distributed_table(t, 'org_id', colocate_with => 'environments');
        END IF;
    END LOOP;
    FOREACH t IN ARRAY fks LOOP
        EXECUTE t;
    END LOOP;
    -- The decision writers' calls (migration 0015), each run whole on the worker that holds
    -- the organization of its first argument, its statements planned afresh each time (a
    -- generic plan of Citus 13.2 grows by a copy of its local shard plan on every execution:
    -- storage/postgres/connect.rs, ON_CONNECT).
    FOR f IN SELECT oid FROM pg_proc WHERE proname IN ('mandate_claim', 'mandate_store') LOOP
        EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_custom_plan', f);
        PERFORM create_distributed_function(f, '$1', colocate_with => 'environments');
    END LOOP;
    -- The coordinator's own copies of the rows, now on the workers, go.
    FOR t IN SELECT table_name::text FROM citus_tables
             WHERE citus_table_type IN ('distributed', 'reference') LOOP
        PERFORM truncate_local_data_after_distributing_table(t);
    END LOOP;
END $$;
