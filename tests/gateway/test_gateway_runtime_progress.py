"""Progress and cancellation of a stdio server's call through its real runtime worker (Celery):
the server's reports reach the SDK client with its token over the worker's private endpoint, and
a client that cancels has the call cancelled in the worker and so in the server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway.test_gateway_progress import _countdown
from tests.gateway.test_gateway_runtime import shared_cache  # noqa: F401 (a fixture)
from tests.gateway_helpers import RunningGateway, gateway_client, text_of
from tests.mcp_fixtures import scenario_argv
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a real runtime worker, as a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


@pytest.fixture
def arrivals(tmp_path: Path) -> Path:
    return tmp_path / "arrivals"


@pytest.fixture
def stdio_counting(arrivals):
    """A stdio server, discovered here, before the runtime worker starts (it would claim it)."""
    server = McpServerFactory(
        slug="progress", command=scenario_argv("--progress", "--arrivals", str(arrivals))
    )
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    # A cold start on a busy machine: a generous deadline, which progress must not need.
    server_gateway_policy_set(
        actor="test", server=server, call_deadline_seconds=30, max_call_seconds=60
    )
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain


def test_a_stdio_servers_progress_comes_through_its_runtime_worker(
    shared_cache,  # noqa: F811 (emptied before the worker advertises its endpoint in it)
    stdio_counting,
    worker,  # noqa: F811 (the fixture imported above)
    arrivals,
):
    running = RunningGateway()
    try:
        reports: list[tuple[float, float | None, str | None]] = []
        result = anyio.run(
            _countdown, running.url, stdio_counting, "auto", {"steps": 3, "pause": 0.2}, reports
        )
        assert result.is_error is False, text_of(result)
        assert reports == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]

        async def cancel() -> None:
            async with gateway_client(running.url, stdio_counting, mode="legacy") as client:
                with anyio.move_on_after(1.0):
                    await client.call_tool("progress__countdown", {"steps": 100, "pause": 0.2})
                for _ in range(50):
                    if "cancelled" in arrivals.read_text():
                        return
                    await anyio.sleep(0.1)

        anyio.run(cancel)
        assert "cancelled" in arrivals.read_text()
    finally:
        running.stop()
