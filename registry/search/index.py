"""Writes of the search index: a server's tools reindexed in the caller's transaction.

Tool sync calls `tool_search_index_refresh` when it changes a server's tools, and the receiver
does when a server's name or category changes. Every offered tool is indexed, approved or not:
what an agent may find is decided at query time by the catalogue's selector, never by the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.postgres.search import SearchVector
from django.db import connection, transaction
from django.db.models import Value

from registry.search.models import ToolSearchEntry
from registry.search.text import joined, schema_text
from registry.servers.models import Tool

# The entry's text fields, in the order of SQLite's FTS5 columns and of the shared ranking.
INDEX_FIELDS = ("name_text", "title_text", "params_text", "description_text", "context_text")
# The text holds terms already stemmed (registry.search.text): PostgreSQL must not stem again,
# so `simple` (lower case, no stop words, no stemming), like FTS5's plain `unicode61`.
TEXT_SEARCH_CONFIG = "simple"


def index_vector() -> Any:
    vectors = [SearchVector(field, config=Value(TEXT_SEARCH_CONFIG)) for field in INDEX_FIELDS]
    combined: Any = vectors[0]
    for vector in vectors[1:]:
        combined = combined + vector
    return combined


def document_fields(
    *,
    name: str,
    title: str | None,
    annotations: Mapping[str, Any] | None,
    input_schema: Mapping[str, Any] | None,
    description: str | None,
    server_name: str,
    server_slug: str,
    category_name: str | None,
    category_slug: str | None,
) -> dict[str, str]:
    """The index text of one tool by field: what the database matches and the ranking counts.

    The index (from Tool rows) and the ranking (from an agent's catalogue) both call this, so
    that a term the database matches is a term the ranking sees."""
    return {
        "name_text": joined([name]),
        "title_text": joined([title, str((annotations or {}).get("title") or "")]),
        "params_text": joined([schema_text(input_schema)]),
        "description_text": joined([description]),
        "context_text": joined([server_name, server_slug, category_name, category_slug]),
    }


def entry_fields(tool: Any) -> dict[str, str]:
    server = tool.server
    category = server.category
    return document_fields(
        name=tool.name,
        title=tool.title,
        annotations=tool.annotations,
        input_schema=tool.input_schema,
        description=tool.description,
        server_name=server.name,
        server_slug=server.slug,
        category_name=category.name if category else None,
        category_slug=category.slug if category else None,
    )


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
            entry_model.objects.filter(tool__server_id__in=ids).update(vector=index_vector())
    return len(tools)


def tool_search_index_rebuild() -> int:
    """Reindex every server (the management command; after a restore, or to be sure)."""
    server_ids = Tool.objects.order_by().values_list("server_id", flat=True).distinct()
    return tool_search_index_refresh(server_ids=list(server_ids))
