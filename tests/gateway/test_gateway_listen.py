"""`subscriptions/listen` through the real gateway: a 2026-07-28 SDK client that listens is told
when its team's catalogue version moves (grant, revoke, approval), and only its own team's."""

from __future__ import annotations

import time

import anyio
import pytest
from django.db import close_old_connections
from mcp import MCPError
from mcp.client.subscriptions import SubscriptionLost, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from registry.servers import services as server_services
from registry.servers.models import Tool
from registry.teams import services as team_services
from registry.teams.models import AgentToken
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

# The watcher reads the version once a second; a change is told well within this.
TOLD_WITHIN = 4.0


def _in_thread(fn):
    def run():
        try:
            fn()
        finally:
            close_old_connections()

    return anyio.to_thread.run_sync(run)


def test_a_listening_client_is_told_when_its_team_catalogue_moves(
    gateway,
    http_scenario_server,  # noqa: F811 (the fixture imported above)
):
    server = discovered_http_server("echo", http_scenario_server.url, approve=False)
    alpha = TeamFactory(slug="alpha")
    beta = TeamFactory(slug="beta")
    alpha_token = AgentTokenFactory(team=alpha).plain
    beta_token = AgentTokenFactory(team=beta).plain
    tool = Tool.objects.get(server=server, name="echo")
    told: list[tuple[str, float]] = []
    beta_told: list[object] = []
    grants = {}

    def grant():
        grants["alpha"] = GrantFactory(team=alpha, server=server)

    changes = [
        ("grant", grant),
        ("approve", lambda: server_services.tool_approve(actor="test", tool=tool)),
        (
            "revoke",
            lambda: team_services.grant_revoke(actor="test", grant=grants["alpha"], reason="over"),
        ),
    ]

    async def run():
        listed = []
        async with (
            gateway_client(gateway.url, alpha_token) as client,
            gateway_client(gateway.url, beta_token) as beta_client,
        ):
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            assert client.server_capabilities.tools.list_changed is True
            async with (
                client.listen(tools_list_changed=True) as subscription,
                beta_client.listen(tools_list_changed=True) as beta_subscription,
                anyio.create_task_group() as group,
            ):
                assert subscription.honored.tools_list_changed is True

                async def beta_listens():
                    async for event in beta_subscription:
                        beta_told.append(event)

                group.start_soon(beta_listens)
                events = aiter(subscription)
                for what, change in changes:
                    changed_at = time.monotonic()
                    await _in_thread(change)
                    with anyio.fail_after(TOLD_WITHIN):
                        event = await anext(events)
                    told.append((what, time.monotonic() - changed_at))
                    assert isinstance(event, ToolsListChanged)
                    tools = (await client.list_tools(cache_mode="refresh")).tools
                    listed.append([t.name for t in tools])
                await anyio.sleep(1.5)  # beta's watcher had its chance to (wrongly) tell
                group.cancel_scope.cancel()
        return listed

    after_grant, after_approve, after_revoke = anyio.run(run)

    assert [what for what, _ in told] == ["grant", "approve", "revoke"]
    assert all(delay < TOLD_WITHIN for _, delay in told), told
    assert after_grant == []  # granted, but no tool approved yet
    assert after_approve == ["echo__echo"]
    assert after_revoke == []
    assert beta_told == []  # another team's changes are not told


def test_a_listen_stream_ends_when_its_token_is_revoked(
    gateway,
    http_scenario_server,  # noqa: F811 (the fixture imported above)
):
    server = discovered_http_server("echo", http_scenario_server.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team)

    def revoke():
        team_services.agent_token_revoke(actor="test", token=AgentToken.objects.get(pk=token.pk))

    async def run():
        async with (
            gateway_client(gateway.url, token.plain) as client,
            client.listen(tools_list_changed=True) as subscription,
        ):
            await _in_thread(revoke)
            with anyio.fail_after(TOLD_WITHIN):
                try:
                    events = [event async for event in subscription]
                except SubscriptionLost as lost:
                    return lost.__cause__
            return events

    ended = anyio.run(run)

    assert isinstance(ended, MCPError)
    assert "The token is no longer valid" in ended.message
