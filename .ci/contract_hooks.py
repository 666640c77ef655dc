"""What schemathesis loads beside openapi.yaml in .ci/contract.py (`hooks` in its config).

openapi.yaml declares what the server accepts as far as JSON Schema can say it, and the
positive-data check (`positive_data_acceptance`) holds the server to it: every request the
document calls valid must be accepted. Four rules of the contract are not about a value's
shape, so no schema keyword states them; these hooks keep the generated requests inside them,
each rule narrowly, so that the check judges everything else:

- An amount is written as a plain decimal, never with an exponent. JSON Schema constrains a
  number's value, not how it is spelled, and Python's JSON writes 0.00001 as `1e-05`. The
  JSON serializer below writes every float in positional notation: same value, and the
  schema's bounds (at most 18 decimal places, at most 2^96 - 1) still decide which values.
- A mandate's `expires` is today (UTC) or later. The `date` format draws from tomorrow on,
  so a run that crosses midnight UTC still sends valid dates. Its `not_before`, when given,
  is on or before `expires`, a rule across two fields: the server's refusal of a later one
  (its message names the rule) is dropped on POST /v1/mandates only.
- A `cursor` is valid only as issued: the `next_cursor` of the same list, filters and key
  class, for 24 hours. The schema gives its shape; a drawn cursor of that shape is still
  invented. In a positive case the cursor is replaced by a real one for the request's own
  filters, or dropped when that list has no second page.
- A state change is refused (400, as the interface says) once the object has moved on: the
  seeded mandate, review and escrow take each step once, then every repeat is refused. Those
  refusals, recognized by the server's message on those operations only, are dropped.

DELETE /v1/mandates/{id} is 400 whatever is sent (the interface says so); its refusal is
dropped the same way, so the positive-data check covers every other operation. On
POST /v1/authorizations the refusal of an `x402` payment that is not the request's (payTo,
asset, amount) or whose fiat asset is a code Mandate does not know, and of an `acp` allowance
that is not the request's or names a currency Mandate does not know, are dropped too. Every
other status a positive case gets is judged by the check as it is.
"""

import datetime
import json
import math
import os
import re
from decimal import Decimal

import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.openapi.checks import RejectedPositiveData

BASE_URL = os.environ["MANDATE_CONTRACT_URL"]
ORG_KEY = os.environ["MANDATE_CONTRACT_KEY"]


def _plain(value):
    """JSON text of a generated value, floats in positional notation (`0.00001`, not `1e-05`)."""
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        return format(Decimal(text), "f") if "e" in text or "E" in text else text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return json.dumps(value)


@schemathesis.serializer("application/json")
def plain_decimal_json(ctx, value):
    if isinstance(value, bytes):
        return value
    return _plain(value).encode()


TOMORROW = datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=1)
schemathesis.openapi.format("date", st.dates(min_value=TOMORROW).map(datetime.date.isoformat))


@schemathesis.hook
def before_call(context, case, kwargs):
    query = case.query
    if not isinstance(query, dict) or "cursor" not in query:
        return
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    # A first page of one, with the case's own filters, hands out the cursor of its second page.
    params = {name: value for name, value in query.items() if name not in ("cursor", "limit")}
    params["limit"] = 1
    response = requests.get(
        BASE_URL + case.operation.path,
        params=params,
        headers={"Authorization": f"Bearer {ORG_KEY}"},
        timeout=10,
    )
    cursor = response.json().get("next_cursor") if response.status_code == 200 else None
    if cursor:
        query["cursor"] = cursor
    else:
        del query["cursor"]


_ESCROW_STATE = re.compile(
    r"^escrow is (?:\w+, which is final"
    r"|disputed, so it cannot \w+; only release or refund can end it"
    r"|already delivered; release, refund or dispute it"
    r"|funded but not delivered; deliver it first, or refund or dispute it)$"
)
_REVIEW_STATE = re.compile(r"^review rev_\S+ cannot be resolved: ")
# The 400s a valid request may get, by operation and the message the server gives: the state
# refusals of each state-changing operation, and DELETE /v1/mandates/{id}, which the interface
# makes 400 whatever is sent (the one operation the positive-data check does not cover).
REFUSALS = {
    ("POST", "/v1/mandates/{id}/revoke"): re.compile(r"^mandate mnd_\S+ is \w+; only an active mandate can be revoked$"),
    ("POST", "/v1/reviews/{id}/approve"): _REVIEW_STATE,
    ("POST", "/v1/reviews/{id}/deny"): _REVIEW_STATE,
    ("POST", "/v1/escrows/{id}/deliver"): _ESCROW_STATE,
    ("POST", "/v1/escrows/{id}/release"): _ESCROW_STATE,
    ("POST", "/v1/escrows/{id}/refund"): _ESCROW_STATE,
    ("POST", "/v1/escrows/{id}/dispute"): _ESCROW_STATE,
    # Also an AP2 open mandate that is no signed SD-JWT of a trusted issuer
    # (docs/protocols.md).
    ("POST", "/v1/mandates"): re.compile(
        r"^(not_before must be on or before expires \(\d{4}-\d{2}-\d{2}\)"
        r"|limits\.min_per_transaction must be <= limits\.per_transaction \(\S+\)"
        r"|ap2\.open_mandate: .+)$"
    ),
    # An AP2 closed mandate that does not verify or names another payment, or an x402
    # payment whose payTo is not the recipient's name, whose fiat asset is not the currency
    # or whose atomic amount is not the request's amount: rules across fields
    # (docs/protocols.md). Also an x402 fiat asset of a code Mandate does not know: the
    # schema gives the shape of a code, not the list of currencies.
    # An ACP allowance the request is not (its max_amount, currency, merchant, expiry), or
    # whose currency is no ISO 4217 code Mandate knows.
    ("POST", "/v1/authorizations"): re.compile(
        r"^(ap2\.closed_mandate[: ]|x402(\.accepted)?\.(payTo|asset|amount) does not match the request: "
        r"|x402(\.accepted)?\.asset must be an x402 asset: \".*\" is not an ISO 4217 currency code Mandate knows"
        r"|acp\.allowance\.(max_amount|currency|merchant_id|expires_at) does not match the request: "
        r"|acp\.allowance\.currency \"[A-Za-z]{3}\" is not an ISO 4217 currency Mandate knows"
        r"|acp\.allowance\.expires_at must be an RFC 3339 date-time"
        r"|acp and ap2 cannot be sent together)"
    ),
    ("DELETE", "/v1/mandates/{id}"): re.compile(r"^DELETE is not supported on /v1/mandates/\{id\}; "),
}


@schemathesis.hook
def filter_failure(context, failure, case, response):
    refusal = REFUSALS.get((case.method.upper(), case.operation.path))
    if refusal is None or not isinstance(failure, RejectedPositiveData):
        return True
    if response.status_code != 400:
        return True
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return True
    return not (isinstance(message, str) and refusal.search(message))
