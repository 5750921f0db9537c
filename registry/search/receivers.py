"""Reindexes a server's tools when they change (a sync, inside its transaction) and when what the
index holds of the server itself changes (after commit)."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from registry.search.index import tool_search_index_refresh
from registry.servers.signals import server_tools_changed, server_visibility_changed

# Tool syncs announce theirs with server_tools_changed; these change the server's name, slug or
# category.
REINDEX_REASONS = frozenset({"server.updated"})


@receiver(server_visibility_changed, dispatch_uid="search_reindex_on_server_change")
def search_reindex_on_server_change(
    sender: Any, server_ids: list[int], reason: str, **kwargs: Any
) -> None:
    if reason in REINDEX_REASONS:
        tool_search_index_refresh(server_ids=server_ids)


@receiver(server_tools_changed, dispatch_uid="search_reindex_on_tools_change")
def search_reindex_on_tools_change(sender: Any, server_ids: list[int], **kwargs: Any) -> None:
    tool_search_index_refresh(server_ids=server_ids)
