-- 0006: decisions_by_agent grouped by ranges of seq.
--
-- Keyed by (agent_seq, seq), each agent's next decision went to the end of that agent's
-- run of entries: with 100,000 agents and 10 million decisions, to one of ~45,000 leaves
-- spread over the whole index, which no cache within the memory budget holds. Storing a
-- decision then read a leaf from the OS and wrote it back, and the cost of a decision grew
-- with history (docs/performance.md).
--
-- Led by seq >> 18, every new entry lands in the part of the index that holds the latest
-- 262,144 decisions (a few MB), whatever the history; older parts are never written again.
-- A read by agent walks the parts that its seq range spans, newest or oldest first, with
-- one seek per part (storage/decisions.rs, BUCKET_BITS). The expression must stay
-- `seq >> 18` for SQLite to match the queries to this index.

DROP INDEX decisions_by_agent;
CREATE INDEX decisions_by_agent ON decisions (seq >> 18, agent_seq, seq);
