"""MCP servers (written with the SDK) that the sandbox tests and the benchmark run in containers."""
