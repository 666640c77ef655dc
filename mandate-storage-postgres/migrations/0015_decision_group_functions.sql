-- 0015: a group of decisions reaches the database as two calls (storage/postgres/writer.rs):
-- mandate_claim, which claims the group's seqs in a short commit of its own, and
-- mandate_store, which stores the group in one transaction. Each is one round trip, and its
-- statements are planned once a connection (PL/pgSQL keeps their plans). On Citus both are
-- distributed functions, by their first argument, co-located with `environments`
-- (citus.sql): a call is run whole on the worker that holds that organization, and every
-- statement in it is a single-table statement naming its organization, which Citus plans on
-- its fast path and runs on the local shard. A group holds the organizations of one worker
-- (plain PostgreSQL: of the database), each organization's decisions together, in the order
-- of their agents' keys.
--
-- Both functions lock rows in the order they are given: organizations in the order of their
-- ids, an organization's agents in the order of their keys. Every writer of every process
-- gives them so, so two groups never wait on each other in a circle.

-- Claims, for writer p_writer, p_seqs[i] decision seqs and p_events[i] event seqs of
-- organization p_orgs[i] (p_org is the first of them: the distribution argument), and marks
-- month p_months[i] of each with the first seq of its block unless the month is marked (or
-- the writer knows it is: NULL)
-- (docs/scale.md, storage/postgres/claims.rs). Returns, for each organization in order, the
-- first seq of its block and the first seq of its events' block (NULL when none is claimed).
-- Its commit does not wait for its WAL flush: the group's own commit, which waits, covers it,
-- and a claim lost in a crash belonged to a group that never committed.
CREATE FUNCTION mandate_claim(p_org TEXT, p_writer TEXT, p_orgs TEXT[], p_seqs BIGINT[],
                              p_events BIGINT[], p_months BIGINT[])
RETURNS TABLE (claimed_seq BIGINT, claimed_event BIGINT)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_org    TEXT;
    v_seqs   BIGINT;
    v_events BIGINT;
    v_month  BIGINT;
    v_last   BIGINT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR i IN 1 .. coalesce(array_length(p_orgs, 1), 0) LOOP
        -- A statement's conditions take plain variables, not array elements (see
        -- mandate_store).
        v_org := p_orgs[i];
        v_seqs := p_seqs[i];
        v_events := p_events[i];
        v_month := p_months[i];
        v_last := NULL;
        UPDATE org_counters SET value = value + v_seqs
            WHERE org_id = v_org AND name = 'decisions'
            RETURNING value INTO v_last;
        IF v_last IS NULL THEN
            RAISE EXCEPTION 'organization % has no decisions counter', v_org;
        END IF;
        claimed_seq := v_last - v_seqs + 1;
        claimed_event := NULL;
        IF v_events > 0 THEN
            UPDATE org_counters SET value = value + v_events
                WHERE org_id = v_org AND name = 'events'
                RETURNING value INTO v_last;
            claimed_event := v_last - v_events + 1;
        END IF;
        -- The writer's row holds the claim until the group settles it; a row swept (its
        -- process taken for dead) is made again.
        UPDATE decision_claims
            SET first_seq = claimed_seq, first_event = claimed_event, claimed_at = now()
            WHERE org_id = v_org AND writer = p_writer;
        IF NOT FOUND THEN
            INSERT INTO decision_claims (org_id, writer, first_seq, first_event, claimed_at)
            VALUES (v_org, p_writer, claimed_seq, claimed_event, now());
        END IF;
        IF v_month IS NOT NULL THEN
            INSERT INTO decision_months (org_id, month, first_seq)
                VALUES (v_org, v_month, claimed_seq)
                ON CONFLICT (org_id, month) DO NOTHING;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- Stores a group of decisions in one transaction, each only if its agent's version is still
-- the one it was read at (d_version) and its environment's mode still the one it was made in
-- (d_mode), and, with an Idempotency-Key, the request's claim on it still its own (its row
-- locked); with a single-use credential, only if no decision accepted it before. For each
-- decision stored: the agent's version moved and marked as its (last_decision), the
-- credential accepted, the review it opens with its event (at the seq its group claimed) and
-- deliveries, its idempotency record completed, and its row, with the next seq of its
-- organization's claimed block. Then each organization's claim is settled; a claim no longer
-- the one given (swept as stale) fails the call, which rolls the group back.
-- c_*: the group's claims, one an organization (mandate_claim's answers).
-- d_*: each decision's row and what its version move checks; i_*: its Idempotency-Key's
-- record (NULLs without one); a_credential: the single-use credential it accepts (or NULL);
-- r_*: the review it opens with its event (NULLs without one).
-- Returns, for each decision in order: 1 stored, 0 not stored (its agent or mode changed, or
-- its credential was accepted before), -1 not stored (its Idempotency-Key claim is no longer
-- its own). p_unchecked (a planted bug for the history checker's own test, never set by a
-- release build) stores a decision whatever its agent's version. With p_at_once (plain
-- PostgreSQL) each run of decisions with neither an Idempotency-Key nor a credential moves
-- its agents' versions with one statement, and the group's rows are inserted by one: fewer
-- statements, where each costs little; on Citus every statement is one row's, which Citus
-- plans on its fast path.
CREATE FUNCTION mandate_store(
    p_org TEXT, p_writer TEXT, p_unchecked BOOLEAN, p_at_once BOOLEAN,
    c_orgs TEXT[], c_firsts BIGINT[], c_events BIGINT[],
    d_org TEXT[], d_env TEXT[], d_agent_seq BIGINT[], d_version BIGINT[], d_mode TEXT[],
    d_id TEXT[], d_agent_id TEXT[], d_mandate_id TEXT[], d_verdict TEXT[],
    d_policy_verdict TEXT[], d_reason TEXT[], d_amount TEXT[], d_currency TEXT[],
    d_recipient TEXT[], d_category TEXT[], d_nonce TEXT[], d_policy_version TEXT[],
    d_iss TEXT[], d_iat BIGINT[], d_exp BIGINT[], d_created_ms BIGINT[], d_supersedes TEXT[],
    d_review_id TEXT[], d_is_request BOOLEAN[], d_signing_kid TEXT[], d_signature BYTEA[],
    d_bindings TEXT[], d_leaf BYTEA[],
    i_key_hash BYTEA[], i_key TEXT[], i_claim BYTEA[], i_status INT[], i_body BYTEA[],
    i_request_id TEXT[],
    a_credential TEXT[],
    r_id TEXT[], r_status TEXT[], r_created_ms BIGINT[], r_expires_ms BIGINT[], r_event TEXT[],
    r_data TEXT[])
RETURNS INT[]
-- Rows are found through their keys only, one probe a row in the order given (a nested
-- loop over the run's arrays), so that a run's version moves lock its agents' rows in that
-- order, as every group does, and cost a probe each, not a scan of the organization's
-- agents.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_mergejoin = off
SET enable_hashjoin = off
LANGUAGE plpgsql AS $fn$
DECLARE
    n          INT := coalesce(array_length(d_id, 1), 0);
    outcome    INT[] := array_fill(0, ARRAY[coalesce(array_length(d_id, 1), 0)]);
    -- The next seq of each claimed block, and of its events' block.
    v_next     BIGINT[] := c_firsts;
    v_next_ev  BIGINT[] := c_events;
    v_claim    INT;
    v_webhook  TEXT;
    v_mode     TEXT;
    v_mode_org TEXT;
    v_mode_env TEXT;
    -- A statement's conditions take plain variables, not array elements: Citus 13.2 crashes
    -- (a segmentation fault of the worker's backend) running a fast-path statement whose
    -- WHERE compares a column with an array's element.
    v_org      TEXT;
    v_env      TEXT;
    v_seq      BIGINT;
    v_event    BIGINT;
    v_agent    BIGINT;
    v_version  BIGINT;
    v_id       TEXT;
    v_key_hash BYTEA;
    v_key      TEXT;
    v_created  BIGINT;
    v_text     TEXT;
    v_bytes    BYTEA;
    v_number   INT;
    v_first    BIGINT;
    -- At once: where the run of plain decisions being gathered starts (0: none), and each
    -- stored decision's seq.
    v_run      INT := 0;
    v_seqs     BIGINT[] := array_fill(NULL::BIGINT, ARRAY[coalesce(array_length(d_id, 1), 0)]);
BEGIN
    -- The version moves (and credentials), in the order given.
    FOR i IN 1 .. n + 1 LOOP
        -- At once, a run of plain decisions of one organization ends before a decision that
        -- is not one (or of another organization, or after the last): its versions are
        -- moved in one statement, each row found by its key, locked in order.
        IF p_at_once AND v_run > 0
           AND (i > n OR i_key[i] IS NOT NULL OR a_credential[i] IS NOT NULL
                OR d_org[i] IS DISTINCT FROM d_org[v_run]) THEN
            v_org := d_org[v_run];
            FOR v_number IN
                UPDATE agents a SET version = a.version + 1, last_decision = u.id
                FROM unnest(d_agent_seq[v_run:i - 1], d_version[v_run:i - 1],
                            d_id[v_run:i - 1], d_env[v_run:i - 1], d_mode[v_run:i - 1])
                     WITH ORDINALITY AS u (seq, version, id, env, mode, at)
                WHERE a.org_id = v_org AND a.seq = u.seq
                  AND (a.version = u.version OR p_unchecked)
                  AND EXISTS (SELECT 1 FROM environments e
                              WHERE e.org_id = v_org AND e.env = u.env AND e.mode = u.mode)
                RETURNING v_run + u.at::INT - 1
            LOOP
                outcome[v_number] := 1;
            END LOOP;
            v_run := 0;
        END IF;
        EXIT WHEN i > n;
        IF p_at_once AND i_key[i] IS NULL AND a_credential[i] IS NULL THEN
            IF v_run = 0 THEN
                v_run := i;
            END IF;
            CONTINUE;
        END IF;
        v_org := d_org[i];
        v_env := d_env[i];
        v_id := d_id[i];
        IF v_mode_org IS DISTINCT FROM v_org OR v_mode_env IS DISTINCT FROM v_env THEN
            SELECT mode INTO v_mode FROM environments WHERE org_id = v_org AND env = v_env;
            v_mode_org := v_org;
            v_mode_env := v_env;
        END IF;
        IF i_key[i] IS NOT NULL THEN
            v_key_hash := i_key_hash[i];
            v_key := i_key[i];
            v_bytes := i_claim[i];
            PERFORM 1 FROM idempotency
                WHERE org_id = v_org AND key_hash = v_key_hash AND idem_key = v_key
                  AND claim = v_bytes AND status IS NULL
                FOR UPDATE;
            IF NOT FOUND THEN
                outcome[i] := -1;
                CONTINUE;
            END IF;
        END IF;
        CONTINUE WHEN v_mode IS DISTINCT FROM d_mode[i];
        v_agent := d_agent_seq[i];
        v_version := d_version[i];
        UPDATE agents SET version = version + 1, last_decision = v_id
            WHERE org_id = v_org AND seq = v_agent AND (version = v_version OR p_unchecked);
        CONTINUE WHEN NOT FOUND;
        IF a_credential[i] IS NOT NULL THEN
            v_text := a_credential[i];
            v_created := d_created_ms[i];
            INSERT INTO accepted_credentials (org_id, env, id, decision_id, created_ms)
                VALUES (v_org, v_env, v_text, v_id, v_created)
                ON CONFLICT DO NOTHING;
            CONTINUE WHEN NOT FOUND;
        END IF;
        outcome[i] := 1;
    END LOOP;
    -- What the stored decisions write, each organization's from its claimed blocks.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN outcome[i] <> 1;
        v_org := d_org[i];
        v_env := d_env[i];
        v_id := d_id[i];
        v_created := d_created_ms[i];
        v_claim := array_position(c_orgs, v_org);
        IF v_claim IS NULL THEN
            RAISE EXCEPTION 'decision % of organization % has no claim', v_id, v_org;
        END IF;
        IF r_id[i] IS NOT NULL THEN
            INSERT INTO reviews (org_id, env, id, decision_id, agent_id, status, created_ms,
                                 expires_ms)
                VALUES (v_org, v_env, r_id[i], v_id, d_agent_id[i], r_status[i],
                        r_created_ms[i], r_expires_ms[i]);
            v_event := v_next_ev[v_claim];
            v_text := r_event[i];
            INSERT INTO events (org_id, seq, env, id, type, data, created_ms)
                VALUES (v_org, v_event, v_env, v_text, 'decision.review_pending', r_data[i],
                        v_created);
            v_next_ev[v_claim] := v_event + 1;
            -- One delivery to each active endpoint subscribed to the event's type, due at once.
            FOR v_webhook IN SELECT id FROM webhooks
                WHERE org_id = v_org AND env = v_env AND status = 'active'
                  AND events ? 'decision.review_pending'
            LOOP
                INSERT INTO deliveries (org_id, event_id, webhook_id, attempts, next_attempt_ms,
                                        state, created_ms)
                    VALUES (v_org, v_text, v_webhook, 0, v_created, 'pending', v_created);
            END LOOP;
        END IF;
        IF i_key[i] IS NOT NULL THEN
            v_key_hash := i_key_hash[i];
            v_key := i_key[i];
            v_number := i_status[i];
            v_bytes := i_body[i];
            v_text := i_request_id[i];
            UPDATE idempotency
                SET status = v_number, body = v_bytes, request_id = v_text, claimed_until = NULL
                WHERE org_id = v_org AND key_hash = v_key_hash AND idem_key = v_key
                  AND status IS NULL;
        END IF;
        v_seq := v_next[v_claim];
        v_next[v_claim] := v_seq + 1;
        IF p_at_once THEN
            v_seqs[i] := v_seq;
            CONTINUE;
        END IF;
        INSERT INTO decisions (seq, agent_seq, id, org_id, env, agent_id, mandate_id, verdict,
                               policy_verdict, reason, mode, amount, currency, recipient,
                               category, nonce, policy_version, iss, iat, exp, created_ms,
                               supersedes, review_id, is_request, signing_kid, signature,
                               bindings, leaf)
            VALUES (v_seq, d_agent_seq[i], v_id, v_org, v_env, d_agent_id[i], d_mandate_id[i],
                    d_verdict[i], d_policy_verdict[i], d_reason[i], d_mode[i], d_amount[i],
                    d_currency[i], d_recipient[i], d_category[i], d_nonce[i],
                    d_policy_version[i], d_iss[i], d_iat[i], d_exp[i], v_created,
                    d_supersedes[i], d_review_id[i], d_is_request[i], d_signing_kid[i],
                    d_signature[i], d_bindings[i], d_leaf[i]);
    END LOOP;
    -- At once: every stored decision's row by one statement.
    IF p_at_once THEN
        INSERT INTO decisions (seq, agent_seq, id, org_id, env, agent_id, mandate_id, verdict,
                               policy_verdict, reason, mode, amount, currency, recipient,
                               category, nonce, policy_version, iss, iat, exp, created_ms,
                               supersedes, review_id, is_request, signing_kid, signature,
                               bindings, leaf)
            SELECT * FROM unnest(v_seqs, d_agent_seq, d_id, d_org, d_env, d_agent_id,
                                 d_mandate_id, d_verdict, d_policy_verdict, d_reason, d_mode,
                                 d_amount, d_currency, d_recipient, d_category, d_nonce,
                                 d_policy_version, d_iss, d_iat, d_exp, d_created_ms,
                                 d_supersedes, d_review_id, d_is_request, d_signing_kid,
                                 d_signature, d_bindings, d_leaf)
                AS r (seq, agent_seq, id, org_id, env, agent_id, mandate_id, verdict,
                      policy_verdict, reason, mode, amount, currency, recipient, category,
                      nonce, policy_version, iss, iat, exp, created_ms, supersedes,
                      review_id, is_request, signing_kid, signature, bindings, leaf)
            WHERE r.seq IS NOT NULL;
    END IF;
    -- Each claim settled, only if it is still the one given when it stored decisions (so
    -- that none lands at or below a watermark readers have passed).
    FOR k IN 1 .. coalesce(array_length(c_orgs, 1), 0) LOOP
        v_org := c_orgs[k];
        v_first := c_firsts[k];
        UPDATE decision_claims SET first_seq = NULL, first_event = NULL
            WHERE org_id = v_org AND writer = p_writer AND first_seq = v_first;
        IF NOT FOUND AND v_next[k] > v_first THEN
            RAISE EXCEPTION 'the claim of writer % on organization % was swept', p_writer, v_org
                USING ERRCODE = 'MD001';
        END IF;
    END LOOP;
    RETURN outcome;
END
$fn$;
