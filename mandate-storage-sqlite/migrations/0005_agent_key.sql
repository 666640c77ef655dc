-- 0005: decisions_by_agent keyed by an integer per agent.
--
-- Keyed by (org_id, env, agent_id, seq) the index held ~75 bytes an entry: with 100,000
-- agents the leaves that receive their next decisions (one per agent) outgrew the
-- writer's cache, and history cost throughput (docs/performance.md). agents.seq is the
-- agent's integer (agents are never deleted); the index on (agent_seq, seq) is several
-- times smaller. Every query that reads by agent turns the agent id into agent_seq first.

ALTER TABLE decisions ADD COLUMN agent_seq INTEGER;
UPDATE decisions SET agent_seq = (
    SELECT a.seq FROM agents a
    WHERE a.org_id = decisions.org_id AND a.env = decisions.env AND a.id = decisions.agent_id
);
DROP INDEX decisions_by_agent;
CREATE INDEX decisions_by_agent ON decisions (agent_seq, seq);
