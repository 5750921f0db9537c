"""stdio servers through the gateway: a real runtime worker (Celery, threads pool) starts the
server on demand and serves the gateway's calls over its private endpoint, with per-team
isolation (two teams never share a server process) and a shared scope where the admin says so."""

from __future__ import annotations

import time

import anyio
import pytest
import redis
from django.conf import settings

from registry.gateway.models import ServerGatewayPolicy
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import RuntimeState, ServerStatus, Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, gateway_client, text_of
from tests.mcp_fixtures import scenario_argv
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a real runtime worker, as a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


def _shared_cache_emptied() -> redis.Redis:
    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    return client


@pytest.fixture
def shared_cache():
    """The cache the worker process uses too (REDIS_URL, this test process's key prefix),
    emptied first: ids repeat from test to test. The broker on the same Redis keeps its keys."""
    return _shared_cache_emptied()


def test_emptying_the_shared_cache_leaves_the_brokers_routing_alone():
    """The broker's keys are outside the cache's prefix (tests/settings.py): emptying the cache
    once deleted the worker-direct exchange's routing table a running worker had written, and
    every runtime command sent to that worker's own queue was dropped from then on."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    table = f"{prefix}_kombu.binding.prefix-check"  # a routing table of no real exchange
    client.sadd(table, "node@host\x06\x16\x06\x16node@host.dq2")
    try:
        _shared_cache_emptied()
        assert client.exists(table)
    finally:
        client.delete(table)


@pytest.fixture
def gateway(shared_cache):
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def memory_world():
    server = McpServerFactory(slug="memory", command=scenario_argv("--memory"))
    # Discovered before approval: approving also asks the (running) worker for a discovery.
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    # A cold start (spawning Python servers) on a busy 2-core machine: a generous deadline.
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=60)
    tokens = {}
    for slug in ("alpha", "beta"):
        team = TeamFactory(slug=slug)
        GrantFactory(team=team, server=server)
        tokens[slug] = AgentTokenFactory(team=team).plain
    return server, tokens


async def _calls(url, token, calls):
    results = []
    async with gateway_client(url, token) as client:
        for name, arguments in calls:
            results.append(text_of(await client.call_tool(name, arguments)))
    return results


def test_a_stdio_server_starts_on_demand_and_keeps_each_team_apart(
    worker,  # noqa: F811 (the fixture imported above)
    gateway,
    memory_world,
):
    server, tokens = memory_world
    assert ServerStatus.objects.get(server=server).runtime_state == RuntimeState.STOPPED

    alpha = anyio.run(
        _calls,
        gateway.url,
        tokens["alpha"],
        [("memory__remember", {"text": "alpha-secret"}), ("memory__recall", {})],
    )
    beta = anyio.run(_calls, gateway.url, tokens["beta"], [("memory__recall", {})])

    assert alpha == ["remembered", "alpha-secret"]
    assert beta == [""]  # another team: another process, which was told nothing
    status = ServerStatus.objects.get(server=server)
    assert (status.runtime_state, status.runtime_owner) == (RuntimeState.RUNNING, worker["node"])
    assert ServerGatewayPolicy.objects.get(server=server).demanded_until is not None

    # The admin makes the server shared: one process for every caller.
    server_gateway_policy_set(actor="test", server=server, isolation_scope="shared")
    anyio.run(_calls, gateway.url, tokens["alpha"], [("memory__remember", {"text": "one"})])
    shared = anyio.run(_calls, gateway.url, tokens["beta"], [("memory__recall", {})])
    assert shared == ["one"]


@pytest.mark.containers
def test_a_sandboxed_server_is_called_through_the_gateway(gateway):
    """The published mcp-server-time in a sandboxed container, held warm by a runtime manager
    (in this process), called by an agent through the gateway and the private endpoint."""
    import json

    from registry.servers.jobs.runtime import runtime_request
    from tests.sandbox.test_sandbox_servers import TIME_VERSION
    from tests.sandbox_images import ensure_test_images
    from workers.runtime import RuntimeManager

    ensure_test_images(say=lambda *_: None)
    server = McpServerFactory(
        slug="time",
        trust_tier="untrusted",
        isolation="sandbox",
        network_mode="none",
        command=["uvx", f"mcp-server-time=={TIME_VERSION}"],
        package_registry="pypi",
        package_identifier="mcp-server-time",
        package_version=TIME_VERSION,
    )
    discover_inline(server)  # the vetting report an untrusted server's approval needs
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server, note="pinned, sandboxed")
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool, note="reviewed")
    server_gateway_policy_set(
        actor="test", server=server, isolation_scope="shared", call_deadline_seconds=30
    )
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain
    runtime_request(server=server, action="start", actor="test")
    manager = RuntimeManager("gateway-sandbox@host", heartbeat_seconds=0.5)
    manager.start()
    try:
        assert manager.command(server.pk, "start") == "running"
        [answer] = anyio.run(
            _calls, gateway.url, token, [("time__get_current_time", {"timezone": "UTC"})]
        )
    finally:
        manager.shutdown()

    assert json.loads(answer)["timezone"] == "UTC"


def test_a_stdio_server_that_crashes_mid_call_is_answered_at_once_with_upstream_closed(
    worker,  # noqa: F811 (the fixture imported above)
    gateway,
):
    """Issue 30, item 4: the crash ends the call with `upstream_closed` as soon as the process
    exits (a read-only tool included: not retried into the restart until the deadline, which
    answered `upstream_timeout`)."""
    server = McpServerFactory(slug="crashy", command=scenario_argv("--crash-on-call"))
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=40)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain

    async def call():
        async with gateway_client(gateway.url, token) as client:
            started = time.monotonic()
            result = await client.call_tool("crashy__echo", {"text": "crash"})
            return result, time.monotonic() - started

    for _ in range(2):  # a cold start, then the server started again
        result, took = anyio.run(call)
        assert result.is_error
        assert result.meta["toolroom/error"]["code"] == "upstream_closed", text_of(result)
        assert took < 30, f"answered after {took:.1f} s (the deadline is 40 s)"
    print(f"the crash answered after {took:.1f} s")
