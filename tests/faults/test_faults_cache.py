"""Faults of the catalogue's cache, against a redis-server of the test's own: whatever Redis does
(down, frozen, restarted from its own old data or an older snapshot, restarted empty), agents get
correct catalogues, from the database while it is away (marked degraded), and nothing the database
has moved past is ever served again, by Django or by the ASGI fast path."""

from __future__ import annotations

import json
import time

import pytest
import redis

from registry.core.models import CatalogueCacheEpoch
from registry.servers import services as server_services
from registry.teams.models import Team
from tests.catalogue_helpers import DJANGO_ANSWERED, READ, approved_server, fast_path_call, tool_of
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.owned_redis import OwnedRedis

pytestmark = [pytest.mark.django_db, pytest.mark.processes]

RETRY_SECONDS = 0.3


@pytest.fixture
def owned_redis(tmp_path, settings):
    server = OwnedRedis(tmp_path / "redis")
    server.start()
    from registry.teams import tokens

    tokens._last_told.clear()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": server.url,
            "KEY_PREFIX": "faults",
        }
    }
    settings.TOOLROOM_CACHE_RETRY_SECONDS = RETRY_SECONDS
    yield server
    server.stop()


@pytest.fixture
def agent(api_client, committed, owned_redis):
    with committed():
        team = TeamFactory(slug="alpha")
        server = approved_server("files", {"read_file": READ, "list_dir": READ})
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    return team, server, token


def _names(response) -> set[str]:
    return {tool["name"] for tool in json.loads(response.content)["tools"]}


def _fast(token, **headers):
    [answer] = fast_path_call(
        [
            (
                "/api/v1/catalogue",
                "",
                {"Host": "127.0.0.1:8000", "Authorization": f"Bearer {token.plain}", **headers},
            )
        ]
    )
    return answer


def _warm(api_client, token) -> None:
    """Django builds and caches the catalogue; the fast path then serves it from Redis."""
    warm = api_client.get("/api/v1/catalogue")
    assert warm.status_code == 200
    assert "files__read_file" in _names(warm)
    status, headers, body = _fast(token)
    assert (status, headers["x-toolroom-cache"]) == (200, "hit")
    assert b"files__read_file" in body


def _after_the_circuit_closes() -> None:
    time.sleep(RETRY_SECONDS + 0.05)


def _cached_state_versions(owned_redis) -> list[int]:
    client = redis.Redis.from_url(owned_redis.url)
    return [
        int(client.get(key).split(b"|")[0]) for key in client.scan_iter("faults:*catalogue-state:*")
    ]


def _revoke(committed, server, name="read_file"):
    with committed():
        server_services.tool_revoke(actor="test", tool=tool_of(server, name), reason="leaked")


def test_a_tool_revoked_while_redis_was_down_never_comes_back(
    agent, api_client, committed, owned_redis
):
    team, server, token = agent
    _warm(api_client, token)
    before = Team.objects.get(pk=team.pk).catalogue_version
    epoch_before = CatalogueCacheEpoch.objects.get().epoch

    owned_redis.stop()
    _revoke(committed, server)  # commits; the cache does not take the new version

    assert Team.objects.get(pk=team.pk).catalogue_version == before + 1
    assert CatalogueCacheEpoch.objects.get().epoch == epoch_before + 1
    down = api_client.get("/api/v1/catalogue")
    assert down.status_code == 200
    assert down["X-Toolroom-Degraded"] == "cache"
    assert _names(down) == {"files__list_dir"}
    assert _fast(token)[0] == DJANGO_ANSWERED

    owned_redis.start()  # from its own saved data: the state of the old version is back
    assert before in _cached_state_versions(owned_redis)
    _after_the_circuit_closes()

    for _ in range(3):
        status, _, body = _fast(token)
        assert status == DJANGO_ANSWERED or b"files__read_file" not in body
        answer = api_client.get("/api/v1/catalogue")
        assert answer.status_code == 200
        assert _names(answer) == {"files__list_dir"}
        assert "X-Toolroom-Degraded" not in answer
    # The cache is in use again, under the new epoch.
    status, headers, body = _fast(token)
    assert (status, headers["x-toolroom-cache"]) == (200, "hit")
    assert b"files__read_file" not in body
    assert b"files__list_dir" in body


def test_an_older_snapshot_of_redis_brings_nothing_back(
    agent, api_client, committed, owned_redis, tmp_path
):
    team, server, token = agent
    _warm(api_client, token)
    owned_redis.stop()
    owned_redis.snapshot(tmp_path / "old")
    owned_redis.start()
    _after_the_circuit_closes()

    _revoke(committed, server)  # the cache takes this one: nothing failed
    assert _names(api_client.get("/api/v1/catalogue")) == {"files__list_dir"}

    owned_redis.stop()
    owned_redis.restore(tmp_path / "old")  # e.g. fsync lost the last writes, or a backup
    owned_redis.start()
    assert Team.objects.get(pk=team.pk).catalogue_version - 1 in _cached_state_versions(owned_redis)
    _after_the_circuit_closes()

    for _ in range(3):
        answer = api_client.get("/api/v1/catalogue")
        assert _names(answer) == {"files__list_dir"}
        status, _, body = _fast(token)
        assert status == DJANGO_ANSWERED or b"files__read_file" not in body


def test_a_token_revoked_while_redis_was_down_stays_revoked(
    agent, api_client, committed, owned_redis
):
    from registry.teams import services as team_services

    _, _, token = agent
    _warm(api_client, token)

    owned_redis.stop()
    with committed():
        team_services.agent_token_revoke(actor="test", token=token)
    assert api_client.get("/api/v1/catalogue").status_code == 401
    owned_redis.start()
    _after_the_circuit_closes()

    assert _fast(token)[0] == DJANGO_ANSWERED
    assert api_client.get("/api/v1/catalogue").status_code == 401
    assert _fast(token)[0] == DJANGO_ANSWERED


def test_a_frozen_redis_costs_one_short_timeout_then_the_database_answers(
    agent, api_client, committed, owned_redis
):
    _, server, token = agent
    _warm(api_client, token)

    owned_redis.freeze()
    try:
        started = time.monotonic()
        frozen = api_client.get("/api/v1/catalogue")
        first = time.monotonic() - started
        started = time.monotonic()
        again = api_client.get("/api/v1/catalogue")
        second = time.monotonic() - started
        _revoke(committed, server)
        after_revoke = api_client.get("/api/v1/catalogue")
    finally:
        owned_redis.thaw()
    print(f"frozen Redis: first request {first * 1000:.0f} ms, next {second * 1000:.0f} ms")

    assert frozen.status_code == again.status_code == 200
    assert frozen["X-Toolroom-Degraded"] == again["X-Toolroom-Degraded"] == "cache"
    assert "files__read_file" in _names(again)
    assert _names(after_revoke) == {"files__list_dir"}
    _after_the_circuit_closes()
    assert _names(api_client.get("/api/v1/catalogue")) == {"files__list_dir"}
    status, _, body = _fast(token)
    assert status == DJANGO_ANSWERED or b"files__read_file" not in body


def test_redis_restarted_empty_is_refilled_from_the_database(
    agent, api_client, committed, owned_redis
):
    _, server, token = agent
    _warm(api_client, token)
    owned_redis.stop()
    owned_redis.wipe()
    owned_redis.start()
    _after_the_circuit_closes()
    _revoke(committed, server)

    assert _names(api_client.get("/api/v1/catalogue")) == {"files__list_dir"}
    status, headers, body = _fast(token)
    assert (status, headers["x-toolroom-cache"]) == (200, "hit")
    assert b"files__read_file" not in body


def test_the_admin_keeps_working_while_redis_is_down(
    owned_redis, settings, admin_client, django_capture_on_commit_callbacks
):
    """In the compose stack Redis is the cache and the broker: with it down, admin pages and
    operations answer (work is sent later: beat's loops, the discovery outbox), never 500."""
    from django.urls import reverse

    from registry.core import task_queue

    settings.CELERY_BROKER_URL = owned_redis.url
    task_queue._client.cache_clear()
    try:
        server = approved_server("admin-down", {"read_file": READ})
        token = AgentTokenFactory()
        owned_redis.stop()

        assert admin_client.get("/admin/").status_code == 200
        assert admin_client.get("/admin/teams/agenttoken/").status_code == 200
        assert admin_client.get(f"/admin/teams/agenttoken/{token.pk}/change/").status_code == 200
        for operation in ("check", "discover", "start"):
            with django_capture_on_commit_callbacks(execute=True):
                answer = admin_client.post(
                    reverse("admin:servers_mcpserver_operate", args=[server.pk, operation])
                )
            assert answer.status_code == 302, operation
    finally:
        task_queue._client.cache_clear()


def test_throttles_let_requests_through_while_redis_is_down(
    owned_redis, api_client, committed, charlie
):
    """The throttles count in the same cache: with it down, a wrong agent token is still a 401
    and a person's access request is still taken (uncounted), never a 500 or a timeout each."""
    from registry.teams import services as team_services
    from registry.teams.models import AccessRequest, MembershipLevel

    with committed():
        team = TeamFactory(slug="alpha")
        team_services.team_member_set(
            actor="test", team=team, user=charlie, level=MembershipLevel.OWNER
        )
        server = approved_server("files", {"read_file": READ})
    owned_redis.stop()

    wrong = api_client.get(
        "/api/v1/catalogue", HTTP_AUTHORIZATION="Bearer trm_0123456789ab_" + "x" * 43
    )
    api_client.credentials()
    api_client.force_login(charlie)
    asked = api_client.post(
        "/api/v1/access-requests",
        {"team": "alpha", "server": server.slug, "justification": "reading files"},
        format="json",
    )

    assert wrong.status_code == 401
    assert asked.status_code == 201, asked.content
    assert AccessRequest.objects.filter(team=team, server=server).count() == 1
