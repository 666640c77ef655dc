-- 0020: each page of log_heads keeps room for its rows' next versions.
--
-- A log's round updates its head twice (the append, then the checkpoint shown), and a
-- head row carries two signed checkpoints: pages packed full have no room for the new
-- versions, so every update moved its row to another page, with a new index entry and a
-- dead row for autovacuum. With one organization this was a few rows a second; with a
-- thousand, every round moved every row. With room on the page the update stays there
-- (a heap-only tuple) and the page is pruned in passing.
ALTER TABLE log_heads SET (fillfactor = 25);
