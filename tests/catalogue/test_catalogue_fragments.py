"""Catalogue documents made of kept per-tool fragments are, byte for byte, the documents the
formats' reference renderers make (`json.dumps(render_tools(...))`), in every format, with
filters, pre-flight, expiring grants, unhealthy servers, odd schemas and non-ASCII text; and a
tool that changes is never served from an old fragment."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from registry.catalogue.formats import TOOL_FORMATS, render_tools
from registry.catalogue.fragments import FragmentStore, tools_document_body
from registry.catalogue.selectors import catalogue_for_agent, catalogue_preflight
from registry.servers.models import Health, Tool
from registry.teams.models import DependencyLevel
from tests.catalogue_helpers import READ, WRITE, approved_server, set_health, tool_of
from tests.factories import GrantFactory, TeamFactory

pytestmark = pytest.mark.django_db

DECLARED = {
    DependencyLevel.REQUIRED: ["files", "nowhere"],
    DependencyLevel.RECOMMENDED: ["git"],
    DependencyLevel.OPTIONAL: ["weather"],
}


def _reference(fmt, team, role, *, at, category=None, declared=None):
    """The document as the view made it before fragments: the reference renderers, encoded."""
    catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk, category=category, at=at)
    preflight = (
        catalogue_preflight(catalogue=catalogue, declared_servers=declared)
        if fmt == "native" and declared
        else None
    )
    data = render_tools(fmt, catalogue, version=7, preflight=preflight)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _fragments(fmt, team, role, *, at, store, category=None, declared=None):
    return tools_document_body(
        fmt=fmt,
        team_id=team.pk,
        role_id=role.pk,
        version=7,
        category=category,
        declared_servers=declared if fmt == "native" else None,
        at=at,
        store=store,
    )


@pytest.fixture
def world():
    team = TeamFactory(slug="alpha")
    files = approved_server(
        "files",
        {"read_file": READ, "write_file": WRITE, "fetch_page": {"openWorldHint": True}},
        category="storage",
    )
    git = approved_server("git", {"log": READ, "diff": READ}, category="developer-tools")
    weather = approved_server("weather", {"forecast": READ})
    odd = tool_of(files, "read_file")  # non-ASCII, a title, an output schema, a bare schema
    Tool.objects.filter(pk=odd.pk).update(
        title="Lire un fichier — «vite»",
        description='Reads a file. Ünïcödé, emoji 🗂, quotes " and \\ and a\nnewline.',
        input_schema={"type": "string", "description": "path ✓"},
        output_schema={"type": "object", "properties": {"content": {"type": "string"}}},
    )
    Tool.objects.filter(pk=tool_of(git, "diff").pk).update(
        description="", title="Diff", annotations={}
    )
    GrantFactory(team=team, server=files)
    GrantFactory(team=team, server=git, expires_at=timezone.now() + timedelta(days=3))
    GrantFactory(
        team=team,
        server=git,
        tool=tool_of(git, "log"),
        expires_at=timezone.now() + timedelta(days=9),
    )
    GrantFactory(
        team=team,
        server=weather,
        tool=tool_of(weather, "forecast"),
        expires_at=timezone.now() + timedelta(hours=5),
    )
    set_health(git, Health.UNHEALTHY)
    set_health(files, Health.DEGRADED)
    return team, files, git


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
@pytest.mark.parametrize("role_name", ["operations", "review"])
@pytest.mark.parametrize("category", [None, "storage", "nothing-here"])
def test_every_format_is_byte_for_byte_the_reference(world, fmt, role_name, category):
    team, _, _ = world
    role = team.roles.get(name=role_name)
    at = timezone.now()
    store = FragmentStore()

    expected = _reference(fmt, team, role, at=at, category=category, declared=DECLARED)
    first = _fragments(fmt, team, role, at=at, store=store, category=category, declared=DECLARED)
    rendered = store.rendered
    again = _fragments(fmt, team, role, at=at, store=store, category=category, declared=DECLARED)

    assert first == expected
    assert again == expected
    assert store.rendered == rendered  # the second document came from kept fragments


def test_hiding_unhealthy_servers_and_no_declarations_match_too(world, settings):
    team, _, _ = world
    role = team.roles.get(name="operations")
    settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = True
    at = timezone.now()
    for fmt in TOOL_FORMATS:
        assert _fragments(fmt, team, role, at=at, store=FragmentStore()) == _reference(
            fmt, team, role, at=at
        )


def test_a_changed_tool_is_rendered_again_whatever_changed_it(world):
    team, files, git = world
    role = team.roles.get(name="operations")
    store = FragmentStore()
    at = timezone.now()
    for fmt in TOOL_FORMATS:
        _fragments(fmt, team, role, at=at, store=store, declared=DECLARED)

    # A write that leaves the definition hash alone (no service does; a fragment must not care),
    # a health change, a rename of the server (new namespaced names).
    Tool.objects.filter(pk=tool_of(files, "write_file").pk).update(description="Writes, now.")
    Tool.objects.filter(pk=tool_of(files, "read_file").pk).update(
        input_schema={"type": "object", "properties": {"changed": {"type": "integer"}}}
    )
    set_health(files, Health.HEALTHY)
    git.slug = "git-two"
    git.save(update_fields=["slug"])

    for fmt in TOOL_FORMATS:
        fresh = _fragments(fmt, team, role, at=at, store=store, declared=DECLARED)
        assert fresh == _reference(fmt, team, role, at=at, declared=DECLARED)
    assert b"Writes, now." in fresh
    assert b'"changed":{"type":"integer"}' in fresh
    assert b"git-two__log" in fresh


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_postgresql_keys_fragments_by_row_version(world):
    """Outside a transaction (as the fast path builds) PostgreSQL's catalogue query reads each
    tool row's version instead of its JSON; any write of the row still shows at once."""
    team, files, _ = world
    role = team.roles.get(name="operations")
    store = FragmentStore()
    at = timezone.now()
    assert _fragments("native", team, role, at=at, store=store) == _reference(
        "native", team, role, at=at
    )

    with CaptureQueriesContext(connection) as queries:
        again = _fragments("native", team, role, at=at, store=store)
    assert again == _reference("native", team, role, at=at)
    (tools_query,) = [query["sql"] for query in queries if "servers_mcpserver" in query["sql"]]
    assert ("input_schema" in tools_query) is (connection.vendor != "postgresql")
    assert ("xmin" in tools_query) is (connection.vendor == "postgresql")

    Tool.objects.filter(pk=tool_of(files, "read_file").pk).update(
        input_schema={"type": "object", "properties": {"changed": {"type": "integer"}}}
    )
    fresh = _fragments("native", team, role, at=at, store=store)
    assert fresh == _reference("native", team, role, at=at)
    assert b'"changed":{"type":"integer"}' in fresh


@contextmanager
def _before_the_details_query(change):
    """Run `change` once, just before the query that reads the details of tools new to the store
    (after the catalogue query saw their rows): a write racing a build."""
    done: list[bool] = []

    def wrapper(execute, sql, params, many, context):
        if not done and "input_schema" in sql and "servers_mcpserver" not in sql:
            done.append(True)
            change()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield
    assert done


def test_a_tool_written_during_a_build_is_not_kept_under_its_old_version(world):
    team, files, _ = world
    role = team.roles.get(name="operations")
    store = FragmentStore()
    at = timezone.now()
    target = Tool.objects.filter(pk=tool_of(files, "write_file").pk)
    before = target.get().description

    with _before_the_details_query(lambda: target.update(description="Written meanwhile.")):
        raced = _fragments("native", team, role, at=at, store=store)
    assert b"Written meanwhile." in raced  # the details as read: the newer ones

    # Written back as it was when the catalogue query saw it: that version's fragment must not
    # hold what the racing build read.
    target.update(description=before)
    again = _fragments("native", team, role, at=at, store=store)
    assert again == _reference("native", team, role, at=at)
    assert b"Written meanwhile." not in again


def test_a_tool_deleted_during_a_build_is_left_out(world):
    team, files, _ = world
    role = team.roles.get(name="operations")
    at = timezone.now()
    target = tool_of(files, "write_file")

    with _before_the_details_query(lambda: Tool.objects.filter(pk=target.pk).delete()):
        document = _fragments("native", team, role, at=at, store=FragmentStore())

    assert document == _reference("native", team, role, at=at)
    assert b"write_file" not in document


def test_the_store_keeps_at_most_its_limit():
    store = FragmentStore(limit=3)
    for n in range(5):
        store.keep(("k", n), f"fragment {n}")

    assert store.find(("k", 0)) is None
    assert store.find(("k", 1)) is None
    assert store.find(("k", 4)) == "fragment 4"
    assert store.rendered == 5


def test_the_api_serves_the_reference_bytes(world, api_client, settings):
    team, _, _ = world
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    from tests.factories import AgentTokenFactory

    token = AgentTokenFactory(team=team, declared_servers=DECLARED)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    for fmt in TOOL_FORMATS:
        answer = api_client.get("/api/v1/catalogue", {"format": fmt})
        assert answer.status_code == 200
        document = json.loads(answer.content)
        at = (
            timezone.datetime.fromisoformat(document["generatedAt"].replace("Z", "+00:00"))
            if fmt == "native"
            else timezone.now()
        )
        expected = json.loads(_reference(fmt, team, token.role, at=at, declared=DECLARED))
        if fmt == "native":
            expected["version"] = document["version"]
        assert document == expected
