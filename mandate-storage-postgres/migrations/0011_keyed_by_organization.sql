-- 0011: organizations are the unit of distribution (issue #48, docs/scale.md). Every
-- table that holds an organization's data is keyed by org_id first: its primary key, its
-- unique constraints and its foreign keys. No identity columns: the seqs that order an
-- organization's rows (agents, mandates, events, webhooks, the decision log) come from the
-- organization's rows of org_counters, moved by the statement that inserts, in its
-- transaction; the handles that need only be unique are natural keys (a delivery is its
-- event and endpoint, an attempt adds its number, a movement is its escrow and kind). The
-- decision log's claims and the readers' watermark are per organization. The same schema
-- runs undistributed on plain PostgreSQL; on Citus, `migrate` distributes it after the
-- numbered migrations (migrations.rs). Tables shared by all (orgs, api_keys, signing_keys,
-- settings, counters, ap2_consents, schema_migrations) keep their keys.
-- Processes of an older build must be stopped first: they insert through the identities
-- and claim from the global counter.

-- The per-organization counters. Every organization continues above every seq given so
-- far, so list cursors and export marks stay valid and every new seq is above every old.
CREATE TABLE org_counters (
    org_id TEXT NOT NULL REFERENCES orgs (id),
    name   TEXT NOT NULL,
    value  BIGINT NOT NULL,
    PRIMARY KEY (org_id, name)
);
INSERT INTO org_counters (org_id, name, value)
SELECT o.id, c.name, c.value FROM orgs o CROSS JOIN (VALUES
    ('decisions', GREATEST((SELECT value FROM counters WHERE name = 'decision_seq'),
                           (SELECT MAX(seq) FROM decisions), 0)),
    ('agents', COALESCE((SELECT MAX(seq) FROM agents), 0)),
    ('mandates', COALESCE((SELECT MAX(seq) FROM mandates), 0)),
    ('events', COALESCE((SELECT MAX(seq) FROM events), 0)),
    ('webhooks', COALESCE((SELECT MAX(seq) FROM webhooks), 0))) AS c (name, value);
DELETE FROM counters WHERE name = 'decision_seq';

-- The readiness probe's write, off the shared counters (on Citus a table of the
-- coordinator's, so that a lost worker does not fail every process's /readyz).
CREATE TABLE readiness_probe (id INTEGER PRIMARY KEY, value BIGINT NOT NULL);
DELETE FROM counters WHERE name = 'readiness_probe';

-- The decision that last moved an agent's version: a single-use credential is accepted
-- only by the decision whose move it was.
ALTER TABLE agents ADD COLUMN last_decision TEXT;

-- Claims per organization and writer (settled claims only: old processes are stopped).
DROP TABLE decision_claims;
CREATE TABLE decision_claims (
    org_id     TEXT NOT NULL,
    -- The writer: a random name of its process, then the writer's number.
    writer     TEXT NOT NULL,
    -- The first seq of the open claim; NULL once settled.
    first_seq  BIGINT,
    claimed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (org_id, writer)
);

-- The foreign keys that do not name org_id go first; they come back with it below.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey,
    DROP CONSTRAINT deliveries_webhook_id_fkey;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_delivery_id_fkey;
ALTER TABLE escrow_history DROP CONSTRAINT escrow_history_escrow_id_fkey;
ALTER TABLE escrows DROP CONSTRAINT escrows_decision_id_fkey;
ALTER TABLE mandate_expiring_fired DROP CONSTRAINT mandate_expiring_fired_event_id_fkey,
    DROP CONSTRAINT mandate_expiring_fired_mandate_id_fkey;
ALTER TABLE settlement_movements DROP CONSTRAINT settlement_movements_escrow_id_fkey;

-- org_id where it was missing, from the row each belongs to.
ALTER TABLE deliveries ADD COLUMN org_id TEXT;
UPDATE deliveries d SET org_id = e.org_id FROM events e WHERE e.id = d.event_id;
ALTER TABLE delivery_attempts ADD COLUMN org_id TEXT,
    ADD COLUMN event_id TEXT, ADD COLUMN webhook_id TEXT;
UPDATE delivery_attempts a
    SET org_id = d.org_id, event_id = d.event_id, webhook_id = d.webhook_id
    FROM deliveries d WHERE d.id = a.delivery_id;
ALTER TABLE escrow_history ADD COLUMN org_id TEXT;
UPDATE escrow_history h SET org_id = e.org_id FROM escrows e WHERE e.id = h.escrow_id;
ALTER TABLE settlement_movements ADD COLUMN org_id TEXT;
UPDATE settlement_movements m SET org_id = e.org_id FROM escrows e WHERE e.id = m.escrow_id;
ALTER TABLE mandate_expiring_fired ADD COLUMN org_id TEXT;
UPDATE mandate_expiring_fired f SET org_id = m.org_id FROM mandates m WHERE m.id = f.mandate_id;
-- An idempotency record belongs to the organization of the API key that sent it; a record
-- of a key no longer stored can never be asked for again.
ALTER TABLE idempotency ADD COLUMN org_id TEXT;
UPDATE idempotency i SET org_id = k.org_id FROM api_keys k WHERE k.hash = i.key_hash;
DELETE FROM idempotency WHERE org_id IS NULL;
-- One attempt number recorded twice (a claim that ran out mid-attempt): the later row goes.
DELETE FROM delivery_attempts a USING delivery_attempts b
    WHERE a.delivery_id = b.delivery_id AND a.attempt = b.attempt AND a.id > b.id;
ALTER TABLE deliveries ALTER COLUMN org_id SET NOT NULL;
ALTER TABLE delivery_attempts ALTER COLUMN org_id SET NOT NULL,
    ALTER COLUMN event_id SET NOT NULL, ALTER COLUMN webhook_id SET NOT NULL,
    DROP COLUMN id, DROP COLUMN delivery_id;
ALTER TABLE escrow_history ALTER COLUMN org_id SET NOT NULL;
ALTER TABLE settlement_movements ALTER COLUMN org_id SET NOT NULL;
ALTER TABLE mandate_expiring_fired ALTER COLUMN org_id SET NOT NULL;
ALTER TABLE idempotency ALTER COLUMN org_id SET NOT NULL;

-- No identities: seqs from org_counters, natural keys, and the seqs nothing read go.
ALTER TABLE agents ALTER COLUMN seq DROP IDENTITY;
ALTER TABLE mandates ALTER COLUMN seq DROP IDENTITY;
ALTER TABLE events ALTER COLUMN seq DROP IDENTITY;
ALTER TABLE webhooks ALTER COLUMN seq DROP IDENTITY;
ALTER TABLE reviews DROP COLUMN seq;
ALTER TABLE escrows DROP COLUMN seq;
ALTER TABLE deliveries DROP COLUMN id;
ALTER TABLE settlement_movements DROP COLUMN id;

-- The keys, org_id first.
ALTER TABLE agents DROP CONSTRAINT agents_pkey, ADD PRIMARY KEY (org_id, seq);
ALTER TABLE mandates DROP CONSTRAINT mandates_pkey, DROP CONSTRAINT mandates_id_key,
    ADD PRIMARY KEY (org_id, seq), ADD UNIQUE (org_id, id);
ALTER TABLE decisions DROP CONSTRAINT decisions_pkey, DROP CONSTRAINT decisions_id_key,
    ADD PRIMARY KEY (org_id, seq), ADD UNIQUE (org_id, id);
ALTER TABLE reviews DROP CONSTRAINT reviews_id_key, ADD PRIMARY KEY (org_id, id);
ALTER TABLE events DROP CONSTRAINT events_pkey, DROP CONSTRAINT events_id_key,
    ADD PRIMARY KEY (org_id, seq), ADD UNIQUE (org_id, id);
ALTER TABLE idempotency DROP CONSTRAINT idempotency_pkey,
    ADD PRIMARY KEY (org_id, key_hash, idem_key);
ALTER TABLE webhooks DROP CONSTRAINT webhooks_pkey, DROP CONSTRAINT webhooks_id_key,
    ADD PRIMARY KEY (org_id, seq), ADD UNIQUE (org_id, id);
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_webhook_id_key,
    ADD PRIMARY KEY (org_id, event_id, webhook_id);
ALTER TABLE delivery_attempts ADD PRIMARY KEY (org_id, event_id, webhook_id, attempt);
ALTER TABLE mandate_expiring_fired DROP CONSTRAINT mandate_expiring_fired_pkey,
    ADD PRIMARY KEY (org_id, mandate_id);
ALTER TABLE escrows DROP CONSTRAINT escrows_id_key, DROP CONSTRAINT escrows_decision_id_key,
    DROP CONSTRAINT escrows_nonce_key,
    ADD PRIMARY KEY (org_id, id), ADD UNIQUE (org_id, decision_id), ADD UNIQUE (org_id, nonce);
ALTER TABLE escrow_history DROP CONSTRAINT escrow_history_pkey,
    ADD PRIMARY KEY (org_id, escrow_id, step);
ALTER TABLE settlement_movements DROP CONSTRAINT settlement_movements_escrow_id_kind_key,
    ADD PRIMARY KEY (org_id, escrow_id, kind);

-- The foreign keys, org_id first.
ALTER TABLE deliveries
    ADD FOREIGN KEY (org_id, event_id) REFERENCES events (org_id, id),
    ADD FOREIGN KEY (org_id, webhook_id) REFERENCES webhooks (org_id, id);
ALTER TABLE delivery_attempts ADD FOREIGN KEY (org_id, event_id, webhook_id)
    REFERENCES deliveries (org_id, event_id, webhook_id);
ALTER TABLE escrows ADD FOREIGN KEY (org_id, decision_id) REFERENCES decisions (org_id, id);
ALTER TABLE escrow_history ADD FOREIGN KEY (org_id, escrow_id) REFERENCES escrows (org_id, id);
ALTER TABLE settlement_movements
    ADD FOREIGN KEY (org_id, escrow_id) REFERENCES escrows (org_id, id);
ALTER TABLE mandate_expiring_fired
    ADD FOREIGN KEY (org_id, mandate_id) REFERENCES mandates (org_id, id),
    ADD FOREIGN KEY (org_id, event_id) REFERENCES events (org_id, id);

-- The indexes that led with another column lead with org_id.
DROP INDEX decisions_by_agent, decisions_by_agent_time, deliveries_by_webhook;
CREATE INDEX decisions_by_agent ON decisions (org_id, agent_seq, seq);
CREATE INDEX decisions_by_agent_time ON decisions (org_id, agent_seq, created_ms);
CREATE INDEX deliveries_by_webhook ON deliveries (org_id, webhook_id, state);
