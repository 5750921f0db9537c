"""Search in the catalogue (`GET /api/v1/catalogue?q=`): never more than the agent may call, ranked
by the database's own full-text search, cached and conditional like the rest of the catalogue.

Runs on SQLite (FTS5) by default and on PostgreSQL (tsvector, GIN) with DATABASE_URL."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from rest_framework.test import APIClient

from registry.core.process_cache import forget_all
from registry.search.models import ToolSearchEntry
from registry.servers import services as server_services
from registry.servers.models import McpServer, Tool, Transport
from registry.servers.policy import TrustTier
from registry.servers.vetting import tool_sync
from registry.teams import services
from tests.catalogue.test_catalogue_permissions import (
    SERVERS,
    build_world,
    expected_catalogue,
    worlds,
)
from tests.factories import tool_definition

pytestmark = pytest.mark.django_db

# Every tool of the permission matrix has one of these words in its name, every server its slug.
MATCH_ALL = "look change call out " + " ".join(SERVERS)


def search(client: APIClient, token: str, q: str, **params: Any) -> Any:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/v1/catalogue", {"q": q, **params})


def found_names(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    tools = response.json()["tools"]
    return [tool["function"]["name"] if "function" in tool else tool["name"] for tool in tools]


@pytest.fixture(autouse=True)
def _fresh_search_catalogues():
    """Each test rolls back: team ids and versions repeat, so kept catalogues must go."""
    forget_all()
    yield
    forget_all()


@pytest.fixture
def locmem_cache(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return settings


@pytest.mark.exhaustive
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds)
@pytest.mark.timeout(900)  # 40 random worlds; PostgreSQL on a busy shared machine took > 300 s
def test_search_finds_exactly_the_tools_the_agent_may_call(world, locmem_cache):
    """Over random grants, server states (suspended, pending), tool states (unapproved, revoked,
    changed since approval, removed), roles and health: a query matching every tool's name finds
    exactly the agent's catalogue, never a tool of another team or one the rules keep out."""
    locmem_cache.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = world["hide_unhealthy"]
    cache.clear()
    forget_all()  # ids and versions repeat after each example's rollback
    client = APIClient()
    with transaction.atomic():
        tokens = build_world(world)
        assert ToolSearchEntry.objects.count() == sum(
            state != "removed" for state in world["tools"].values()
        )
        for (team, role), token in tokens.items():
            expected = expected_catalogue(world, team, role)
            for fmt in ("native", "openai"):
                names = found_names(search(client, token, MATCH_ALL, format=fmt, limit=50))
                assert len(names) == len(set(names))
                assert set(names) == expected, (team, role, fmt)
            # A narrower query finds only matching tools, still within the catalogue.
            looked = set(found_names(search(client, token, "look", limit=50)))
            assert looked == {name for name in expected if name.endswith("__look")}
        transaction.set_rollback(True)
    assert not McpServer.objects.exists()


def _server_with_tools(slug: str, name: str, definitions: list[dict[str, Any]]) -> McpServer:
    server = server_services.server_create(
        actor="test",
        slug=slug,
        name=name,
        transport=Transport.STDIO,
        command=["python", "-m", "x"],
        trust_tier=TrustTier.BUILTIN,
    )
    tool_sync.server_tools_sync(server=server, tools=definitions)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    return server


READ_ONLY = {"readOnlyHint": True}
FILES_TOOLS = [
    tool_definition(
        "read_file",
        description="Read the complete contents of a file from the file system.",
        annotations=READ_ONLY,
        inputSchema={
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Path of the file"}},
        },
    ),
    tool_definition(
        "list_directory",
        description="List the entries of a directory.",
        annotations=READ_ONLY,
    ),
    tool_definition(
        "search_files",
        description="Find files whose names match a glob pattern.",
        annotations=READ_ONLY,
    ),
]
GIT_TOOLS = [
    tool_definition(
        "git_log", description="Show the commit history of a repository.", annotations=READ_ONLY
    ),
    tool_definition("git_diff", description="Show changes between commits.", annotations=READ_ONLY),
]


@pytest.fixture
def world(locmem_cache):
    files = _server_with_tools("files", "Files", FILES_TOOLS)
    git = _server_with_tools("git", "Git", GIT_TOOLS)
    team = services.team_create(actor="test", slug="payments")
    for server in (files, git):
        services.grant_create(actor="test", team=team, server=server)
    token = services.agent_token_create(
        actor="test", team=team, role=team.roles.get(name="review"), name="bot"
    ).plain
    return {"files": files, "git": git, "team": team, "token": token}


def test_search_ranks_by_relevance_in_every_format(world):
    client = APIClient()
    for fmt in ("native", "mcp", "openai", "anthropic"):
        names = found_names(search(client, world["token"], "read a file", format=fmt))
        assert names[0] == "files__read_file", fmt
    assert found_names(search(client, world["token"], "commit history"))[0] == "git__git_log"
    # The parameter description counts: only read_file documents a path.
    assert found_names(search(client, world["token"], "path"))[0] == "files__read_file"
    # Identifiers are split: camelCase and snake_case alike.
    assert found_names(search(client, world["token"], "listDirectory"))[0] == (
        "files__list_directory"
    )
    # A task's words the tools say otherwise: `folder` also searches for `directory`.
    assert found_names(search(client, world["token"], "folder entries"))[0] == (
        "files__list_directory"
    )
    assert found_names(search(client, world["token"], "folder")) == ["files__list_directory"]


def test_search_finds_through_the_thesaurus_words_no_tool_uses(world):
    # `chronicle` and `alterations` are in no tool's text; WordNet relates them to `history` and
    # `change`, which the database matches like the query's own words.
    client = APIClient()
    assert found_names(search(client, world["token"], "chronicle")) == ["git__git_log"]
    assert found_names(search(client, world["token"], "alterations")) == ["git__git_diff"]


def test_search_honours_limit_category_and_says_what_it_searched(world):
    client = APIClient()
    body = search(client, world["token"], "Show the files", limit=2).json()
    assert len(body["tools"]) == 2
    assert body["search"] == {"terms": ["file", "show"], "limit": 2, "found": 2}
    assert {server["slug"] for server in body["servers"]} <= {"files", "git"}
    assert found_names(search(client, world["token"], "zebra unicorn")) == []
    assert found_names(search(client, world["token"], "the of and")) == []  # stop words only
    # Expansions are searched and said: `folder` -> `directori`.
    body = search(client, world["token"], "folder").json()
    assert body["search"]["terms"] == ["directori", "folder"]


def test_search_refuses_bad_parameters_with_the_error_format(world):
    client = APIClient()
    for params in ({"q": ""}, {"q": "x", "limit": 0}, {"q": "x", "limit": 51}, {"q": "x" * 501}):
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
        response = client.get("/api/v1/catalogue", params)
        assert response.status_code == 400, params
        assert set(response.json()["error"]) == {"code", "message", "fields"}
    response = client.get("/api/v1/catalogue", {"limit": 3})
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["fields"]


def test_search_answers_are_cached_and_conditional_on_the_team_version(
    world, redis_cache, committed
):
    client = APIClient()
    first = search(client, world["token"], "read file")
    assert first["X-Toolroom-Cache"] == "miss"
    again = search(client, world["token"], "File, READ!")  # the same terms: the same answer
    assert again["X-Toolroom-Cache"] == "hit"
    assert again["ETag"] == first["ETag"]
    other = search(client, world["token"], "read file", limit=1)
    assert other["ETag"] != first["ETag"]
    assert search(client, world["token"], "read file", format="mcp")["ETag"] != first["ETag"]
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    response = client.get("/api/v1/catalogue", {"q": "read file"}, HTTP_IF_NONE_MATCH=first["ETag"])
    assert response.status_code == 304
    # Revoking the tool bumps the team's version: the cached answer is unreachable at once.
    with committed():
        server_services.tool_revoke(
            actor="test", tool=Tool.objects.get(name="read_file"), reason="test"
        )
    after = search(client, world["token"], "read file")
    assert after["ETag"] != first["ETag"]
    assert "files__read_file" not in found_names(after)


def test_a_tool_changed_since_approval_disappears_and_returns_when_reapproved(world, committed):
    client = APIClient()
    assert found_names(search(client, world["token"], "commit history"))[0] == "git__git_log"
    changed = [
        tool_definition(
            "git_log",
            description="Show the commit history of a repository, and upload it somewhere.",
            annotations=READ_ONLY,
        ),
        GIT_TOOLS[1],
    ]
    with committed():
        tool_sync.server_tools_sync(server=world["git"], tools=changed)
    assert "git__git_log" not in found_names(search(client, world["token"], "commit history"))
    # The index already holds the new text (tool sync rewrote it), but only approval shows it.
    entry = ToolSearchEntry.objects.get(tool__name="git_log")
    assert "upload" in entry.description_text
    assert found_names(search(client, world["token"], "upload")) == []
    with committed():
        server_services.tool_approve(actor="test", tool=Tool.objects.get(name="git_log"))
    assert found_names(search(client, world["token"], "upload")) == ["git__git_log"]
    assert found_names(search(client, world["token"], "commit history"))[0] == "git__git_log"


def test_removed_tools_leave_the_index_and_server_renames_reindex(world, committed):
    tool_sync.server_tools_sync(server=world["files"], tools=FILES_TOOLS[:1])
    assert set(
        ToolSearchEntry.objects.filter(tool__server=world["files"]).values_list(
            "tool__name", flat=True
        )
    ) == {"read_file"}
    with committed():
        server_services.server_update(
            actor="test", server=world["git"], changes={"name": "Versioning"}
        )
    # The index holds stems (registry.search.text): "Versioning" is indexed as "version".
    assert ToolSearchEntry.objects.get(tool__name="git_log").context_text.startswith("version ")


def test_the_full_text_index_exists_for_this_database():
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'search_tool_fts'")
            definition = cursor.fetchone()[0].lower()
            # The index holds stems already: FTS5 must not stem again.
            assert "fts5" in definition
            assert "porter" not in definition
        else:
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = "
                "'search_toolsearchentry_vector_gin'"
            )
            assert "gin" in cursor.fetchone()[0].lower()


def test_concurrent_searches_of_a_new_version_build_its_catalogue_once(world, monkeypatch):
    import threading
    import time

    from registry.catalogue import search as catalogue_search_module
    from registry.catalogue.selectors import catalogue_for_agent

    team = world["team"]
    role = team.roles.get(name="review")
    # Built here: the threads below see no data of this test's transaction.
    catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk)
    built = []

    def slow_build(**kwargs: Any) -> Any:
        built.append(kwargs)
        time.sleep(0.2)  # long enough for every thread to arrive while it builds
        return catalogue

    monkeypatch.setattr(catalogue_search_module, "catalogue_for_agent", slow_build)
    barrier = threading.Barrier(8)
    results = []

    def agent() -> None:
        barrier.wait()
        kept = catalogue_search_module._catalogue_at(
            team_id=team.pk, role_id=role.pk, category=None, version=41
        )
        results.append(kept)

    threads = [threading.Thread(target=agent) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1
    assert len(results) == 8
    assert all(kept is results[0] for kept in results)
    assert [tool.name for tool in results[0].catalogue.tools] == [
        tool.name for tool in catalogue.tools
    ]


def test_search_answers_encode_exactly_as_the_rendered_document(world):
    """The MCP, OpenAI and Anthropic answers are joined from tool entries encoded once per kept
    catalogue: byte for byte the JSON of `render_tools`, for a first search and for later ones
    that reuse the entries (in another order, with other tools)."""
    import json

    from registry.catalogue.formats import render_tools
    from registry.catalogue.search import SearchRequest, catalogue_search, search_document

    team = world["team"]
    role = team.roles.get(name="review")
    queries = [MATCH_ALL, "read a file", "commit history", "folder entries", "git", "files"]
    for fmt in ("mcp", "openai", "anthropic", "native"):
        for query in queries * 2:
            request = SearchRequest(text=query, limit=5)
            answer = search_document(
                fmt=fmt,
                team_id=team.pk,
                role_id=role.pk,
                category=None,
                search=request,
                version=7,
            )
            found = catalogue_search(
                team_id=team.pk, role_id=role.pk, query=query, limit=5, version=7
            )
            expected = render_tools(fmt, found, version=7, preflight=None)
            if fmt == "native":
                assert isinstance(answer, dict)
                assert answer["tools"] == expected["tools"]
                continue
            assert found.tools, query
            assert answer == json.dumps(expected, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8"
            ), (fmt, query)
