"""Warm runtimes in a real RuntimeManager: start, probe, discover, restart, give up, stop."""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

from registry.servers.jobs.runtime import runtime_claim, runtime_request
from registry.servers.models import RuntimeState, ServerStatus
from tests.factories import McpServerFactory
from tests.mcp_fixtures import scenario_argv
from tests.process_hygiene import server_processes_started_by
from tests.waiting import wait_for
from workers.runtime import RuntimeManager

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

OWNER = "runtime-test@host"


@pytest.fixture
def manager():
    runtime_manager = RuntimeManager(OWNER, heartbeat_seconds=0.5)
    runtime_manager.start()
    yield runtime_manager
    runtime_manager.shutdown()


def _warm_server(*flags, **fields):
    fields.setdefault("review_status", "approved")
    server = McpServerFactory(command=scenario_argv(*flags), **fields)
    runtime_request(server=server, action="start", actor="test")
    return server


def _state(server):
    return ServerStatus.objects.get(server=server)


def _restart_state(server):
    return tuple(
        ServerStatus.objects.filter(server=server)
        .values_list("runtime_state", "runtime_restarts")
        .get()
    )


def _my_server_processes():
    return server_processes_started_by({f"{socket.gethostname()}:{os.getpid()}"})


def test_it_starts_probes_and_discovers_through_the_warm_session(manager):
    server = _warm_server()

    assert manager.command(server.pk, "start") == "running"

    status = _state(server)
    assert (status.runtime_state, status.runtime_owner) == (RuntimeState.RUNNING, OWNER)
    [result] = manager.probe_batch([server.pk])
    assert result.ok
    outcome = manager.discover(server.pk)
    assert outcome.ok
    assert outcome.via == "warm runtime"
    assert len(outcome.tools) == 3
    assert len(_my_server_processes()) == 1


def test_a_second_worker_cannot_take_a_live_runtime(manager):
    server = _warm_server()
    manager.command(server.pk, "start")
    assert not runtime_claim(server_id=server.pk, owner="other@host")


def test_a_runtime_whose_process_dies_is_restarted(manager):
    server = _warm_server("--crash-on-call", restart_max_attempts=3)
    manager.command(server.pk, "start")
    [first_pid] = _my_server_processes()

    os.killpg(os.getpgid(first_pid), signal.SIGKILL)
    [probe] = manager.probe_batch([server.pk])  # finds the session dead

    assert not probe.ok
    # One read for both fields: two reads could see RUNNING from before the restart and its count
    # from after (a race this test once lost on PostgreSQL).
    wait_for(
        lambda: _restart_state(server) == (RuntimeState.RUNNING, 1),
        what="the restart",
    )
    [second] = manager.probe_batch([server.pk])
    assert second.ok
    assert _my_server_processes() != [first_pid]


def test_it_gives_up_after_the_restart_policy_and_says_why(manager):
    server = _warm_server(restart_max_attempts=1)
    McpServerFactory._meta.model.objects.filter(pk=server.pk).update(command=["/nope/mcp"])

    manager.command(server.pk, "start")

    wait_for(lambda: _state(server).runtime_state == RuntimeState.FAILED, what="giving up")
    status = _state(server)
    assert "Gave up after 1 restart(s)" in status.runtime_error
    assert "not found: /nope/mcp" in status.runtime_error
    assert status.runtime_owner == ""


def test_stopping_ends_the_process_and_records_it(manager):
    server = _warm_server()
    manager.command(server.pk, "start")

    assert manager.command(server.pk, "stop") == "stopped"

    assert _state(server).runtime_state == RuntimeState.STOPPED
    wait_for(lambda: not _my_server_processes(), timeout=10, what="the process to end")


def test_a_runtime_taken_over_elsewhere_is_stopped_here(manager):
    server = _warm_server()
    manager.command(server.pk, "start")

    ServerStatus.objects.filter(server=server).update(runtime_owner="other@host")

    wait_for(lambda: not manager.holds(server.pk), timeout=10, what="the runtime to let go")
    wait_for(lambda: not _my_server_processes(), timeout=10, what="the process to end")


def test_shutting_the_manager_down_stops_every_runtime():
    runtime_manager = RuntimeManager(OWNER, heartbeat_seconds=0.5)
    runtime_manager.start()
    servers = [_warm_server() for _ in range(3)]
    for server in servers:
        runtime_manager.command(server.pk, "start")
    assert len(_my_server_processes()) == 3

    runtime_manager.shutdown()

    assert not _my_server_processes()
    assert set(
        ServerStatus.objects.filter(server__in=servers).values_list("runtime_state", flat=True)
    ) == {RuntimeState.STOPPED}


def test_discovery_of_a_runtime_not_held_here_fails_clearly(manager):
    outcome = manager.discover(999_999)
    assert not outcome.ok
    assert "not held here" in outcome.error


# Runs the server, but the first launch (the server's own, shared session) only once the file
# `go` appears in the directory given: until then that session cannot be ready.
_GATED_FIRST_LAUNCH = """
import os, sys, time
gate = sys.argv[1]
try:
    os.mkdir(os.path.join(gate, "first"))
except FileExistsError:
    pass
else:
    while not os.path.exists(os.path.join(gate, "go")):
        time.sleep(0.05)
os.execv(sys.argv[2], sys.argv[2:])
"""


def test_a_team_session_starts_alongside_the_servers_own_session(manager, tmp_path):
    """A gateway call in a per-team scope does not wait for the server's shared session to be
    ready (a cold call waits for one process start, not two in a row)."""
    import asyncio

    from workers.adapters.mcp_client import AskRefused

    server = McpServerFactory(
        review_status="approved",
        command=[sys.executable, "-c", _GATED_FIRST_LAUNCH, str(tmp_path), *scenario_argv()],
    )
    runtime_request(server=server, action="start", actor="test")

    async def refuse(params):
        raise AskRefused("no caller")

    starting = asyncio.run_coroutine_threadsafe(manager._command(server.pk, "start"), manager.loop)
    # The server's own session's process has taken the gated first launch. Holding the runtime
    # is not enough: it is held before that process starts, and a team session whose process
    # started first took the gate itself and waited out its handshake deadline (seen on a
    # loaded machine).
    wait_for((tmp_path / "first").is_dir, timeout=60, what="the server's own process at the gate")
    assert manager.holds(server.pk)
    request = {
        "server_id": server.pk,
        "scope": "team:1",
        "tool": "echo",
        "arguments": {"text": "early"},
        "timeout": 30,
    }
    result = manager._call(manager._endpoint_call(request, refuse))

    assert result["content"][0]["text"] == "early"
    assert not manager.runtimes[server.pk].ready.is_set()  # its own session is still waiting
    assert _state(server).runtime_state == RuntimeState.STARTING
    (tmp_path / "go").touch()
    assert starting.result(60) == "running"


def test_a_call_in_flight_when_a_team_sessions_process_dies_is_not_sent_again(manager, tmp_path):
    """The process exits during the call (it crashes on it): the call fails `closed` (it reached
    the server: never re-sent), and the dead session leaves the pool at once (issue 30)."""
    from workers.adapters.mcp_client import AskRefused, McpFailure

    arrivals = tmp_path / "arrivals"
    server = _warm_server("--crash-on-call", "--arrivals", str(arrivals))
    manager.command(server.pk, "start")

    async def refuse(params):
        raise AskRefused("no caller")

    request = {"server_id": server.pk, "scope": "team:1", "tool": "echo", "timeout": 30}
    with pytest.raises(McpFailure) as failure:
        manager._call(manager._endpoint_call({**request, "arguments": {"text": "x"}}, refuse))

    assert failure.value.kind == "closed"
    assert arrivals.read_text().count("echo") == 1
    wait_for(lambda: (server.pk, "team:1") not in manager.scoped.sessions, what="it dropped")
