"""Check a Mandate verdict token before you settle, in one call.

``check(token, expected, key_set, options)`` runs mandate-core's whole counterparty check
(the Rust ``Counterparty::check``, compiled into this package): the ES256 signature by the
key set's ``kid``, the issuer, the expiry, the signing key's environment, that the verdict
is ``allow``, that it is for this amount, currency and recipient (and x402, AP2 or ACP
binding, when expected), and that its nonce was never accepted before. It returns the
verified verdict, or raises ``CheckError`` whose ``code`` is the Rust refusal's code
(``wrong_amount``, ``expired``, ``replay``, ...).

Amounts are decimal strings (``"42.50"``), never floats. The arguments go to the Rust
check as JSON text written by ``json``, and the answer comes back the same way.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

from ._native import Checker as _NativeChecker

__all__ = [
    "CheckError",
    "Checker",
    "InputError",
    "check",
    "ExpectedTransaction",
    "CheckOptions",
    "Verified",
    "VerdictClaims",
]


class _ExpectedRequired(TypedDict):
    amount: str
    currency: str
    recipient: str


class ExpectedTransaction(_ExpectedRequired, total=False):
    """The transaction about to be settled: what the verdict must be for."""

    x402: Dict[str, Any]
    """``{"requirements": {...}, "decimals": 6}``: the x402 payment."""
    ap2: Dict[str, str]
    """``{"mandate": digest, "transaction": id}``: the AP2 mandates."""
    acp: Dict[str, Any]
    """``{"allowance": {...}}``: the ACP delegated payment allowance."""


class _OptionsRequired(TypedDict):
    issuer: str


class CheckOptions(_OptionsRequired, total=False):
    """How to check; ``now`` is the current time when left out."""

    now: Union[int, str, datetime]
    environments: Literal["live_only", "live_or_sandbox"]
    leeway_secs: int
    require_log: bool
    log: Optional[Dict[str, Any]]


class Request(TypedDict):
    agent: str
    amount: str
    currency: str
    recipient: str
    category: str


class _ClaimsRequired(TypedDict):
    iss: str
    jti: str
    iat: int
    exp: int
    verdict: str
    policy_verdict: str
    policy_version: str
    nonce: str
    request: Request


class VerdictClaims(_ClaimsRequired, total=False):
    """A verdict's verified claims; ``request["amount"]`` is the exact decimal text."""

    mandate: str
    ap2_mandate: str
    ap2_transaction: str
    x402_payment: str
    acp_allowance: str
    acp_checkout_session: str


class Verified(TypedDict):
    """A verdict that passed every check."""

    claims: VerdictClaims
    kid: str
    environment: Literal["live", "sandbox"]
    unchecked: Dict[str, str]
    """Bindings the token carries that were not expected, so not checked."""


class Objection(TypedDict):
    code: str
    message: str


class CheckError(Exception):
    """The check refused the token.

    ``code`` is the Rust refusal's code: the token's flaw (``expired``, ``bad_signature``,
    ...) or the first objection to a valid token (``wrong_amount``, ``not_allow``,
    ``replay``, ...); ``objections`` lists every objection; ``claims`` are the verified
    claims when the signature held.
    """

    code: str
    objections: List[Objection]
    claims: Optional[VerdictClaims]

    def __init__(self, failure: Dict[str, Any]) -> None:
        super().__init__(failure["message"])
        self.code = failure["code"]
        self.objections = failure["objections"]
        self.claims = failure["claims"]


class InputError(ValueError):
    """The arguments are wrong: the message names the member and what to write instead."""

    code = "invalid_input"


def _json(value: Any, what: str) -> str:
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a dict")
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as e:
        raise InputError(f"{what} cannot be written as JSON: {e}") from None


def _key_set(key_set: Union[bytes, str, Dict[str, Any]]) -> str:
    if isinstance(key_set, (bytes, bytearray)):
        return bytes(key_set).decode("utf-8")
    if isinstance(key_set, str):
        return key_set
    return _json(key_set, "key_set")


def _options(options: Optional[CheckOptions]) -> str:
    given: Dict[str, Any] = dict(options or {})
    now = given.get("now")
    if now is None:
        given["now"] = int(time.time())
    elif isinstance(now, datetime):
        if now.tzinfo is None:
            raise InputError("options.now is a naive datetime: give it a timezone")
        given["now"] = int(now.timestamp())
    return _json(given, "options")


class Checker:
    """A verifier with its replay guard: a nonce it accepted is refused after (``replay``).

    Keep one for the life of the process: the accepted nonces are in its memory.
    """

    def __init__(self) -> None:
        self._native = _NativeChecker()

    def check(
        self,
        token: str,
        expected: ExpectedTransaction,
        key_set: Union[bytes, str, Dict[str, Any]],
        options: CheckOptions,
    ) -> Verified:
        """The whole check; the verified verdict, or a raised CheckError or InputError."""
        if not isinstance(token, str):
            raise InputError("token must be the verdict token, a str")
        ok, text = self._native.check_json(
            token, _json(expected, "expected"), _key_set(key_set), _options(options)
        )
        answer = json.loads(text)
        if ok:
            return answer
        if answer["kind"] == "input":
            raise InputError(answer["message"])
        raise CheckError(answer)


# The module-level check keeps one checker, so that a token is accepted once per process.
_shared = Checker()


def check(
    token: str,
    expected: ExpectedTransaction,
    key_set: Union[bytes, str, Dict[str, Any]],
    options: CheckOptions,
) -> Verified:
    """The whole check with the module's own Checker (one replay guard for the process)."""
    return _shared.check(token, expected, key_set, options)
