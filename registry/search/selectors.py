"""Matching tools against a query with the database's own full-text search.

More: docs/search.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from registry.search.index import TEXT_SEARCH_CONFIG
from registry.search.models import ToolSearchEntry
from registry.search.ranking import PREFIX_MIN_LENGTH

FTS_TABLE = "search_tool_fts"
_POSTGRESQL_MATCH = (
    f'SELECT "tool_id" FROM "{ToolSearchEntry._meta.db_table}" '  # noqa: S608 (constants)
    f'WHERE "vector" @@ to_tsquery(%s::regconfig, %s)'
)


class SearchUnsupported(Exception):
    """The database has no full-text search Toolroom knows (only PostgreSQL and SQLite do)."""


def tool_search_match(*, terms: Sequence[str]) -> set[int]:
    """Ids of the indexed tools holding at least one of these terms (stems)."""
    if not terms:
        return set()
    if connection.vendor == "postgresql":
        return _match_postgresql(terms)
    if connection.vendor == "sqlite":
        return _match_sqlite(terms)
    raise SearchUnsupported(connection.vendor)


def _match_postgresql(terms: Sequence[str]) -> set[int]:
    # Terms are [a-z0-9]+ (registry.search.text), so the raw tsquery needs no quoting.
    raw = " | ".join(f"{term}:*" if len(term) >= PREFIX_MIN_LENGTH else term for term in terms)
    with connection.cursor() as cursor:
        cursor.execute(_POSTGRESQL_MATCH, [TEXT_SEARCH_CONFIG, raw])
        return {row[0] for row in cursor.fetchall()}


def _match_sqlite(terms: Sequence[str]) -> set[int]:
    match = " OR ".join(
        f'"{term}"*' if len(term) >= PREFIX_MIN_LENGTH else f'"{term}"' for term in terms
    )
    sql = f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s"  # noqa: S608 (constant)
    with connection.cursor() as cursor:
        cursor.execute(sql, [match])
        return {row[0] for row in cursor.fetchall()}
