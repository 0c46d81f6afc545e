"""An MCP server on standard input and output made with the official Python SDK (PyPI
`mcp`), for Trellis's client tests: its tool `book_table` asks the person mid-call
(elicitation, by the SDK's resolvers: a multi-round-trip request from protocol 2026-07-28
on, a request of the server's own before) whose name the table is under and for how many
seats, and answers with what came back: the fields, or the person's decline or cancel.
"""

from typing import Annotated

from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp.server import MCPServer
from mcp.server.mcpserver import Elicit, ElicitationResult, Resolve

server = MCPServer("elicit-server")


class Booking(BaseModel):
    name: str = Field(description="Whose name the table is under")
    seats: int = Field(description="How many seats")


def ask_booking(date: str) -> Elicit[Booking]:
    return Elicit(f"Who is the table on {date} for?", Booking)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def book_table(date: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    """Books a table, asking whose name and how many seats."""
    if booking.action == "accept":
        return f"booked on {date} for {booking.data.name}, {booking.data.seats} seats"
    return f"not booked: the person chose {booking.action}"


server.run("stdio")
