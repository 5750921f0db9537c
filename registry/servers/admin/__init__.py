"""The vetting workplace in the Django admin: servers, tools and categories (the audit trail's
pages are in registry/audit/admin.py). Importing this package registers the pages."""

from registry.servers.admin import categories, servers, tools

__all__ = ["categories", "servers", "tools"]
