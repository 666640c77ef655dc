"""The official MCP Python SDK (`mcp` on PyPI) driving `mandate mcp` against a real
mandate-server, over stdio or streamable HTTP. Run by tests/mcp/main.rs, which owns the
server: this script prints {"need": ...} lines on stdout when the server side must act
(approve or deny a review, move the clock, change a rate, revoke, stop the server) and, for
the actions it must see done first, waits for a line on stdin. Any failed check raises and
the script exits non-zero with the traceback on stderr; {"done": true} ends a good run.

Argument: a JSON object: transport ("stdio" or "http"), url (http), command and env (stdio),
mode (how the SDK's `Client` negotiates: "legacy", the initialize handshake of 2025-11-25,
or "auto", its `server/discover` probe, which settles on 2026-07-28), jwks_url, issuer, the
agent's mandate id, and elsewhere (the command and env of a `mandate mcp` of the same agent
with another HOME, as on another host).
"""

import json
import re
import sys
import time
from typing import Literal

import anyio
import jsonschema
import jwt
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, TypeAdapter

CONFIG = json.loads(sys.argv[1])
# A `mandate mcp` of the same agent as on another host (another HOME), over stdio.
ELSEWHERE = StdioServerParameters(
    command=CONFIG["elsewhere"]["command"][0], args=CONFIG["elsewhere"]["command"][1:],
    env=CONFIG["elsewhere"]["env"])
TOOLS = {"authorize_payment", "wait_for_review", "get_mandate", "list_decisions", "verify_verdict"}
READ_ONLY = {"wait_for_review", "get_mandate", "list_decisions", "verify_verdict"}
IDEMPOTENT = {"wait_for_review", "get_mandate", "list_decisions"}
# The protocol version each negotiation mode settles on with mandate mcp.
VERSIONS = {"legacy": "2025-11-25", "auto": "2026-07-28"}
# The `format` values JSON Schema 2020-12 defines.
STANDARD_FORMATS = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
    "json-pointer", "relative-json-pointer", "regex"}


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


def formats(schema):
    """Every `format` value anywhere in a schema."""
    if isinstance(schema, dict):
        found = {schema["format"]} if isinstance(schema.get("format"), str) else set()
        return found.union(*(formats(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(formats(v) for v in schema))
    return set()


class Session:
    def __init__(self, client):
        self.client = client
        self.session = client
        self.server = client.server_spec
        self.schemas = {}

    async def tools(self):
        listed = await self.client.list_tools()
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


class TaskHandle(types.Result):
    """A `CreateTaskResult` of the tasks extension (`resultType: "task"`)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    poll_interval_ms: int | None = None


class GetTask(types.GetTaskRequest):
    """`tasks/get`, its task id mirrored into the Mcp-Name header as the extension asks."""

    name_param = "taskId"


class CancelTask(types.CancelTaskRequest):
    name_param = "taskId"


class Tasks(ClientExtension):
    """The client side of the tasks extension (io.modelcontextprotocol/tasks): declared on
    every request; a task answered to tools/call is handed to the caller (allow_claimed)."""

    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle, ctx):
        while True:
            task = await get_task(ctx.session, handle.task_id)
            if task["status"] != "working":
                return types.CallToolResult.model_validate(task["result"])
            await anyio.sleep(task.get("pollIntervalMs", 1000) / 1000)


async def get_task(session, task_id):
    return await session.send_request(
        GetTask(params=types.GetTaskRequestParams(task_id=task_id)), TypeAdapter(dict))


async def review_tasks(s, schema):
    """A review as a task, under 2026-07-28: working while pending, completed with the
    signed allow once approved, or with the denial and the reviewer's reason."""
    server = s.server
    async with Client(server, mode="auto", extensions=[Tasks()]) as client:
        assert client.server_capabilities.extensions and (
            "io.modelcontextprotocol/tasks" in client.server_capabilities.extensions), \
            client.server_capabilities
        await client.list_tools()
        # An allow is no task: it is answered at once.
        plain = await client.call_tool("authorize_payment", {
            "amount": "3", "currency": "USD", "recipient": "vendor:acme", "category": "travel"})
        assert plain.structured_content["verdict"] == "allow", plain
        for action, amount in [("approve", "80"), ("deny", "65")]:
            handle = await client.session.call_tool("authorize_payment", {
                "amount": amount, "currency": "USD", "recipient": "vendor:acme",
                "category": "travel"}, allow_claimed=True)
            assert isinstance(handle, TaskHandle), handle
            assert handle.status == "working" and handle.task_id.startswith("dec_"), handle
            review = re.search(r"rev_[A-Za-z0-9_-]+", handle.status_message).group(0)
            # Any mandate mcp answers for the task: here a fresh process (stdio) or another
            # connection (HTTP) polls it.
            async with Client(server, mode="auto", extensions=[Tasks()]) as other:
                task = await get_task(other.session, handle.task_id)
            assert task["status"] == "working", task
            assert task["pollIntervalMs"] > 0 and task["createdAt"] == handle.created_at, task
            details = {"review": review}
            if action == "deny":
                details["reason"] = "too expensive for a taxi"
            say({"need": action, **details})
            while True:
                task = await get_task(client.session, handle.task_id)
                if task["status"] != "working":
                    break
                await anyio.sleep(0.2)
            assert task["status"] == "completed", task
            result = types.CallToolResult.model_validate(task["result"])
            assert not result.is_error, result
            output = result.structured_content
            jsonschema.validate(output, schema)
            if action == "approve":
                assert output["verdict"] == "allow" and output["review_status"] == "approved", output
                assert output["decision"] != handle.task_id, output
                assert output["next_step"].startswith("Pay now"), output
                assert task["statusMessage"] == output["next_step"], task
                verify_token(output["verdict_token"], amount, output["decision"])
            else:
                assert output["review_status"] == "denied" and output["verdict_token"] is None, output
                assert output["next_step"].startswith("Do not pay"), output
                # The reviewer's reason, as they gave it.
                assert output["reason"] == "too expensive for a taxi", output
                assert task["lastUpdatedAt"] >= task["createdAt"], task
            # Completed: a cancel is acknowledged and changes nothing.
            await client.session.send_request(
                CancelTask(params=types.CancelTaskRequestParams(task_id=handle.task_id)),
                TypeAdapter(dict))
            again = await get_task(client.session, handle.task_id)
            assert again["status"] == "completed", again
        # Cancelled while working: the review is withdrawn on the server, so no person can
        # approve it any more, and any mandate mcp of this agent, on any host, reads the
        # task as cancelled.
        handle = await client.session.call_tool("authorize_payment", {
            "amount": "70", "currency": "USD", "recipient": "vendor:acme",
            "category": "travel"}, allow_claimed=True)
        assert isinstance(handle, TaskHandle) and handle.status == "working", handle
        await client.session.send_request(
            CancelTask(params=types.CancelTaskRequestParams(task_id=handle.task_id)),
            TypeAdapter(dict))
        await cancelled_for_good(s, handle.task_id, handle.status_message)
        for elsewhere in (server, ELSEWHERE):
            async with Client(elsewhere, mode="auto", extensions=[Tasks()]) as other:
                task = await get_task(other.session, handle.task_id)
            assert task["status"] == "cancelled" and "result" not in task, task
            assert task["statusMessage"].startswith("Cancelled by request: do not pay"), task
        # Not a task of this agent: not found, an error naming it.
        try:
            await get_task(client.session, "dec_not_mine")
            raise AssertionError("tasks/get of an unknown task answered")
        except MCPError as e:
            assert e.code == -32602 and "dec_not_mine" in str(e), e


async def cancelled_for_good(s, decision, status_message):
    """A person tries to approve the review of a cancelled task: refused (409), since the
    cancellation withdrew it on the server; wait_for_review reads it withdrawn, no token."""
    review = re.search(r"rev_[A-Za-z0-9_-]+", status_message).group(0)
    await need("approve_refused", review=review)
    waited = await s.ok("wait_for_review", {"decision": decision, "timeout_seconds": 30})
    assert waited["status"] == "denied" and waited["verdict_token"] is None, waited
    assert "withdrew the review" in waited["reason"], waited
    listed = await s.ok("list_decisions", {"limit": 100, "verdict": "review"})
    mine = [d for d in listed["decisions"] if d["id"] == decision]
    assert mine and mine[0]["review_status"] == "denied", listed


async def raw_request(session, request):
    """Sends a typed request and answers its raw result. The SDK leaves the tasks of
    2025-11-25 out on purpose (mcp_types.methods: "tasks/* deliberately absent") and reads
    every tools/call answer as a CallToolResult, so a task-augmented call is sent through
    the channel its typed requests are built on: the session's dispatcher
    (`Outbound.send_raw_request`), stamped as the session stamps every request."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts = {}
    session._stamp(data, opts)
    return await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)


async def call_as_task(session, arguments, name="authorize_payment"):
    """tools/call with a task (2025-11-25): its CreateTaskResult."""
    raw = await raw_request(session, types.CallToolRequest(params=types.CallToolRequestParams(
        name=name, arguments=arguments, task=types.TaskMetadata(ttl=60000))))
    return types.CreateTaskResult.model_validate(raw)


async def get_task_2025(session, task_id):
    return await session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
        types.GetTaskResult)


async def task_result_2025(session, task_id):
    return await session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
        types.CallToolResult)


async def cancel_task_2025(session, task_id):
    return await session.send_request(
        types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
        types.CancelTaskResult)


async def expect_error(code, coroutine):
    try:
        answered = await coroutine
    except MCPError as e:
        assert e.code == code, e
        return str(e)
    raise AssertionError(f"answered instead of error {code}: {answered}")


async def legacy_review_tasks(s, schema):
    """A review as a task under 2025-11-25: the tool declares it may run as one, a call that
    asks for a task answers one (completed at once on allow, working while a person
    reviews), tasks/result waits for the person and answers the signed allow or the denial
    with the reviewer's reason, and tasks/cancel cancels a working task for good."""
    session, server = s.client.session, s.server
    capabilities = session.initialize_result.capabilities
    assert capabilities.tasks and capabilities.tasks.requests.tools.call is not None, capabilities
    assert capabilities.tasks.cancel is not None and capabilities.tasks.list is None, capabilities
    listed = {t.name: t for t in (await session.list_tools()).tools}
    for name, tool in listed.items():
        support = tool.execution.task_support if tool.execution else None
        assert support == ("optional" if name == "authorize_payment" else None), (name, tool)

    # An allow asked as a task: completed at once; its result the allow.
    created = await call_as_task(session, {
        "amount": "3", "currency": "USD", "recipient": "vendor:acme", "category": "travel"})
    assert created.task.status == "completed" and created.task.ttl is None, created
    result = await task_result_2025(session, created.task.task_id)
    assert result.structured_content["verdict"] == "allow", result
    assert result.meta["io.modelcontextprotocol/related-task"]["taskId"] == created.task.task_id
    verify_token(result.structured_content["verdict_token"], "3", created.task.task_id)

    for action, amount in [("approve", "80"), ("deny", "65")]:
        created = await call_as_task(session, {
            "amount": amount, "currency": "USD", "recipient": "vendor:acme",
            "category": "travel"})
        task = created.task
        assert task.status == "working" and task.task_id.startswith("dec_"), task
        assert task.poll_interval and task.poll_interval > 0, task
        review = re.search(r"rev_[A-Za-z0-9_-]+", task.status_message).group(0)
        # Any mandate mcp answers for the task: a fresh process (stdio) or another session.
        async with Client(server, mode="legacy") as other:
            again = await get_task_2025(other.session, task.task_id)
        assert again.status == "working" and again.created_at == task.created_at, again
        # tasks/result waits until the person decided.
        answers = []

        async def fetch(task_id=task.task_id, answers=answers):
            answers.append(await task_result_2025(session, task_id))

        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch)
            await anyio.sleep(1)
            assert not answers, "tasks/result answered before the person decided"
            details = {"review": review}
            if action == "deny":
                details["reason"] = "too expensive for a taxi"
            say({"need": action, **details})
        result = answers[0]
        assert not result.is_error, result
        output = result.structured_content
        jsonschema.validate(output, schema)
        assert result.meta["io.modelcontextprotocol/related-task"]["taskId"] == task.task_id
        ended = await get_task_2025(session, task.task_id)
        assert ended.status == "completed" and ended.status_message == output["next_step"], ended
        if action == "approve":
            assert output["verdict"] == "allow" and output["review_status"] == "approved", output
            verify_token(output["verdict_token"], amount, output["decision"])
        else:
            assert output["review_status"] == "denied" and output["verdict_token"] is None, output
            assert output["reason"] == "too expensive for a taxi", output
        # An ended task cannot be cancelled.
        message = await expect_error(-32602, cancel_task_2025(session, task.task_id))
        assert "already completed" in message, message

    # Cancelled while working: cancelled for good, even once a person approves, for any
    # mandate mcp of this agent; its result says not to pay.
    created = await call_as_task(session, {
        "amount": "70", "currency": "USD", "recipient": "vendor:acme", "category": "travel"})
    cancelled = await cancel_task_2025(session, created.task.task_id)
    assert cancelled.status == "cancelled", cancelled
    await cancelled_for_good(s, created.task.task_id, created.task.status_message)
    for elsewhere in (server, ELSEWHERE):
        async with Client(elsewhere, mode="legacy") as other:
            again = await get_task_2025(other.session, created.task.task_id)
            result = await task_result_2025(other.session, created.task.task_id)
        assert again.status == "cancelled", again
        assert result.is_error and "do not pay" in result.content[0].text, result
    await expect_error(-32602, cancel_task_2025(session, created.task.task_id))

    # Errors: another agent's task, a tool that does not run as a task, a call refused
    # before any decision was made (no task is created).
    message = await expect_error(-32602, get_task_2025(session, "dec_not_mine"))
    assert "dec_not_mine" in message, message
    await expect_error(-32601, call_as_task(session, {}, name="get_mandate"))
    message = await expect_error(-32602, call_as_task(session, {
        "amount": "5", "currency": "USD", "recipient": "acme", "category": "travel"}))
    assert "no task was created" in message and "recipient" in message, message


async def console_elicitation(s):
    """A review shown to the user (URL-mode elicitation), for a client that takes it and a
    mandate mcp told the console's URL: the user is asked to open the review there, the
    call then answers the review as usual (under 2026-07-28 through the SDK's input-required
    retry, which makes no second decision); a client that does not take it is not asked."""
    asked = []
    answer = {"action": "accept"}

    async def on_elicit(context, params):
        asked.append(params)
        return types.ElicitResult(action=answer["action"])

    async with Client(s.server, mode=CONFIG["mode"], elicitation_callback=on_elicit) as client:
        before = len((await s.ok("list_decisions", {"limit": 100}))["decisions"])
        for action in ("accept", "decline"):
            answer["action"] = action
            result = await client.call_tool("authorize_payment", {
                "amount": "85", "currency": "USD", "recipient": "vendor:acme",
                "category": "travel"})
            assert not result.is_error, result
            output = result.structured_content
            assert output["verdict"] == "review" and output["verdict_token"] is None, output
            params = asked[-1]
            assert params.mode == "url", params
            assert params.url == f"{CONFIG['console']}#reviews/{output['review']}", params
            assert params.elicitation_id == output["review"], params
            assert "pay 85 USD to vendor:acme" in params.message, params
            said = "agreed to" if action == "accept" else "declined"
            assert f"the user was asked to open the review in the console and {said}" in \
                output["next_step"], output
        assert len(asked) == 2, asked
        after = len((await s.ok("list_decisions", {"limit": 100}))["decisions"])
        assert after == before + 2, (before, after)
    # The main client declares no elicitation: a review asks it nothing.
    plain = await s.ok("authorize_payment", {
        "amount": "85", "currency": "USD", "recipient": "vendor:acme", "category": "travel"})
    assert plain["verdict"] == "review" and "console" not in plain["next_step"], plain
    if CONFIG["transport"] == "stdio":
        # mandate mcp not told the console's URL asks no one.
        args = [a for a in s.server.args if a != "--console-url" and a != CONFIG["console"]]
        untold = StdioServerParameters(command=s.server.command, args=args, env=s.server.env)
        async with Client(untold, mode=CONFIG["mode"], elicitation_callback=on_elicit) as client:
            result = await client.call_tool("authorize_payment", {
                "amount": "85", "currency": "USD", "recipient": "vendor:acme",
                "category": "travel"})
            assert result.structured_content["verdict"] == "review", result
        assert len(asked) == 2, asked


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
    # Ranges in the schemas, and only the formats JSON Schema defines.
    for tool in tools.values():
        unknown = formats([tool.input_schema, tool.output_schema]) - STANDARD_FORMATS
        assert not unknown, (tool.name, unknown)
    limit = tools["list_decisions"].input_schema["properties"]["limit"]
    assert (limit["type"], limit["minimum"], limit["maximum"]) == ("integer", 1, 100), limit
    timeout = tools["wait_for_review"].input_schema["properties"]["timeout_seconds"]
    assert (timeout["minimum"], timeout["maximum"]) == (1, 600), timeout
    for name in ("authorize_payment", "verify_verdict"):
        properties = tools[name].input_schema["properties"]
        assert {"x402", "ap2", "acp"} <= set(properties), (name, set(properties))
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

    # Bound to an x402 payment: the verdict carries its digest, and verify_verdict checks
    # it (with the asset's decimals, the atomic amount too); another payment is refused.
    pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    requirements = {"scheme": "exact", "network": "eip155:84532", "amount": "2000000",
                    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": pay_to,
                    "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}}
    bound = await s.ok("authorize_payment", {
        "amount": "2", "currency": "USD", "recipient": f"vendor:{pay_to}",
        "category": "software", "x402": requirements})
    assert bound["verdict"] == "allow", bound
    claims = jwt.decode(bound["verdict_token"], options={"verify_signature": False})
    assert claims.get("x402_payment"), claims
    expected = {"token": bound["verdict_token"], "amount": "2", "currency": "USD",
                "recipient": f"vendor:{pay_to}"}
    other = await s.ok("verify_verdict", {**expected, "x402": {**requirements, "amount": "3000000"},
                                          "decimals": 6})
    assert other["valid"] is False, other
    same = await s.ok("verify_verdict", {**expected, "x402": requirements, "decimals": 6})
    assert same["valid"] is True, same
    message = await s.error("authorize_payment", {
        "amount": "2", "currency": "USD", "recipient": "vendor:someone-else",
        "category": "software", "x402": requirements})
    assert "x402" in message and "400" in message, message

    # Made under an ACP delegated payment allowance: decided on its maximum, the verdict
    # bound to it (its digest and checkout session), which verify_verdict checks; a request
    # that is not the allowance is the API's 400 naming it.
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 86400))
    allowance = {"reason": "one_time", "max_amount": 1500, "currency": "usd",
                 "checkout_session_id": "csn_mcp_1", "merchant_id": "acme_store",
                 "expires_at": expires}
    under = {"amount": "15", "currency": "USD", "recipient": "vendor:acme_store",
             "category": "software"}
    made = await s.ok("authorize_payment", {**under, "acp": {"allowance": allowance}})
    assert made["verdict"] == "allow", made
    claims = jwt.decode(made["verdict_token"], options={"verify_signature": False})
    assert claims["acp_checkout_session"] == "csn_mcp_1" and claims["acp_allowance"], claims
    expected = {"token": made["verdict_token"], "amount": "15", "currency": "USD",
                "recipient": "vendor:acme_store"}
    elsewhere = await s.ok("verify_verdict", {**expected, "acp": {"allowance": {
        **allowance, "checkout_session_id": "csn_mcp_2"}}})
    assert elsewhere["valid"] is False and any(
        "acp_checkout_session" in r for r in elsewhere["reasons"]), elsewhere
    charged = await s.ok("verify_verdict", {**expected, "acp": {"allowance": allowance}})
    assert charged["valid"] is True, charged
    message = await s.error("authorize_payment", {
        **under, "amount": "16", "acp": {"allowance": {**allowance, "checkout_session_id": "csn_mcp_3"}}})
    assert "acp.allowance" in message and "400" in message, message

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
                details = {"reason": "not this week"} if action == "deny" else {}
                say({"need": action, "review": asked["review"], **details})

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
            assert waited["reason"] == "not this week", waited
            assert waited["verdict_token"] is None
        else:
            assert waited["status"] == "expired", waited
            assert waited["verdict_token"] is None
    # The approved one is reachable later too.
    listed = await s.ok("list_decisions", {"limit": 100, "verdict": "review"})
    approved = [d for d in listed["decisions"] if d["review_status"] == "approved"]
    assert len(approved) == 1 and approved[0]["review_resolution"], listed

    await tick(s)
    if CONFIG["mode"] == "auto":
        await review_tasks(s, s.schemas["authorize_payment"])
    else:
        await legacy_review_tasks(s, s.schemas["authorize_payment"])
    await tick(s)
    await console_elicitation(s)

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
    # Out of its range: refused naming the argument and the range.
    message = await s.error("list_decisions", {"limit": 1000})
    assert "limit must be an integer from 1 to 100, not 1000" in message, message
    for seconds in (-1, 100000):
        message = await s.error("wait_for_review", {"decision": food["decision"], "timeout_seconds": seconds})
        assert f"timeout_seconds must be an integer from 1 to 600, not {seconds}" in message, message
    # An amount is echoed as given.
    message = await s.error("authorize_payment", {
        "amount": "1e2", "currency": "USD", "recipient": "vendor:acme", "category": "software"})
    assert "amount 1e2 is not usable" in message, message
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
        server = StdioServerParameters(
            command=CONFIG["command"][0], args=CONFIG["command"][1:], env=CONFIG["env"])
    else:
        server = CONFIG["url"]
    async with Client(server, mode=CONFIG["mode"]) as client:
        client.server_spec = server
        # Negotiated as the SDK does: the handshake, or the discover probe.
        assert client.protocol_version == VERSIONS[CONFIG["mode"]], client.protocol_version
        assert client.server_info.name == "mandate", client.server_info
        await scenario(client)
    say({"done": True})


anyio.run(main)
