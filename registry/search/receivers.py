"""Reindexes a server's tools when what the index holds of the server itself changes."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from registry.search.index import tool_search_index_refresh
from registry.servers.signals import server_visibility_changed

# Tool sync reindexes in its own transaction; these change the server's name, slug or category.
REINDEX_REASONS = frozenset({"server.updated"})


@receiver(server_visibility_changed, dispatch_uid="search_reindex_on_server_change")
def search_reindex_on_server_change(
    sender: Any, server_ids: list[int], reason: str, **kwargs: Any
) -> None:
    if reason in REINDEX_REASONS:
        tool_search_index_refresh(server_ids=server_ids)
