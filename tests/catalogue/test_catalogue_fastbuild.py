"""The ASGI fast path builds a document the cache does not hold (a new version, or the document
cache off) in one thread, and answers exactly what Django answers for it: the same bytes, ETag
and headers; what it cannot build (a token whose role left its team) is Django's to answer.

These tests commit for real (transactional database): the build runs in a worker thread with a
database connection of its own, as under uvicorn.
"""

from __future__ import annotations

import json
import threading
import time
from unittest.mock import patch

import pytest
from django.db import DatabaseError, connection
from django.db.backends.signals import connection_created

from registry.api import fastbuild
from registry.catalogue.documents import document_key
from registry.catalogue.formats import TOOL_FORMATS
from registry.core import cache as catalogue_cache_module
from registry.search.index import tool_search_index_refresh
from registry.servers.models import McpServer, UpstreamAuth
from registry.teams.models import TeamRole
from tests.catalogue_helpers import DJANGO_ANSWERED, READ, approved_server, fast_path_call
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_cache")]

# What Django's middleware and the view put on a catalogue answer, besides the request id.
SAME_HEADERS = (
    "content-type",
    "etag",
    "cache-control",
    "vary",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
)


@pytest.fixture
def agent(api_client):
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=approved_server("files", {"read_file": READ}))
    token = AgentTokenFactory(team=team)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    warm = api_client.get("/api/v1/catalogue")  # Django caches the token, state and document
    assert warm.status_code == 200
    return team, token


def _headers(token):
    return {"Host": "127.0.0.1:8000", "Authorization": f"Bearer {token.plain}"}


def _same_as_django(headers, django):
    for name in SAME_HEADERS:
        assert headers.get(name) == django.headers.get(name), name
    assert headers["content-length"] == str(len(django.content))
    assert headers["x-request-id"]


def test_a_new_version_is_built_by_the_fast_path_as_django_would(agent, api_client):
    team, token = agent
    GrantFactory(team=team, server=approved_server("git", {"log": READ}))  # a new version

    [(status, headers, body)] = fast_path_call(
        [("/api/v1/catalogue", "format=openai", _headers(token))]
    )

    assert status == 200
    assert headers["x-toolroom-cache"] == "miss"
    assert b'"git__log"' in body
    django = api_client.get("/api/v1/catalogue", {"format": "openai"})
    assert django["X-Toolroom-Cache"] == "hit"  # the fast path kept what it built
    assert django.content == body
    _same_as_django(headers, django)


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_with_the_document_cache_off_every_format_is_built_like_django(
    agent, api_client, settings, fmt
):
    _, token = agent
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0

    [(status, headers, body)] = fast_path_call(
        [("/api/v1/catalogue", f"format={fmt}", _headers(token))]
    )
    django = api_client.get("/api/v1/catalogue", {"format": fmt})

    assert status == 200
    assert headers["x-toolroom-cache"] == django["X-Toolroom-Cache"] == "miss"
    _same_as_django(headers, django)
    if fmt == "native":  # built at two moments: everything but the moment is the same
        ours, theirs = json.loads(body), json.loads(django.content)
        assert ours.pop("generatedAt") <= theirs.pop("generatedAt")
        assert ours == theirs
    else:
        assert body == django.content


def test_what_it_cannot_build_is_left_to_django(agent, settings):
    _, token = agent
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    TeamRole.objects.filter(pk=token.role_id).update(
        team=TeamFactory(slug="beta"), name="moved-away"
    )

    [(status, _, _)] = fast_path_call([("/api/v1/catalogue", "", _headers(token))])

    assert status == DJANGO_ANSWERED


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_searches_are_built_and_served_by_the_fast_path_as_django_would(
    agent, api_client, settings, fmt
):
    team, token = agent
    tool_search_index_refresh(server_ids=team.grants.values_list("server_id", flat=True))
    query = "q=read+a+file&limit=3"
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    [(status, headers, body)] = fast_path_call(
        [("/api/v1/catalogue", f"format={fmt}&{query}", _headers(token))]
    )
    django = api_client.get("/api/v1/catalogue", {"format": fmt, "q": "read a file", "limit": 3})

    assert status == 200
    assert headers["x-toolroom-cache"] == "miss"
    _same_as_django(headers, django)
    ours, theirs = json.loads(body), json.loads(django.content)
    if fmt == "native":
        assert ours.pop("generatedAt") <= theirs.pop("generatedAt")
        assert ours["search"] == {"terms": ["file", "read"], "limit": 3, "found": 1}
    assert ours == theirs

    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 60  # Django keeps it; the fast path serves it
    kept = api_client.get("/api/v1/catalogue", {"format": fmt, "q": "read a file", "limit": 3})
    [(status, headers, body)] = fast_path_call(
        [("/api/v1/catalogue", f"format={fmt}&{query}", _headers(token))]
    )
    assert (status, headers["x-toolroom-cache"], body) == (200, "hit", kept.content)


def test_the_fast_path_builds_an_agents_account_marks_as_django_would(agent, api_client, settings):
    """A per-person server's tool says an agent token cannot call it, in the tools documents
    and the search answers the fast path builds, exactly as Django's."""
    team, token = agent
    keyed = approved_server("keyed", {"whoami": READ})
    McpServer.objects.filter(pk=keyed.pk).update(upstream_auth=UpstreamAuth.PERSON_SECRET)
    tool_search_index_refresh(server_ids=[keyed.pk])
    GrantFactory(team=team, server=keyed)  # a new version
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    for fmt in TOOL_FORMATS:
        for query in (f"format={fmt}", f"format={fmt}&q=whoami"):
            [(status, headers, body)] = fast_path_call(
                [("/api/v1/catalogue", query, _headers(token))]
            )
            django = api_client.get(f"/api/v1/catalogue?{query}")
            assert (status, headers["x-toolroom-cache"]) == (200, "miss"), query
            _same_as_django(headers, django)
            ours, theirs = json.loads(body), json.loads(django.content)
            if fmt == "native":
                assert ours.pop("generatedAt") <= theirs.pop("generatedAt")
            assert ours == theirs
            assert (b"needs_person" if fmt in ("native", "mcp") else b"an agent token") in body


def test_search_answers_are_kept_in_the_process_under_their_etag(agent, settings):
    """A search answer the fast path built or read is kept in the process under its ETag: it
    is served again with Redis's copy gone, until a change moves the team's version (a new
    ETag); with the document cache off nothing is kept."""
    team, token = agent
    tool_search_index_refresh(server_ids=team.grants.values_list("server_id", flat=True))
    request = ("/api/v1/catalogue", "format=mcp&q=read+a+file", _headers(token))
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    assert [h["x-toolroom-cache"] for _, h, _ in fast_path_call([request, request])] == [
        "miss",
        "miss",
    ]

    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 60
    [(status, first, body)] = fast_path_call([request])
    assert (status, first["x-toolroom-cache"]) == (200, "miss")
    catalogue_cache_module.catalogue_cache().backend.delete(document_key(first["etag"]))
    [(status, again, kept)] = fast_path_call([request])
    assert (status, again["x-toolroom-cache"], again["etag"], kept) == (
        200,
        "hit",
        first["etag"],
        body,
    )

    git = approved_server("git", {"read_log": READ})
    tool_search_index_refresh(server_ids=[git.pk])
    GrantFactory(team=team, server=git)  # a new version
    [(status, moved, found)] = fast_path_call([request])
    assert (status, moved["x-toolroom-cache"]) == (200, "miss")
    assert moved["etag"] != first["etag"]
    assert b"git__read_log" in found


@pytest.mark.parametrize(
    "query",
    [
        "q=",
        "q=+++",
        "limit=3",
        "q=file&limit=0",
        "q=file&limit=51",
        "q=file&limit=3.0",
        "q=file&q=read",
        "q=" + "x" * 501,
        "q=%FF",
        "q=file%00",
    ],
)
def test_a_search_django_would_refuse_is_left_to_django(agent, query):
    _, token = agent

    [(status, _, _)] = fast_path_call([("/api/v1/catalogue", query, _headers(token))])

    assert status == DJANGO_ANSWERED


def test_an_epoch_due_for_confirmation_is_confirmed_by_the_fast_path(agent, settings):
    """Past TOOLROOM_CACHE_REVALIDATE_SECONDS the fast path confirms the epoch itself (one query
    and one Redis round trip, as Django would) instead of handing the request to Django."""
    _, token = agent
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    process_cache = catalogue_cache_module._current()
    process_cache.validated_at = 0.0  # confirmed long ago: due
    assert catalogue_cache_module.catalogue_cache_confirmed() is None

    [(status, headers, body)] = fast_path_call([("/api/v1/catalogue", "", _headers(token))] * 3)[
        -1:
    ]

    assert (status, headers["x-toolroom-cache"]) == (200, "miss")
    assert b'"files__read_file"' in body
    assert catalogue_cache_module.catalogue_cache_confirmed() is not None


def test_an_epoch_that_cannot_be_confirmed_leaves_the_request_to_django(agent, settings):
    _, token = agent
    process_cache = catalogue_cache_module._current()
    process_cache.validated_at = 0.0
    process_cache.invalidate("test: a Redis that restarted unseen")
    with patch.object(
        catalogue_cache_module, "_server_run_id", side_effect=RuntimeError("confirmation failed")
    ):
        [(status, _, _)] = fast_path_call([("/api/v1/catalogue", "", _headers(token))])

    assert status == DJANGO_ANSWERED
    assert catalogue_cache_module.catalogue_cache_confirmed() is None


@pytest.fixture
def connections_opened():
    """The build threads' database connections opened (or taken from the pool) meanwhile."""
    opened: list[str] = []

    def receiver(sender, connection, **kwargs):
        if threading.current_thread().name.startswith("catalogue-build-"):
            opened.append(threading.current_thread().name)

    connection_created.connect(receiver)
    yield opened
    connection_created.disconnect(receiver)


def test_build_threads_keep_their_database_connection_from_one_build_to_the_next(
    agent, settings, connections_opened
):
    """Twelve uncached searches in a row open at most one connection per build thread (each
    used to open, and close, one of its own)."""
    team, token = agent
    tool_search_index_refresh(server_ids=team.grants.values_list("server_id", flat=True))
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    request = ("/api/v1/catalogue", "format=mcp&q=read+a+file", _headers(token))

    answers = fast_path_call([request] * 12)

    assert [(status, h["x-toolroom-cache"]) for status, h, _ in answers] == [(200, "miss")] * 12
    assert len({body for _, _, body in answers}) == 1
    assert 1 <= len(connections_opened) <= fastbuild.BUILD_THREADS
    assert len(set(connections_opened)) == len(connections_opened)  # one per thread


def test_a_connection_held_its_maximum_time_is_given_back(
    agent, settings, connections_opened, monkeypatch
):
    _, token = agent
    settings.TOOLROOM_CATALOGUE_CACHE_SECONDS = 0
    monkeypatch.setattr(fastbuild, "BUILD_CONNECTION_MAX_SECONDS", 0.0)

    answers = fast_path_call([("/api/v1/catalogue", "format=mcp", _headers(token))] * 5)

    assert [status for status, _, _ in answers] == [200] * 5
    assert len(connections_opened) == 5


def test_a_build_thread_gives_its_connection_back_after_an_error_and_when_idle(monkeypatch):
    monkeypatch.setattr(fastbuild, "BUILD_IDLE_SECONDS", 0.2)
    threads = fastbuild.BuildThreads(count=1)

    def connect() -> None:  # `connection` is the calling thread's: looked up in the thread
        connection.ensure_connection()

    def connection_open() -> bool:
        return connection.connection is not None

    def failing_query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM no_such_table")

    try:
        threads.submit(connect).result(10)
        assert threads.submit(connection_open).result(10) is True  # kept
        with pytest.raises(DatabaseError):
            threads.submit(failing_query).result(10)
        assert threads.submit(connection_open).result(10) is False  # closed after the error
        threads.submit(connect).result(10)
        time.sleep(0.6)  # idle longer than BUILD_IDLE_SECONDS
        assert threads.submit(connection_open).result(10) is False
        threads.submit(connect).result(10)
    finally:
        threads.release()
    assert threads.submit(connection_open).result(10) is False  # release closed it
    threads.release()
