"""The gateway: one MCP endpoint per team that calls approved tools (docs/gateway.md)."""
