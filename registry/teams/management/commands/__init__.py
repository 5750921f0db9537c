"""`create_team`, `grant`, `create_agent_token` and `load_demo_teams`."""
