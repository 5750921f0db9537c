"""A per-team session's server process dies in a runtime worker (issue 30): the worker drops the
dead session at once, and the team's next call opens a new one (a new process) and is served, not
answered `upstream_closed` (a real runtime worker and a real gateway)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.jobs.runtime import runtime_request
from registry.servers.models import McpServer, RuntimeState, ServerStatus, Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway.test_gateway_runtime import gateway, shared_cache  # noqa: F401 (fixtures)
from tests.gateway_helpers import gateway_client, text_of
from tests.mcp_fixtures import scenario_argv
from tests.waiting import wait_for
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a real runtime worker, as a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


def _memory_server(marker: Path) -> McpServer:
    """The memory server, per team, approved; `marker` (unused by calls) names its processes."""
    argv = scenario_argv("--memory", "--arrivals", str(marker))
    server = McpServerFactory(slug="memory", command=argv)
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    server_gateway_policy_set(
        actor="test", server=server, isolation_scope="team", call_deadline_seconds=60
    )
    return server


def _server_pids(marker: str) -> set[int]:
    """The live processes whose command line holds `marker` (an exited one's is empty)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.add(int(entry.name))
            except OSError:
                continue
    return pids


def _call(url: str, token: str, tool: str, arguments: dict[str, str]):
    async def run():
        async with gateway_client(url, token) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(run)


def test_a_dead_per_team_session_is_replaced_by_the_teams_next_call(
    tmp_path,
    worker,  # noqa: F811 (the fixture imported above)
    gateway,  # noqa: F811
):
    marker = str(tmp_path / "arrivals")
    server = _memory_server(tmp_path / "arrivals")
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = str(AgentTokenFactory(team=team).plain)

    # The shared session first, so the team's process is the one that appears after it.
    runtime_request(server=server, action="start", actor="test")
    wait_for(
        lambda: ServerStatus.objects.get(server=server).runtime_state == RuntimeState.RUNNING,
        timeout=60,
        what="the shared session running",
        log=worker["log"],
    )
    wait_for(  # a discovery's process (the approval asks for one) has ended too
        lambda: len(_server_pids(marker)) == 1, timeout=60, what="only the shared process left"
    )
    [shared] = _server_pids(marker)
    remembered = _call(gateway.url, token, "memory__remember", {"text": "alpha-note"})
    assert remembered.is_error is False, text_of(remembered)
    [teams] = _server_pids(marker) - {shared}

    os.kill(teams, signal.SIGKILL)
    wait_for(lambda: teams not in _server_pids(marker), timeout=30, what="the process gone")

    recalled = _call(gateway.url, token, "memory__recall", {})

    assert recalled.is_error is False, text_of(recalled)
    assert text_of(recalled) == ""  # a new process, which was told nothing
    [new] = _server_pids(marker) - {shared}
    assert new != teams
    assert ServerStatus.objects.get(server=server).runtime_state == RuntimeState.RUNNING
