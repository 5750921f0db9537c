"""The index holds terms stemmed in Python: SQLite's FTS5 table stops stemming again (plain
`unicode61`, no `porter`), PostgreSQL's tsvector uses the `simple` configuration, and every
tool is reindexed with the new text (registry.search.text)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

FTS_SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS search_tool_fts_update",
    "DROP TRIGGER IF EXISTS search_tool_fts_delete",
    "DROP TRIGGER IF EXISTS search_tool_fts_insert",
    "DROP TABLE IF EXISTS search_tool_fts",
]


def _fts_sqlite(tokenize: str) -> list[str]:
    columns = "rowid, name, title, params, description, context"
    values = (
        "new.tool_id, new.name_text, new.title_text, new.params_text, new.description_text, "
        "new.context_text"
    )
    return [
        "CREATE VIRTUAL TABLE search_tool_fts USING fts5("
        f"name, title, params, description, context, tokenize = '{tokenize}')",
        "CREATE TRIGGER search_tool_fts_insert AFTER INSERT ON search_toolsearchentry BEGIN "
        f"INSERT INTO search_tool_fts ({columns}) VALUES ({values}); END",
        "CREATE TRIGGER search_tool_fts_delete AFTER DELETE ON search_toolsearchentry BEGIN "
        "DELETE FROM search_tool_fts WHERE rowid = old.tool_id; END",
        "CREATE TRIGGER search_tool_fts_update AFTER UPDATE ON search_toolsearchentry BEGIN "
        "DELETE FROM search_tool_fts WHERE rowid = old.tool_id; "
        f"INSERT INTO search_tool_fts ({columns}) VALUES ({values}); END",
        f"INSERT INTO search_tool_fts ({columns}) SELECT tool_id, name_text, title_text, "
        "params_text, description_text, context_text FROM search_toolsearchentry",
    ]


def _recreate(tokenize: str) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in [*FTS_SQLITE_DROP, *_fts_sqlite(tokenize)]:
            schema_editor.execute(statement)

    return run


def _reindex(apps: Any, schema_editor: Any) -> None:
    from registry.search.index import index_servers  # noqa: PLC0415

    tool_model = apps.get_model("servers", "Tool")
    server_ids = tool_model.objects.order_by().values_list("server_id", flat=True).distinct()
    index_servers(
        tool_model=tool_model,
        entry_model=apps.get_model("search", "ToolSearchEntry"),
        server_ids=list(server_ids),
    )


class Migration(migrations.Migration):
    dependencies = [("search", "0001_tool_search_index")]

    operations = [
        migrations.RunPython(
            _recreate("unicode61"), _recreate("porter unicode61"), elidable=False
        ),
        migrations.RunPython(_reindex, _reindex, elidable=False),
    ]
