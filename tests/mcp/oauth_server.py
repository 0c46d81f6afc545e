"""An MCP server behind OAuth 2.1, made with the official Python SDK (PyPI `mcp`): the
SDK's authorization server routes (metadata, dynamic client registration, authorize,
token with PKCE) and its resource server (protected-resource metadata, bearer checks),
over HTTPS, for Trellis's client tests.

Usage: oauth_server.py PORT CERT KEY LIFETIME. Serves https://127.0.0.1:PORT/mcp; an
access token lasts LIFETIME seconds, and a refresh token gives a new one (and a new refresh
token). The authorization endpoint approves at once, as a person who clicked Allow would:
it redirects to the client's redirect URI with a code.

Tools: `whoami`: which access token this is (`token 1`, `token 2` after a refresh), and
how many tokens were refused as expired or unknown.
"""

import secrets
import sys
import time

import uvicorn
from pydantic import AnyHttpUrl

from mcp.server import MCPServer
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

port, cert, key, lifetime = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
base = f"https://127.0.0.1:{port}"


class Provider:
    """Everything in memory: clients, codes, tokens (numbered as issued)."""

    def __init__(self):
        self.clients = {}
        self.codes = {}
        self.access = {}
        self.refresh = {}
        self.issued = 0
        self.refused = 0

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull):
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params: AuthorizationParams):
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code):
        return self.codes.get(authorization_code)

    def issue(self, client_id, scopes, resource):
        self.issued += 1
        access = f"access-{self.issued}-{secrets.token_urlsafe(16)}"
        refresh = f"refresh-{self.issued}-{secrets.token_urlsafe(16)}"
        expires = int(time.time()) + lifetime
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource,
            claims={"number": self.issued},
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, expires_in=lifetime, refresh_token=refresh, scope=" ".join(scopes))

    async def exchange_authorization_code(self, client, authorization_code):
        self.codes.pop(authorization_code.code, None)
        return self.issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token):
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        self.refresh.pop(refresh_token.token, None)
        return self.issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token):
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            self.refused += 1
            return None
        return found

    async def revoke_token(self, token):
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


provider = Provider()
server = MCPServer(
    "oauth-test-server",
    auth_server_provider=provider,
    auth=AuthSettings(
        issuer_url=AnyHttpUrl(base),
        resource_server_url=AnyHttpUrl(f"{base}/mcp"),
        client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"]),
        required_scopes=["mcp"],
    ),
)


@server.tool()
def whoami() -> str:
    """Which access token this call came with."""
    token = get_access_token()
    number = (token.claims or {}).get("number") if token else None
    return f"token {number}; refused {provider.refused}"


app = server.streamable_http_app(host="127.0.0.1")
uvicorn.run(app, host="127.0.0.1", port=port, ssl_certfile=cert, ssl_keyfile=key, log_level="info")
