"""An MCP server on standard input and output made with the official Python SDK (PyPI
`mcp`), for Trellis's client tests: it lists a tool whose name is too long to keep (the
client leaves it out, with a note) beside a fine one, `short`.
"""

from mcp.server import MCPServer

server = MCPServer("long-name-server")


@server.tool(name="n" * 200)
def too_long() -> str:
    """A tool whose name is past the 128 characters a client keeps."""
    return "unreachable"


@server.tool()
def short() -> str:
    """A fine tool."""
    return "short"


server.run("stdio")
