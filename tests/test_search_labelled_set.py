"""The labelled search set (tests/data/search) ranked by this database's full-text search.

Issue 17 asks that both databases give every task the same top 5. They do not yet (bm25 on
SQLite weighs rare words up, ts_rank on PostgreSQL does not; docs/search.md has the numbers), so
what is pinned here is each database's own top 5 (tests/data/search/top5.<database>.json, one
file per database so the two can be diffed), and the agreement between the two files is counted
and must not fall below what was measured. Quality (recall@5, MRR) is a benchmark:
bench/search/run.py.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from registry.catalogue.search import catalogue_search
from registry.search.models import ToolSearchEntry
from registry.teams import services
from tests.search_corpus import DATA, corpus_servers, load_corpus, tasks

pytestmark = pytest.mark.django_db


def test_the_labelled_set_is_large_enough_and_consistent():
    servers = corpus_servers()
    names = [f"{server['slug']}__{tool['name']}" for server in servers for tool in server["tools"]]
    descriptions = [tool["description"] for server in servers for tool in server["tools"]]
    generated = json.loads((DATA / "registry.json").read_text())["servers"]
    assert sum(len(server["tools"]) for server in generated) == 1000
    assert len(set(names)) == len(names)
    assert len(set(descriptions)) == len(descriptions)
    labelled = tasks()
    assert len(labelled) >= 60
    assert {task.split for task in labelled} == {"tune", "held_out"}
    assert all(expected in names for task in labelled for expected in task.expected)


# Tasks whose top 5 is the same set on both databases when the pins were recorded (of 80).
AGREEING_TOP5_SETS = 15


def test_the_two_databases_top_5_agree_at_least_as_often_as_measured():
    sqlite = json.loads((DATA / "top5.sqlite.json").read_text())
    postgresql = json.loads((DATA / "top5.postgresql.json").read_text())
    assert set(sqlite) == set(postgresql) == {task.id for task in tasks()}
    agreeing = [task for task in sqlite if set(sqlite[task]) == set(postgresql[task])]
    assert len(agreeing) >= AGREEING_TOP5_SETS


def test_this_database_ranks_the_labelled_set_as_pinned(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    servers = load_corpus()
    assert ToolSearchEntry.objects.count() == 1045
    team = services.team_create(actor="test", slug="search")
    for server in servers:
        services.grant_create(actor="test", team=team, server=server)
    role = team.roles.get(name="operations")
    top5 = {
        task.id: [
            tool.name
            for tool in catalogue_search(
                team_id=team.pk, role_id=role.pk, query=task.query, limit=5
            ).tools
        ]
        for task in tasks()
    }
    expected = json.loads((DATA / f"top5.{connection.vendor}.json").read_text())
    differing = {task_id: ranked for task_id, ranked in top5.items() if expected[task_id] != ranked}
    assert not differing
