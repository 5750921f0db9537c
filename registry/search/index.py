"""Writes of the search index: a server's tools reindexed in the caller's transaction.

Tool sync calls `tool_search_index_refresh` when it changes a server's tools, and the receiver
does when a server's name or category changes. Every offered tool is indexed, approved or not:
what an agent may find is decided at query time by the catalogue's selector, never by the index.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.postgres.search import SearchVector
from django.db import connection, transaction
from django.db.models import Value

from registry.search.models import ToolSearchEntry
from registry.search.text import joined, schema_text
from registry.servers.models import Tool

# Weight classes of PostgreSQL (A highest); SQLite's bm25 weights in selectors.py mirror them.
FIELD_WEIGHTS = {
    "name_text": "A",
    "title_text": "B",
    "params_text": "B",
    "description_text": "C",
    "context_text": "D",
}
TEXT_SEARCH_CONFIG = "english"


def weighted_vector() -> Any:
    vectors = [
        SearchVector(field, weight=weight, config=Value(TEXT_SEARCH_CONFIG))
        for field, weight in FIELD_WEIGHTS.items()
    ]
    combined: Any = vectors[0]
    for vector in vectors[1:]:
        combined = combined + vector
    return combined


def entry_fields(tool: Any) -> dict[str, str]:
    server = tool.server
    category = server.category
    return {
        "name_text": joined([tool.name]),
        "title_text": joined([tool.title, str((tool.annotations or {}).get("title") or "")]),
        "params_text": joined([schema_text(tool.input_schema)]),
        "description_text": joined([tool.description]),
        "context_text": joined(
            [
                server.name,
                server.slug,
                category.name if category else "",
                category.slug if category else "",
            ]
        ),
    }


def tool_search_index_refresh(*, server_ids: Iterable[int]) -> int:
    """Rewrite the index rows of these servers' offered tools; returns how many were written."""
    return index_servers(tool_model=Tool, entry_model=ToolSearchEntry, server_ids=server_ids)


def index_servers(*, tool_model: Any, entry_model: Any, server_ids: Iterable[int]) -> int:
    """The refresh over given model classes, so that migration 0001 runs it on historical ones."""
    ids = sorted(set(server_ids))
    if not ids:
        return 0
    tools = list(
        tool_model.objects.filter(server_id__in=ids, removed_at__isnull=True)
        .select_related("server__category")
        .order_by("pk")
    )
    with transaction.atomic():
        entry_model.objects.filter(tool__server_id__in=ids).delete()
        entry_model.objects.bulk_create(
            [entry_model(tool_id=tool.pk, **entry_fields(tool)) for tool in tools]
        )
        if connection.vendor == "postgresql":
            entry_model.objects.filter(tool__server_id__in=ids).update(vector=weighted_vector())
    return len(tools)


def tool_search_index_rebuild() -> int:
    """Reindex every server (the management command; after a restore, or to be sure)."""
    server_ids = Tool.objects.order_by().values_list("server_id", flat=True).distinct()
    return tool_search_index_refresh(server_ids=list(server_ids))
