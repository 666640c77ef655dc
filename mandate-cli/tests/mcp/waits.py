"""Many `wait_for_review` calls at once on one review, through the official MCP Python SDK
(`mcp` on PyPI) over streamable HTTP. Run by tests/mcp/waits.rs, which counts the API calls
they cost. Argument: a JSON object: url, decision, count, seconds."""

import json
import sys

import anyio
from mcp import Client

CONFIG = json.loads(sys.argv[1])


async def main():
    statuses = []
    async with Client(CONFIG["url"], mode="legacy") as client:

        async def wait():
            result = await client.call_tool(
                "wait_for_review",
                {"decision": CONFIG["decision"], "timeout_seconds": CONFIG["seconds"]},
                read_timeout_seconds=60,
            )
            assert not result.is_error, result.content
            statuses.append(result.structured_content["status"])

        async with anyio.create_task_group() as group:
            for _ in range(CONFIG["count"]):
                group.start_soon(wait)
    # Nobody decided: every wait ended pending, none on an error (a 429 would be one).
    assert statuses == ["pending"] * CONFIG["count"], statuses


anyio.run(main)
