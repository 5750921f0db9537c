"""A real Celery worker process, on the real Redis, doing discovery, health checks and runtimes.

The worker runs as a separate process with the threads pool on both queues (what `make run`
starts), against the test database, so everything crosses real process boundaries.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.conf import settings

from registry.core import task_queue
from registry.servers import services
from registry.servers.jobs.discovery import discovery_request
from registry.servers.jobs.health import health_request
from registry.servers.jobs.runtime import runtime_display_state, runtime_request
from registry.servers.models import (
    DiscoveryRun,
    DiscoveryStatus,
    Health,
    HealthSample,
    RuntimeState,
    ServerStatus,
)
from tests.celery_worker import CeleryWorker
from tests.mcp_fixtures import scenario_argv
from tests.process_hygiene import server_processes_started_by
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


@pytest.fixture
def worker(tmp_path):
    process = CeleryWorker(tmp_path / "worker.log")
    try:
        yield {"node": process.node, "process": process.process, "log": process.log}
    finally:
        process.stop()


def _status(server):
    return ServerStatus.objects.get(server=server)


def test_a_worker_discovers_checks_and_holds_a_server_warm(worker):
    log = worker["log"]
    server = services.server_create(
        actor="test",
        slug="scenario",
        name="Scenario",
        transport="stdio",
        command=scenario_argv(),
        trust_tier="builtin",
        health_check_interval_seconds=10,
        health_check_timeout_seconds=5,
    )

    # Registering a server asks for a discovery; the worker does it.
    wait_for(
        lambda: DiscoveryRun.objects.filter(server=server, status="succeeded").exists(),
        timeout=60,
        what="the discovery",
        log=log,
    )
    assert server.tools.count() == 3

    # Approved, the server is picked up by the health sweep.
    services.server_submit_for_review(actor="test", server=server)
    services.server_approve(actor="test", server=server)
    task_queue.send_now(task_queue.HEALTH_SWEEP)
    wait_for(
        lambda: _status(server).health == Health.HEALTHY, timeout=60, what="a health check", log=log
    )

    # Kept warm: the runtime worker holds it, probes and discovery go through the warm session.
    runtime_request(server=server, action="start", actor="test")
    wait_for(
        lambda: _status(server).runtime_state == RuntimeState.RUNNING,
        timeout=60,
        what="the warm runtime",
        log=log,
    )
    assert _status(server).runtime_owner == worker["node"]
    samples_before = HealthSample.objects.filter(server=server).count()
    health_request(servers=[server], actor="test")
    wait_for(
        lambda: HealthSample.objects.filter(server=server).count() > samples_before,
        timeout=30,
        what="the warm probe",
        log=log,
    )
    run = discovery_request(server=server, actor="test", trigger="test")
    wait_for(
        lambda: DiscoveryRun.objects.get(pk=run.pk).status == DiscoveryStatus.SUCCEEDED,
        timeout=30,
        what="the warm discovery",
        log=log,
    )
    assert DiscoveryRun.objects.get(pk=run.pk).summary["via"] == "warm runtime"

    # Stopping the worker stops what it held, and leaves no process behind.
    worker_pid = worker["process"].pid
    tag = f"{os.uname().nodename}:{worker_pid}"
    assert server_processes_started_by({tag})
    worker["process"].send_signal(signal.SIGTERM)
    worker["process"].wait(timeout=40)
    assert _status(server).runtime_state == RuntimeState.STOPPED
    assert not server_processes_started_by({tag})


def test_a_killed_worker_takes_its_servers_with_it(worker):
    server = services.server_create(
        actor="test",
        slug="scenario-kill",
        name="Scenario",
        transport="stdio",
        command=scenario_argv(),
        trust_tier="builtin",
    )
    services.server_submit_for_review(actor="test", server=server)
    services.server_approve(actor="test", server=server)
    runtime_request(server=server, action="start", actor="test")
    wait_for(
        lambda: _status(server).runtime_state == RuntimeState.RUNNING,
        timeout=60,
        what="the warm runtime",
        log=worker["log"],
    )
    tag = f"{os.uname().nodename}:{worker['process'].pid}"
    assert server_processes_started_by({tag})
    assert runtime_display_state(_status(server)) == RuntimeState.RUNNING

    worker["process"].kill()
    worker["process"].wait()

    # Status says so within seconds (TOOLROOM_RUNTIME_OWNER_LOST_SECONDS), not "running" for the
    # minute until another worker may take the claim over.
    wait_for(
        lambda: runtime_display_state(_status(server)) == "owner lost",
        timeout=settings.TOOLROOM_RUNTIME_OWNER_LOST_SECONDS + 10,
        what='"owner lost"',
    )

    # The kernel ends the server with its parent (parent-death signal), not a clean-up later.
    wait_for(
        lambda: not server_processes_started_by({tag}),
        timeout=10,
        what="the orphaned server to die",
    )
