"""Teams, their members and roles, grants of servers and tools, access requests, agent tokens."""
