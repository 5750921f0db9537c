"""Servers built on the Python SDK 1.x: the real `mcp-server-sqlite` 2025.4.25 from PyPI on the SDK
release of its day (mcp 1.6.0). Such a server exits on the 2026-07-28 probe (`server/discover`
fails its request validation), so discovery, health checks and the gateway's sessions (through
a real runtime worker) fall back to the initialize handshake, on a server without a dependency
lock too. (The SDK's probe waits 10 s for the answer that never comes; discovery pays that once
and records the version, which every later session adopts without a probe.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.jobs.launch import server_launch_plan_by_id
from registry.servers.models import DiscoveryStatus, ServerStatus, Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway.test_gateway_runtime import gateway, shared_cache  # noqa: F401 (fixtures)
from tests.gateway_helpers import gateway_client, text_of
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a real runtime worker, as a fixture)
from workers.adapters.mcp_client import McpFailure, StdioTarget, connect
from workers.adapters.negotiation import connect_negotiated
from workers.health import check_plan

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

# The SDK 1.x release mcp-server-sqlite 2025.4.25 was built against, and a pydantic of its day
# (the newest pydantic no longer imports in mcp 1.6).
SDK1_REQUIREMENTS = ["mcp==1.6.0", "pydantic==2.10.6", "mcp-server-sqlite==2025.4.25"]
VENV = Path(__file__).resolve().parents[2] / "var" / "test-venvs" / "sdk1-sqlite"


@pytest.fixture(scope="session")
def sqlite_sdk1() -> list[str]:
    """The command of mcp-server-sqlite on SDK 1.6 (a venv built once, under var/)."""
    marker = VENV / ".built"
    wanted = "\n".join(SDK1_REQUIREMENTS)
    if not marker.exists() or marker.read_text() != wanted:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "--quiet", *SDK1_REQUIREMENTS],
            check=True,
            timeout=600,
        )
        marker.write_text(wanted)
    return [str(VENV / "bin" / "mcp-server-sqlite")]


def _argv(command: list[str], tmp_path: Path) -> list[str]:
    return [*command, "--db-path", str(tmp_path / "data.db")]


async def _tools(connector, argv: list[str]) -> tuple[str, int]:
    async with connector(StdioTarget(argv=argv), mode="auto") as connection:
        return connection.identity.protocol_version, len(await connection.list_tools())


def test_the_probe_ends_an_sdk1_server_and_the_handshake_reaches_it(sqlite_sdk1, tmp_path):
    argv = _argv(sqlite_sdk1, tmp_path)
    # Without the fallback: the SDK's own auto mode loses the server on the probe.
    with pytest.raises(McpFailure) as lost:
        anyio.run(_tools, connect, argv)
    assert lost.value.kind == "closed"

    version, count = anyio.run(_tools, connect_negotiated, argv)

    assert version == "2024-11-05"
    assert count == 6  # read_query, write_query, create_table, list_tables, describe, insight


@pytest.fixture
def discovered(sqlite_sdk1, tmp_path):
    """Discovered here, before the runtime worker starts (it would claim the discovery)."""
    # No dependency lock: nothing says beforehand that the server speaks only the handshake.
    server = McpServerFactory(slug="sqlite", command=_argv(sqlite_sdk1, tmp_path))
    return server, discover_inline(server)


def test_an_sdk1_server_is_discovered_checked_and_called_through_the_gateway(
    discovered,
    worker,  # noqa: F811 (the fixture imported above)
    gateway,  # noqa: F811
):
    server, run = discovered

    assert run.status == DiscoveryStatus.SUCCEEDED, run.error
    assert ServerStatus.objects.get(server=server).protocol_version == "2024-11-05"
    assert "list_tables" in set(Tool.objects.filter(server=server).values_list("name", flat=True))
    # Recorded, the version is adopted from then on: no probe, no wait for it.
    health = anyio.run(check_plan, server_launch_plan_by_id(server_id=server.pk))
    assert health.ok, health.error

    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=60)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain

    async def calls() -> list[str]:
        async with gateway_client(gateway.url, token) as client:
            created = await client.call_tool(
                "sqlite__create_table", {"query": "CREATE TABLE notes (body TEXT)"}
            )
            listed = await client.call_tool("sqlite__list_tables", {})
            return [text_of(created), text_of(listed)]

    created, listed = anyio.run(calls)

    assert "notes" in listed, (created, listed)
