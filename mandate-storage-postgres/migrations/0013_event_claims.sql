-- 0013: the events of a group's reviews take their seqs by claim (issue #49).
--
-- A group of decisions claims the seqs of the events its reviews open in its claim's short
-- transaction, beside its decisions' seqs, instead of moving the organization's events
-- counter in its own transaction and holding that row to its commit (which made the groups
-- of every process take turns). Readers of the events stop below the lowest open claim
-- (docs/webhooks.md, "Reading the log"), as readers of the decisions do.
ALTER TABLE decision_claims ADD COLUMN first_event BIGINT;
