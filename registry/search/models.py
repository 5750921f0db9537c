"""The search index: one row per offered tool, holding the text agents search, by field.

PostgreSQL ranks `vector` (a weighted tsvector behind a GIN index); SQLite ranks the FTS5 table
`search_tool_fts`, which triggers on this table keep equal to it (migration 0001). Tool sync
rewrites a server's rows in the transaction that changes its tools.
"""

from __future__ import annotations

from django.contrib.postgres.search import SearchVectorField
from django.db import models


class ToolSearchEntry(models.Model):
    tool = models.OneToOneField(
        "servers.Tool", on_delete=models.CASCADE, primary_key=True, related_name="search_entry"
    )
    name_text = models.TextField(help_text="The tool's name, split into words.")
    title_text = models.TextField(blank=True)
    params_text = models.TextField(blank=True, help_text="Parameter names and descriptions.")
    description_text = models.TextField(blank=True)
    context_text = models.TextField(blank=True, help_text="Server name and slug, category.")
    # Only PostgreSQL fills it (SQLite keeps the column empty and searches its FTS5 table).
    vector = SearchVectorField(null=True, editable=False)

    class Meta:
        verbose_name_plural = "tool search entries"

    def __str__(self) -> str:
        return f"search entry of tool {self.tool_id}"
