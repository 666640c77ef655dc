-- 0015: one consent, one use, service-wide (issue #51). An AP2 open payment mandate is in
-- force in one organization and environment: the first import binds it there, by its
-- consent key (mandate_core::ap2::OpenMandate::consent_key: its issuer JWT's digest with
-- the signature in low-S form, one name for both ECDSA twins), and an import elsewhere is
-- refused. Keyed by the consent key, not by organization: read and written only by an
-- import, never by a decision.
CREATE TABLE ap2_consents (
    consent_key TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL,
    env         TEXT NOT NULL,
    created_ms  INTEGER NOT NULL
);
-- Mandates imported before: their stored digest was the low-S one, their consent key. The
-- first import of each (by creation) is where it is in force.
INSERT OR IGNORE INTO ap2_consents (consent_key, org_id, env, created_ms)
SELECT ap2_digest, org_id, env, created_ms
FROM mandates
WHERE ap2_digest IS NOT NULL
ORDER BY created_ms, seq;
