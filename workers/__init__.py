"""Toolroom's data plane: the Celery app, its tasks, and the adapters over the MCP and Docker SDKs."""
