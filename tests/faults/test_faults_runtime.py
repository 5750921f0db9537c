"""Warm runtimes under faults, in a real RuntimeManager with real server processes: a crash is
noticed when the process (or a sandboxed server's container) exits, not at the next probe; the
restart budget comes back after a stable run, and crashes, restarts and takeovers are audited."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from datetime import timedelta

import docker
import pytest
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.servers.jobs.runtime import (
    runtime_claim,
    runtime_display_state,
    runtime_request,
)
from registry.servers.models import RuntimeState, ServerStatus
from registry.servers.policy import TrustTier
from tests.factories import McpServerFactory
from tests.mcp_fixtures import scenario_argv
from tests.process_hygiene import server_processes_started_by
from tests.sandbox.test_sandbox_servers import TIME_VERSION
from tests.sandbox_images import ensure_test_images
from tests.waiting import wait_for
from workers.runtime import RuntimeManager

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

OWNER = "runtime-faults@host"


@pytest.fixture
def manager():
    runtime_manager = RuntimeManager(OWNER, heartbeat_seconds=0.5)
    runtime_manager.start()
    yield runtime_manager
    runtime_manager.shutdown()


def _warm_server(**fields):
    server = McpServerFactory(command=scenario_argv(), review_status="approved", **fields)
    runtime_request(server=server, action="start", actor="test")
    return server


def _runtime(server):
    return tuple(
        ServerStatus.objects.filter(server=server)
        .values_list("runtime_state", "runtime_restarts")
        .get()
    )


def _kill_the_server_process() -> int:
    [pid] = server_processes_started_by({f"{socket.gethostname()}:{os.getpid()}"})
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    return pid


def test_a_crash_is_noticed_when_the_process_exits_without_any_probe(manager):
    server = _warm_server(restart_max_attempts=3)
    manager.command(server.pk, "start")

    _kill_the_server_process()  # and no probe, no call: only the exit itself can tell

    wait_for(lambda: _runtime(server) == (RuntimeState.RUNNING, 1), timeout=15, what="restart")
    crash = AuditEvent.objects.get(action="server.runtime_crashed", server=server)
    assert "The server process exited" in crash.summary


def _running_containers_of(server) -> list[str]:
    client = docker.from_env()
    try:
        containers = client.containers.list(filters={"label": f"io.toolroom.server={server.slug}"})
        return [container.id for container in containers]
    finally:
        client.close()


@pytest.mark.containers
def test_a_sandboxed_servers_container_killed_is_noticed_when_it_exits(manager):
    ensure_test_images(say=lambda *_: None)
    server = _warm_sandboxed_time_server()
    manager.command(server.pk, "start")
    [container_id] = _running_containers_of(server)

    # The real `docker kill`, and no probe, no call: only the end of the attach stream can tell.
    subprocess.run(["docker", "kill", container_id], check=True, capture_output=True)

    wait_for(lambda: _runtime(server) == (RuntimeState.RUNNING, 1), timeout=60, what="restart")
    crash = AuditEvent.objects.get(action="server.runtime_crashed", server=server)
    assert "exited" in crash.summary
    [restarted] = _running_containers_of(server)
    assert restarted != container_id


def _warm_sandboxed_time_server():
    server = McpServerFactory(
        trust_tier=TrustTier.UNTRUSTED,
        isolation="sandbox",
        network_mode="none",
        data_sensitivity="internal",
        command=["uvx", f"mcp-server-time=={TIME_VERSION}"],
        package_registry="pypi",
        package_identifier="mcp-server-time",
        package_version=TIME_VERSION,
        review_status="approved",
        restart_max_attempts=3,
    )
    runtime_request(server=server, action="start", actor="test")
    return server


def _crashes(server) -> int:
    return AuditEvent.objects.filter(action="server.runtime_crashed", server=server).count()


def _crash_and_wait_for_the_restart(server, crashes_before: int) -> None:
    killed = _kill_the_server_process()
    wait_for(lambda: _crashes(server) == crashes_before + 1, timeout=15, what="the crash")
    wait_for(lambda: _runtime(server)[0] == RuntimeState.RUNNING, timeout=15, what="restart")
    wait_for(
        lambda: (
            server_processes_started_by({f"{socket.gethostname()}:{os.getpid()}"})
            not in ([], [killed])
        ),
        timeout=15,
        what="the new process",
    )


def test_the_restart_budget_comes_back_after_a_stable_run(manager, settings):
    settings.TOOLROOM_RUNTIME_STABLE_SECONDS = 1
    server = _warm_server(restart_max_attempts=1)
    manager.command(server.pk, "start")

    for crashes in range(3):  # three crashes, each after a stable run: never out of budget
        time.sleep(1.2)
        _crash_and_wait_for_the_restart(server, crashes)

    assert _runtime(server) == (RuntimeState.RUNNING, 1)


def test_crashes_without_a_stable_run_use_up_the_budget_and_fail_visibly(manager):
    server = _warm_server(restart_max_attempts=1)
    manager.command(server.pk, "start")
    _crash_and_wait_for_the_restart(server, 0)

    _kill_the_server_process()  # at once: no stable run in between

    wait_for(lambda: _runtime(server)[0] == RuntimeState.FAILED, timeout=15, what="giving up")
    assert runtime_display_state(ServerStatus.objects.get(server=server)) == "failed"
    assert AuditEvent.objects.filter(action="server.runtime_failed", server=server).exists()


def test_a_takeover_is_audited_and_a_silent_owner_shows_as_lost(settings):
    server = McpServerFactory(review_status="approved")
    old = timezone.now() - timedelta(seconds=settings.TOOLROOM_RUNTIME_STALE_SECONDS + 1)
    ServerStatus.objects.update_or_create(
        server=server,
        defaults={
            "runtime_owner": "dead@host",
            "runtime_state": RuntimeState.RUNNING,
            "runtime_heartbeat_at": old,
        },
    )
    assert runtime_display_state(ServerStatus.objects.get(server=server)) == "owner lost"

    assert runtime_claim(server_id=server.pk, owner="alive@host")

    takeover = AuditEvent.objects.get(action="server.runtime_taken_over", server=server)
    assert takeover.details == {"from": "dead@host", "to": "alive@host"}
