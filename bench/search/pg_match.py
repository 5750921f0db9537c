"""What PostgreSQL's full-text match costs per search, as the search sends it and in two variants.

    BENCH_REDIS_URL=redis://127.0.0.1:6379/13 .venv/bin/python bench/search/pg_match.py

Loads the labelled set (1,045 tools, granted to one team) into a PostgreSQL database of its own,
then times, for every task's query terms (the thesaurus's included, as `catalogue_search` makes
them), three rounds of: the match as registry/search/selectors.py sends it (`term:*` for a
prefix); the same with each prefix replaced by the catalogue's terms it begins (exact terms
only); and both again with sequential scans off (the GIN index). Prints the median and p95 round
trip of each and one EXPLAIN ANALYZE of each shape. The database is dropped afterwards.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._common import bench_database

Query = tuple[str, list[Any]]


def main() -> None:
    with bench_database("postgresql", "pgmatch") as env:
        os.environ.update(env)
        from bench._common import django_setup, migrate  # noqa: PLC0415

        django_setup({})
        migrate()
        measure()


def measure() -> None:
    from django.db import connection  # noqa: PLC0415

    from registry.catalogue.search import searchable  # noqa: PLC0415
    from registry.catalogue.selectors import catalogue_for_agent  # noqa: PLC0415
    from registry.search.index import TEXT_SEARCH_CONFIG  # noqa: PLC0415
    from registry.search.models import ToolSearchEntry  # noqa: PLC0415
    from registry.search.ranking import PREFIX_MIN_LENGTH  # noqa: PLC0415
    from registry.search.text import weighted_query_terms  # noqa: PLC0415
    from registry.teams import services  # noqa: PLC0415
    from tests.search_corpus import load_corpus, tasks  # noqa: PLC0415

    team = services.team_create(actor="bench", slug="bench")
    for server in load_corpus():
        services.grant_create(actor="bench", team=team, server=server)
    role = team.roles.get(name="operations")
    kept = searchable(catalogue_for_agent(team_id=team.pk, role_id=role.pk, category=None))
    term_sets = [
        [term for term, _ in kept.model.expanded(weighted_query_terms(task.query))]
        for task in tasks()
    ]
    table = ToolSearchEntry._meta.db_table
    match = f'SELECT "tool_id" FROM "{table}" WHERE "vector" @@ to_tsquery(%s::regconfig, %s)'  # noqa: S608

    def as_sent(terms: list[str]) -> Query:
        raw = " | ".join(f"{t}:*" if len(t) >= PREFIX_MIN_LENGTH else t for t in terms)
        return match, [TEXT_SEARCH_CONFIG, raw]

    def exact(terms: list[str]) -> Query:
        found = set(terms)
        for term in terms:
            if len(term) >= PREFIX_MIN_LENGTH:
                found.update(kept.model._longer_terms(term))
        return match, [TEXT_SEARCH_CONFIG, " | ".join(sorted(found))]

    def run(label: str, shape: Callable[[list[str]], Query]) -> None:
        times = []
        with connection.cursor() as cursor:
            for _ in range(3):
                for terms in term_sets:
                    sql, params = shape(terms)
                    began = time.perf_counter()
                    cursor.execute(sql, params)
                    cursor.fetchall()
                    times.append((time.perf_counter() - began) * 1000)
        times.sort()
        print(
            f"{label}: median {statistics.median(times):.3f} ms, "
            f"p95 {times[int(len(times) * 0.95)]:.3f} ms ({len(times)} matches)"
        )

    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*), avg(pg_column_size("vector")) FROM "{table}"')  # noqa: S608
        rows, size = cursor.fetchone()
        print(f"{rows} index entries, {float(size):.0f} bytes a tsvector on average")
    run("as sent (term:* for prefixes)", as_sent)
    run("exact terms", exact)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
    run("as sent, sequential scans off", as_sent)
    run("exact terms, sequential scans off", exact)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = on")
        for shape in (as_sent, exact):
            sql, params = shape(term_sets[0])
            cursor.execute("EXPLAIN ANALYZE " + sql, params)
            print("\n".join(row[0] for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
