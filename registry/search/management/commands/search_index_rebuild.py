"""Reindex every tool for search (after a restore, or to be sure the index matches the tools)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from registry.search.index import tool_search_index_rebuild


class Command(BaseCommand):
    help = "Rebuild the tool search index from the tools in the database."

    def handle(self, *args: Any, **options: Any) -> None:
        count = tool_search_index_rebuild()
        self.stdout.write(f"Indexed {count} tools.")
