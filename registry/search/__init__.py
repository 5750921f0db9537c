"""Full-text search over tools: the index kept by tool sync and the databases' own rankers."""
