"""The official MCP Python SDK (`mcp` on PyPI) driving `mandate mcp` against a real
mandate-server, over stdio or streamable HTTP. Run by tests/mcp/main.rs, which owns the
server: this script prints {"need": ...} lines on stdout when the server side must act
(approve or deny a review, move the clock, change a rate, revoke, stop the server) and, for
the actions it must see done first, waits for a line on stdin. Any failed check raises and
the script exits non-zero with the traceback on stderr; {"done": true} ends a good run.

Argument: a JSON object: transport ("stdio" or "http"), url (http), command and env (stdio),
jwks_url, issuer, and the agent's mandate id.
"""

import json
import sys
import time

import anyio
import jsonschema
import jwt
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

CONFIG = json.loads(sys.argv[1])
TOOLS = {"authorize_payment", "wait_for_review", "get_mandate", "list_decisions", "verify_verdict"}
READ_ONLY = {"wait_for_review", "get_mandate", "list_decisions", "verify_verdict"}
IDEMPOTENT = {"wait_for_review", "get_mandate", "list_decisions"}


def say(message):
    print(json.dumps(message), flush=True)


async def need(what, **details):
    """Asks the server side to act, and waits until it says it has."""
    say({"need": what, **details})
    line = await anyio.to_thread.run_sync(sys.stdin.readline)
    assert line.strip() == "done", f"the harness answered {line!r} to {what}"


def key_set():
    import urllib.request

    with urllib.request.urlopen(CONFIG["jwks_url"]) as r:
        return json.load(r)


def verify_token(token, amount, decision):
    """Verifies the token with PyJWT against the published JWK Set: ES256, kid, issuer."""
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256", header
    keys = {k["kid"]: k for k in key_set()["keys"]}
    key = jwt.PyJWK(keys[header["kid"]]).key
    claims = jwt.decode(
        token,
        key,
        algorithms=["ES256"],
        issuer=CONFIG["issuer"],
        # The server runs on a test clock ahead of this machine's; the expiry is the
        # server's business, checked by mandate-core's verifier elsewhere.
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
    )
    assert claims["verdict"] == "allow", claims
    assert claims["jti"] == decision, claims
    assert str(claims["request"]["amount"]) == amount, claims
    return claims


class Session:
    def __init__(self, session):
        self.session = session
        self.schemas = {}

    async def tools(self):
        listed = await self.session.list_tools()
        return {t.name: t for t in listed.tools}

    async def call(self, name, arguments, progress=None, timeout=None):
        result = await self.session.call_tool(
            name, arguments, read_timeout_seconds=timeout, progress_callback=progress
        )
        if not result.is_error:
            jsonschema.validate(result.structured_content, self.schemas[name])
        return result

    async def ok(self, name, arguments, **kw):
        result = await self.call(name, arguments, **kw)
        assert not result.is_error, f"{name} {arguments}: {result.content}"
        return result.structured_content

    async def error(self, name, arguments):
        result = await self.call(name, arguments)
        assert result.is_error, f"{name} {arguments} should fail: {result.structured_content}"
        return " ".join(c.text for c in result.content if c.type == "text")


async def tick(s):
    """A minute passes on the server's clock: the velocity window (10 a minute) empties."""
    await need("advance", seconds=61)


async def scenario(session):
    s = Session(session)
    # Tools listed, each with a valid input and output schema and honest annotations.
    tools = await s.tools()
    assert set(tools) == TOOLS, set(tools)
    for name, tool in tools.items():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.output_schema, name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        s.schemas[name] = tool.output_schema
        assert tool.description and len(tool.description) > 40, name
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
        assert tool.annotations.destructive_hint is False, name
        assert tool.annotations.idempotent_hint is (name in IDEMPOTENT), name
    assert set(tools["authorize_payment"].input_schema["required"]) == {
        "amount", "currency", "recipient", "category"}
    # No tool result or schema names the key.
    assert CONFIG["agent_key"] not in json.dumps([t.model_dump() for t in tools.values()])

    mandate = await s.ok("get_mandate", {})
    assert mandate["active"] is True
    assert mandate["mandate"]["id"] == CONFIG["mandate"]
    assert mandate["mandate"]["remaining"] == {"per_transaction": 100, "per_month": 450}

    # Allow: a token that verifies against the JWK Set; the remaining budget after it.
    allowed = await s.ok("authorize_payment", {
        "amount": 20.5, "currency": "USD", "recipient": "vendor:acme", "category": "software"})
    assert allowed["verdict"] == "allow", allowed
    verify_token(allowed["verdict_token"], "20.5", allowed["decision"])
    assert allowed["remaining"]["per_month"] == 429.5, allowed
    assert allowed["idempotency_key"].startswith("idem_")
    assert CONFIG["agent_key"] not in json.dumps(allowed)
    # verify_verdict, as the payee would.
    bad = await s.ok("verify_verdict", {
        "token": allowed["verdict_token"], "amount": "21", "currency": "USD",
        "recipient": "vendor:acme"})
    assert bad["valid"] is False and "amount" in bad["reasons"][0], bad
    good = await s.ok("verify_verdict", {
        "token": allowed["verdict_token"], "amount": "20.50", "currency": "USD",
        "recipient": "vendor:acme"})
    assert good["valid"] is True and good["reasons"] == [], good
    assert good["environment"] == "sandbox", good
    replayed = await s.ok("verify_verdict", {
        "token": allowed["verdict_token"], "amount": "20.50", "currency": "USD",
        "recipient": "vendor:acme"})
    assert replayed["valid"] is False and "replay" in replayed["reasons"][0], replayed
    forged = await s.ok("verify_verdict", {
        "token": allowed["verdict_token"][:-6] + "AAAAAA", "amount": "20.5",
        "currency": "USD", "recipient": "vendor:acme"})
    assert forged["valid"] is False, forged

    # A retried authorize_payment with one key makes one decision.
    before = await s.ok("list_decisions", {"limit": 100})
    first = await s.ok("authorize_payment", {
        "amount": "10", "currency": "USD", "recipient": "vendor:acme",
        "category": "software", "idempotency_key": "idem_retry_1"})
    again = await s.ok("authorize_payment", {
        "amount": "10", "currency": "USD", "recipient": "vendor:acme",
        "category": "software", "idempotency_key": "idem_retry_1"})
    assert first["decision"] == again["decision"], (first, again)
    assert first["verdict_token"] == again["verdict_token"]
    after = await s.ok("list_decisions", {"limit": 100})
    assert len(after["decisions"]) == len(before["decisions"]) + 1, after

    # A review approved through the API while wait_for_review waits.
    await tick(s)
    for action, amount in [("approve", "75"), ("deny", "60"), ("expire", "70")]:
        asked = await s.ok("authorize_payment", {
            "amount": amount, "currency": "USD", "recipient": "vendor:acme",
            "category": "travel"})
        assert asked["verdict"] == "review", asked
        assert asked["verdict_token"] is None and asked["review"].startswith("rev_")
        seen = []

        async def progress(value, total, message, action=action, asked=asked, seen=seen):
            seen.append((value, total, message))
            if len(seen) == 1:
                say({"need": action, "review": asked["review"]})

        waited = await s.ok(
            "wait_for_review", {"decision": asked["decision"], "timeout_seconds": 60},
            progress=progress, timeout=90)
        assert seen, "no progress notification while waiting"
        if action == "approve":
            assert waited["status"] == "approved", waited
            assert waited["verdict"] == "allow", waited
            verify_token(waited["verdict_token"], amount, waited["decision"])
        elif action == "deny":
            assert waited["status"] == "denied", waited
            assert waited["verdict_token"] is None
        else:
            assert waited["status"] == "expired", waited
            assert waited["verdict_token"] is None
    # The approved one is reachable later too.
    listed = await s.ok("list_decisions", {"limit": 100, "verdict": "review"})
    approved = [d for d in listed["decisions"] if d["review_status"] == "approved"]
    assert len(approved) == 1 and approved[0]["review_resolution"], listed

    # Denials: category; a bound wait on a decision without review is a tool error.
    await tick(s)
    food = await s.ok("authorize_payment", {
        "amount": 5, "currency": "USD", "recipient": "vendor:acme", "category": "food"})
    assert food["verdict"] == "deny_category" and food["verdict_token"] is None, food
    assert "food" in food["reason"] and "not pay" in food["next_step"], food
    message = await s.error("wait_for_review", {"decision": food["decision"]})
    assert "opened no review" in message, message

    # Bad arguments: a tool error (or, for a missing argument, the SDK's error) naming it.
    message = await s.error("authorize_payment", {
        "amount": "12,50", "currency": "USD", "recipient": "vendor:acme", "category": "software"})
    assert "amount" in message, message
    message = await s.error("authorize_payment", {
        "amount": 5, "currency": "USD", "recipient": "acme", "category": "software"})
    assert "recipient" in message and "400" in message, message
    message = await s.error("list_decisions", {"verdict": "maybe"})
    assert "verdict" in message, message
    try:
        missing = await s.session.call_tool("authorize_payment", {"amount": 5, "currency": "USD"})
        assert missing.is_error, missing
        text = " ".join(c.text for c in missing.content if c.type == "text")
    except MCPError as e:
        text = str(e)
    assert "recipient" in text, text

    # Velocity: the eleventh request in a minute is denied.
    await tick(s)
    verdicts = []
    for _ in range(11):
        r = await s.ok("authorize_payment", {
            "amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"})
        verdicts.append(r["verdict"])
    assert verdicts[-1] == "deny_velocity", verdicts
    assert verdicts[:10] == ["allow"] * 10, verdicts

    # Rate limited: the API's 429, its Retry-After waited for, then a tool error.
    await need("rate", per_sec=1)
    started = time.monotonic()
    message = await s.error("list_decisions", {})
    for _ in range(3):
        if "429" in message:
            break
        message = await s.error("list_decisions", {})
    assert "429 rate_limited" in message and "Retry-After" in message, message
    assert time.monotonic() - started >= 1, "Retry-After was not waited for"
    await need("rate", per_sec=1000)

    # Revoked.
    await tick(s)
    await need("revoke")
    revoked = await s.ok("authorize_payment", {
        "amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software"})
    assert revoked["verdict"] == "deny_revoked", revoked
    assert (await s.ok("get_mandate", {}))["active"] is False

    # The server stopped mid-session: a tool error within seconds, the session alive.
    await need("stop")
    started = time.monotonic()
    message = await s.error("get_mandate", {})
    assert "cannot reach the Mandate API" in message, message
    assert time.monotonic() - started < 10, time.monotonic() - started
    message = await s.error("authorize_payment", {
        "amount": 1, "currency": "USD", "recipient": "vendor:acme", "category": "software",
        "idempotency_key": "idem_down"})
    assert "same idempotency_key is safe" in message, message
    assert set(await s.tools()) == TOOLS
    assert CONFIG["agent_key"] not in message


async def main():
    if CONFIG["transport"] == "stdio":
        params = StdioServerParameters(
            command=CONFIG["command"][0], args=CONFIG["command"][1:], env=CONFIG["env"])
        connect = stdio_client(params)
    else:
        connect = streamable_http_client(CONFIG["url"])
    async with connect as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            await scenario(session)
    say({"done": True})


anyio.run(main)
