-- Each API key row may carry its binding to the operator's key-encryption key: a MAC over
-- the row's identity and authority (hash, organization, environment, class, agent), made
-- and checked by the server (signing/api_keys.rs); the engine stores opaque bytes. With a
-- key-encryption key, a row without a valid binding is refused as an unknown key.
ALTER TABLE api_keys ADD COLUMN binding BYTEA;
