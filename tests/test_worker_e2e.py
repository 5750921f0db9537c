"""A real Celery worker process, on the real Redis, doing discovery, health checks and runtimes.

The worker runs as a separate process with the threads pool on both queues (what `make run`
starts), against the test database, so everything crosses real process boundaries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from registry.core import task_queue
from registry.servers import services
from registry.servers.discovery import discovery_request
from registry.servers.health import health_request
from registry.servers.models import (
    DiscoveryRun,
    DiscoveryStatus,
    Health,
    HealthSample,
    RuntimeState,
    ServerStatus,
)
from registry.servers.runtime import runtime_request
from tests.mcp_fixtures import scenario_argv
from tests.process_hygiene import server_processes_started_by

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parent.parent


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{user}{password}@{host}{port}/{db['NAME']}"


def _wait_for(condition, *, timeout, what, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n--- worker log ---\n{tail}")


@pytest.fixture
def worker(tmp_path):
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.fail("The worker tests need the real Redis broker: set REDIS_URL (make test does).")
    node = f"e2e-{uuid.uuid4().hex[:8]}@{os.uname().nodename}"
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "test",
        "DATABASE_URL": _database_url(),
    }
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers",
                "worker",
                "-Q",
                "toolroom,discovery,runtime",
                "-P",
                "threads",
                "-c",
                "4",
                "-n",
                node,
                "--without-gossip",
                "--without-mingle",
                "-l",
                "info",
            ],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(
            lambda: "ready." in log.read_text() or process.poll() is not None,
            timeout=60,
            what="the worker to be ready",
            log=log,
        )
        assert process.poll() is None, log.read_text()[-3000:]
        yield {"node": node, "process": process, "log": log}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
    _wait_for(
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
    _wait_for(
        lambda: _status(server).health == Health.HEALTHY, timeout=60, what="a health check", log=log
    )

    # Kept warm: the runtime worker holds it, probes and discovery go through the warm session.
    runtime_request(server=server, action="start", actor="test")
    _wait_for(
        lambda: _status(server).runtime_state == RuntimeState.RUNNING,
        timeout=60,
        what="the warm runtime",
        log=log,
    )
    assert _status(server).runtime_owner == worker["node"]
    samples_before = HealthSample.objects.filter(server=server).count()
    health_request(servers=[server], actor="test")
    _wait_for(
        lambda: HealthSample.objects.filter(server=server).count() > samples_before,
        timeout=30,
        what="the warm probe",
        log=log,
    )
    run = discovery_request(server=server, actor="test", trigger="test")
    _wait_for(
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
    _wait_for(
        lambda: _status(server).runtime_state == RuntimeState.RUNNING,
        timeout=60,
        what="the warm runtime",
        log=worker["log"],
    )
    tag = f"{os.uname().nodename}:{worker['process'].pid}"
    assert server_processes_started_by({tag})

    worker["process"].kill()
    worker["process"].wait()

    # The kernel ends the server with its parent (parent-death signal), not a clean-up later.
    _wait_for(
        lambda: not server_processes_started_by({tag}),
        timeout=10,
        what="the orphaned server to die",
    )
