-- 0014: a decision maintains three index entries, not five (issue #49).
--
-- * decisions_by_env (org_id, env, seq) becomes the primary key, in place of (org_id, seq):
--   every read by seq names the environment (lists, exports, the log's tail), and an
--   organization's seqs are unique by their claims (claims.rs), so the narrower key held
--   nothing the wider one does not.
-- * decisions_by_agent_time (org_id, agent_seq, created_ms) goes. It served one read: an
--   agent's allowed decisions since the start of its longest window (its state rebuilt).
--   That read now walks decisions_by_agent (org_id, agent_seq, seq) from the first seq
--   decision_months gives for the window's month on.
--
-- decision_months: for each organization and UTC month (year * 12 + month - 1 of
-- created_ms), a seq at or below every decision of that month or a later one stored by a
-- claim naming it. A group's claim names the month of its latest decision and writes the
-- first seq of its block there unless a row is there already (claims.rs, MONTH); a
-- decision stored outside the groups writes its own seq the same way. Claims take seqs in
-- the order of their commits, so the first claim to name a month holds the lowest block of
-- any that names it, and a decision of month m or later lies in a claim naming m or a
-- later month: the lowest first_seq of the months from m on is at or below each of them.
CREATE TABLE decision_months (
    org_id    TEXT   NOT NULL,
    month     BIGINT NOT NULL,
    first_seq BIGINT NOT NULL,
    PRIMARY KEY (org_id, month)
);

-- Each statement on decisions goes through EXECUTE: on Citus, where decisions is already
-- distributed, a DDL command is sent to the workers as the text of the query that holds it,
-- which must be that command alone (this file is one message of many statements), and the
-- statements touch the distributed table over one connection a node (sequential), as a
-- transaction that changes its DDL must.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    END IF;
    EXECUTE $q$
        INSERT INTO decision_months (org_id, month, first_seq)
        SELECT org_id, month, MIN(seq)
        FROM (SELECT org_id, seq,
                     (EXTRACT(YEAR FROM to_timestamp(created_ms / 1000) AT TIME ZONE 'UTC') * 12
                      + EXTRACT(MONTH FROM to_timestamp(created_ms / 1000) AT TIME ZONE 'UTC')
                      - 1)::BIGINT AS month
              FROM decisions) AS d
        GROUP BY org_id, month $q$;
    EXECUTE 'ALTER TABLE decisions DROP CONSTRAINT decisions_pkey';
    EXECUTE 'DROP INDEX decisions_by_env';
    EXECUTE 'ALTER TABLE decisions ADD PRIMARY KEY (org_id, env, seq)';
    EXECUTE 'DROP INDEX decisions_by_agent_time';
END $$;
