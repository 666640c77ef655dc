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
             WHERE p.proname IN ('mandate_claim', 'mandate_store', 'mandate_record')
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

-- The decision writers' fast path (docs/scale.md, "Where a decision's time goes"). On Citus
-- every statement a distributed table is named in is planned by Citus, deparsed and planned
-- again for its shard, each time: a decision's few statements cost ten times what they cost
-- on plain PostgreSQL. So the step writes mandate_record's statements (migration 0017) once
-- for each shard of the organizations' tables, on the shard tables themselves (all of one
-- shard index sit on one worker, co-located): `mandate_record_s<shard>`, where shard is the
-- id of the `environments` shard. Their statements are PostgreSQL's own, planned once a
-- connection, each one statement for the group's decisions in that shard.
--
-- The writers call `mandate_record_citus`, distributed by its first organization, so run on
-- the worker that holds the group's organizations. It takes, as every write of Citus does,
-- the metadata lock of each shard it writes (a shard move or split waits for its commit,
-- and it for theirs), then runs the decisions of each shard on this worker through that
-- shard's function, and those of a shard elsewhere (an organization moved meanwhile) or
-- without one (split since this step last ran; `migrate` writes theirs) through
-- mandate_record's own statements, routed by Citus. The functions are written again only
-- when they differ from what they would be (a new shard, a changed mandate_record): a step
-- with nothing to do sends nothing to the workers.
DO $$
DECLARE
    f_src    TEXT;
    f_args   TEXT;
    f_names  TEXT[];
    f_config TEXT;
    f_settings TEXT[];
    v_coloc  INT;
    s        RECORD;
    t        RECORD;
    body     TEXT;
    fname    TEXT;
    cases    TEXT := '';
    slices   TEXT;
    whole    TEXT;
    routed   TEXT;
    dispatch TEXT;
    dispatcher REGPROCEDURE;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    SELECT p.prosrc, pg_get_function_arguments(p.oid), p.proargnames
        INTO f_src, f_args, f_names
        FROM pg_proc p
        WHERE p.proname = 'mandate_record' AND p.pronamespace = current_schema()::regnamespace;
    IF f_src IS NULL THEN
        RAISE EXCEPTION 'mandate_record (migration 0017) is missing: run the numbered migrations first';
    END IF;
    -- Its planner settings, with one generic plan a statement (no distributed table is
    -- named, so no plan of Citus's), where its routed statements are planned afresh: set
    -- once a call on the dispatcher, whose calls of the shards' functions plan under them,
    -- not on each of those (a function's settings are set and reset on each of its calls).
    SELECT coalesce(array_agg(c ORDER BY k), '{}') || 'plan_cache_mode=force_generic_plan'::TEXT
        INTO f_settings
        FROM pg_proc p, unnest(p.proconfig) WITH ORDINALITY AS u (c, k)
        WHERE p.proname = 'mandate_record' AND p.pronamespace = current_schema()::regnamespace
          AND split_part(c, '=', 1) <> 'plan_cache_mode';
    SELECT string_agg(format('SET %s = %s', split_part(c, '=', 1),
                             quote_literal(substr(c, strpos(c, '=') + 1))), ' ' ORDER BY k)
        INTO f_config FROM unnest(f_settings) WITH ORDINALITY AS u (c, k);
    -- A call's arguments for one run: the group's organizations `ka` to `kb`, its decisions
    -- `a` to `b` (a shard function's statements are the group's, `p_at_once`).
    SELECT string_agg(CASE WHEN n LIKE 'o\_%' THEN format('%I[ka:kb]', n)
                           WHEN n ~ '^[dira]_' THEN format('%I[a:b]', n)
                           WHEN n = 'p_at_once' THEN '%s'
                           ELSE quote_ident(n) END, ', ' ORDER BY k)
        INTO slices FROM unnest(f_names) WITH ORDINALITY AS a (n, k);
    SELECT string_agg(CASE WHEN n = 'p_at_once' THEN '%s' ELSE quote_ident(n) END, ', ' ORDER BY k)
        INTO whole FROM unnest(f_names) WITH ORDINALITY AS a (n, k);
    SELECT colocationid INTO v_coloc FROM pg_dist_partition
        WHERE logicalrelid = 'environments'::regclass;
    FOR s IN SELECT e.shardid, e.shardminvalue FROM pg_dist_shard e
             WHERE e.logicalrelid = 'environments'::regclass
             ORDER BY e.shardminvalue::BIGINT LOOP
        body := f_src;
        -- Each table of the organizations named where a statement reads or writes it, as
        -- its shard of this index.
        FOR t IN SELECT x.logicalrelid::regclass::text AS tab, x.shardid
                 FROM pg_dist_shard x JOIN pg_dist_partition p ON p.logicalrelid = x.logicalrelid
                 WHERE p.colocationid = v_coloc AND x.shardminvalue = s.shardminvalue LOOP
            body := regexp_replace(body, '((FROM|INTO|UPDATE|JOIN)\s+)' || t.tab || '\M',
                                   '\1' || t.tab || '_' || t.shardid, 'g');
        END LOOP;
        fname := 'mandate_record_s' || s.shardid;
        IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE proname = fname AND prosrc = body
                       AND proconfig IS NULL) THEN
            EXECUTE format('CREATE OR REPLACE FUNCTION %I(%s) RETURNS INT[] LANGUAGE plpgsql AS %L',
                           fname, f_args, body);
        END IF;
        -- The whole group in this shard (always so with one shard a worker): its arrays
        -- as they came, not copied into slices.
        cases := cases || format(E'\n            WHEN %s THEN\n                IF a = 1 AND b = n THEN\n                    codes := %I(%s);\n                ELSE\n                    codes := %I(%s);\n                END IF;',
                                 s.shardid, fname, format(whole, 'true'), fname,
                                 format(slices, 'true'));
    END LOOP;

    IF cases = '' THEN
        cases := E'\n            WHEN NULL THEN NULL;';
    END IF;
    routed := format('mandate_record(%s)', format(slices, 'false'));
    dispatch := format($body$
DECLARE
    n       INT := coalesce(array_length(d_id, 1), 0);
    k_n     INT := coalesce(array_length(o_orgs, 1), 0);
    outcome INT[] := '{}';
    codes   INT[];
    o_shard BIGINT[];
    o_end   INT[];
    v_local BIGINT[];
    v_shard BIGINT;
    ka      INT := 1;
    kb      INT;
    a       INT := 1;
    b       INT;
BEGIN
    IF k_n = 0 THEN
        RETURN outcome;
    END IF;
    -- Each organization's shard, and, as every write of Citus does, the metadata lock of
    -- each: a move or split of these shards waits for this commit, and this for theirs.
    SELECT s.shards INTO o_shard
        FROM (SELECT array_agg(get_shard_id_for_distribution_column('environments', o) ORDER BY k)
                  AS shards
              FROM unnest(o_orgs) WITH ORDINALITY AS u (o, k)) AS s
        CROSS JOIN LATERAL (
            SELECT lock_shard_metadata(5, ARRAY(SELECT DISTINCT x FROM unnest(s.shards) x
                                                ORDER BY x))) AS l;
    -- Then, in a statement of its own (a snapshot taken after the lock: a move that
    -- committed meanwhile is seen), the shards on this worker, each with its one placement.
    SELECT array_agg(p.shardid) INTO v_local FROM pg_dist_placement p
        WHERE p.shardid = ANY(o_shard)
          AND p.groupid = (SELECT groupid FROM pg_dist_local_group)
          AND NOT EXISTS (SELECT 1 FROM pg_dist_placement q
                          WHERE q.shardid = p.shardid AND q.groupid <> p.groupid);
    -- Where each organization's decisions end (they come in its order).
    o_end := array_fill(0, ARRAY[k_n]);
    b := 0;
    FOR k IN 1 .. k_n LOOP
        WHILE b < n AND d_org[b + 1] = o_orgs[k] LOOP
            b := b + 1;
        END LOOP;
        o_end[k] := b;
    END LOOP;
    IF b <> n THEN
        RAISE EXCEPTION 'the group''s decisions are not in the order of its organizations';
    END IF;
    -- Each run of organizations of one shard, through its function when it is here.
    WHILE ka <= k_n LOOP
        v_shard := o_shard[ka];
        kb := ka;
        WHILE kb < k_n AND o_shard[kb + 1] = v_shard LOOP
            kb := kb + 1;
        END LOOP;
        b := o_end[kb];
        codes := NULL;
        -- A CASE statement, not an expression: each branch's call is an expression of its
        -- own, set up in a transaction only when its shard is stored.
        IF v_shard = ANY(v_local) THEN
            CASE v_shard%s
            ELSE
                NULL;
            END CASE;
        END IF;
        IF codes IS NULL THEN
            codes := %s;
        END IF;
        outcome := outcome || codes;
        a := b + 1;
        ka := kb + 1;
    END LOOP;
    RETURN outcome;
END
$body$, cases, routed);
    IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'mandate_record_citus'
                   AND prosrc = dispatch AND proconfig = f_settings) THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION mandate_record_citus(%s) RETURNS INT[] %s LANGUAGE plpgsql AS %L',
                       f_args, f_config, dispatch);
    END IF;
    SELECT p.oid INTO dispatcher FROM pg_proc p
        WHERE p.proname = 'mandate_record_citus'
          AND p.pronamespace = current_schema()::regnamespace;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_object o
                   WHERE o.classid = 'pg_proc'::regclass AND o.objid = dispatcher
                     AND o.distribution_argument_index IS NOT NULL) THEN
        PERFORM create_distributed_function(dispatcher, '$1', colocate_with => 'environments');
    END IF;
END $$;

-- A strip's entries (migration 0019, mandate_log_put_entries): stored in the organization's
-- shard of log_entries by its name when that shard is on the node the call runs on, with
-- the arguments as they came; otherwise by the INSERT Citus routes. Citus sends a statement
-- on a distributed table to its shard as text with its arguments written out as literals,
-- and a strip's entries are up to 256 tokens. As every write of Citus does, it first takes
-- the shard's metadata lock, so a move of the shard waits for this commit (and this for
-- the move's), then finds whether the shard's one placement is here.
DO $$
DECLARE
    body CONSTANT TEXT := $body$
DECLARE
    v_shard BIGINT := get_shard_id_for_distribution_column('log_entries', p_org);
BEGIN
    PERFORM lock_shard_metadata(5, ARRAY[v_shard]);
    IF EXISTS (SELECT 1 FROM pg_dist_placement p
               WHERE p.shardid = v_shard
                 AND p.groupid = (SELECT groupid FROM pg_dist_local_group)
                 AND NOT EXISTS (SELECT 1 FROM pg_dist_placement q
                                 WHERE q.shardid = p.shardid AND q.groupid <> p.groupid)) THEN
        EXECUTE format('INSERT INTO %I.%I (org_id, env, start, entries) VALUES ($1, $2, $3, $4)',
                       current_schema(), 'log_entries_' || v_shard)
            USING p_org, p_env, p_start, p_entries;
    ELSE
        INSERT INTO log_entries (org_id, env, start, entries)
            VALUES (p_org, p_env, p_start, p_entries);
    END IF;
END
$body$;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_proc p
                   WHERE p.proname = 'mandate_log_put_entries'
                     AND p.pronamespace = current_schema()::regnamespace) THEN
        RAISE EXCEPTION 'mandate_log_put_entries (migration 0019) is missing: run the numbered migrations first';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_proc p
                   WHERE p.proname = 'mandate_log_put_entries'
                     AND p.pronamespace = current_schema()::regnamespace AND p.prosrc = body) THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION mandate_log_put_entries(p_org TEXT, p_env TEXT, p_start BIGINT, p_entries BYTEA) RETURNS VOID LANGUAGE plpgsql AS %L', body);
    END IF;
END $$;
