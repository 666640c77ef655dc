-- 0013: AP2 (issue #36). The issuer keys an organization trusts to sign the AP2 open
-- payment mandates it imports (operator command `ap2-issuer`), and, on a mandate imported
-- from one, the SD-JWT as presented and its digest (the verdict's `ap2_mandate` binding).
CREATE TABLE ap2_issuers (
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    kid        TEXT NOT NULL,
    -- The public JWK (EC P-256, ES256), JSON.
    jwk        TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (org_id, kid)
);
-- NULL on a mandate given as plain terms.
ALTER TABLE mandates ADD COLUMN ap2_open_mandate TEXT;
ALTER TABLE mandates ADD COLUMN ap2_digest TEXT;
