"""Toolroom's data plane: the Celery app, its tasks, the adapters over the MCP and Docker SDKs."""
