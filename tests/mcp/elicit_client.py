"""The MCP Python SDK as a host with elicitation, against `trellis mcp serve` over stdio:
the person is asked to approve `Notes.delete`, and answers.

Usage: elicit_client.py TRELLIS_BINARY SPACE_PATH accept|decline. Adds a note, deletes it
(the server asks; the callback accepts with `approve: true`, or declines), and prints one
JSON object: what was asked, and whether the delete's result was an error and its text.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main() -> None:
    binary, space, answer = sys.argv[1], sys.argv[2], sys.argv[3]
    server = StdioServerParameters(command=binary, args=["--space", space, "mcp", "serve"])
    asked: list[str] = []

    async def elicit(context, params) -> types.ElicitResult:
        asked.append(params.message)
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            await session.call_tool("Notes_add", {"title": "milk"})
            deleted = await session.call_tool("Notes_delete", {"id": 1})
            text = " ".join(block.text for block in deleted.content if isinstance(block, types.TextContent))
            print(json.dumps({"asked": asked, "error": bool(deleted.is_error), "text": text}))


asyncio.run(main())
