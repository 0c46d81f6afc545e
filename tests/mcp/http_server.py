"""An MCP server over Streamable HTTP made with the official Python SDK (PyPI `mcp`), for
Trellis's client tests. Usage: http_server.py PORT [CERT KEY]; serves
http://127.0.0.1:PORT/mcp, or https:// with the certificate and key (PEM) given.

Tools: `add` (a + b), `token` (the X-Trellis-Token header the request carried), `fail`
(raises, so the result is marked isError).
"""

import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("python-test-server")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def token(ctx: Context) -> str:
    """The X-Trellis-Token header of this request."""
    headers = ctx.headers or {}
    return headers.get("x-trellis-token", "(none)")


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("this tool fails deliberately")


if len(sys.argv) > 3:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_certfile=sys.argv[2], ssl_keyfile=sys.argv[3],
                log_level="info")
else:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
