"""Run a discovery in the test process the way a worker does: request, then the worker's own
`run_discovery` (claim under a lease, discover, record)."""

from __future__ import annotations

from registry.servers.jobs.discovery import discovery_request
from registry.servers.models import DiscoveryRun, DiscoveryStatus, McpServer
from tests.waiting import wait_for
from workers.discovery import run_discovery

UNFINISHED = (DiscoveryStatus.QUEUED, DiscoveryStatus.RUNNING)


def discover_inline(server: McpServer) -> DiscoveryRun:
    """The run, finished. A Celery worker a test runs may have claimed it first (the request
    also sends the task): then `run_discovery` leaves it to that worker, and this waits for it."""
    run = discovery_request(server=server, actor="test", trigger="test")
    run_discovery(run.pk)
    run.refresh_from_db()
    if run.status in UNFINISHED:
        wait_for(
            lambda: DiscoveryRun.objects.get(pk=run.pk).status not in UNFINISHED,
            timeout=120,
            what=f"discovery run {run.pk} finished by the worker that claimed it",
        )
        run.refresh_from_db()
    assert run.status not in UNFINISHED, run.status
    return run
