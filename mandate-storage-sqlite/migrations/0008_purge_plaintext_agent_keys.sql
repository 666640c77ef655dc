-- 0008: stored idempotent responses are sealed from now on (src/seal.rs). Records stored
-- before held their body in plaintext, and the answer to POST /v1/agents holds the new
-- agent's key: those are dropped, with their bytes overwritten (secure_delete), so no
-- agent key stays at rest. A retry of such a request runs again (409 name_taken: the
-- agent exists). Other plaintext records still replay as they are until they expire.
PRAGMA secure_delete = ON;
DELETE FROM idempotency
 WHERE body IS NOT NULL AND instr(CAST(body AS BLOB), CAST('"agent_key"' AS BLOB)) > 0;
PRAGMA secure_delete = OFF;
