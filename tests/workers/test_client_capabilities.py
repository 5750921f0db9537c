"""Discovery, health checks and warm runtimes declare the client capabilities the gateway relays,
so a tool a server offers only to clients that can answer questions (elicitation), sample
(sampling) or list roots (roots) is found."""

from __future__ import annotations

import anyio
import pytest

from registry.servers.jobs.launch import server_launch_plan
from registry.servers.models import DiscoveryStatus
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from tests.mcp_fixtures import (
    SAMPLING_SERVER,
    scenario_argv,
    server_everything,  # noqa: F401 - a fixture
    start_http_scenario,
)
from workers.health import check_plans

pytestmark = [pytest.mark.django_db, pytest.mark.processes]

# server-everything 2026.8.31 lists 13 tools to a client that declares nothing, and these four
# more (17) to one that declares elicitation, sampling and roots.
EVERYTHING_ASKING = {
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "trigger-sampling-request",
    "get-roots-list",
}


def _names(server):
    return set(server.tools.values_list("name", flat=True))


def test_discovery_finds_a_tool_offered_only_to_clients_that_declare_elicitation():
    stdio = McpServerFactory(command=scenario_argv("--elicit", "--elicit-only"))
    run = discover_inline(stdio)
    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert _names(stdio) == {"echo", "add", "sleep", "confirm"}
    # The health check lists the tools with the same capabilities: no drift is seen.
    [health] = anyio.run(lambda: check_plans([server_launch_plan(server=stdio)], concurrency=1))
    assert health.ok, health.error
    assert {tool["name"] for tool in health.tools or []} == _names(stdio)

    running = start_http_scenario("--elicit", "--elicit-only")
    try:
        http = McpServerFactory(transport="streamable_http", command=[], url=running.url)
        run = discover_inline(http)
    finally:
        running.stop()
    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert "confirm" in _names(http)


def test_discovery_finds_tools_offered_only_to_clients_that_declare_sampling_or_roots():
    stdio = McpServerFactory(
        command=scenario_argv("--sampling-only", "--roots-only", script=SAMPLING_SERVER)
    )
    run = discover_inline(stdio)
    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert _names(stdio) == {"echo", "hold", "summarize", "where"}
    [health] = anyio.run(lambda: check_plans([server_launch_plan(server=stdio)], concurrency=1))
    assert health.ok, health.error
    assert {tool["name"] for tool in health.tools or []} == _names(stdio)

    running = start_http_scenario("--sampling-only", "--roots-only", script=SAMPLING_SERVER)
    try:
        http = McpServerFactory(transport="streamable_http", command=[], url=running.url)
        run = discover_inline(http)
    finally:
        running.stop()
    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert _names(http) == {"echo", "hold", "summarize", "where"}


def test_server_everything_shows_its_asking_tools(server_everything):  # noqa: F811
    server = McpServerFactory(command=server_everything)
    run = discover_inline(server)
    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert _names(server) >= EVERYTHING_ASKING
    assert server.tools.count() == 17
