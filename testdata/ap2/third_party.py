"""AP2 mandates issued with third-party libraries: the IETF SD-JWT reference
implementation (PyPI `sd-jwt`, `SDJWTIssuer`) and jwcrypto, as AP2's own SDK signs them.

jwcrypto does not normalize ECDSA's `s`: about half its ES256 signatures are high-S. Mandate
must give every one of them the digest AP2 computes (`issuer_jwt_hash`: base64url SHA-256 of
the issuer JWT as issued), which this script computes here, independently, for each token.

    python testdata/ap2/third_party.py > testdata/ap2/third_party.json
        writes the committed fixtures (read by mandate-core/tests/ap2_third_party.rs): one
        open mandate whose issuer signature is high-S and one low-S, each with a closed
        mandate (`<open>~~<closed>`), issued at the fixed NOW below.
    python testdata/ap2/third_party.py issue N UNIX
        prints N fresh open mandates with their closed mandates, issued at UNIX (the test
        runs this with MANDATE_THIRD_PARTY_PYTHON).

Needs `pip install sd-jwt==0.10.4 jwcrypto==1.5.6` (.ci/run installs them). The private
scalars are the test keys of generate.py, published on purpose.
"""

import base64
import hashlib
import json
import sys

from cryptography.hazmat.primitives.asymmetric import ec
from jwcrypto.jwk import JWK
from sd_jwt.common import SDObj
from sd_jwt.issuer import SDJWTIssuer

ISSUER_D = 0x1B2C3D4E5F60718293A4B5C6D7E8F9010203040506070809101112131415
AGENT_D = 0x2A3B4C5D6E7F8091A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F7
NOW = 1795560000  # 2026-11-24T21:20:00Z
# The order of P-256: a signature is high-S when s > N / 2.
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def key(d: int, kid: str) -> JWK:
    jwk = json.loads(JWK.from_pyca(ec.derive_private_key(d, ec.SECP256R1())).export())
    jwk['kid'] = kid
    return JWK.from_json(json.dumps(jwk))


def b64_sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode('ascii')).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b'=').decode('ascii')


def high_s(jwt: str) -> bool:
    signature = jwt.split('.')[2]
    raw = base64.urlsafe_b64decode(signature + '=' * (-len(signature) % 4))
    return int.from_bytes(raw[32:], 'big') > N // 2


ISSUER = key(ISSUER_D, 'issuer-key-1')
AGENT = key(AGENT_D, 'agent-key-1')


def open_mandate(now: int) -> str:
    """An AP2 open payment mandate: the mandate is the one disclosed element of
    `delegate_payload`, its constraints a disclosed member, each allowed payee a
    disclosed element."""
    mandate = {
        'vct': 'mandate.payment.open.1',
        SDObj('constraints'): [
            {'type': 'payment.amount_range', 'currency': 'USD', 'max': 5000, 'min': 100},
            {'type': 'payment.budget', 'currency': 'USD', 'max': 150},
            {
                'type': 'payment.allowed_payees',
                'allowed': [
                    SDObj({'id': 's-1', 'name': 'Shop', 'website': 'https://shop.example'}),
                    SDObj({'id': 'm-2', 'name': 'Market'}),
                ],
            },
        ],
        'cnf': {'jwk': json.loads(AGENT.export_public())},
        'iat': now - 3600,
        'exp': now + 30 * 86400,
    }
    issuer = SDJWTIssuer(
        {'delegate_payload': [SDObj(mandate)]},
        ISSUER,
        sign_alg='ES256',
        extra_header_parameters={'typ': 'dc+sd-jwt', 'kid': 'issuer-key-1'},
    )
    return issuer.sd_jwt_issuance


def closed_mandate(open_sd_jwt: str, tx: str, now: int) -> str:
    """The closed payment mandate for one payment: a `kb+sd-jwt` SD-JWT signed by the
    open mandate's `cnf` key, bound to it by `sd_hash`, presented as `<open>~~<closed>`."""
    payment = {
        'vct': 'mandate.payment.1',
        'transaction_id': tx,
        'payee': {'id': 's-1', 'name': 'Shop', 'website': 'https://shop.example'},
        'payment_amount': {'amount': 1234, 'currency': 'USD'},
        'payment_instrument': {'id': 'pi-1', 'type': 'credit', 'description': 'Visa 4242'},
    }
    closed = SDJWTIssuer(
        {
            'delegate_payload': [SDObj(payment)],
            'sd_hash': b64_sha256(open_sd_jwt),
            'iat': now,
            'aud': 'merchant',
            'nonce': 'n-' + tx,
        },
        AGENT,
        sign_alg='ES256',
        extra_header_parameters={'typ': 'kb+sd-jwt', 'kid': 'agent-key-1'},
    )
    return open_sd_jwt[:-1] + '~~' + closed.sd_jwt_issuance


def issued(now: int, tx: str) -> dict:
    open_sd_jwt = open_mandate(now)
    issuer_jwt = open_sd_jwt.split('~')[0]
    return {
        'open_mandate': open_sd_jwt,
        'presentation': closed_mandate(open_sd_jwt, tx, now),
        'issuer_jwt_hash': b64_sha256(issuer_jwt),
        'high_s': high_s(issuer_jwt),
    }


def fixtures() -> dict:
    found = {}
    while len(found) < 2:
        one = issued(NOW, 'tx-1')
        found.setdefault('high_s' if one['high_s'] else 'low_s', one)
    return {
        'source': 'testdata/ap2/third_party.py (sd-jwt 0.10.4, jwcrypto 1.5.6)',
        'now': NOW,
        'issuer_jwks': {'keys': [json.loads(ISSUER.export_public())]},
        'high_s': found['high_s'],
        'low_s': found['low_s'],
    }


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'issue':
        count, now = int(sys.argv[2]), int(sys.argv[3])
        print(json.dumps([issued(now, f'tx-{i}') for i in range(count)]))
    else:
        print(json.dumps(fixtures(), indent=2))
