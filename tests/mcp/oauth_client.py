"""The MCP Python SDK's OAuth client (`OAuthClientProvider`) reaching
`trellis mcp serve --http --tls-cert ... --require-token` over HTTPS, as a host that signs
in would.

Usage: oauth_client.py URL CA_PEM [TOKEN]. With TOKEN, kept as the provider's stored OAuth
token, it lists the tools and prints {"tools": [...]}. Without, the server's 401 sends the
provider to the protected-resource metadata, which names no authorization server (a
Trellis token comes from `trellis token new`), so it cannot sign in: it prints
{"refused": "..."}. The server's certificate is checked against CA_PEM, the test's own CA.
"""

import asyncio
import json
import ssl
import sys

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata, OAuthToken


class Stored(TokenStorage):
    """A token given on the command line, as a host keeps one it got earlier."""

    def __init__(self, token):
        self.token = token

    async def get_tokens(self):
        return OAuthToken(access_token=self.token, token_type="Bearer") if self.token else None

    async def set_tokens(self, tokens):
        self.token = tokens.access_token

    async def get_client_info(self):
        return None

    async def set_client_info(self, client_info):
        pass


async def main() -> None:
    url, ca = sys.argv[1], sys.argv[2]
    token = sys.argv[3] if len(sys.argv) > 3 else None
    metadata = OAuthClientMetadata(client_name="trellis test", redirect_uris=["http://127.0.0.1:9/callback"])
    provider = OAuthClientProvider(url, metadata, Stored(token))
    trust = ssl.create_default_context(cafile=ca)
    async with httpx2.AsyncClient(auth=provider, verify=trust, timeout=30) as http:
        try:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = await session.list_tools()
                    print(json.dumps({"tools": sorted(tool.name for tool in tools.tools)}))
        except BaseException as error:  # what the task groups raise, grouped
            print(json.dumps({"refused": repr(error)}))


asyncio.run(main())
