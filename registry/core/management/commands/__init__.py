"""Toolroom core's management commands: quickstart_admin."""
