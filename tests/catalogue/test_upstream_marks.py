"""The catalogue's "needs your account" mark (issue 25): a per-person server's tool says, for the
calling person, whether they linked their account (or entered their secret) and where to do it,
in the REST catalogue's native and MCP formats, the gateway's tools/list and the portal; an agent
token reads that it cannot call such a tool. The fragment-built documents stay byte for byte the
reference renderers' for every kind of caller."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from django.test import Client as HttpClient
from django.utils import timezone

from registry.catalogue.formats import render_tools
from registry.catalogue.fragments import FragmentStore, tools_document_body
from registry.catalogue.selectors import catalogue_for_agent
from registry.gateway.listing import tools_list_document
from registry.oauth.tokens import person_token_authenticate
from registry.servers.models import McpServer, UpstreamAuth
from registry.teams import services as team_services
from registry.teams.models import MembershipLevel
from registry.teams.tokens import token_authenticate
from registry.upstream.services import secret_store
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory, UserFactory
from tests.oauth_helpers import person_access_token

pytestmark = pytest.mark.django_db

PAGE = "http://127.0.0.1:8000/portal/accounts/"


@pytest.fixture
def world(committed) -> dict[str, Any]:
    """alpha (carol) holds `keyed` (each person's secret), `tracker` (each person's OAuth) and
    `files` (shared)."""
    with committed():
        alpha = TeamFactory(slug="alpha")
        carol = UserFactory(username="carol")
        team_services.team_member_set(
            actor="test", team=alpha, user=carol, level=MembershipLevel.OWNER
        )
        servers = {}
        for slug, mode in (
            ("keyed", UpstreamAuth.PERSON_SECRET),
            ("tracker", UpstreamAuth.PERSON_OAUTH),
            ("files", UpstreamAuth.SHARED),
        ):
            servers[slug] = approved_server(slug, {"whoami": READ})
            McpServer.objects.filter(pk=servers[slug].pk).update(upstream_auth=mode)
            servers[slug].refresh_from_db()
            GrantFactory(team=alpha, server=servers[slug])
    return {"team": alpha, "carol": carol, **servers}


def marks(document: dict[str, Any], fmt: str) -> dict[str, Any]:
    """Each tool's mark (None: none), by tool name."""
    if fmt == "native":
        return {tool["name"]: tool.get("upstreamAccount") for tool in document["tools"]}
    return {
        tool["name"]: tool["_meta"]["toolroom/catalogue"].get("upstreamAccount")
        for tool in document["tools"]
    }


def test_the_fragments_match_the_reference_for_agents_and_people(world, committed):
    team = world["team"]
    role = team.roles.get(name="operations")
    agent = token_authenticate(AgentTokenFactory(team=team).plain)
    with committed():
        token = person_access_token(world["carol"], team)
    person = person_token_authenticate(token).identity
    linked = dataclasses.replace(person, upstream_accounts={"keyed": "linked", "tracker": "broken"})
    expected = [
        (agent, "needs_person", "needs_person"),
        (person, "not_linked", "not_linked"),
        (linked, "linked", "broken"),
    ]
    at = timezone.now()
    for caller, keyed, tracker in expected:
        for fmt in ("native", "mcp"):
            catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk, at=at)
            reference = json.dumps(
                render_tools(fmt, catalogue, version=7, preflight=None, caller=caller),
                ensure_ascii=False,
                separators=(",", ":"),
            ).encode()
            built = tools_document_body(
                fmt=fmt,
                team_id=team.pk,
                role_id=role.pk,
                version=7,
                at=at,
                store=FragmentStore(),
                caller=caller,
            )
            assert built == reference
            assert marks(json.loads(built), fmt) == {
                "files__whoami": None,
                "keyed__whoami": {"mode": "person_secret", "state": keyed, "url": PAGE},
                "tracker__whoami": {"mode": "person_oauth", "state": tracker, "url": PAGE},
            }


def test_the_api_and_the_gateway_mark_a_persons_tools_as_their_accounts_change(
    world, committed, api_client
):
    with committed():
        token = person_access_token(world["carol"], world["team"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    before = api_client.get("/api/v1/catalogue")
    assert before.status_code == 200, before.content
    assert marks(before.json(), "native")["keyed__whoami"] == {
        "mode": "person_secret",
        "state": "not_linked",
        "url": PAGE,
    }
    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    after = api_client.get("/api/v1/catalogue", HTTP_IF_NONE_MATCH=before["ETag"])
    assert after.status_code == 200  # not 304: the mark changed
    assert marks(after.json(), "native")["keyed__whoami"]["state"] == "linked"
    assert marks(after.json(), "native")["tracker__whoami"]["state"] == "not_linked"
    listed = api_client.get("/api/v1/catalogue", {"format": "mcp"}).json()
    assert marks(listed, "mcp")["keyed__whoami"]["state"] == "linked"
    # The gateway's own tools/list says the same.
    identity = person_token_authenticate(token).identity
    gateway_list = json.loads(tools_list_document(identity=identity).body)
    assert marks(gateway_list, "mcp")["keyed__whoami"]["state"] == "linked"
    assert marks(gateway_list, "mcp")["files__whoami"] is None
    # An agent token reads that it cannot call them.
    api_client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {AgentTokenFactory(team=world['team']).plain}"
    )
    agent = marks(api_client.get("/api/v1/catalogue").json(), "native")
    assert agent["keyed__whoami"]["state"] == agent["tracker__whoami"]["state"] == "needs_person"


def test_the_portal_marks_the_tools_that_need_the_persons_account(world, committed):
    http = HttpClient()
    http.force_login(world["carol"])
    roles = world["team"].roles.count()  # a table per role, each with the three tools
    page = http.get("/portal/").content.decode()
    assert page.count("Needs your account") == 2 * roles
    assert 'href="/portal/accounts/">enter your token</a>' in page
    assert 'href="/portal/accounts/">link it</a>' in page
    with committed():
        secret_store(person=world["carol"], server=world["keyed"], secret="key-of-carol")
    page = http.get("/portal/").content.decode()
    assert page.count("Needs your account") == roles
    assert "(uses your own account)" in page
