-- 0009: each decision keeps what its token is rebuilt from (issue #35): the kid of the key
-- that signed it and the raw 64-byte ES256 signature. With the claims, stored column by
-- column, they give back the compact JWS that was answered, byte for byte. Decisions stored
-- before have neither: their token reads as null.
ALTER TABLE decisions ADD COLUMN signing_kid TEXT;
ALTER TABLE decisions ADD COLUMN signature BLOB;
