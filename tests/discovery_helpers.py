"""Run a discovery in the test process the way a worker does: request, claim, discover, record."""

from __future__ import annotations

import anyio

from registry.servers.discovery import discovery_claim, discovery_record, discovery_request
from registry.servers.launch import server_launch_plan
from registry.servers.models import DiscoveryRun, McpServer
from workers.discovery import discover_plan


def discover_inline(server: McpServer) -> DiscoveryRun:
    run = discovery_request(server=server, actor="test", trigger="test")
    claimed = discovery_claim(run_id=run.pk)
    assert claimed is not None
    outcome = anyio.run(discover_plan, server_launch_plan(server=server))
    return discovery_record(run=claimed, outcome=outcome)
