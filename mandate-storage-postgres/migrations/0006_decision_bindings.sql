-- 0006: what a verdict is bound to besides the request (issue #36): the claims
-- ap2_mandate, ap2_transaction and x402_payment, as JSON holding only those present
-- (`{"x402_payment":"…"}`), NULL when the verdict is bound to nothing. With the other
-- columns, signing_kid and signature they rebuild the token answered, byte for byte.
ALTER TABLE decisions ADD COLUMN bindings TEXT;
