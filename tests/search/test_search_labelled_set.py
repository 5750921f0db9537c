"""The labelled search set (tests/data/search): both databases give every task the same top 5.

`tests/data/search/top5.json` holds every task's top 5, recorded by `bench/search/run.py
--write-top5`, which writes it only when SQLite and PostgreSQL ranked every task alike. This
test ranks the set on the database it runs on and compares with the file: CI runs it on SQLite
and on PostgreSQL, so each run checks one database against the answer both gave when it was
recorded. Quality (recall@5, MRR) is a benchmark: bench/search/run.py.
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
    assert {task.split for task in labelled} == {"tune", "held_out_2", "held_out_3"}
    assert len(tasks("held_out_2")) >= 50
    assert len(tasks("held_out_3")) >= 90
    assert all(expected in names for task in labelled for expected in task.expected)


@pytest.mark.exhaustive
def test_this_database_ranks_every_task_as_both_databases_did(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    recorded = json.loads((DATA / "top5.json").read_text())
    assert set(recorded["recorded_on"]) == {"sqlite", "postgresql"}
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
    assert set(recorded["top5"]) == set(top5)
    differing = {
        task_id: (recorded["top5"][task_id], ranked)
        for task_id, ranked in top5.items()
        if recorded["top5"][task_id] != ranked
    }
    assert not differing, f"{connection.vendor} ranks differently: {differing}"
