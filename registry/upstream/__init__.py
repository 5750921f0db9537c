"""Each person's own account at a remote MCP server that acts for the person who calls."""
