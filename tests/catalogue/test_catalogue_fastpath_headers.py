"""Header parity: the ASGI catalogue fast path re-implements what Django's middleware adds to an
answer (security headers, caching, Vary...), so for the same request both must send the same
headers, every one of them, apart from the few that say who answered or differ per request."""

from __future__ import annotations

import pytest

from tests.catalogue_helpers import DJANGO_ANSWERED, READ, approved_server, fast_path_call
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

HOST = "127.0.0.1:8000"
# Differ by design: which path answered, and the id every request gets afresh.
WHO_ANSWERED = {"x-toolroom-cache", "x-request-id"}
# Headers only Django sends, found by this test and harmless: DRF's APIView adds `Allow` (the
# view's methods) to every answer, and CommonMiddleware a `Content-Length: 0` to an empty 304.
# Pinned, so that any other difference, either way, fails.
ONLY_DJANGO = {
    "200": {"allow": "GET, HEAD, OPTIONS"},
    "304": {"allow": "GET, HEAD, OPTIONS", "content-length": "0"},
}


@pytest.fixture
def agent(api_client, committed):
    with committed():
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=approved_server("files", {"read_file": READ}))
        token = AgentTokenFactory(team=team)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    warm = api_client.get("/api/v1/catalogue", HTTP_HOST=HOST)  # Django builds and caches it
    assert warm.status_code == 200
    return api_client, token, warm


def _django_headers(response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}


def _without_who_answered(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name not in WHO_ANSWERED}


@pytest.mark.parametrize("conditional", [False, True], ids=["200", "304"])
def test_the_fast_path_sends_every_header_django_sends(agent, conditional):
    api_client, token, warm = agent
    extra = {"If-None-Match": warm["ETag"]} if conditional else {}

    django = api_client.get(
        "/api/v1/catalogue",
        HTTP_HOST=HOST,
        **{f"HTTP_{name.upper().replace('-', '_')}": value for name, value in extra.items()},
    )
    [(status, fast, body)] = fast_path_call(
        [
            (
                "/api/v1/catalogue",
                "",
                {"Host": HOST, "Authorization": f"Bearer {token.plain}", **extra},
            )
        ]
    )

    assert status != DJANGO_ANSWERED  # the fast path answered it itself
    assert (status, body) == (django.status_code, django.content)
    assert _without_who_answered(fast) | ONLY_DJANGO[str(status)] == _without_who_answered(
        _django_headers(django)
    )
