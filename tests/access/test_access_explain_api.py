"""`GET /api/v1/catalogue/explain`: an agent learns why it can or cannot use a tool, for its own
team and role only; nothing about other teams or servers it cannot browse leaks through it."""

from __future__ import annotations

import pytest

from registry.access import private_data
from registry.gateway import checks
from registry.servers import services as server_services
from registry.servers.models import ServerPrompt, ServerResource
from registry.teams import services as team_services
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import CONNECT, READ, WRITE, approved_server, tool_of
from tests.factories import (
    AgentTokenFactory,
    GrantFactory,
    McpServerFactory,
    TeamFactory,
    ToolFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

URL = "/api/v1/catalogue/explain"


@pytest.fixture
def world(committed):
    """alpha holds 'files'; beta holds 'files' for its own reasons and a server in review."""
    checks._tables.clear()
    with committed():
        alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
        files = approved_server("files", {"read_file": READ, "write_file": WRITE, "fetch": CONNECT})
        GrantFactory(team=alpha, server=files)
        team_services.grant_create(
            actor="beta-admin-label",
            team=beta,
            server=files,
            tool=tool_of(files, "write_file"),
            note="beta-private-note",
        )
        hidden = McpServerFactory(slug="hidden")
        ToolFactory(server=hidden, name="secret_tool")
        server_services.server_submit_for_review(actor="test", server=hidden)
        GrantFactory(team=beta, server=hidden)
        item_of(files, uri="file:///readme")
        item_of(files, uri="file:///secret", hide=True)
        item_of(files, prompt="review", approve=False)
        item_of(hidden, prompt="leak")
    return alpha, beta, files


def item_of(server, *, uri=None, prompt=None, approve=True, hide=False):
    """A resource (or prompt) as discovery stores it, approved (or awaiting approval, or hidden)."""
    item: ServerResource | ServerPrompt = (
        ServerResource(server=server, uri=uri, name=uri.rsplit("/", 1)[-1])
        if uri is not None
        else ServerPrompt(server=server, name=prompt)
    )
    item.refresh_definition_hash()
    item.save()
    if hide:
        return server_services.item_hide(actor="test", item=item)
    return server_services.item_approve(actor="test", item=item) if approve else item


def ask(api_client, token, name, kind="tool", **headers):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}", **headers)
    return api_client.get(URL, {kind: name})


README = "toolroom://files/file%3A%2F%2F%2Freadme"


def test_an_agent_learns_why_it_can_read_a_resource_and_why_not_get_a_prompt(
    world, api_client, committed
):
    alpha, _, _ = world
    with committed():
        token = AgentTokenFactory(team=alpha)

    resource = ask(api_client, token, README, "resource")
    prompt = ask(api_client, token, "files__review", "prompt").json()

    assert resource.status_code == 200
    assert resource["Cache-Control"] == "private, no-store"
    body = resource.json()
    assert (body["kind"], body["resource"], body["name"]) == ("resource", "file:///readme", README)
    assert (body["verdict"], body["code"]) == ("callable", "allowed")
    assert [rule["rule"] for rule in body["rules"]][:4] == [
        "grant",
        "tool_offered",
        "server_review",
        "tool_approval",
    ]
    assert body["rules"][3]["facts"]["review_state"] == "approved"
    assert (prompt["kind"], prompt["prompt"]) == ("prompt", "review")
    assert (prompt["first_failing_rule"], prompt["code"]) == ("tool_approval", "tool_not_approved")
    assert "awaiting approval" in prompt["rules"][3]["reason"]


def test_a_grant_of_one_tool_explains_why_the_servers_items_are_not_offered(
    world, api_client, committed
):
    _, beta, _ = world  # beta holds files' write_file only
    with committed():
        token = AgentTokenFactory(team=beta)

    body = ask(api_client, token, README, "resource").json()

    assert (body["first_failing_rule"], body["code"]) == ("grant", "unknown_tool")
    assert "whole server" in body["rules"][0]["reason"]


def test_items_a_team_cannot_see_answer_like_names_that_do_not_exist(world, api_client, committed):
    alpha, beta, _ = world
    with committed():
        token, beta_token = AgentTokenFactory(team=alpha), AgentTokenFactory(team=beta)

    hidden_item = ask(api_client, token, "toolroom://files/file%3A%2F%2F%2Fsecret", "resource")
    missing_item = ask(api_client, token, "toolroom://files/file%3A%2F%2F%2Fnone", "resource")
    other_server = ask(api_client, token, "hidden__leak", "prompt")
    missing_prompt = ask(api_client, token, "nothing__here", "prompt")
    granted = ask(api_client, beta_token, "hidden__leak", "prompt").json()

    assert {r.status_code for r in (hidden_item, missing_item, other_server, missing_prompt)} == {
        404
    }
    assert hidden_item.json()["error"]["message"].replace("secret", "X") == (
        missing_item.json()["error"]["message"].replace("none", "X")
    )
    assert other_server.json()["error"]["message"].replace("hidden__leak", "X") == (
        missing_prompt.json()["error"]["message"].replace("nothing__here", "X")
    )
    # The team holding the whole server under review learns why.
    assert (granted["first_failing_rule"], granted["code"]) == (
        "server_review",
        "server_unavailable",
    )


def test_an_agent_learns_why_it_can_use_a_tool(world, api_client, committed):
    alpha, _, _ = world
    with committed():
        token = AgentTokenFactory(team=alpha)

    response = ask(api_client, token, "files__read_file")

    assert response.status_code == 200
    body = response.json()
    assert (body["team"], body["role"], body["verdict"]) == ("alpha", "operations", "callable")
    assert body["code"] == "allowed"
    assert [rule["rule"] for rule in body["rules"]] == [
        "grant",
        "tool_offered",
        "server_review",
        "tool_approval",
        "role_class",
        "health",
        "gateway_mode",
        "circuit",
        "private_data_ratchet",
        "upstream_account",
    ]
    approval = body["rules"][3]["facts"]
    assert approval["current_definition_matches"] is True
    assert response["Cache-Control"] == "private, no-store"


def test_an_agent_learns_why_not_for_its_own_role(world, api_client, committed):
    alpha, _, _ = world
    with committed():
        token = AgentTokenFactory(team=alpha, role=alpha.roles.get(name="review"))

    body = ask(api_client, token, "files__write_file").json()

    assert body["verdict"] == "not available"
    assert (body["first_failing_rule"], body["code"]) == ("role_class", "role_forbids")
    assert body["role"] == "review"


def test_the_ratchet_is_checked_for_the_asking_token(world, api_client, committed):
    alpha, _, _ = world
    with committed():
        token, other = AgentTokenFactory(team=alpha), AgentTokenFactory(team=alpha)
    private_data.private_data_mark(
        caller=token_authenticate(token.plain), server_slug="vault", seconds=600
    )

    marked = ask(api_client, token, "files__fetch", HTTP_MCP_CONVERSATION_ID="c-7").json()
    other_conversation = ask(api_client, token, "files__fetch", HTTP_MCP_CONVERSATION_ID="c-8")
    other_token = ask(api_client, other, "files__fetch").json()

    assert marked["code"] == "private_data_ratchet"
    assert other_conversation.json()["code"] == "private_data_ratchet"  # any conversation
    assert other_token["code"] == "allowed"


def test_nothing_about_another_team_leaks(world, api_client, committed):
    alpha, _, _ = world
    with committed():
        token = AgentTokenFactory(team=alpha)

    shared = ask(api_client, token, "files__write_file")
    team_param = api_client.get(URL, {"tool": "files__write_file", "team": "beta"})
    hidden = ask(api_client, token, "hidden__secret_tool")
    missing = ask(api_client, token, "nothing__here")

    assert shared.status_code == 200
    for leak in ("beta", "beta-private-note", "beta-admin-label"):
        assert leak not in shared.content.decode()
    assert team_param.json()["team"] == "alpha"  # no parameter names another team
    # A server alpha cannot browse answers exactly like a name that does not exist.
    assert (hidden.status_code, missing.status_code) == (404, 404)
    assert hidden.json()["error"]["code"] == missing.json()["error"]["code"] == "not_found"
    assert hidden.json()["error"]["message"].replace("hidden__secret_tool", "X") == (
        missing.json()["error"]["message"].replace("nothing__here", "X")
    )


def test_a_granted_server_under_review_is_explained_to_its_team(world, api_client, committed):
    _, beta, _ = world
    with committed():
        token = AgentTokenFactory(team=beta)

    body = ask(api_client, token, "hidden__secret_tool").json()

    assert (body["first_failing_rule"], body["code"]) == ("server_review", "server_unavailable")


def test_bad_requests_get_the_one_error_format(world, api_client, committed, charlie):
    alpha, _, _ = world
    with committed():
        token = AgentTokenFactory(team=alpha)

    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    no_tool = api_client.get(URL)
    api_client.credentials(HTTP_AUTHORIZATION="Bearer trm_000000000000_nope")
    bad_token = api_client.get(URL, {"tool": "files__read_file"})
    api_client.credentials()
    api_client.force_login(charlie)
    person = api_client.get(URL, {"tool": "files__read_file"})

    assert no_tool.status_code == 400
    assert no_tool.json()["error"]["fields"] == {"tool": ["Name one tool, resource or prompt."]}
    assert bad_token.status_code == 401
    assert set(bad_token.json()["error"]) == {"code", "message", "fields"}
    assert person.status_code in (401, 403)
    assert set(person.json()) == {"error"}


def test_the_endpoint_is_in_the_openapi_schema(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    operation = schema["paths"]["/api/v1/catalogue/explain"]["get"]
    assert operation["operationId"] == "catalogue_explain"
    # the ratchet's caller is the token
    assert {p["name"] for p in operation["parameters"]} == {"tool", "resource", "prompt"}
    assert {"200", "400", "401", "404"} <= set(operation["responses"])
