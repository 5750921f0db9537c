"""The gateway's search mode (registry/gateway/search_mode.py, workers/gateway/search_tools.py),
end to end through a real gateway and a real MCP server: tools/list shows the pinned tools plus
find_tools and call_tool, call_tool refuses exactly what a direct call refuses, and find_tools
never finds what the agent may not call."""

from __future__ import annotations

import dataclasses
import json

import anyio
import pytest
from django.core.cache import cache
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from mcp import MCPError

from registry.audit.models import AuditEvent
from registry.core.process_cache import forget_all
from registry.gateway import search_mode
from registry.gateway.models import ToolCall
from registry.servers import services as server_services
from registry.servers.models import McpServer, Tool
from registry.teams import services as team_services
from registry.teams.tokens import token_authenticate
from tests.catalogue.test_catalogue_permissions import (
    SERVERS,
    build_world,
    expected_catalogue,
    worlds,
)
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import (
    discovered_http_server,
    gateway_client,
    text_of,
)
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)
from tests.search.test_catalogue_search import MATCH_ALL

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

META = ["find_tools", "call_tool"]


@pytest.fixture(autouse=True)
def _fresh_kept_state():
    forget_all()
    yield
    forget_all()


@pytest.fixture
def world(http_scenario_server):  # noqa: F811 (the fixture imported above)
    server = discovered_http_server("echo", http_scenario_server.url)
    alpha = TeamFactory(slug="alpha")
    GrantFactory(team=alpha, server=server)
    beta = TeamFactory(slug="beta")
    tokens = {
        "ops": AgentTokenFactory(team=alpha),
        "review": AgentTokenFactory(team=alpha, role=alpha.roles.get(name="review")),
        "beta": AgentTokenFactory(team=beta),
    }
    for token in tokens.values():
        team_services.agent_token_tool_exposure_set(actor="test", token=token, exposure="search")
    return {"server": server, "alpha": alpha, **tokens}


def _session(url, token, steps):
    """Run `steps(client)` in one SDK client session; MCP errors come back as values."""

    async def run():
        async with gateway_client(url, token) as client:
            return await steps(client)

    return anyio.run(run)


async def _call(client, name, arguments):
    try:
        return await client.call_tool(name, arguments)
    except MCPError as error:
        return error


def _refusal(result):
    """What a refusal says: the protocol error, or the tool error's code and text."""
    if isinstance(result, MCPError):
        return ("protocol", result.code, result.message)
    meta = (result.meta or {}).get("toolroom/error", {})
    return ("tool", result.is_error, meta.get("code"), text_of(result))


def test_search_mode_lists_pinned_tools_and_the_meta_tools(gateway, world):
    async def listed(client):
        return [tool.name for tool in (await client.list_tools()).tools]

    assert _session(gateway.url, world["ops"].plain, listed) == META
    team_services.agent_token_declare_servers(
        actor="test", token=world["ops"], declared_servers={"required": ["echo"]}
    )
    assert _session(gateway.url, world["ops"].plain, listed) == [
        "echo__add",
        "echo__echo",
        "echo__sleep",
        *META,
    ]
    # The review role may not call write tools: pinned or not, they are not listed.
    team_services.agent_token_declare_servers(
        actor="test", token=world["review"], declared_servers={"optional": ["echo"]}
    )
    assert _session(gateway.url, world["review"].plain, listed) == ["echo__echo", *META]
    # Back to all: the whole catalogue, no meta-tools.
    team_services.agent_token_tool_exposure_set(actor="test", token=world["ops"], exposure="all")
    assert _session(gateway.url, world["ops"].plain, listed) == [
        "echo__add",
        "echo__echo",
        "echo__sleep",
    ]


def test_the_team_default_applies_to_tokens_that_do_not_choose(gateway, world):
    async def listed(client):
        return [tool.name for tool in (await client.list_tools()).tools]

    follower = AgentTokenFactory(team=world["alpha"], name="follower")
    assert _session(gateway.url, follower.plain, listed) == [
        "echo__add",
        "echo__echo",
        "echo__sleep",
    ]
    team_services.team_tool_exposure_set(actor="test", team=world["alpha"], exposure="search")
    assert _session(gateway.url, follower.plain, listed) == META
    team_services.agent_token_tool_exposure_set(actor="test", token=follower, exposure="all")
    assert len(_session(gateway.url, follower.plain, listed)) == 3


def test_find_tools_finds_callable_tools_and_the_audit_shows_found_and_called(gateway, world):
    async def steps(client):
        found = await client.call_tool("find_tools", {"query": "echo the text back", "limit": 2})
        called = await client.call_tool(
            "call_tool", {"name": "echo__echo", "arguments": {"text": "hello"}}
        )
        bad = await client.call_tool("find_tools", {"query": ""})
        return found, called, bad

    found, called, bad = _session(gateway.url, world["ops"].plain, steps)

    tools = json.loads(text_of(found))["tools"]
    assert tools[0]["name"] == "echo__echo"
    assert "inputSchema" in tools[0]
    assert len(tools) <= 2
    assert (called.is_error, text_of(called)) == (False, "hello")
    assert bad.is_error is True
    event = AuditEvent.objects.get(action="gateway.tools_found")
    assert event.details["query"] == "echo the text back"
    assert event.details["found"] == [tool["name"] for tool in tools]
    for _ in range(100):
        if ToolCall.objects.exists():
            break
        anyio.run(anyio.sleep, 0.05)
    call = ToolCall.objects.get()
    assert (call.name, call.via, call.outcome) == ("echo__echo", "mcp-search", "ok")


def test_call_tool_refuses_exactly_what_a_direct_call_refuses(gateway, world):
    cases = [
        ("review", "echo__add", {"a": 1, "b": 2}),  # the role may not call write tools
        ("ops", "echo__add", {"a": 1}),  # arguments outside the approved schema
        ("beta", "echo__echo", {"text": "hi"}),  # another team's tool
        ("ops", "nothing__here", {}),  # no such tool
        ("ops", "echo__echo", {"text": "allowed"}),  # allowed: both answer alike
    ]
    for key, name, arguments in cases:

        async def steps(client, name=name, arguments=arguments):
            direct = await _call(client, name, arguments)
            meta = await _call(client, "call_tool", {"name": name, "arguments": arguments})
            return direct, meta

        direct, meta = _session(gateway.url, world[key].plain, steps)
        assert _refusal(direct) == _refusal(meta), (key, name)

    # A rule that changes between calls (the grant revoked) is applied to both paths alike.
    team_services.grant_revoke(actor="test", grant=world["alpha"].grants.get())

    async def after_revoke(client):
        direct = await _call(client, "echo__echo", {"text": "x"})
        meta = await _call(client, "call_tool", {"name": "echo__echo", "arguments": {"text": "x"}})
        return direct, meta

    direct, meta = _session(gateway.url, world["ops"].plain, after_revoke)
    assert _refusal(direct) == _refusal(meta)
    assert isinstance(direct, MCPError)  # the team no longer holds it: no such tool

    # The call audit holds both paths' calls with the same outcomes, told apart by `via`.
    for _ in range(400):
        if ToolCall.objects.count() >= 12:
            break
        anyio.run(anyio.sleep, 0.05)
    calls = list(ToolCall.objects.order_by("started_at", "pk"))
    direct_calls = [(c.name, c.outcome, c.error_class) for c in calls if c.via == "mcp"]
    meta_calls = [(c.name, c.outcome, c.error_class) for c in calls if c.via == "mcp-search"]
    assert direct_calls == meta_calls
    assert len(direct_calls) == 6
    assert direct_calls[-1] == meta_calls[-1] == ("echo__echo", "refused", "unknown_tool")


def test_a_tool_changed_since_approval_is_not_found_until_reapproved(gateway, world):
    async def find(client):
        found = await client.call_tool("find_tools", {"query": "echo text"})
        return [tool["name"] for tool in json.loads(text_of(found))["tools"]]

    assert "echo__echo" in _session(gateway.url, world["ops"].plain, find)
    tool = Tool.objects.get(server=world["server"], name="echo")
    server_services.tool_revoke(actor="test", tool=tool, reason="test")
    assert "echo__echo" not in _session(gateway.url, world["ops"].plain, find)
    server_services.tool_approve(actor="test", tool=Tool.objects.get(pk=tool.pk))
    assert "echo__echo" in _session(gateway.url, world["ops"].plain, find)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds)
def test_find_tools_and_the_search_list_never_leak(world, settings):
    """Over the permission matrix's random worlds: what find_tools finds and what the search
    mode lists (every server pinned) are within the agent's catalogue, and find_tools finds all
    of it."""
    settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = world["hide_unhealthy"]
    cache.clear()
    forget_all()
    with transaction.atomic():
        tokens = build_world(world)
        for (team, role), plain in tokens.items():
            expected = expected_catalogue(world, team, role)
            identity = dataclasses.replace(
                token_authenticate(plain),
                declared_servers={"required": list(SERVERS)},
                tool_exposure="search",
            )
            found = search_mode.tools_find(identity=identity, query=MATCH_ALL, limit=50)
            assert {tool["name"] for tool in found["tools"]} == expected, (team, role)
            _, version = search_mode.tool_exposure(identity=identity)
            listed = search_mode.search_mode_document(identity=identity, version=version)
            assert [tool["name"] for tool in listed["tools"][-2:]] == META
            assert {tool["name"] for tool in listed["tools"][:-2]} == expected, (team, role)
        transaction.set_rollback(True)
    assert not McpServer.objects.exists()
