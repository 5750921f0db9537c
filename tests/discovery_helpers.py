"""Run a discovery in the test process the way a worker does: request, then the worker's own
`run_discovery` (claim under a lease, discover, record)."""

from __future__ import annotations

from registry.servers.models import DiscoveryRun, DiscoveryStatus, McpServer
from registry.servers.operations.discovery import discovery_request
from workers.discovery import run_discovery


def discover_inline(server: McpServer) -> DiscoveryRun:
    run = discovery_request(server=server, actor="test", trigger="test")
    run_discovery(run.pk)
    run.refresh_from_db()
    assert run.status not in (DiscoveryStatus.QUEUED, DiscoveryStatus.RUNNING), run.status
    return run
