"""Each tool's catalogue entry says the gateway's call deadline and the server's maximum call time
(how far its progress may stretch the deadline), and marks a tool the gateway cannot call (one
that must be called as a task), with the reason: the native REST catalogue, in both of its
builds, and the portal's team page; a policy change shows at once."""

from __future__ import annotations

import json

import pytest

from registry.catalogue.formats import render_mcp, tool_entry_native
from registry.catalogue.fragments import FragmentStore, tools_document_body
from registry.catalogue.selectors import catalogue_for_agent
from registry.gateway.checks import call_check
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.teams import services
from registry.teams.models import MembershipLevel
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import READ, approved_server
from tests.factories import (
    AgentTokenFactory,
    GrantFactory,
    TeamFactory,
    ToolFactory,
    tool_definition,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def setup(committed, dave):
    with committed():
        team = TeamFactory(slug="alpha")
        services.team_member_set(actor="test", team=team, user=dave, level=MembershipLevel.MEMBER)
        files = approved_server("files", {"read_file": READ})
        clock = approved_server("clock", {"get_time": READ})
        GrantFactory(team=team, server=files)
        GrantFactory(team=team, server=clock)
        token = AgentTokenFactory(team=team, role=team.roles.get(name="operations"))
    return team, files, token


def _deadlines(api_client, token):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    response = api_client.get("/api/v1/catalogue")
    assert response.status_code == 200
    return {
        tool["name"]: (tool["callDeadlineSeconds"], tool["maxCallSeconds"])
        for tool in response.json()["tools"]
    }


def test_the_native_entry_shows_the_call_deadline_and_maximum(
    api_client, client, setup, committed, dave
):
    team, files, token = setup
    assert _deadlines(api_client, token) == {
        "clock__get_time": (5.0, 60.0),  # no policy: the defaults
        "files__read_file": (5.0, 60.0),
    }

    with committed():
        server_gateway_policy_set(
            actor="test", server=files, call_deadline_seconds=20, max_call_seconds=120
        )
    assert _deadlines(api_client, token) == {
        "clock__get_time": (5.0, 60.0),
        "files__read_file": (20.0, 120.0),
    }

    # The fragment build and the plain one give the same entries.
    role = token.role
    catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk)
    plain = [tool_entry_native(tool) for tool in catalogue.tools]
    body = tools_document_body(
        fmt="native", team_id=team.pk, role_id=role.pk, version=1, store=FragmentStore()
    )
    assert json.loads(body)["tools"] == plain

    client.force_login(dave)
    page = client.get("/portal/").content.decode()
    assert "20 s, up to 120 s while the server reports progress" in page
    assert "5 s, up to 60 s while the server reports progress" in page


def test_a_tool_that_must_be_called_as_a_task_is_marked_not_callable(
    api_client, client, committed, dave
):
    with committed():
        team = TeamFactory(slug="alpha")
        services.team_member_set(actor="test", team=team, user=dave, level=MembershipLevel.MEMBER)
        research = approved_server("research", {"quick_search": READ})
        tool = ToolFactory(
            server=research,
            name="research_query",
            definition=tool_definition(
                "research_query", annotations=READ, execution={"taskSupport": "required"}
            ),
        )
        server_services.tool_approve(actor="test", tool=tool)
        GrantFactory(team=team, server=research)
        token = AgentTokenFactory(team=team, role=team.roles.get(name="operations"))

    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    tools = {t["name"]: t for t in api_client.get("/api/v1/catalogue").json()["tools"]}
    marked = tools["research__research_query"]["notCallableThroughGateway"]
    assert "must be called as a task" in marked
    assert "does not support" in marked
    assert tools["research__quick_search"]["notCallableThroughGateway"] is None

    role = token.role
    plain = [
        tool_entry_native(t) for t in catalogue_for_agent(team_id=team.pk, role_id=role.pk).tools
    ]
    body = tools_document_body(
        fmt="native", team_id=team.pk, role_id=role.pk, version=1, store=FragmentStore()
    )
    assert json.loads(body)["tools"] == plain
    # The MCP list (the gateway's tools/list) says so in the description and in `_meta`, in the
    # fragment build as in the plain one.
    listed = render_mcp(catalogue_for_agent(team_id=team.pk, role_id=role.pk))
    body = tools_document_body(
        fmt="mcp", team_id=team.pk, role_id=role.pk, version=1, store=FragmentStore()
    )
    assert json.loads(body) == listed
    entries = {entry["name"]: entry for entry in listed["tools"]}
    marked_entry = entries["research__research_query"]
    assert marked_entry["description"].startswith(f"Not callable through the gateway: {marked}.")
    assert marked_entry["_meta"]["toolroom/catalogue"]["notCallableThroughGateway"] == marked
    assert (
        "notCallableThroughGateway"
        not in entries["research__quick_search"]["_meta"]["toolroom/catalogue"]
    )

    client.force_login(dave)
    page = client.get("/portal/").content.decode()
    assert "Not callable through the gateway" in page

    # The gateway refuses the call with the reason, before reaching the server.
    identity = token_authenticate(token.plain)
    refused = call_check(identity=identity, name="research__research_query", arguments={})
    assert (refused.allowed, refused.code) == (False, "not_callable")
    assert "must be called as a task" in refused.message
    assert call_check(identity=identity, name="research__quick_search", arguments={}).allowed
