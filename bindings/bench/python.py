"""Verifications a second in Python: mandate_verify's whole check (a fresh Checker each
time, so the replay guard accepts the one token again) against PyJWT's PyJWS.decode,
which checks the ES256 signature alone with a key read once (cryptography). Each side runs
for SECONDS_EACH (default 3) after a warm-up. Prints TSV rows: runtime, what,
verifications_per_s. Argument: the cases file."""

import json
import os
import sys
import time

import jwt
import mandate_verify

SECONDS = float(os.environ.get("SECONDS_EACH", "3"))
FILE = json.loads(open(sys.argv[1]).read())
ALLOW = next(c for c in FILE["cases"] if c["name"] == "allow")["checks"][0]
TOKEN = FILE["tokens"]["allow"]
KEY_SET = json.dumps(FILE["key_sets"]["published"])


def rate(fn):
    warm = time.perf_counter() + 0.5
    while time.perf_counter() < warm:
        fn()
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        for _ in range(100):
            fn()
        n += 100
    return n / (time.perf_counter() - start)


kid = jwt.get_unverified_header(TOKEN)["kid"]
jwk = next(k for k in FILE["key_sets"]["published"]["keys"] if k["kid"] == kid)
key = jwt.PyJWK(jwk, algorithm="ES256").key
jws = jwt.PyJWS()

whole = rate(lambda: mandate_verify.Checker().check(TOKEN, ALLOW["expected"], KEY_SET, ALLOW["options"]))
signature = rate(lambda: jws.decode(TOKEN, key, algorithms=["ES256"]))
print(f"python\tmandate_verify check (whole)\t{whole:.0f}")
print(f"python\tPyJWT PyJWS.decode (signature only)\t{signature:.0f}")
