"""The tool search index: the entry table everywhere, a GIN index on PostgreSQL, an FTS5 table
kept equal to the entries by triggers on SQLite; existing tools are indexed."""

from __future__ import annotations

from typing import Any

import django.contrib.postgres.search
import django.db.models.deletion
from django.db import migrations, models

FTS_SQLITE = [
    "CREATE VIRTUAL TABLE search_tool_fts USING fts5("
    "name, title, params, description, context, tokenize = 'porter unicode61')",
    "CREATE TRIGGER search_tool_fts_insert AFTER INSERT ON search_toolsearchentry BEGIN "
    "INSERT INTO search_tool_fts (rowid, name, title, params, description, context) VALUES "
    "(new.tool_id, new.name_text, new.title_text, new.params_text, new.description_text, "
    "new.context_text); END",
    "CREATE TRIGGER search_tool_fts_delete AFTER DELETE ON search_toolsearchentry BEGIN "
    "DELETE FROM search_tool_fts WHERE rowid = old.tool_id; END",
    "CREATE TRIGGER search_tool_fts_update AFTER UPDATE ON search_toolsearchentry BEGIN "
    "DELETE FROM search_tool_fts WHERE rowid = old.tool_id; "
    "INSERT INTO search_tool_fts (rowid, name, title, params, description, context) VALUES "
    "(new.tool_id, new.name_text, new.title_text, new.params_text, new.description_text, "
    "new.context_text); END",
]
FTS_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS search_tool_fts_update",
    "DROP TRIGGER IF EXISTS search_tool_fts_delete",
    "DROP TRIGGER IF EXISTS search_tool_fts_insert",
    "DROP TABLE IF EXISTS search_tool_fts",
]
GIN_POSTGRESQL = [
    "CREATE INDEX search_toolsearchentry_vector_gin ON search_toolsearchentry USING gin (vector)"
]
GIN_POSTGRESQL_DROP = ["DROP INDEX IF EXISTS search_toolsearchentry_vector_gin"]


def _create_full_text(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for statement in {"sqlite": FTS_SQLITE, "postgresql": GIN_POSTGRESQL}.get(vendor, []):
        schema_editor.execute(statement)


def _drop_full_text(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for statement in {"sqlite": FTS_SQLITE_DROP, "postgresql": GIN_POSTGRESQL_DROP}.get(vendor, []):
        schema_editor.execute(statement)


def _index_existing_tools(apps: Any, schema_editor: Any) -> None:
    # The index's text rules live in one place (registry.search.index), run on historical models.
    from registry.search.index import index_servers  # noqa: PLC0415

    tool_model = apps.get_model("servers", "Tool")
    server_ids = tool_model.objects.order_by().values_list("server_id", flat=True).distinct()
    index_servers(
        tool_model=tool_model,
        entry_model=apps.get_model("search", "ToolSearchEntry"),
        server_ids=list(server_ids),
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [("servers", "0004_sandbox_image")]

    operations = [
        migrations.CreateModel(
            name="ToolSearchEntry",
            fields=[
                (
                    "tool",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="search_entry",
                        serialize=False,
                        to="servers.tool",
                    ),
                ),
                ("name_text", models.TextField(help_text="The tool's name, split into words.")),
                ("title_text", models.TextField(blank=True)),
                (
                    "params_text",
                    models.TextField(blank=True, help_text="Parameter names and descriptions."),
                ),
                ("description_text", models.TextField(blank=True)),
                (
                    "context_text",
                    models.TextField(blank=True, help_text="Server name and slug, category."),
                ),
                (
                    "vector",
                    django.contrib.postgres.search.SearchVectorField(editable=False, null=True),
                ),
            ],
            options={"verbose_name_plural": "tool search entries"},
        ),
        migrations.RunPython(_create_full_text, _drop_full_text, elidable=False),
        migrations.RunPython(_index_existing_tools, migrations.RunPython.noop, elidable=False),
    ]
