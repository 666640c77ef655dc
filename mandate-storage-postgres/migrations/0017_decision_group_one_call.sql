-- 0017: a group of decisions reaches the database as one call, mandate_record, one
-- transaction with one commit (storage/postgres/writer.rs). It replaces the two calls of
-- migration 0015 (mandate_claim, then mandate_store), which stay for processes of the
-- previous release during a rolling upgrade.
--
-- The seqs of a group are taken in its own transaction: each organization's counter row
-- moves by the decisions it stores, and stays locked until the group commits. So an
-- organization's decisions (and events) commit in the order of their seqs, and readers need
-- no claim: every seq at or below the counter's committed value is committed (its
-- watermark, docs/exports.md), and a group rolled back leaves no gap. The price is that two
-- groups of one organization commit one after the other; an organization's decisions go to
-- one writer of a process, so only the writers of different processes (and a review
-- resolved, a mandate revoked: events appended outside the groups) ever wait for each
-- other's commit, and a group takes what arrived meanwhile.
--
-- Locks are taken in one order in every group of every process: first the agents' rows
-- (and the requests' Idempotency-Key rows), organizations by id, an organization's agents
-- by key; then the counter rows, organizations by id, the decisions' before the events'.
-- Every transaction outside the groups that takes a counter row (an approval's decision, an
-- event) takes it after any agent's row, and only its own organization's: no two wait on
-- each other in a circle.
--
-- On plain PostgreSQL (p_at_once) each of these is one statement for the whole group,
-- whatever its organizations: the version moves of its decisions without an
-- Idempotency-Key or a credential, the counters, the months, the rows. On Citus the
-- function is distributed by its first argument, co-located with `environments`, and runs
-- whole on the worker that holds the group's organizations; every statement in it names
-- one organization (Citus's fast path, on the local shard).
--
-- Arguments: p_org, the group's first organization (the distribution argument on Citus);
-- p_unchecked (a planted bug for the history checker's own test, never set by a release
-- build) stores a decision whatever its agent's version; o_orgs, the group's organizations
-- in order, each once, and o_months, for each the month of its latest decision to mark in
-- decision_months with the first seq the group gives it (NULL: known to be marked); then,
-- a decision each, in the order of their organizations (the decisions of one together),
-- then of their agents' keys, as mandate_store takes them (migration 0015).
-- Returns, for each decision in order: 1 stored, 0 not stored (its agent or mode changed, or
-- its credential was accepted before), -1 not stored (its Idempotency-Key claim is no longer
-- its own).
CREATE FUNCTION mandate_record(
    p_org TEXT, p_unchecked BOOLEAN, p_at_once BOOLEAN,
    o_orgs TEXT[], o_months BIGINT[],
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
-- loop over the arrays), so that a statement locks its rows in that order, as every group
-- does, and costs a probe a row, not a scan. One plan a statement and connection, made at
-- its first call: the plan is the same whatever the arrays hold, and PostgreSQL would
-- otherwise plan the statements again on calls where it finds a custom plan cheaper.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_mergejoin = off
SET enable_hashjoin = off
LANGUAGE plpgsql AS $fn$
DECLARE
    n          INT := coalesce(array_length(d_id, 1), 0);
    k_n        INT := coalesce(array_length(o_orgs, 1), 0);
    outcome    INT[] := array_fill(0, ARRAY[coalesce(array_length(d_id, 1), 0)]);
    -- Each decision's organization, as its index in o_orgs.
    d_k        INT[] := array_fill(0, ARRAY[coalesce(array_length(d_id, 1), 0)]);
    -- For each organization: the decisions it stores and the reviews they open, then the
    -- next seq of each of its blocks.
    o_stored   BIGINT[] := array_fill(0::BIGINT, ARRAY[coalesce(array_length(o_orgs, 1), 0)]);
    o_reviews  BIGINT[] := array_fill(0::BIGINT, ARRAY[coalesce(array_length(o_orgs, 1), 0)]);
    o_next     BIGINT[] := array_fill(NULL::BIGINT, ARRAY[coalesce(array_length(o_orgs, 1), 0)]);
    o_next_ev  BIGINT[] := array_fill(NULL::BIGINT, ARRAY[coalesce(array_length(o_orgs, 1), 0)]);
    o_first    BIGINT[] := array_fill(NULL::BIGINT, ARRAY[coalesce(array_length(o_orgs, 1), 0)]);
    v_k        INT;
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
    v_count    BIGINT;
    v_last     BIGINT;
    v_month    BIGINT;
    -- At once: where the run of plain decisions being gathered starts (0: none), and each
    -- stored decision's seq.
    v_run      INT := 0;
    v_seqs     BIGINT[] := array_fill(NULL::BIGINT, ARRAY[coalesce(array_length(d_id, 1), 0)]);
BEGIN
    -- Each decision's organization in o_orgs (both in the same order).
    v_k := 1;
    FOR i IN 1 .. n LOOP
        WHILE v_k <= k_n AND o_orgs[v_k] IS DISTINCT FROM d_org[i] LOOP
            v_k := v_k + 1;
        END LOOP;
        IF v_k > k_n THEN
            RAISE EXCEPTION 'decision % of organization % is not in the group''s organizations',
                d_id[i], d_org[i];
        END IF;
        d_k[i] := v_k;
    END LOOP;
    -- The version moves (and credentials), in the order given.
    FOR i IN 1 .. n + 1 LOOP
        -- At once, a run of plain decisions ends before a decision that is not one (or
        -- after the last): its versions are moved in one statement, each row found by its
        -- key, locked in order, whatever the organizations.
        IF p_at_once AND v_run > 0
           AND (i > n OR i_key[i] IS NOT NULL OR a_credential[i] IS NOT NULL) THEN
            FOR v_number IN
                UPDATE agents a SET version = a.version + 1, last_decision = u.id
                FROM unnest(d_org[v_run:i - 1], d_agent_seq[v_run:i - 1],
                            d_version[v_run:i - 1], d_id[v_run:i - 1], d_env[v_run:i - 1],
                            d_mode[v_run:i - 1])
                     WITH ORDINALITY AS u (org, seq, version, id, env, mode, at)
                WHERE a.org_id = u.org AND a.seq = u.seq
                  AND (a.version = u.version OR p_unchecked)
                  -- A scalar subquery a row, not a join: the statement joins the arrays
                  -- with agents alone, probing (and locking) in the arrays' order.
                  AND u.mode = (SELECT e.mode FROM environments e
                                WHERE e.org_id = u.org AND e.env = u.env)
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
    -- What each organization stores.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN outcome[i] <> 1;
        o_stored[d_k[i]] := o_stored[d_k[i]] + 1;
        IF r_id[i] IS NOT NULL THEN
            o_reviews[d_k[i]] := o_reviews[d_k[i]] + 1;
        END IF;
    END LOOP;
    -- The seqs: each organization's counters move by what it stores, in the order of the
    -- organizations, the decisions' before the events', held until the commit.
    IF p_at_once THEN
        FOR v_k, v_last IN
            UPDATE org_counters c SET value = c.value + u.stored
            FROM unnest(o_orgs, o_stored) WITH ORDINALITY AS u (org, stored, k)
            WHERE c.org_id = u.org AND c.name = 'decisions' AND u.stored > 0
            RETURNING u.k::INT, c.value
        LOOP
            o_first[v_k] := v_last - o_stored[v_k] + 1;
        END LOOP;
        FOR v_k, v_last IN
            UPDATE org_counters c SET value = c.value + u.reviews
            FROM unnest(o_orgs, o_reviews) WITH ORDINALITY AS u (org, reviews, k)
            WHERE c.org_id = u.org AND c.name = 'events' AND u.reviews > 0
            RETURNING u.k::INT, c.value
        LOOP
            o_next_ev[v_k] := v_last - o_reviews[v_k] + 1;
        END LOOP;
    ELSE
        FOR k IN 1 .. k_n LOOP
            CONTINUE WHEN o_stored[k] = 0;
            v_org := o_orgs[k];
            v_count := o_stored[k];
            v_last := NULL;
            UPDATE org_counters SET value = value + v_count
                WHERE org_id = v_org AND name = 'decisions'
                RETURNING value INTO v_last;
            o_first[k] := v_last - v_count + 1;
            CONTINUE WHEN o_reviews[k] = 0;
            v_count := o_reviews[k];
            v_last := NULL;
            UPDATE org_counters SET value = value + v_count
                WHERE org_id = v_org AND name = 'events'
                RETURNING value INTO v_last;
            o_next_ev[k] := v_last - v_count + 1;
        END LOOP;
    END IF;
    FOR k IN 1 .. k_n LOOP
        CONTINUE WHEN o_stored[k] = 0;
        IF o_first[k] IS NULL OR (o_reviews[k] > 0 AND o_next_ev[k] IS NULL) THEN
            RAISE EXCEPTION 'organization % has no decisions or events counter', o_orgs[k];
        END IF;
        o_next[k] := o_first[k];
    END LOOP;
    -- Each month of the group marked with its organization's first seq in it, unless it is
    -- marked: a later group's seqs are above this one's, as its counter waits for this
    -- commit.
    IF p_at_once THEN
        INSERT INTO decision_months (org_id, month, first_seq)
            SELECT u.org, u.month, u.first
            FROM unnest(o_orgs, o_months, o_first) AS u (org, month, first)
            WHERE u.month IS NOT NULL AND u.first IS NOT NULL
            ON CONFLICT (org_id, month) DO NOTHING;
    ELSE
        FOR k IN 1 .. k_n LOOP
            CONTINUE WHEN o_months[k] IS NULL OR o_first[k] IS NULL;
            v_org := o_orgs[k];
            v_month := o_months[k];
            v_seq := o_first[k];
            INSERT INTO decision_months (org_id, month, first_seq)
                VALUES (v_org, v_month, v_seq)
                ON CONFLICT (org_id, month) DO NOTHING;
        END LOOP;
    END IF;
    -- What the stored decisions write, each organization's with its seqs.
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN outcome[i] <> 1;
        v_k := d_k[i];
        v_org := d_org[i];
        v_env := d_env[i];
        v_id := d_id[i];
        v_created := d_created_ms[i];
        IF r_id[i] IS NOT NULL THEN
            INSERT INTO reviews (org_id, env, id, decision_id, agent_id, status, created_ms,
                                 expires_ms)
                VALUES (v_org, v_env, r_id[i], v_id, d_agent_id[i], r_status[i],
                        r_created_ms[i], r_expires_ms[i]);
            v_event := o_next_ev[v_k];
            v_text := r_event[i];
            INSERT INTO events (org_id, seq, env, id, type, data, created_ms)
                VALUES (v_org, v_event, v_env, v_text, 'decision.review_pending', r_data[i],
                        v_created);
            o_next_ev[v_k] := v_event + 1;
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
        v_seq := o_next[v_k];
        o_next[v_k] := v_seq + 1;
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
    RETURN outcome;
END
$fn$;
