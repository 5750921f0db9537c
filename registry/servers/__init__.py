"""MCP servers and their tools: registration, vetting, approvals pinned to definition hashes."""
