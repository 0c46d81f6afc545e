"""Drives `trellis mcp serve` with the official MCP Python SDK, as an MCP host would.

Usage: client.py stdio TRELLIS_BINARY SPACE_PATH, or client.py http URL; prints one JSON
object with what it saw.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    if sys.argv[1] == "http":
        async with streamable_http_client(sys.argv[2]) as (read, write):
            await scenario(read, write)
    else:
        binary, space = sys.argv[2], sys.argv[3]
        params = StdioServerParameters(command=binary, args=["--space", space, "mcp", "serve"])
        async with stdio_client(params) as (read, write):
            await scenario(read, write)


async def scenario(read, write) -> None:
    updated: list[str] = []
    arrived = asyncio.Event()
    tools_changed = asyncio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()
        if isinstance(message, types.ToolListChangedNotification):
            tools_changed.set()

    async with ClientSession(read, write, message_handler=on_message) as session:
        init = await session.initialize()
        listed = await session.list_tools()
        before = await session.list_resources()
        watched = next(str(r.uri) for r in before.resources if r.name == "Counter")
        await session.subscribe_resource(watched)
        added = await session.call_tool("Counter_increment", {"amount": 2})
        await asyncio.wait_for(arrived.wait(), timeout=20)
        refused = await session.call_tool("Counter_increment", {"amount": "two"})
        approval = await session.call_tool("Notes_delete", {"id": 1})
        resources = await session.list_resources()
        counter_uri = next(str(r.uri) for r in resources.resources if r.name == "Counter")
        counter = await session.read_resource(counter_uri)
        created = await session.call_tool("create-charm", {"pattern": "counter", "name": "Steps"})
        await asyncio.wait_for(tools_changed.wait(), timeout=20)
        relisted = await session.list_tools()
        stepped = await session.call_tool("Steps_increment", {"amount": 3})
        try:
            await session.call_tool("Nope_nothing", {})
            unknown = None
        except Exception as error:  # the SDK raises the JSON-RPC error
            unknown = str(error)
        print(
            json.dumps(
                {
                    "server": init.server_info.name,
                    "tools": {tool.name: tool.title for tool in listed.tools},
                    "destructive": sorted(
                        tool.name for tool in listed.tools if tool.annotations and tool.annotations.destructive_hint
                    ),
                    "added": added.structured_content,
                    "added_error": added.is_error,
                    "refused_error": refused.is_error,
                    "refused_text": refused.content[0].text,
                    "approval_error": approval.is_error,
                    "approval_text": approval.content[0].text,
                    "unknown": unknown,
                    "resources": sorted(r.name for r in resources.resources),
                    "counter_uri": counter_uri,
                    "counter": json.loads(counter.contents[0].text),
                    "counter_mime": counter.contents[0].mime_type,
                    "updated": updated,
                    "created": created.structured_content,
                    "relisted": [tool.name for tool in relisted.tools],
                    "stepped": stepped.structured_content,
                }
            )
        )


asyncio.run(main())
