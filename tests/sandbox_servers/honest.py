"""A small honest MCP server: echo and add. The benchmark runs it locally and sandboxed."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("honest")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    server.run()
