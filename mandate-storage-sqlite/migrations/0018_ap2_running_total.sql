-- 0018: an AP2 open mandate is one running total. Its budget and occurrence count are
-- spent once across every mandate imported from it (the mandates that carry it), whatever
-- agent each was imported for: an import supersedes the mandates still carrying it and
-- starts from what they spent.
--
-- ap2_consent: the open mandate's consent key (ap2_consents) on a mandate imported from
-- it, set at import; NULL on a plain mandate, and on one imported before this migration
-- until the next import into its organization and environment keys it (the key is the
-- SD-JWT's, computed by the core, not by SQL).
-- ap2_spent: what the open mandate had spent under the mandates that carried it before
-- this one, when this one was imported (mandate_core's SpendToDate as JSON, exact
-- amounts); NULL when none carried it before.
ALTER TABLE mandates ADD COLUMN ap2_consent TEXT;
ALTER TABLE mandates ADD COLUMN ap2_spent TEXT;
-- The mandates of a consent, read by an import.
CREATE INDEX mandates_by_consent ON mandates (org_id, env, ap2_consent)
    WHERE ap2_consent IS NOT NULL;
-- The imported mandates not keyed yet.
CREATE INDEX mandates_unkeyed ON mandates (org_id, env)
    WHERE ap2_open_mandate IS NOT NULL AND ap2_consent IS NULL;
