"""Drives `trellis mcp serve` with the official MCP Python SDK, as an MCP host would.

Usage: client.py REVISION stdio TRELLIS_BINARY SPACE_PATH, or client.py REVISION http URL,
where REVISION is `legacy` (the `initialize` handshake, `resources/subscribe`: what hosts
speak today), `current:CAP` (2026-07-28: `server/discover`, `subscriptions/listen`,
against a server that lets CAP subscriptions be open at once) or `observe` (subscribe to
the counter, say `subscribed` on a line, wait for a change someone else makes); prints
one JSON object with what it saw. Over HTTP, TRELLIS_MCP_TOKEN is sent as a bearer token.
"""

import os

import asyncio
import json
import sys
from contextlib import AsyncExitStack

from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionLost, ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client

# How long a notification may take to come.
WAIT = 20


async def main() -> None:
    revision, transport = sys.argv[1], sys.argv[2]
    if transport == "http":
        server = sys.argv[3]
    else:
        binary, space = sys.argv[3], sys.argv[4]
        server = StdioServerParameters(command=binary, args=["--space", space, "mcp", "serve"])
    if revision == "observe":
        await observe(server)
    elif revision.startswith("current:"):
        await current(server, int(revision.removeprefix("current:")))
    elif revision.startswith("crowd:"):
        await crowd(server, int(revision.removeprefix("crowd:")))
    elif transport == "http":
        async with streamable_http_client(server) as (read, write):
            await legacy(read, write)
    else:
        async with stdio_client(server) as (read, write):
            await legacy(read, write)


def http_client():
    """The HTTP client of the SDK's transport, with the bearer token if one is given."""
    token = os.environ.get("TRELLIS_MCP_TOKEN")
    return create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) if token else None


async def observe(url: str) -> None:
    """Subscribes to the counter and waits for a change made elsewhere (the test makes it
    once this prints `subscribed`); prints what it heard and the counter then."""
    updated: list[str] = []
    arrived = asyncio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()

    async with streamable_http_client(url, http_client=http_client()) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            resources = await session.list_resources()
            counter = next(str(r.uri) for r in resources.resources if r.name == "Counter")
            await session.subscribe_resource(counter)
            print("subscribed", flush=True)
            await asyncio.wait_for(arrived.wait(), WAIT)
            data = await session.read_resource(counter)
            print(json.dumps({"counter_uri": counter, "updated": updated, "counter": json.loads(data.contents[0].text)}))


async def open_at_once(client, counter: str) -> tuple[int, str | None]:
    """Opens streams on `counter` until one is not honoured; how many were, and why the
    last one was refused."""
    async with AsyncExitStack() as held:
        opened = 0
        while True:
            sub = await held.enter_async_context(client.listen(resource_subscriptions=[counter]))
            if not sub.honored.resource_subscriptions:
                break
            opened += 1
        try:
            await asyncio.wait_for(anext(sub), WAIT)
            return opened, None
        except SubscriptionLost as lost:
            return opened, str(lost.__cause__)


async def current(server, cap: int) -> None:
    """The 2026-07-28 revision: no handshake, change notifications on listen streams."""
    async with Client(server) as client:  # mode "auto": server/discover first
        version = client.protocol_version
        resources = await client.list_resources()
        counter = next(str(r.uri) for r in resources.resources if r.name == "Counter")
        async with client.listen(
            resource_subscriptions=[counter, "trellis://charm/nope"], tools_list_changed=True, resources_list_changed=True
        ) as sub:
            honored = sub.honored
            added = await client.call_tool("Counter_increment", {"amount": 2})
            first = await asyncio.wait_for(anext(sub), WAIT)
            created = await client.call_tool("create-charm", {"pattern": "counter", "name": "Steps"})
            lists = set()
            while lists != {"tools", "resources"}:
                event = await asyncio.wait_for(anext(sub), WAIT)
                if isinstance(event, ToolsListChanged):
                    lists.add("tools")
                elif isinstance(event, ResourcesListChanged):
                    lists.add("resources")
            relisted = await client.list_tools()
            stepped = await client.call_tool("Steps_increment", {"amount": 3})

        # Each stream ended (cancelled) gives back what it took: more streams, one after
        # the other, than could be open at once.
        for _ in range(cap + 2):
            async with client.listen(resource_subscriptions=[counter]) as again:
                reopened = again.honored.resource_subscriptions

        # Too many at once: the one past the cap is refused, and ending the others makes room.
        opened, refused = await open_at_once(client, counter)
        async with client.listen(resource_subscriptions=[counter]) as after:
            after_honored = after.honored.resource_subscriptions
            await client.call_tool("Counter_increment", {"amount": 1})
            after_event = await asyncio.wait_for(anext(after), WAIT) if after_honored else None

        counter_data = await client.read_resource(counter)
        print(
            json.dumps(
                {
                    "version": version,
                    "honored": honored.model_dump(by_alias=True, exclude_none=True),
                    "counter_uri": counter,
                    "added": added.structured_content,
                    "first": first.uri if isinstance(first, ResourceUpdated) else repr(first),
                    "created": created.structured_content,
                    "relisted": [tool.name for tool in relisted.tools],
                    "stepped": stepped.structured_content,
                    "reopened": reopened,
                    "opened_at_once": opened,
                    "refused": refused,
                    "after_honored": after_honored,
                    "after": after_event.uri if isinstance(after_event, ResourceUpdated) else repr(after_event),
                    "counter": json.loads(counter_data.contents[0].text),
                }
            )
        )


async def legacy(read, write) -> None:
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
        # A handler that answers: the SDK checks its structured content against the
        # tool's output schema (from the listing) before handing it over.
        todo_added = await session.call_tool("Todo_add", {"title": "milk"})
        output_schemas = {tool.name: tool.output_schema for tool in listed.tools}
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
                    "todo_added": todo_added.structured_content,
                    "todo_added_text": json.loads(todo_added.content[0].text),
                    "todo_output_schema": output_schemas["Todo_add"],
                    "counter_output_schema": output_schemas["Counter_increment"],
                }
            )
        )


async def crowd(url: str, sessions: int) -> None:
    """Opens `sessions` sessions of the earlier revisions over HTTP that only initialise
    (and stay open), then one more that subscribes to the counter and increments it:
    prints whether that one heard of the change, and the error of a subscription too many
    for one session, if any."""
    async with AsyncExitStack() as held:
        for _ in range(sessions):
            read, write = await held.enter_async_context(streamable_http_client(url))
            idle = await held.enter_async_context(ClientSession(read, write))
            await idle.initialize()
        updated = asyncio.Event()

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updated.set()

        read, write = await held.enter_async_context(streamable_http_client(url))
        session = await held.enter_async_context(ClientSession(read, write, message_handler=on_message))
        await session.initialize()
        resources = await session.list_resources()
        counter = next(str(r.uri) for r in resources.resources if r.name == "Counter")
        subscribed = None
        try:
            await session.subscribe_resource(counter)
        except Exception as error:  # the SDK raises the JSON-RPC error
            subscribed = str(error)
        await session.call_tool("Counter_increment", {"amount": 1})
        try:
            await asyncio.wait_for(updated.wait(), WAIT)
            heard = True
        except TimeoutError:
            heard = False
        print(json.dumps({"subscribe_error": subscribed, "heard": heard}))


asyncio.run(main())
