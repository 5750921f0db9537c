"""Ranking tools by relevance with the database's own full-text search.

`tool_search_rank` orders the given tools (the caller passes the ones an agent may call) by how
well they match a query, best first, and leaves out those that match no term. The terms are
OR-ed: a task in plain words rarely has every word in a tool's text.

- PostgreSQL: `ts_rank` over the weighted tsvector (name A, title and parameters B, description
  C, server and category D), through django.contrib.postgres.search; the GIN index finds the
  matching rows.
- SQLite: FTS5's `bm25` over `search_tool_fts`, with column weights in the same proportions.

The two rankers differ (bm25 weighs rare words up, ts_rank does not): tests and the benchmark
compare their top 5 on a labelled set (docs/search.md). Ties go to the lower tool id on both.
"""

from __future__ import annotations

from collections.abc import Collection

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import F

from registry.search.index import TEXT_SEARCH_CONFIG
from registry.search.models import ToolSearchEntry
from registry.search.text import query_terms

# PostgreSQL's weights for D, C, B, A (its defaults, written out so the choice is visible).
POSTGRES_WEIGHTS = [0.1, 0.2, 0.4, 1.0]
# SQLite's bm25 weights for the FTS5 columns name, title, params, description, context.
SQLITE_BM25_WEIGHTS = (10.0, 4.0, 4.0, 2.0, 1.0)
FTS_TABLE = "search_tool_fts"


class SearchUnsupported(Exception):
    """The database has no full-text search Toolroom knows (only PostgreSQL and SQLite do)."""


def tool_search_rank(*, query: str, tool_ids: Collection[int], limit: int) -> list[int]:
    """Ids of the matching tools among `tool_ids`, best first, at most `limit`."""
    terms = query_terms(query)
    if not terms or not tool_ids or limit <= 0:
        return []
    if connection.vendor == "postgresql":
        return _rank_postgresql(terms, tool_ids, limit)
    if connection.vendor == "sqlite":
        return _rank_sqlite(terms, tool_ids, limit)
    raise SearchUnsupported(connection.vendor)


def _rank_postgresql(terms: list[str], tool_ids: Collection[int], limit: int) -> list[int]:
    # Terms are [a-z0-9]+ (query_terms), so the raw tsquery needs no quoting.
    # As on SQLite, the candidates are filtered here: a list of every candidate id in the query
    # costs more than ranking every match.
    search = SearchQuery(" | ".join(terms), search_type="raw", config=TEXT_SEARCH_CONFIG)
    ranked = (
        ToolSearchEntry.objects.filter(vector=search)
        .annotate(rank=SearchRank(F("vector"), search, weights=POSTGRES_WEIGHTS))
        .order_by("-rank", "tool_id")
        .values_list("tool_id", flat=True)
    )
    allowed = tool_ids if isinstance(tool_ids, (set, frozenset)) else set(tool_ids)
    found: list[int] = []
    for tool_id in ranked.iterator(chunk_size=256):
        if tool_id in allowed:
            found.append(tool_id)
            if len(found) == limit:
                break
    return found


def _rank_sqlite(terms: list[str], tool_ids: Collection[int], limit: int) -> list[int]:
    # The candidates are filtered here, not in SQL: an `IN (json_each(...))` filter is evaluated
    # per matching row and costs more than ranking every match (the index is one registry's).
    match = " OR ".join(f'"{term}"' for term in terms)
    weights = ", ".join(str(weight) for weight in SQLITE_BM25_WEIGHTS)
    sql = (
        f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s "  # noqa: S608 (constants)
        f"ORDER BY bm25({FTS_TABLE}, {weights}), rowid"
    )
    allowed = tool_ids if isinstance(tool_ids, (set, frozenset)) else set(tool_ids)
    found: list[int] = []
    with connection.cursor() as cursor:
        cursor.execute(sql, [match])
        while len(found) < limit:
            rows = cursor.fetchmany(256)
            if not rows:
                break
            found.extend(row[0] for row in rows if row[0] in allowed)
    return found[:limit]
