"""Log messages of a stdio server's call through its real runtime worker (Celery): they cross the
worker's private endpoint to the SDK client that made the call and asked for them (both protocol
generations on the client's side), never to another client or a caller who did not ask."""

from __future__ import annotations

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway.test_gateway_logging import EXPECTED, _scenario
from tests.gateway.test_gateway_runtime import shared_cache  # noqa: F401 (a fixture)
from tests.gateway_helpers import RunningGateway, text_of
from tests.mcp_fixtures import scenario_argv
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a real runtime worker, as a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


@pytest.fixture
def stdio_chatty():
    """A stdio server, discovered here, before the runtime worker starts (it would claim it)."""
    server = McpServerFactory(slug="logs", command=scenario_argv("--log"))
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    # A cold start on a busy machine: a generous deadline.
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=30)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain, AgentTokenFactory(team=team).plain


def test_a_stdio_servers_log_messages_come_through_its_runtime_worker(
    shared_cache,  # noqa: F811 (emptied before the worker advertises its endpoint in it)
    stdio_chatty,
    worker,  # noqa: F811 (the fixture imported above)
):
    token, other_token = stdio_chatty
    running = RunningGateway()
    try:
        for mode in ("legacy", "auto"):
            result, unasked, heard, other_heard, silent_heard = anyio.run(
                _scenario, running.url, token, other_token, mode
            )
            assert result.is_error is False, text_of(result)
            assert unasked.is_error is False, text_of(unasked)
            assert heard == EXPECTED, mode
            assert other_heard == [], mode
            assert silent_heard == [], mode
    finally:
        running.stop()
