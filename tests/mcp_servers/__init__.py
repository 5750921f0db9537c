"""MCP servers written with the official SDK for the tests: well-behaved and misbehaving."""
