"""A small MCP server written with the SDK (stdio): three tools, a resource, a prompt.

The kind of server a team writes in an afternoon; the discovery benchmark's second server, next
to the published mcp-server-time. Run: python bench/discovery/small_server.py
"""

from __future__ import annotations

import datetime as dt

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-small", instructions="A small server for the discovery benchmark.")


@server.tool()
def echo(text: str) -> str:
    """Return the text it was given."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def utc_now() -> str:
    """The current time in UTC, ISO 8601."""
    return dt.datetime.now(dt.UTC).isoformat()


@server.resource("memo://greeting", mime_type="text/plain")
def greeting() -> str:
    """A greeting."""
    return "Hello from the bench server."


@server.prompt()
def summarise(text: str) -> str:
    """Ask for a summary of a text."""
    return f"Summarise this text in three sentences:\n\n{text}"


if __name__ == "__main__":
    server.run()
