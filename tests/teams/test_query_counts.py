"""Query counts pinned where a page or list could grow a query per row: the team API's lists and
the admin's change pages (the catalogue's are pinned in tests/catalogue/test_catalogue_api.py).

Each test answers the same request with few rows and with many: the count must not grow, and must
stay at the number measured when the test was written (a change to it is a decision, not drift).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, ToolFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

TEAM_LISTS = [
    "/api/v1/teams",
    "/api/v1/servers",
    "/api/v1/grants",
    "/api/v1/access-requests",
    "/api/v1/agents",
]


def _queries(client, url: str) -> int:
    """Queries of a second identical request (the first warms per-process caches)."""
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(captured.captured_queries)


def _grow_team(team, owner, rows: int) -> None:
    """`rows` more of everything the team's lists show: servers, grants, requests, agents."""
    for _ in range(rows):
        server = approved_server(f"s-{team.slug}-{team.grants.count()}", {"read": READ})
        GrantFactory(team=team, server=server)
        wanted = approved_server(f"w-{team.slug}-{team.grants.count()}", {"read": READ})
        services.access_request_create(
            actor=owner, team=team, server=wanted, justification="for the tests"
        )
        AgentTokenFactory(team=team)


@pytest.mark.usefixtures("no_periodic_queries")
@pytest.mark.parametrize("url", TEAM_LISTS)
def test_the_team_api_lists_cost_the_same_with_one_row_or_eight(api_client, charlie, url):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    api_client.force_login(charlie)
    _grow_team(team, charlie, 1)
    with_one = _queries(api_client, url)

    _grow_team(team, charlie, 7)
    with_eight = _queries(api_client, url)

    assert with_eight == with_one == TEAM_LIST_QUERIES[url]


# Measured when pinned (SQLite and PostgreSQL alike): session, user, the caller's teams, the rows
# and what each list prefetches.
TEAM_LIST_QUERIES = {
    "/api/v1/teams": 7,
    "/api/v1/servers": 5,
    "/api/v1/grants": 4,
    "/api/v1/access-requests": 4,
    "/api/v1/agents": 4,
}


def test_the_server_change_page_costs_the_same_with_two_tools_or_twenty(client, alice):
    server = approved_server("clock", {"now": READ, "zone": READ})
    client.force_login(alice)
    url = reverse("admin:servers_mcpserver_change", args=[server.pk])
    with_two = _queries(client, url)

    ToolFactory.create_batch(18, server=server)
    with_twenty = _queries(client, url)

    assert with_twenty == with_two == 19  # 18, and the storage volumes (storage section)


def test_the_tool_change_page_is_a_fixed_number_of_queries(client, alice):
    server = approved_server("clock", {"now": READ})
    tool = server.tools.get()
    client.force_login(alice)

    assert _queries(client, reverse("admin:servers_tool_change", args=[tool.pk])) == 13


@pytest.mark.usefixtures("no_periodic_queries")
def test_the_team_change_page_grows_only_by_the_member_autocomplete(client, alice, charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    client.force_login(alice)
    url = reverse("admin:teams_team_change", args=[team.pk])
    _grow_team(team, charlie, 1)
    with_one = _queries(client, url)

    _grow_team(team, charlie, 7)
    for number in range(7):
        services.team_member_set(actor="test", team=team, user=UserFactory(username=f"m{number}"))
    with_eight = _queries(client, url)

    # The rows come in one query each; only Django's autocomplete widget looks up each member's
    # user for its selected option (one query per member row).
    assert with_one == 13
    assert with_eight == with_one + 7
