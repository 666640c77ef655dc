"""The shared verification cases (testdata/verify/cases.json, tokens the real server
signed) through the installed package's check: each check's outcome must be the one
recorded, which the Rust check (mandate-core/tests/verify_cases.rs) and the npm package's
tests hold to as well."""

import json
import os
import pathlib
from datetime import datetime, timezone

import pytest

import mandate_verify
from mandate_verify import CheckError, Checker, InputError

ROOT = pathlib.Path(__file__).resolve().parents[3]
CASES = pathlib.Path(os.environ.get("MANDATE_VERIFY_CASES", ROOT / "testdata/verify/cases.json"))
FILE = json.loads(CASES.read_text())


def outcome(run):
    """The outcome of one check as the file writes it."""
    try:
        v = run()
    except CheckError as e:
        return {"error": e.code, "objections": [o["code"] for o in e.objections]}
    claims = v["claims"]
    return {
        "ok": {
            "jti": claims["jti"],
            "verdict": claims["verdict"],
            "amount": claims["request"]["amount"],
            "currency": claims["request"]["currency"],
            "recipient": claims["request"]["recipient"],
            "kid": v["kid"],
            "environment": v["environment"],
            "unchecked": v["unchecked"],
        }
    }


@pytest.mark.parametrize("case", FILE["cases"], ids=[c["name"] for c in FILE["cases"]])
def test_every_shared_case_has_the_recorded_outcome(case):
    checker = Checker()
    for i, check in enumerate(case["checks"]):
        got = outcome(
            lambda: checker.check(
                FILE["tokens"][check["token"]],
                check["expected"],
                FILE["key_sets"][check["key_set"]],
                check["options"],
            )
        )
        assert got == check["outcome"], f"check {i + 1}"


def first(name):
    return next(c for c in FILE["cases"] if c["name"] == name)["checks"][0]


def test_a_refusal_carries_the_code_the_objections_and_the_claims():
    c = first("wrong amount")
    with pytest.raises(CheckError) as raised:
        Checker().check(FILE["tokens"][c["token"]], c["expected"], FILE["key_sets"]["published"], c["options"])
    e = raised.value
    assert e.code == "wrong_amount"
    assert "amount 42.51 does not match the signed amount 42.50" in str(e)
    assert e.objections[0]["code"] == "wrong_amount"
    assert e.claims["request"]["amount"] == "42.50"


def test_the_key_set_may_be_bytes_text_or_a_dict():
    c = first("allow")
    published = FILE["key_sets"]["published"]
    for key_set in (published, json.dumps(published), json.dumps(published).encode()):
        v = Checker().check(FILE["tokens"][c["token"]], c["expected"], key_set, c["options"])
        assert v["claims"]["request"]["amount"] == "42.50"


def test_the_module_level_check_keeps_one_replay_guard():
    c = first("allow")
    args = (FILE["tokens"][c["token"]], c["expected"], FILE["key_sets"]["published"], c["options"])
    assert mandate_verify.check(*args)["kid"] == c["outcome"]["ok"]["kid"]
    with pytest.raises(CheckError) as raised:
        mandate_verify.check(*args)
    assert raised.value.code == "replay"


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"expected": {"amount": 42.5}}, "expected.amount must be a decimal string"),
        ({"expected": {"recipent": "vendor:acme"}}, "expected.recipent is not a member"),
        ({"options": {"issuer": None}}, "options.issuer is missing"),
        ({"options": {"environments": "sandbox"}}, "options.environments"),
        ({"options": {"now": 1.5}}, "options.now"),
    ],
)
def test_wrong_arguments_are_an_input_error_naming_the_member(change, pattern):
    c = first("allow")
    expected = {**c["expected"], **change.get("expected", {})}
    options = {**c["options"], **change.get("options", {})}
    with pytest.raises(InputError, match=pattern) as raised:
        Checker().check(FILE["tokens"][c["token"]], expected, FILE["key_sets"]["published"], options)
    assert raised.value.code == "invalid_input"
    assert isinstance(raised.value, ValueError)


def test_a_key_set_without_a_usable_key_is_an_input_error():
    c = first("allow")
    with pytest.raises(InputError, match="key set"):
        Checker().check(FILE["tokens"][c["token"]], c["expected"], {"keys": []}, c["options"])


def test_now_defaults_to_the_current_time_and_a_datetime_is_accepted():
    c = first("allow")
    rest = {k: v for k, v in c["options"].items() if k != "now"}
    token = FILE["tokens"][c["token"]]
    # The recorded tokens expired long ago: now by default is today, so they are refused.
    with pytest.raises(CheckError) as raised:
        Checker().check(token, c["expected"], FILE["key_sets"]["published"], rest)
    assert raised.value.code == "expired"
    at = datetime.fromtimestamp(c["options"]["now"], tz=timezone.utc)
    v = Checker().check(token, c["expected"], FILE["key_sets"]["published"], {**rest, "now": at})
    assert v["environment"] == "live"
