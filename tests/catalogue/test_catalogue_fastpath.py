"""The ASGI fast path answers only what the cache holds and is good (304s, cached documents), the
same way Django would; everything else, errors included, is left to Django."""

from __future__ import annotations

import pytest

from registry.teams import services
from tests.catalogue_helpers import DJANGO_ANSWERED, READ, approved_server, fast_path_call
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

_call = fast_path_call


@pytest.fixture
def agent(api_client, committed):
    with committed():
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=approved_server("files", {"read_file": READ}))
        token = AgentTokenFactory(team=team)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    warm = api_client.get("/api/v1/catalogue")  # Django builds and caches it
    assert warm.status_code == 200
    return team, token, warm


def _headers(token, **extra):
    return {"Host": "127.0.0.1:8000", "Authorization": f"Bearer {token.plain}", **extra}


@pytest.mark.usefixtures("no_periodic_queries")
def test_it_answers_304_from_the_cache_like_django(agent, django_assert_num_queries):
    _, token, warm = agent

    with django_assert_num_queries(0):
        [(status, headers, body)] = _call(
            [("/api/v1/catalogue", "", _headers(token, **{"If-None-Match": warm["ETag"]}))]
        )

    assert (status, body) == (304, b"")
    assert headers["etag"] == warm["ETag"]
    assert headers["x-frame-options"] == warm["X-Frame-Options"]
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.usefixtures("no_periodic_queries")
def test_it_serves_the_cached_document_django_built(agent, django_assert_num_queries):
    _, token, warm = agent

    with django_assert_num_queries(0):
        [(status, headers, body)] = _call([("/api/v1/catalogue", "", _headers(token))])

    assert (status, body) == (200, warm.content)
    assert headers["x-toolroom-cache"] == "hit"
    assert headers["content-type"] == "application/json"


def test_it_leaves_a_revoked_token_to_django(agent, committed):
    _, token, warm = agent
    with committed():
        services.agent_token_revoke(actor="test", token=token)

    answers = _call(
        [
            ("/api/v1/catalogue", "", _headers(token, **{"If-None-Match": warm["ETag"]})),
            ("/api/v1/catalogue", "", _headers(token)),
        ]
    )

    assert [status for status, _, _ in answers] == [DJANGO_ANSWERED, DJANGO_ANSWERED]


def test_an_old_etag_is_never_confirmed_after_a_change(agent, committed):
    team, token, warm = agent
    with committed():
        services.grant_revoke(actor="test", grant=team.grants.get())

    answers = _call(
        [
            ("/api/v1/catalogue", "", _headers(token, **{"If-None-Match": warm["ETag"]})),
            ("/api/v1/catalogue", "", _headers(token)),
        ]
    )

    assert [status for status, _, _ in answers] == [DJANGO_ANSWERED, DJANGO_ANSWERED]


@pytest.mark.parametrize(
    ("path", "query", "change"),
    [
        ("/api/v1/catalogue/mcp.json", "", {}),
        ("/api/v1/catalogue", "format=yaml", {}),
        ("/api/v1/catalogue", "format=mcp&format=native", {}),
        ("/api/v1/catalogue", "page=2", {}),
        ("/api/v1/catalogue", "", {"Host": "evil.example.com"}),
        ("/api/v1/catalogue", "", {"Authorization": "Bearer trm_000000000000_" + "A" * 43}),
        ("/api/v1/catalogue", "", {"Authorization": "Basic abc"}),
        ("/api/v1/catalogue", "", {"Authorization": ""}),
    ],
)
def test_it_leaves_everything_unusual_to_django(agent, path, query, change):
    _, token, _ = agent

    [(status, _, _)] = _call([(path, query, {**_headers(token), **change})])

    assert status == DJANGO_ANSWERED


def test_a_wrong_secret_with_a_real_prefix_goes_to_django(agent):
    _, token, _ = agent
    forged = token.plain[:-4] + ("AAAA" if not token.plain.endswith("AAAA") else "BBBB")

    [(status, _, _)] = _call(
        [("/api/v1/catalogue", "", {**_headers(token), "Authorization": f"Bearer {forged}"})]
    )

    assert status == DJANGO_ANSWERED


def test_a_cold_cache_goes_to_django(agent, redis_cache, committed):
    team, token, _ = agent
    with committed():
        other = AgentTokenFactory(team=team, role=team.roles.get(name="review"))

    [(status, _, _)] = _call([("/api/v1/catalogue", "", _headers(other))])

    assert status == DJANGO_ANSWERED
    assert token.pk != other.pk


def test_it_can_be_turned_off(agent, settings):
    _, token, warm = agent
    settings.TOOLROOM_CATALOGUE_FAST_PATH = False

    [(status, _, _)] = _call(
        [("/api/v1/catalogue", "", _headers(token, **{"If-None-Match": warm["ETag"]}))]
    )

    assert status == DJANGO_ANSWERED
